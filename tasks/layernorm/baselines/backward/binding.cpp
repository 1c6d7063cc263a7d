// Torch glue for the LayerNorm backward kernel (normalised over weight's shape, the trailing dims of x): checks,
// scratch allocation, launch on the current stream. Returns (grad_x, grad_weight, grad_bias). Called as robust-kbench
// calls it, backward(grad_output, x, weight, bias, eps, normalized_shape): normalized_shape arrives as a Python tuple
// of ints, the trailing sizes of x that weight's shape repeats.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

long long layernorm_backward_chunks(long long n);
void layernorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw, float* db,
                               double* partial, float* stats, float* coef, long long rows, long long n, float eps,
                               cudaStream_t stream);

std::vector<torch::Tensor> backward(torch::Tensor grad_y, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                    double eps, std::vector<int64_t> normalized_shape) {
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "layernorm backward: tensors must be on CUDA");
    TORCH_CHECK(grad_y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32 &&
                weight.scalar_type() == torch::kFloat32, "layernorm backward: float32 only");
    TORCH_CHECK(grad_y.sizes() == x.sizes(), "layernorm backward: grad_y and x shapes differ");
    TORCH_CHECK(weight.sizes() == bias.sizes(), "layernorm backward: weight and bias shapes differ");
    TORCH_CHECK(x.dim() >= weight.dim() && x.sizes().slice(x.dim() - weight.dim()) == weight.sizes(),
                "layernorm backward: x's trailing dimensions must equal weight's shape");
    TORCH_CHECK(c10::IntArrayRef(normalized_shape) == weight.sizes(),
                "layernorm backward: normalized_shape must equal weight's shape");
    const int64_t n = weight.numel();
    auto gc = grad_y.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
    auto dx = torch::empty_like(xc);
    auto dw = torch::empty_like(wc);
    auto db = torch::empty_like(wc);
    const int64_t rows = n ? xc.numel() / n : 0;
    if (n == 0) return {dx, dw, db};
    auto partial = torch::empty({std::max<int64_t>(rows, 1) * layernorm_backward_chunks(n) * 2},
                                xc.options().dtype(torch::kFloat64));
    auto stats = torch::empty({std::max<int64_t>(rows, 1) * 2}, xc.options());
    auto coef = torch::empty({std::max<int64_t>(rows, 1) * 2}, xc.options());
    layernorm_backward_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(), dx.data_ptr<float>(),
                              dw.data_ptr<float>(), db.data_ptr<float>(), partial.data_ptr<double>(),
                              stats.data_ptr<float>(), coef.data_ptr<float>(), rows, n, (float)eps,
                              c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {dx, dw, db};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "LayerNorm over (C, H, W) backward (CUDA)");
}
