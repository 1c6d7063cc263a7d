// Torch glue for the LayerNorm forward kernel: checks, allocation, launch on the current stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void layernorm_forward_launch(const float* x, const float* w, const float* b, float* y,
                              int rows, int n, float eps, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "layernorm: float32 only");
    const int64_t n = x.size(-1);
    TORCH_CHECK(weight.numel() == n && bias.numel() == n, "layernorm: weight/bias must have x.size(-1) elements");
    auto xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = n ? xc.numel() / n : 0;
    layernorm_forward_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                             y.data_ptr<float>(), (int)rows, (int)n, (float)eps,
                             c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "LayerNorm forward (CUDA)");
}
