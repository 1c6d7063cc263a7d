// Torch glue for the UNet double conv (inference BatchNorm folded into the convs): checks, allocation, launch.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void unet_double_conv_launch(const float* x, const float* w1, const float* g1, const float* b1, const float* m1,
                             const float* v1, const float* w2, const float* g2, const float* b2, const float* m2,
                             const float* v2, float eps, float* wt1, float* wt2, float* shift1, float* shift2,
                             float* mid, float* y, int batch, int ci, int co, int h, int w, cudaStream_t stream);

static void check_vec(const torch::Tensor& t, int64_t n, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32, "unet_conv2d: ", name, " must be a CUDA float32 tensor");
    TORCH_CHECK(t.numel() == n, "unet_conv2d: ", name, " must have out_channels elements");
}

torch::Tensor forward(torch::Tensor x,
                      torch::Tensor conv1_weight, torch::Tensor bn1_weight, torch::Tensor bn1_bias,
                      torch::Tensor bn1_mean, torch::Tensor bn1_var,
                      torch::Tensor conv2_weight, torch::Tensor bn2_weight, torch::Tensor bn2_bias,
                      torch::Tensor bn2_mean, torch::Tensor bn2_var, double eps) {
    TORCH_CHECK(x.is_cuda() && conv1_weight.is_cuda() && conv2_weight.is_cuda(), "unet_conv2d: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && conv1_weight.scalar_type() == torch::kFloat32 &&
                conv2_weight.scalar_type() == torch::kFloat32, "unet_conv2d: float32 only");
    TORCH_CHECK(x.dim() == 4, "unet_conv2d: x must be [B, Ci, H, W]");
    const int64_t batch = x.size(0), ci = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t co = conv1_weight.size(0);
    TORCH_CHECK(ci >= 1, "unet_conv2d: need at least one input channel");
    TORCH_CHECK(conv1_weight.sizes() == torch::IntArrayRef({co, ci, 3, 3}), "unet_conv2d: conv1_weight must be [Co, Ci, 3, 3]");
    TORCH_CHECK(conv2_weight.sizes() == torch::IntArrayRef({co, co, 3, 3}), "unet_conv2d: conv2_weight must be [Co, Co, 3, 3]");
    check_vec(bn1_weight, co, "bn1_weight"); check_vec(bn1_bias, co, "bn1_bias");
    check_vec(bn1_mean, co, "bn1_mean");     check_vec(bn1_var, co, "bn1_var");
    check_vec(bn2_weight, co, "bn2_weight"); check_vec(bn2_bias, co, "bn2_bias");
    check_vec(bn2_mean, co, "bn2_mean");     check_vec(bn2_var, co, "bn2_var");
    TORCH_CHECK(batch * std::max(ci, co) * h * w < (int64_t)1 << 31, "unet_conv2d: too large for int indexing");

    auto xc = x.contiguous();
    auto w1 = conv1_weight.contiguous(), w2 = conv2_weight.contiguous();
    auto g1 = bn1_weight.contiguous(), b1 = bn1_bias.contiguous(), m1 = bn1_mean.contiguous(), v1 = bn1_var.contiguous();
    auto g2 = bn2_weight.contiguous(), b2 = bn2_bias.contiguous(), m2 = bn2_mean.contiguous(), v2 = bn2_var.contiguous();
    auto opts = xc.options();
    auto y = torch::empty({batch, co, h, w}, opts);
    auto mid = torch::empty({batch, co, h, w}, opts);
    auto wt1 = torch::empty({ci * 9, co}, opts);
    auto wt2 = torch::empty({co * 9, co}, opts);
    auto shifts = torch::empty({2, co}, opts);
    unet_double_conv_launch(xc.data_ptr<float>(), w1.data_ptr<float>(), g1.data_ptr<float>(), b1.data_ptr<float>(),
                            m1.data_ptr<float>(), v1.data_ptr<float>(), w2.data_ptr<float>(), g2.data_ptr<float>(),
                            b2.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), (float)eps,
                            wt1.data_ptr<float>(), wt2.data_ptr<float>(), shifts.data_ptr<float>(),
                            shifts.data_ptr<float>() + co, mid.data_ptr<float>(), y.data_ptr<float>(), (int)batch,
                            (int)ci, (int)co, (int)h, (int)w, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "UNet double conv3x3-BN-ReLU forward (CUDA)");
}
