// LayerNorm forward, one thread block per row.
// Three sweeps over the row (mean, centred variance, normalise): the second and third hit L1/L2,
// so device memory sees x once. The centred variance keeps precision when |mean| >> std.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read from a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < BLOCK_SIZE / 32) ? shared[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}

template <bool VEC>
__global__ void __launch_bounds__(BLOCK_SIZE)
layernorm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ b, float* __restrict__ y, int n, float eps) {
    __shared__ float shared[32];
    const size_t row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = y + row * n;
    const int tid = threadIdx.x;

    float s = 0.f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = tid; i < n / 4; i += BLOCK_SIZE) {
            float4 v = x4[i];
            s += (v.x + v.y) + (v.z + v.w);
        }
    } else {
        for (int i = tid; i < n; i += BLOCK_SIZE) s += xr[i];
    }
    const float mean = block_sum(s, shared) / n;

    float ss = 0.f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = tid; i < n / 4; i += BLOCK_SIZE) {
            float4 v = x4[i];
            float a = v.x - mean, c = v.y - mean, d = v.z - mean, e = v.w - mean;
            ss += (a * a + c * c) + (d * d + e * e);
        }
    } else {
        for (int i = tid; i < n; i += BLOCK_SIZE) { float d = xr[i] - mean; ss += d * d; }
    }
    const float rstd = rsqrtf(block_sum(ss, shared) / n + eps);

    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = tid; i < n / 4; i += BLOCK_SIZE) {
            float4 v = x4[i], g = w4[i], h = b4[i], o;
            o.x = (v.x - mean) * rstd * g.x + h.x;
            o.y = (v.y - mean) * rstd * g.y + h.y;
            o.z = (v.z - mean) * rstd * g.z + h.z;
            o.w = (v.w - mean) * rstd * g.w + h.w;
            y4[i] = o;
        }
    } else {
        for (int i = tid; i < n; i += BLOCK_SIZE) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
    }
}

void layernorm_forward_launch(const float* x, const float* w, const float* b, float* y,
                              int rows, int n, float eps, cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const bool vec = (n % 4 == 0) &&
        ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
          reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(y)) % 16 == 0);
    if (vec) layernorm_forward_kernel<true><<<rows, BLOCK_SIZE, 0, stream>>>(x, w, b, y, n, eps);
    else     layernorm_forward_kernel<false><<<rows, BLOCK_SIZE, 0, stream>>>(x, w, b, y, n, eps);
}
