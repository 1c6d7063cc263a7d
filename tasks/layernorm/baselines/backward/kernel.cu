// LayerNorm backward over long rows (robust-kbench's layernorm: rows of C*H*W elements, full-size weight and
// bias). With xhat = (x - mean) * rstd and gw = g * w, per row:
//   grad_x = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
// and per element i of the row shape, summed over the B rows:
//   grad_w[i] = sum_r g[r, i] * xhat[r, i],   grad_b[i] = sum_r g[r, i].
// Launches: row statistics of x (chunked partial sums in double, then one block per row), chunked partial sums of
// gw and gw * xhat, their per-row means, grad_x on the (chunk, row) grid, then the parameter gradients with one
// thread per element i walking down the rows (coalesced across i).
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024
#define CHUNK 8192      // kbench:knob values=2048,4096,8192,16384,32768 requires=CHUNK%BLOCK_SIZE==0
#define PARAM_BLOCK 256 // kbench:knob values=128,256,512

long long layernorm_backward_chunks(long long n) { return (n + CHUNK - 1) / CHUNK; }

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is valid in thread 0.
__device__ __forceinline__ double block_sum(double v, double* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / 32) ? shared[threadIdx.x] : 0.0;
    if (warp == 0) v = warp_sum(v);
    return v;
}

// MODE 0: sums of x and x^2. MODE 1: sums of g*w and g*w*xhat (needs the row's mean and rstd).
template <int MODE>
__global__ void __launch_bounds__(BLOCK_SIZE)
ln_bwd_partial(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ w,
               const float2* __restrict__ stats, double* __restrict__ partial, long long rows, long long n,
               long long chunks) {
    __shared__ double shared[32];
    const long long start = static_cast<long long>(blockIdx.x) * CHUNK;
    const long long end = min(n, start + CHUNK);
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const float* xr = x + row * n;
        const float* gr = g + row * n;
        double a = 0.0, c = 0.0;
        if (MODE == 0) {
            for (long long i = start + threadIdx.x; i < end; i += BLOCK_SIZE) {
                const double v = xr[i];
                a += v;
                c += v * v;
            }
        } else {
            const float mean = stats[row].x, rstd = stats[row].y;
            for (long long i = start + threadIdx.x; i < end; i += BLOCK_SIZE) {
                const float gw = gr[i] * w[i];
                const float xhat = (xr[i] - mean) * rstd;
                a += gw;
                c += (double)gw * xhat;
            }
        }
        a = block_sum(a, shared);
        c = block_sum(c, shared);
        if (threadIdx.x == 0) {
            partial[(row * chunks + blockIdx.x) * 2] = a;
            partial[(row * chunks + blockIdx.x) * 2 + 1] = c;
        }
    }
}

// MODE 0: (mean, rstd) of x. MODE 1: (mean(gw), mean(gw * xhat)).
template <int MODE>
__global__ void __launch_bounds__(BLOCK_SIZE)
ln_bwd_row(const double* __restrict__ partial, float2* __restrict__ out, long long n, long long chunks, float eps) {
    __shared__ double shared[32];
    const long long row = blockIdx.x;
    double a = 0.0, c = 0.0;
    for (long long k = threadIdx.x; k < chunks; k += BLOCK_SIZE) {
        a += partial[(row * chunks + k) * 2];
        c += partial[(row * chunks + k) * 2 + 1];
    }
    a = block_sum(a, shared);
    c = block_sum(c, shared);
    if (threadIdx.x == 0) {
        if (MODE == 0) {
            const double mean = a / n;
            const double var = fmax(c / n - mean * mean, 0.0);
            out[row] = make_float2((float)mean, (float)(1.0 / sqrt(var + (double)eps)));
        } else {
            out[row] = make_float2((float)(a / n), (float)(c / n));
        }
    }
}

__global__ void __launch_bounds__(BLOCK_SIZE)
ln_bwd_grad_x(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ w,
              const float2* __restrict__ stats, const float2* __restrict__ coef, float* __restrict__ dx,
              long long rows, long long n) {
    const long long start = static_cast<long long>(blockIdx.x) * CHUNK;
    const long long end = min(n, start + CHUNK);
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const float mean = stats[row].x, rstd = stats[row].y;
        const float c1 = coef[row].x, c2 = coef[row].y;
        const float* xr = x + row * n;
        const float* gr = g + row * n;
        float* dr = dx + row * n;
        for (long long i = start + threadIdx.x; i < end; i += BLOCK_SIZE) {
            const float xhat = (xr[i] - mean) * rstd;
            dr[i] = rstd * (gr[i] * w[i] - c1 - xhat * c2);
        }
    }
}

__global__ void __launch_bounds__(PARAM_BLOCK)
ln_bwd_params(const float* __restrict__ x, const float* __restrict__ g, const float2* __restrict__ stats,
              float* __restrict__ dw, float* __restrict__ db, long long rows, long long n) {
    for (long long i = static_cast<long long>(blockIdx.x) * PARAM_BLOCK + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * PARAM_BLOCK) {
        double sw = 0.0, sb = 0.0;
        for (long long r = 0; r < rows; ++r) {
            const float gv = g[r * n + i];
            const float xhat = (x[r * n + i] - stats[r].x) * stats[r].y;
            sw += (double)gv * xhat;
            sb += gv;
        }
        dw[i] = (float)sw;
        db[i] = (float)sb;
    }
}

static dim3 chunk_grid(long long rows, long long chunks) {
    return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

// partial: rows * layernorm_backward_chunks(n) * 2 doubles; stats and coef: rows float2 each.
void layernorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw, float* db,
                               double* partial, float* stats, float* coef, long long rows, long long n, float eps,
                               cudaStream_t stream) {
    if (n == 0) return;
    float2* st = reinterpret_cast<float2*>(stats);
    float2* cf = reinterpret_cast<float2*>(coef);
    if (rows > 0) {
        const long long chunks = layernorm_backward_chunks(n);
        const dim3 grid = chunk_grid(rows, chunks);
        ln_bwd_partial<0><<<grid, BLOCK_SIZE, 0, stream>>>(x, g, w, st, partial, rows, n, chunks);
        ln_bwd_row<0><<<static_cast<unsigned>(rows), BLOCK_SIZE, 0, stream>>>(partial, st, n, chunks, eps);
        ln_bwd_partial<1><<<grid, BLOCK_SIZE, 0, stream>>>(x, g, w, st, partial, rows, n, chunks);
        ln_bwd_row<1><<<static_cast<unsigned>(rows), BLOCK_SIZE, 0, stream>>>(partial, cf, n, chunks, eps);
        ln_bwd_grad_x<<<grid, BLOCK_SIZE, 0, stream>>>(x, g, w, st, cf, dx, rows, n);
    }
    long long blocks = (n + PARAM_BLOCK - 1) / PARAM_BLOCK;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    ln_bwd_params<<<static_cast<unsigned>(blocks), PARAM_BLOCK, 0, stream>>>(x, g, st, dw, db, rows, n);
}
