// Torch glue for the conv + bias + ReLU + 2x2 max-pool backward: returns (grad_x, grad_weight, grad_bias). Called as
// robust-kbench calls it, backward(x, weights, biases, grad_output).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void conv_relu_pool_backward_launch(const float* gy, const float* x, const float* w, const float* bias, float* gx,
                                    float* gw, float* gb, float* wt, float* wx, float* dz, int batch, int ci, int h,
                                    int wd, int co, int ks, cudaStream_t stream);

std::vector<torch::Tensor> backward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor grad_y) {
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "conv_relu_pool backward: tensors must be on CUDA");
    TORCH_CHECK(grad_y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32 &&
                weight.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "conv_relu_pool backward: float32 only");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4, "conv_relu_pool backward: x and weight must be 4-D");
    const int64_t batch = x.size(0), ci = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t co = weight.size(0), ks = weight.size(2);
    TORCH_CHECK(weight.size(1) == ci && weight.size(3) == ks, "conv_relu_pool backward: weight must be [Co, Ci, K, K]");
    TORCH_CHECK(ks >= 1 && ks <= 7, "conv_relu_pool backward: kernel sizes 1..7 are supported");
    TORCH_CHECK(h >= ks && w >= ks, "conv_relu_pool backward: input smaller than the kernel");
    TORCH_CHECK(bias.numel() == co, "conv_relu_pool backward: bias must have Co elements");
    const int64_t ph = (h - ks + 1) / 2, pw = (w - ks + 1) / 2;
    TORCH_CHECK(grad_y.sizes() == torch::IntArrayRef({batch, co, ph, pw}), "conv_relu_pool backward: grad_y shape mismatch");
    TORCH_CHECK(batch * std::max(ci, co) * h * w < (int64_t)1 << 31, "conv_relu_pool backward: too large for int indexing");
    auto gyc = grad_y.contiguous(), xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
    auto opts = xc.options();
    auto gx = torch::empty_like(xc);
    auto gw = torch::zeros_like(wc);            // grad_w blocks accumulate with atomics
    auto gb = torch::zeros({co}, opts);         // so does grad_bias
    auto wt = torch::empty({ci * ks * ks, co}, opts);
    auto wx = torch::empty({co * ks * ks, ci}, opts);
    auto dz = torch::empty({batch, co, 2 * ph, 2 * pw}, opts);  // gradient at the conv outputs
    conv_relu_pool_backward_launch(gyc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                                   bc.data_ptr<float>(), gx.data_ptr<float>(), gw.data_ptr<float>(),
                                   gb.data_ptr<float>(), wt.data_ptr<float>(), wx.data_ptr<float>(),
                                   dz.data_ptr<float>(), (int)batch, (int)ci, (int)h, (int)w, (int)co, (int)ks,
                                   c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {gx, gw, gb.view_as(bias)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "conv2d + bias + ReLU + 2x2 max-pool backward (CUDA)");
}
