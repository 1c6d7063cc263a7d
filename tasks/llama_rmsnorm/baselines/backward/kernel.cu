// LLaMA RMSNorm backward, y = x * r * w with r = rsqrt(mean(x^2) + eps):
//   grad_x = r * g * w - x * (r^3 / n) * sum(g * w * x)        (per row)
//   grad_w = sum_rows g * x * r                                (per column)
// Persistent blocks (grid = SMs x resident blocks) stride over rows. A thread owns the same columns
// in every row, so w sits in its registers and its grad_w partial sums accumulate in registers across
// all the rows it visits; each block writes one row of partials and a small column-reduction kernel
// sums them (deterministic, no atomics). When a row fits in registers (ITEMS vectors per thread) x
// and g are read once: DRAM sees read x, read g, write grad_x, plus the partials (grid x n floats,
// ~2% of the traffic on the bench). Longer rows take two sweeps, partials accumulated in global.
// Precision: grad_w sums g * x * r over every row (16,384 on robust-kbench's folder, where the tolerance is
// atol = rtol = 1e-5). In float32 that sum's rounding is of the order of the tolerance on small entries whatever the
// order (scripts/emulate_rmsnorm_bwd_sums.py: 4 of 512 columns outside it; on an H200, 36 of 4096 were), so r,
// the products and every partial sum of grad_w are doubles: an FP64 multiply-add per element, far below what the
// memory traffic costs. grad_x keeps float32 arithmetic, with r and its cube term rounded once from double.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024
#define VEC 4           // kbench:knob values=1,2,4
#define MAX_ITEMS 8     // kbench:knob values=4,8,16 requires=BLOCK_SIZE*MAX_ITEMS<=4096

template <int V> struct alignas(4 * V) Vec { float v[V]; };

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Two sums over the block in one round of barriers; every thread gets both.
__device__ __forceinline__ double2 block_sum2(double a, double b, double2* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    __syncthreads();  // shared may still be read from the previous call (previous row)
    if (lane == 0) shared[warp] = make_double2(a, b);
    __syncthreads();
    double2 v = (threadIdx.x < BLOCK_SIZE / 32) ? shared[threadIdx.x] : make_double2(0.0, 0.0);
    if (warp == 0) { v.x = warp_sum(v.x); v.y = warp_sum(v.y); }
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}

// r = rsqrt(mean(x^2) + eps) in double, and the float32 factors grad_x needs.
struct RowScale { double r; float rf, c; };
__device__ __forceinline__ RowScale row_scale(double2 tot, int n, float eps) {
    const double r = 1.0 / sqrt(tot.x / (double)n + (double)eps);
    return {r, (float)r, (float)(r * r * r * tot.y / (double)n)};
}

// Row held in registers: vector i = tid + k * BLOCK_SIZE, k < ITEMS.
template <int V, int ITEMS>
__global__ void __launch_bounds__(BLOCK_SIZE)
rmsnorm_bwd_cached(const float* __restrict__ g, const float* __restrict__ x,
                   const float* __restrict__ w, float* __restrict__ dx,
                   double* __restrict__ partial, int rows, int n, float eps) {
    __shared__ double2 shared[32];
    const int nv = n / V;
    const int tid = threadIdx.x;
    Vec<V> wr[ITEMS];
    double acc[ITEMS][V];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = tid + k * BLOCK_SIZE;
        if (i < nv) wr[k] = reinterpret_cast<const Vec<V>*>(w)[i];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[k][j] = 0.0;
    }
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t off = (size_t)row * n;
        const Vec<V>* xr = reinterpret_cast<const Vec<V>*>(x + off);
        const Vec<V>* gr = reinterpret_cast<const Vec<V>*>(g + off);
        Vec<V>* dxr = reinterpret_cast<Vec<V>*>(dx + off);
        Vec<V> xv[ITEMS], gv[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = tid + k * BLOCK_SIZE;
            if (i < nv) { xv[k] = xr[i]; gv[k] = gr[i]; }
        }
        double ss = 0.0, dot = 0.0;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            if (tid + k * BLOCK_SIZE < nv) {
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const double xd = xv[k].v[j];
                    ss += xd * xd;
                    dot += (double)(gv[k].v[j] * wr[k].v[j]) * xd;
                }
            }
        }
        const RowScale s = row_scale(block_sum2(ss, dot, shared), n, eps);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = tid + k * BLOCK_SIZE;
            if (i < nv) {
                Vec<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    o.v[j] = s.rf * gv[k].v[j] * wr[k].v[j] - s.c * xv[k].v[j];
                    acc[k][j] += (double)gv[k].v[j] * (double)xv[k].v[j] * s.r;
                }
                dxr[i] = o;
            }
        }
    }
    double* pr = partial + (size_t)blockIdx.x * n;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = tid + k * BLOCK_SIZE;
        if (i < nv) {
#pragma unroll
            for (int j = 0; j < V; ++j) pr[i * V + j] = acc[k][j];
        }
    }
}

// Any row length: a reduction sweep, then a sweep that re-reads x and g (L2 for most rows) and adds
// into this block's own row of partials (each column always touched by the same thread: no race).
template <int V>
__global__ void __launch_bounds__(BLOCK_SIZE)
rmsnorm_bwd_loop(const float* __restrict__ g, const float* __restrict__ x,
                 const float* __restrict__ w, float* __restrict__ dx,
                 double* __restrict__ partial, int rows, int n, float eps) {
    __shared__ double2 shared[32];
    const int nv = n / V;
    const int tid = threadIdx.x;
    const Vec<V>* wv = reinterpret_cast<const Vec<V>*>(w);
    double* pr = partial + (size_t)blockIdx.x * n;
    for (int i = tid; i < nv; i += BLOCK_SIZE) {
#pragma unroll
        for (int j = 0; j < V; ++j) pr[i * V + j] = 0.0;
    }
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t off = (size_t)row * n;
        const Vec<V>* xr = reinterpret_cast<const Vec<V>*>(x + off);
        const Vec<V>* gr = reinterpret_cast<const Vec<V>*>(g + off);
        Vec<V>* dxr = reinterpret_cast<Vec<V>*>(dx + off);
        double ss = 0.0, dot = 0.0;
        for (int i = tid; i < nv; i += BLOCK_SIZE) {
            const Vec<V> a = xr[i], b = gr[i], c = wv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) {
                const double xd = a.v[j];
                ss += xd * xd;
                dot += (double)(b.v[j] * c.v[j]) * xd;
            }
        }
        const RowScale s = row_scale(block_sum2(ss, dot, shared), n, eps);
        for (int i = tid; i < nv; i += BLOCK_SIZE) {
            const Vec<V> a = xr[i], b = gr[i], c = wv[i];
            Vec<V> o;
#pragma unroll
            for (int j = 0; j < V; ++j) {
                o.v[j] = s.rf * b.v[j] * c.v[j] - s.c * a.v[j];
                pr[i * V + j] += (double)b.v[j] * (double)a.v[j] * s.r;
            }
            dxr[i] = o;
        }
    }
}

// grad_w[c] = sum over the P partial rows, in double; 32 columns x 32 row-slices per block, coalesced reads.
__global__ void __launch_bounds__(1024)
column_sum(const double* __restrict__ partial, float* __restrict__ out, int P, int n) {
    __shared__ double s[32][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    double acc = 0.0;
    if (col < n) {
#pragma unroll 4
        for (int p = threadIdx.y; p < P; p += 32) acc += partial[(size_t)p * n + col];
    }
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < n) {
        double t = 0.0;
#pragma unroll
        for (int q = 0; q < 32; ++q) t += s[q][threadIdx.x];
        out[col] = (float)t;
    }
}

static int sm_count() {
    int dev = 0, sms = 1;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

// Rows of partials the binding must allocate: an upper bound of any grid the launcher picks.
int rmsnorm_backward_partial_rows(int rows) {
    int dev = 0, threads = 2048;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
    const long long g = (long long)sm_count() * (threads / BLOCK_SIZE > 0 ? threads / BLOCK_SIZE : 1);
    return (int)(g < rows ? g : rows);
}

template <typename K>
static void run(K kernel, const float* g, const float* x, const float* w, float* dx, float* dw,
                double* partial, int rows, int n, float eps, cudaStream_t stream) {
    int occ = 1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, BLOCK_SIZE, 0);
    if (occ < 1) occ = 1;
    long long grid = (long long)sm_count() * occ;
    const int cap = rmsnorm_backward_partial_rows(rows);
    if (grid > cap) grid = cap;
    kernel<<<(int)grid, BLOCK_SIZE, 0, stream>>>(g, x, w, dx, partial, rows, n, eps);
    column_sum<<<(n + 31) / 32, dim3(32, 32), 0, stream>>>(partial, dw, (int)grid, n);
}

template <int V>
static void launch(const float* g, const float* x, const float* w, float* dx, float* dw,
                   double* partial, int rows, int n, float eps, cudaStream_t stream) {
    const int per_thread = (n / V + BLOCK_SIZE - 1) / BLOCK_SIZE;
    if (per_thread <= 1) return run(rmsnorm_bwd_cached<V, 1>, g, x, w, dx, dw, partial, rows, n, eps, stream);
    if (per_thread <= 2) return run(rmsnorm_bwd_cached<V, 2>, g, x, w, dx, dw, partial, rows, n, eps, stream);
    if (per_thread <= 4) return run(rmsnorm_bwd_cached<V, 4>, g, x, w, dx, dw, partial, rows, n, eps, stream);
    if constexpr (MAX_ITEMS >= 8) {
        if (per_thread <= 8) return run(rmsnorm_bwd_cached<V, 8>, g, x, w, dx, dw, partial, rows, n, eps, stream);
    }
    if constexpr (MAX_ITEMS >= 16) {
        if (per_thread <= 16) return run(rmsnorm_bwd_cached<V, 16>, g, x, w, dx, dw, partial, rows, n, eps, stream);
    }
    run(rmsnorm_bwd_loop<V>, g, x, w, dx, dw, partial, rows, n, eps, stream);
}

// partial: rmsnorm_backward_partial_rows(rows) x n floats of scratch.
void rmsnorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw,
                             double* partial, int rows, int n, float eps, cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const bool vec = (n % VEC == 0) &&
        ((reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(x) |
          reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(dx) |
          reinterpret_cast<uintptr_t>(partial)) % (4 * VEC) == 0);
    if (vec) launch<VEC>(g, x, w, dx, dw, partial, rows, n, eps, stream);
    else     launch<1>(g, x, w, dx, dw, partial, rows, n, eps, stream);
}
