// Torch glue for the implicit-GEMM conv2d: checks, allocation, launch on the current stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void conv2d_forward_launch(const float* x, const float* wt, const float* bias, float* y, int batch, int ci, int h,
                           int w, int co, int kh, int kw, int stride, int pad, int ho, int wo, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor weights, c10::optional<torch::Tensor> biases, int64_t stride,
                      int64_t padding) {
    TORCH_CHECK(x.is_cuda() && weights.is_cuda(), "conv2d: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weights.scalar_type() == torch::kFloat32, "conv2d: float32 only");
    TORCH_CHECK(x.dim() == 4 && weights.dim() == 4 && weights.size(1) == x.size(1),
                "conv2d: x [B, Ci, H, W] and weights [Co, Ci, KH, KW]");
    TORCH_CHECK(stride >= 1 && padding >= 0, "conv2d: stride >= 1 and padding >= 0");
    const int64_t batch = x.size(0), ci = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t co = weights.size(0), kh = weights.size(2), kw = weights.size(3);
    const int64_t ho = (h + 2 * padding - kh) / stride + 1, wo = (w + 2 * padding - kw) / stride + 1;
    TORCH_CHECK(ho >= 1 && wo >= 1, "conv2d: the kernel is larger than the padded input");
    TORCH_CHECK(batch * std::max(ci, co) * std::max(h * w, ho * wo) < ((int64_t)1 << 31) && ci * kh * kw < (1 << 30),
                "conv2d: too large for this kernel's int indexing");
    const bool has_bias = biases.has_value() && biases->defined();
    torch::Tensor bc;
    if (has_bias) {
        TORCH_CHECK(biases->is_cuda() && biases->scalar_type() == torch::kFloat32 && biases->numel() == co,
                    "conv2d: biases must be a CUDA float32 tensor of Co elements");
        bc = biases->contiguous();
    }
    auto xc = x.contiguous(), wc = weights.contiguous();
    auto y = torch::empty({batch, co, ho, wo}, xc.options());
    conv2d_forward_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), has_bias ? bc.data_ptr<float>() : nullptr,
                          y.data_ptr<float>(), (int)batch, (int)ci, (int)h, (int)w, (int)co, (int)kh, (int)kw,
                          (int)stride, (int)padding, (int)ho, (int)wo, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "conv2d with bias, stride and padding (CUDA, implicit GEMM)");
}
