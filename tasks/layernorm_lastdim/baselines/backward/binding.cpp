// Torch glue for the LayerNorm backward kernels: returns (grad_x, grad_weight, grad_bias).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

long long layernorm_backward_workspace(const float* g, const float* x, const float* w, const float* dx, int rows,
                                       int n);
void layernorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw, float* db,
                               float* workspace, int rows, int n, float eps, cudaStream_t stream);

std::vector<torch::Tensor> backward(torch::Tensor grad_y, torch::Tensor x, torch::Tensor weight,
                                    torch::Tensor bias, double eps) {
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda() && weight.is_cuda(), "layernorm backward: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && grad_y.scalar_type() == torch::kFloat32,
                "layernorm backward: float32 only");
    TORCH_CHECK(grad_y.sizes() == x.sizes(), "layernorm backward: grad_y and x shapes differ");
    const int64_t n = x.size(-1);
    TORCH_CHECK(weight.numel() == n && bias.numel() == n, "layernorm backward: weight/bias size mismatch");
    auto gc = grad_y.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
    const int64_t rows = n ? xc.numel() / n : 0;
    TORCH_CHECK(rows <= INT32_MAX && n <= INT32_MAX, "layernorm backward: too large");
    auto dx = torch::empty_like(xc);
    if (rows == 0 || n == 0) {
        auto zw = torch::zeros_like(wc);
        return {dx, zw.view_as(weight), torch::zeros_like(wc).view_as(bias)};
    }
    auto dw = torch::empty_like(wc);
    auto db = torch::empty_like(wc);
    const long long ws_floats = layernorm_backward_workspace(gc.data_ptr<float>(), xc.data_ptr<float>(),
                                                             wc.data_ptr<float>(), dx.data_ptr<float>(),
                                                             (int)rows, (int)n);
    auto ws = torch::empty({ws_floats}, xc.options());
    layernorm_backward_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                              dx.data_ptr<float>(), dw.data_ptr<float>(), db.data_ptr<float>(),
                              ws.data_ptr<float>(), (int)rows, (int)n, (float)eps,
                              c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {dx, dw.view_as(weight), db.view_as(bias)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "LayerNorm backward (CUDA)");
}
