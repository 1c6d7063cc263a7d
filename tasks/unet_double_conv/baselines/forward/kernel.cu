// UNet double conv, inference form: (conv3x3 pad 1 -> BatchNorm(running stats) -> ReLU) x 2.
//   A tiny prep kernel folds each BatchNorm into its conv: wt[k][co] = w[co][k] * s[co] with
//   s = gamma / sqrt(var + eps), shift[co] = beta - mean * s (also transposing the weight to [K][Co]
//   so that A-tile loads are coalesced). Each conv is then one implicit-GEMM kernel with a
//   "+ shift, ReLU" epilogue: M = out channels, N = batch * H * W output pixels, K = Cin * 9.
//   fp32 SIMT FMAs (no TF32), 8x8 register tile per thread, double-buffered shared memory with the
//   next K-slice prefetched into registers; B is gathered on the fly from NCHW (zero padding by
//   bounds checks). The intermediate activation makes one round trip through L2/HBM.
#include <cuda_runtime.h>
#include <stdint.h>

// output channels per block
#define BM 128   // kbench:knob values=64,128
// output pixels per block
#define BN 128   // kbench:knob values=64,128
// K-slice per shared-memory stage
#define BK 8     // kbench:knob values=8,16

constexpr int THREADS = BM * BN / 64;  // each thread owns an 8x8 tile
static_assert(THREADS % BM == 0 && THREADS % BN == 0, "loaders assume a fixed row/column per thread");

__global__ void fold_bn_kernel(const float* __restrict__ w, const float* __restrict__ gamma,
                               const float* __restrict__ beta, const float* __restrict__ mean,
                               const float* __restrict__ var, float eps, float* __restrict__ wt,
                               float* __restrict__ shift, int co_n, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= co_n * k) return;
    const int c = i / k, r = i - c * k;
    const float s = gamma[c] / sqrtf(var[c] + eps);
    wt[(size_t)r * co_n + c] = w[i] * s;
    if (r == 0) shift[c] = beta[c] - mean[c] * s;
}

__global__ void __launch_bounds__(THREADS)
conv3x3_bn_relu_kernel(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ shift,
                       float* __restrict__ y, int ci_n, int h, int w, int co_n, int ncols) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];
    constexpr int A_LD = BK * BM / THREADS, A_STEP = THREADS / BM;
    constexpr int B_LD = BK * BN / THREADS, B_STEP = THREADS / BN;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kdim = ci_n * 9;
    const int hw = h * w;

    // A loader: fixed channel column, rows ak + i*A_STEP of the slice.
    const int am = tid % BM, ak = tid / BM;
    const bool a_ok = m0 + am < co_n;
    const float* wcol = wt + m0 + am;
    // B loader: fixed output pixel, rows bk + i*B_STEP of the slice.
    const int bn = tid % BN, bk = tid / BN;
    const int n = n0 + bn;
    const bool b_ok = n < ncols;
    const float* xcol = x;
    int iy0 = 0, ix0 = 0;
    if (b_ok) {
        const int b = n / hw, p = n - b * hw, oy = p / w, ox = p - oy * w;
        xcol = x + (size_t)b * ci_n * hw;
        iy0 = oy - 1;
        ix0 = ox - 1;
    }

    float ra[A_LD], rb[B_LD];
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LD; ++i) {
            const int k = k0 + ak + i * A_STEP;
            ra[i] = (a_ok && k < kdim) ? wcol[(size_t)k * co_n] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < B_LD; ++i) {
            const int k = k0 + bk + i * B_STEP;
            float v = 0.f;
            if (b_ok && k < kdim) {
                const int c = k / 9, r = k - c * 9, kh = r / 3, kw = r - kh * 3;
                const int iy = iy0 + kh, ix = ix0 + kw;
                if ((unsigned)iy < (unsigned)h && (unsigned)ix < (unsigned)w) v = xcol[(size_t)c * hw + iy * w + ix];
            }
            rb[i] = v;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_LD; ++i) As[buf][ak + i * A_STEP][am] = ra[i];
#pragma unroll
        for (int i = 0; i < B_LD; ++i) Bs[buf][bk + i * B_STEP][bn] = rb[i];
    };

    const int tx = tid % (BN / 8), ty = tid / (BN / 8);
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    const int nk = (kdim + BK - 1) / BK;
    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < nk; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < nk) load((kt + 1) * BK);  // global latency hides behind this slice's FMAs
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][BM / 2 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][BN / 2 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // buf^1 was last read in iteration kt-1, which every thread finished before that sync.
        if (kt + 1 < nk) store(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: y = relu(acc + shift); consecutive columns are consecutive pixels of one image.
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int col = n0 + (j < 4 ? tx * 4 + j : BN / 2 + tx * 4 + j - 4);
        if (col >= ncols) continue;
        const int b = col / hw, p = col - b * hw;
        float* yb = y + (size_t)b * co_n * hw + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int co = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
            if (co < co_n) yb[(size_t)co * hw] = fmaxf(acc[i][j] + shift[co], 0.f);
        }
    }
}

// scratch: wt1 [Ci*9][Co], wt2 [Co*9][Co], shift1 [Co], shift2 [Co], mid [B][Co][H][W]
void unet_double_conv_launch(const float* x, const float* w1, const float* g1, const float* b1, const float* m1,
                             const float* v1, const float* w2, const float* g2, const float* b2, const float* m2,
                             const float* v2, float eps, float* wt1, float* wt2, float* shift1, float* shift2,
                             float* mid, float* y, int batch, int ci, int co, int h, int w, cudaStream_t stream) {
    const int ncols = batch * h * w;
    if (ncols == 0 || co == 0) return;
    const int k1 = ci * 9, k2 = co * 9;
    if (k1 > 0) fold_bn_kernel<<<(co * k1 + 255) / 256, 256, 0, stream>>>(w1, g1, b1, m1, v1, eps, wt1, shift1, co, k1);
    fold_bn_kernel<<<(co * k2 + 255) / 256, 256, 0, stream>>>(w2, g2, b2, m2, v2, eps, wt2, shift2, co, k2);
    dim3 grid((ncols + BN - 1) / BN, (co + BM - 1) / BM);
    conv3x3_bn_relu_kernel<<<grid, THREADS, 0, stream>>>(x, wt1, shift1, mid, ci, h, w, co, ncols);
    conv3x3_bn_relu_kernel<<<grid, THREADS, 0, stream>>>(mid, wt2, shift2, y, co, h, w, co, ncols);
}
