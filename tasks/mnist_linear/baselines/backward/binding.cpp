// Torch glue for the Linear backward: returns (grad_x, grad_weight, grad_bias). Called as robust-kbench calls it,
// backward(grad_output, x, weights): the bias gradient needs no bias.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void linear_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw, float* db,
                            int M, int N, int K, cudaStream_t stream);

std::vector<torch::Tensor> backward(torch::Tensor grad_y, torch::Tensor x, torch::Tensor weight) {
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda() && weight.is_cuda(),
                "linear backward: tensors must be on CUDA");
    TORCH_CHECK(grad_y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32 &&
                weight.scalar_type() == torch::kFloat32,
                "linear backward: float32 only");
    TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "linear backward: x.size(-1) must equal weight.size(1)");
    const int64_t n = weight.size(0), k = weight.size(1);
    auto gc = grad_y.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
    const int64_t m = k ? xc.numel() / k : 0;
    TORCH_CHECK(grad_y.size(-1) == n && grad_y.numel() == m * n, "linear backward: grad_y shape mismatch");
    auto dx = torch::empty_like(xc);
    auto dw = torch::empty_like(wc);
    auto db = torch::empty({n}, wc.options());
    linear_backward_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(), dx.data_ptr<float>(),
                           dw.data_ptr<float>(), db.data_ptr<float>(), (int)m, (int)n, (int)k,
                           c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {dx.view_as(x), dw.view_as(weight), db};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "Linear backward (CUDA, 3xTF32)");
}
