// Torch glue for the ResNet basic block (inference BatchNorm folded into the convs): checks, allocation, launch.
// robust-kbench's signature: every conv has an optional bias (None in its Model) and the downsample tensors are None
// for an identity shortcut, hence the optionals. A conv bias cb is folded with its BatchNorm in the kernel:
// BN(conv(x) + cb) = BN with mean (m - cb) applied to conv(x).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void resnet_block_launch(const float* x, const float* w1, const float* cb1, const float* g1, const float* b1,
                         const float* m1, const float* v1, const float* w2, const float* cb2, const float* g2,
                         const float* b2, const float* m2, const float* v2, const float* wd, const float* cbd,
                         const float* gd, const float* bd, const float* md, const float* vd, int stride, float eps,
                         float* wt1, float* wt2, float* shifts, float* mid, float* y, int batch, int ci, int co, int h,
                         int w, cudaStream_t stream);

static torch::Tensor checked_vec(const torch::Tensor& t, int64_t n, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32, "resnet_block: ", name, " must be a CUDA float32 tensor");
    TORCH_CHECK(t.numel() == n, "resnet_block: ", name, " must have out_channels elements");
    return t.contiguous();
}

static bool given(const c10::optional<torch::Tensor>& t) { return t.has_value() && t->defined(); }

// A conv's optional bias, checked (undefined when the conv has none).
static torch::Tensor bias_or_none(const c10::optional<torch::Tensor>& conv_bias, int64_t n, const char* name) {
    return given(conv_bias) ? checked_vec(*conv_bias, n, name) : torch::Tensor();
}

torch::Tensor forward(torch::Tensor x,
                      torch::Tensor conv1_weight, c10::optional<torch::Tensor> conv1_bias,
                      torch::Tensor bn1_weight, torch::Tensor bn1_bias, torch::Tensor bn1_mean, torch::Tensor bn1_var,
                      torch::Tensor conv2_weight, c10::optional<torch::Tensor> conv2_bias,
                      torch::Tensor bn2_weight, torch::Tensor bn2_bias, torch::Tensor bn2_mean, torch::Tensor bn2_var,
                      c10::optional<torch::Tensor> down_weight, c10::optional<torch::Tensor> down_bias,
                      c10::optional<torch::Tensor> down_bn_weight, c10::optional<torch::Tensor> down_bn_bias,
                      c10::optional<torch::Tensor> down_bn_mean, c10::optional<torch::Tensor> down_bn_var,
                      int64_t stride, double eps) {
    TORCH_CHECK(x.is_cuda() && conv1_weight.is_cuda() && conv2_weight.is_cuda(), "resnet_block: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && conv1_weight.scalar_type() == torch::kFloat32 &&
                conv2_weight.scalar_type() == torch::kFloat32, "resnet_block: float32 only");
    TORCH_CHECK(x.dim() == 4, "resnet_block: x must be [B, Ci, H, W]");
    TORCH_CHECK(stride >= 1, "resnet_block: stride must be >= 1");
    const int64_t batch = x.size(0), ci = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t co = conv1_weight.size(0);
    const int64_t ho = (h - 1) / stride + 1, wo = (w - 1) / stride + 1;
    TORCH_CHECK(ci >= 1 && h >= 1 && w >= 1, "resnet_block: empty input");
    TORCH_CHECK(conv1_weight.sizes() == torch::IntArrayRef({co, ci, 3, 3}), "resnet_block: conv1_weight must be [Co, Ci, 3, 3]");
    TORCH_CHECK(conv2_weight.sizes() == torch::IntArrayRef({co, co, 3, 3}), "resnet_block: conv2_weight must be [Co, Co, 3, 3]");
    auto g1 = checked_vec(bn1_weight, co, "bn1_weight"), b1 = checked_vec(bn1_bias, co, "bn1_bias");
    auto m1 = checked_vec(bn1_mean, co, "bn1_mean"), cb1 = bias_or_none(conv1_bias, co, "conv1_bias");
    auto v1 = checked_vec(bn1_var, co, "bn1_var");
    auto g2 = checked_vec(bn2_weight, co, "bn2_weight"), b2 = checked_vec(bn2_bias, co, "bn2_bias");
    auto m2 = checked_vec(bn2_mean, co, "bn2_mean"), cb2 = bias_or_none(conv2_bias, co, "conv2_bias");
    auto v2 = checked_vec(bn2_var, co, "bn2_var");
    const bool down = given(down_weight);
    torch::Tensor wd, cbd, gd, bd, md, vd;
    if (down) {
        TORCH_CHECK(down_bn_weight.has_value() && down_bn_bias.has_value() && down_bn_mean.has_value() &&
                    down_bn_var.has_value(), "resnet_block: a downsample needs all four BatchNorm tensors");
        TORCH_CHECK(down_weight->is_cuda() && down_weight->scalar_type() == torch::kFloat32,
                    "resnet_block: down_weight must be a CUDA float32 tensor");
        TORCH_CHECK(down_weight->numel() == co * ci, "resnet_block: down_weight must be [Co, Ci, 1, 1]");
        wd = down_weight->contiguous();
        gd = checked_vec(*down_bn_weight, co, "down_bn_weight");
        bd = checked_vec(*down_bn_bias, co, "down_bn_bias");
        md = checked_vec(*down_bn_mean, co, "down_bn_mean");
        cbd = bias_or_none(down_bias, co, "down_bias");
        vd = checked_vec(*down_bn_var, co, "down_bn_var");
    } else {
        TORCH_CHECK(stride == 1 && ci == co, "resnet_block: an identity shortcut needs stride 1 and Ci == Co");
    }
    TORCH_CHECK(batch * std::max(ci, co) * h * w < (int64_t)1 << 31, "resnet_block: too large for int indexing");

    auto xc = x.contiguous(), w1 = conv1_weight.contiguous(), w2 = conv2_weight.contiguous();
    auto opts = xc.options();
    auto y = torch::empty({batch, co, ho, wo}, opts);
    auto mid = torch::empty({batch, co, ho, wo}, opts);
    auto wt1 = torch::empty({ci * 9, co}, opts);
    auto wt2 = torch::empty({co * 9 + (down ? ci : 0), co}, opts);
    auto shifts = torch::empty({3, co}, opts);
    auto ptr = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
    resnet_block_launch(xc.data_ptr<float>(), w1.data_ptr<float>(), ptr(cb1), g1.data_ptr<float>(),
                        b1.data_ptr<float>(), m1.data_ptr<float>(), v1.data_ptr<float>(), w2.data_ptr<float>(),
                        ptr(cb2), g2.data_ptr<float>(), b2.data_ptr<float>(), m2.data_ptr<float>(),
                        v2.data_ptr<float>(), ptr(wd), ptr(cbd), ptr(gd), ptr(bd), ptr(md), ptr(vd), (int)stride,
                        (float)eps, wt1.data_ptr<float>(), wt2.data_ptr<float>(), shifts.data_ptr<float>(),
                        mid.data_ptr<float>(), y.data_ptr<float>(), (int)batch, (int)ci, (int)co, (int)h, (int)w,
                        c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "ResNet basic block forward, inference BatchNorm (CUDA)");
}
