// LLaMA RMSNorm forward: y = x * rsqrt(mean(x^2) + eps) * w over rows of length n.
// Blocks stride over the rows: one block per row (PERSISTENT 0: the scheduler keeps many rows' loads in
// flight), or persistent blocks (grid = SMs x resident blocks), where a thread owns the same columns in every
// row and its slice of w is loaded into registers once. When a row fits in the
// block's registers (ITEMS vectors per thread) it is loaded once, reduced, scaled and stored: DRAM
// sees one read of x and one write of y. Longer rows take two sweeps (the second mostly hits L2).
// VEC-wide (16-byte) accesses need n % VEC == 0 and aligned pointers; otherwise scalar.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK_SIZE 512  // kbench:knob values=128,256,512,1024
#define VEC 4           // kbench:knob values=1,2,4
#define MAX_ITEMS 8     // kbench:knob values=4,8,16 requires=BLOCK_SIZE*MAX_ITEMS<=4096
#define PERSISTENT 0    // kbench:knob values=0,1

template <int V> struct alignas(4 * V) Vec { float v[V]; };

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read from the previous call (previous row)
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < BLOCK_SIZE / 32) ? shared[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}

// Row held in registers: vector i = tid + k * BLOCK_SIZE, k < ITEMS.
template <int V, int ITEMS>
__global__ void __launch_bounds__(BLOCK_SIZE)
rmsnorm_fwd_cached(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   int rows, int n, float eps) {
    __shared__ float shared[32];
    const int nv = n / V;
    const int tid = threadIdx.x;
    const float inv_n = 1.f / (float)n;
    Vec<V> wr[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = tid + k * BLOCK_SIZE;
        if (i < nv) wr[k] = reinterpret_cast<const Vec<V>*>(w)[i];
    }
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const Vec<V>* xr = reinterpret_cast<const Vec<V>*>(x + (size_t)row * n);
        Vec<V>* yr = reinterpret_cast<Vec<V>*>(y + (size_t)row * n);
        Vec<V> xv[ITEMS];
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = tid + k * BLOCK_SIZE;
            if (i < nv) xv[k] = xr[i];
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            if (tid + k * BLOCK_SIZE < nv) {
#pragma unroll
                for (int j = 0; j < V; ++j) ss += xv[k].v[j] * xv[k].v[j];
            }
        }
        const float r = rsqrtf(block_sum(ss, shared) * inv_n + eps);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = tid + k * BLOCK_SIZE;
            if (i < nv) {
                Vec<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) o.v[j] = xv[k].v[j] * r * wr[k].v[j];
                yr[i] = o;
            }
        }
    }
}

// Any row length: a sum-of-squares sweep, then a scaling sweep that re-reads x (L2 for most rows).
template <int V>
__global__ void __launch_bounds__(BLOCK_SIZE)
rmsnorm_fwd_loop(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                 int rows, int n, float eps) {
    __shared__ float shared[32];
    const int nv = n / V;
    const int tid = threadIdx.x;
    const float inv_n = 1.f / (float)n;
    const Vec<V>* wv = reinterpret_cast<const Vec<V>*>(w);
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const Vec<V>* xr = reinterpret_cast<const Vec<V>*>(x + (size_t)row * n);
        Vec<V>* yr = reinterpret_cast<Vec<V>*>(y + (size_t)row * n);
        float ss = 0.f;
        for (int i = tid; i < nv; i += BLOCK_SIZE) {
            const Vec<V> a = xr[i];
#pragma unroll
            for (int j = 0; j < V; ++j) ss += a.v[j] * a.v[j];
        }
        const float r = rsqrtf(block_sum(ss, shared) * inv_n + eps);
        for (int i = tid; i < nv; i += BLOCK_SIZE) {
            const Vec<V> a = xr[i], g = wv[i];
            Vec<V> o;
#pragma unroll
            for (int j = 0; j < V; ++j) o.v[j] = a.v[j] * r * g.v[j];
            yr[i] = o;
        }
    }
}

// Enough blocks to fill every SM once (the kernels stride over rows), never more than rows; or one per row.
template <typename K>
static int persistent_grid(K kernel, int rows) {
    if (!PERSISTENT) return rows;
    int dev = 0, sms = 1, occ = 1;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, BLOCK_SIZE, 0);
    if (occ < 1) occ = 1;
    const long long g = (long long)sms * occ;
    return (int)(g < rows ? g : rows);
}

template <int V, int ITEMS>
static void run_cached(const float* x, const float* w, float* y, int rows, int n, float eps,
                       cudaStream_t stream) {
    auto k = rmsnorm_fwd_cached<V, ITEMS>;
    k<<<persistent_grid(k, rows), BLOCK_SIZE, 0, stream>>>(x, w, y, rows, n, eps);
}

template <int V>
static void launch(const float* x, const float* w, float* y, int rows, int n, float eps,
                   cudaStream_t stream) {
    const int per_thread = (n / V + BLOCK_SIZE - 1) / BLOCK_SIZE;
    if (per_thread <= 1) return run_cached<V, 1>(x, w, y, rows, n, eps, stream);
    if (per_thread <= 2) return run_cached<V, 2>(x, w, y, rows, n, eps, stream);
    if (per_thread <= 4) return run_cached<V, 4>(x, w, y, rows, n, eps, stream);
    if constexpr (MAX_ITEMS >= 8) {
        if (per_thread <= 8) return run_cached<V, 8>(x, w, y, rows, n, eps, stream);
    }
    if constexpr (MAX_ITEMS >= 16) {
        if (per_thread <= 16) return run_cached<V, 16>(x, w, y, rows, n, eps, stream);
    }
    auto k = rmsnorm_fwd_loop<V>;
    k<<<persistent_grid(k, rows), BLOCK_SIZE, 0, stream>>>(x, w, y, rows, n, eps);
}

void rmsnorm_forward_launch(const float* x, const float* w, float* y, int rows, int n, float eps,
                            cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const bool vec = (n % VEC == 0) &&
        ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
          reinterpret_cast<uintptr_t>(y)) % (4 * VEC) == 0);
    if (vec) launch<VEC>(x, w, y, rows, n, eps, stream);
    else     launch<1>(x, w, y, rows, n, eps, stream);
}
