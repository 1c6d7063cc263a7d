// Torch glue for the LayerNorm forward kernel (normalised over weight's shape, the trailing dims of x): checks,
// scratch allocation, launch on the current stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

long long layernorm_chunks(long long n);
void layernorm_forward_launch(const float* x, const float* w, const float* b, float* y, double* partial,
                              float* stats, long long rows, long long n, float eps, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "layernorm: float32 only");
    TORCH_CHECK(weight.sizes() == bias.sizes(), "layernorm: weight and bias shapes differ");
    TORCH_CHECK(x.dim() >= weight.dim() && x.sizes().slice(x.dim() - weight.dim()) == weight.sizes(),
                "layernorm: x's trailing dimensions must equal weight's shape");
    const int64_t n = weight.numel();
    auto xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = n ? xc.numel() / n : 0;
    if (rows == 0 || n == 0) return y;
    auto partial = torch::empty({rows * layernorm_chunks(n) * 2}, xc.options().dtype(torch::kFloat64));
    auto stats = torch::empty({rows * 2}, xc.options());
    layernorm_forward_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                             partial.data_ptr<double>(), stats.data_ptr<float>(), rows, n, (float)eps,
                             c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "LayerNorm over (C, H, W) forward (CUDA)");
}
