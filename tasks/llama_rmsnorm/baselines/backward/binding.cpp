// Torch glue for the RMSNorm backward kernels: returns (grad_x, grad_weight).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

int rmsnorm_backward_partial_rows(int rows);
void rmsnorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw,
                             double* partial, int rows, int n, float eps, cudaStream_t stream);

std::vector<torch::Tensor> backward(torch::Tensor grad_y, torch::Tensor x, torch::Tensor weight,
                                    double eps) {
    TORCH_CHECK(grad_y.is_cuda() && x.is_cuda() && weight.is_cuda(), "rmsnorm backward: tensors must be on CUDA");
    TORCH_CHECK(grad_y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32 &&
                weight.scalar_type() == torch::kFloat32, "rmsnorm backward: float32 only");
    TORCH_CHECK(grad_y.sizes() == x.sizes(), "rmsnorm backward: grad_y and x shapes differ");
    TORCH_CHECK(x.dim() >= 1, "rmsnorm backward: x needs a last dimension");
    const int64_t n = x.size(-1);
    TORCH_CHECK(weight.numel() == n, "rmsnorm backward: weight must have x.size(-1) elements");
    auto gc = grad_y.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
    const int64_t rows = n ? xc.numel() / n : 0;
    TORCH_CHECK(rows <= INT32_MAX && n <= INT32_MAX, "rmsnorm backward: too many rows or columns");
    auto dx = torch::empty_like(xc);
    auto dw = torch::zeros_like(wc);  // stays zero when there are no rows
    const int prow = rows ? rmsnorm_backward_partial_rows((int)rows) : 0;
    auto partial = torch::empty({(int64_t)prow, n}, xc.options().dtype(torch::kFloat64));  // grad_w's partial sums
    rmsnorm_backward_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                            dx.data_ptr<float>(), dw.data_ptr<float>(), partial.data_ptr<double>(),
                            (int)rows, (int)n, (float)eps, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {dx, dw.view_as(weight)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "LLaMA RMSNorm backward (CUDA)");
}
