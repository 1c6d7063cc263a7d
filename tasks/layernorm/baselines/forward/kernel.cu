// LayerNorm forward over long rows: robust-kbench's layernorm normalises each of B rows of C*H*W elements, up to
// millions, so one block per row would leave most SMs idle (B can be 1). Three launches:
//   1. layernorm_partial_stats: a grid of (chunk, row) blocks, each summing x and x^2 over CHUNK elements in double;
//   2. layernorm_row_stats:     one block per row folds its chunks into mean and rstd (biased variance);
//   3. layernorm_normalize:     the same (chunk, row) grid writes y = (x - mean) * rstd * w + b, with the full-size
//      weight and bias indexed by the position inside the row.
// Double sums keep E[x^2] - mean^2 exact enough for inputs with |mean| >> std at fp32 tolerances.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024
#define CHUNK 8192      // kbench:knob values=2048,4096,8192,16384,32768 requires=CHUNK%(4*BLOCK_SIZE)==0

static_assert(CHUNK % (4 * BLOCK_SIZE) == 0, "CHUNK must be a multiple of 4 * BLOCK_SIZE");

long long layernorm_chunks(long long n) { return (n + CHUNK - 1) / CHUNK; }

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is valid in thread 0.
__device__ __forceinline__ double block_sum(double v, double* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read from a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / 32) ? shared[threadIdx.x] : 0.0;
    if (warp == 0) v = warp_sum(v);
    return v;
}

// VEC: n % 4 == 0 and x 16-byte aligned, so every row and every chunk starts on a float4 boundary.
template <bool VEC>
__global__ void __launch_bounds__(BLOCK_SIZE)
layernorm_partial_stats(const float* __restrict__ x, double* __restrict__ partial, long long rows, long long n,
                        long long chunks) {
    __shared__ double shared[32];
    const long long start = static_cast<long long>(blockIdx.x) * CHUNK;
    const long long end = min(n, start + CHUNK);
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const float* xr = x + row * n;
        double s = 0.0, ss = 0.0;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            for (long long i = start / 4 + threadIdx.x; i < end / 4; i += BLOCK_SIZE) {
                const float4 v = x4[i];
                s += (double)v.x + (double)v.y + (double)v.z + (double)v.w;
                ss += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
            }
        } else {
            for (long long i = start + threadIdx.x; i < end; i += BLOCK_SIZE) {
                const double v = xr[i];
                s += v;
                ss += v * v;
            }
        }
        s = block_sum(s, shared);
        ss = block_sum(ss, shared);
        if (threadIdx.x == 0) {
            partial[(row * chunks + blockIdx.x) * 2] = s;
            partial[(row * chunks + blockIdx.x) * 2 + 1] = ss;
        }
    }
}

__global__ void __launch_bounds__(BLOCK_SIZE)
layernorm_row_stats(const double* __restrict__ partial, float2* __restrict__ stats, long long n, long long chunks,
                    float eps) {
    __shared__ double shared[32];
    const long long row = blockIdx.x;
    double s = 0.0, ss = 0.0;
    for (long long c = threadIdx.x; c < chunks; c += BLOCK_SIZE) {
        s += partial[(row * chunks + c) * 2];
        ss += partial[(row * chunks + c) * 2 + 1];
    }
    s = block_sum(s, shared);
    ss = block_sum(ss, shared);
    if (threadIdx.x == 0) {
        const double mean = s / n;
        const double var = fmax(ss / n - mean * mean, 0.0);
        stats[row] = make_float2((float)mean, (float)(1.0 / sqrt(var + (double)eps)));
    }
}

template <bool VEC>
__global__ void __launch_bounds__(BLOCK_SIZE)
layernorm_normalize(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                    const float2* __restrict__ stats, float* __restrict__ y, long long rows, long long n) {
    const long long start = static_cast<long long>(blockIdx.x) * CHUNK;
    const long long end = min(n, start + CHUNK);
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const float2 st = stats[row];
        const float mean = st.x, rstd = st.y;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(x + row * n);
            const float4* w4 = reinterpret_cast<const float4*>(w);
            const float4* b4 = reinterpret_cast<const float4*>(b);
            float4* y4 = reinterpret_cast<float4*>(y + row * n);
            for (long long i = start / 4 + threadIdx.x; i < end / 4; i += BLOCK_SIZE) {
                const float4 v = x4[i], g = w4[i], h = b4[i];
                float4 o;
                o.x = (v.x - mean) * rstd * g.x + h.x;
                o.y = (v.y - mean) * rstd * g.y + h.y;
                o.z = (v.z - mean) * rstd * g.z + h.z;
                o.w = (v.w - mean) * rstd * g.w + h.w;
                y4[i] = o;
            }
        } else {
            const float* xr = x + row * n;
            float* yr = y + row * n;
            for (long long i = start + threadIdx.x; i < end; i += BLOCK_SIZE) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
        }
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

static dim3 chunk_grid(long long rows, long long chunks) {
    return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

// partial: rows * layernorm_chunks(n) * 2 doubles; stats: rows float2 (mean, rstd).
void layernorm_forward_launch(const float* x, const float* w, const float* b, float* y, double* partial,
                              float* stats, long long rows, long long n, float eps, cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const long long chunks = layernorm_chunks(n);
    const bool vec = n % 4 == 0 && aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y);
    const dim3 grid = chunk_grid(rows, chunks);
    float2* st = reinterpret_cast<float2*>(stats);
    if (vec) layernorm_partial_stats<true><<<grid, BLOCK_SIZE, 0, stream>>>(x, partial, rows, n, chunks);
    else     layernorm_partial_stats<false><<<grid, BLOCK_SIZE, 0, stream>>>(x, partial, rows, n, chunks);
    layernorm_row_stats<<<static_cast<unsigned>(rows), BLOCK_SIZE, 0, stream>>>(partial, st, n, chunks, eps);
    if (vec) layernorm_normalize<true><<<grid, BLOCK_SIZE, 0, stream>>>(x, w, b, st, y, rows, n);
    else     layernorm_normalize<false><<<grid, BLOCK_SIZE, 0, stream>>>(x, w, b, st, y, rows, n);
}
