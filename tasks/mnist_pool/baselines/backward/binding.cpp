// Torch glue for the 2x2 max-pool backward kernel: returns (grad_x,). Called as robust-kbench calls it,
// backward(ctx.saved_tensors, grad_output): the saved tensors, (x,), arrive as one tuple.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void maxpool2x2_backward_launch(const float* g, const float* x, float* dx, long long planes, int H,
                                int W, cudaStream_t stream);

std::vector<torch::Tensor> backward(std::vector<torch::Tensor> saved, torch::Tensor grad_y) {
    TORCH_CHECK(saved.size() == 1, "max_pool2d backward: expected the saved tensors (x,)");
    const torch::Tensor& x = saved[0];
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda(), "max_pool2d backward: tensors must be on CUDA");
    TORCH_CHECK(grad_y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32,
                "max_pool2d backward: float32 only");
    TORCH_CHECK(x.dim() == 3 || x.dim() == 4, "max_pool2d backward: x must be [C, H, W] or [B, C, H, W]");
    const int64_t H = x.size(-2), W = x.size(-1);
    TORCH_CHECK(H <= INT32_MAX && W <= INT32_MAX, "max_pool2d backward: plane too large");
    auto sizes = x.sizes().vec();
    sizes[sizes.size() - 2] = H / 2;
    sizes[sizes.size() - 1] = W / 2;
    TORCH_CHECK(grad_y.sizes() == c10::IntArrayRef(sizes), "max_pool2d backward: grad_y has the wrong shape");
    auto xc = x.contiguous(), gc = grad_y.contiguous();
    if (H < 2 || W < 2) return {torch::zeros_like(xc)};  // no window: nothing gets a gradient
    auto dx = torch::empty_like(xc);  // the kernel writes every element
    const int64_t planes = xc.numel() / (H * W);
    maxpool2x2_backward_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), dx.data_ptr<float>(),
                               (long long)planes, (int)H, (int)W, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {dx};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "2x2 stride-2 max pool backward (CUDA)");
}
