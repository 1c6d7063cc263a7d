// ResNet basic block, inference form, in two implicit-GEMM conv kernels (plus a tiny BN-fold prep):
//   kernel 1: mid = relu(conv3x3_s(x) * s1 + t1)
//   kernel 2: y   = relu(conv3x3_1(mid) * s2 + t2 + shortcut)
//     identity shortcut: + x, read in the epilogue;
//     conv1x1_s + BN shortcut: its BN scale is folded into its weights too, so it is just Ci more
//     rows of the same GEMM's K (the B gather switches from mid to strided x) and t_down joins the
//     epilogue shift. One accumulator, one pass, no shortcut tensor in memory.
//   BN fold (prep kernel): wt[k][co] = w[co][k] * s[co], s = gamma / sqrt(var + eps),
//   t[co] = beta - mean * s; weights are transposed to [K][Co] so that A-tile loads are coalesced.
//   GEMM: M = out channels, N = batch * Ho * Wo, K = Cin * 9 (+ Ci). Default (USE_TC 1): 3xTF32 on
//   tensor cores (mma.sync m16n8k8, split hi/lo operands, per-slice promoted fp32 accumulation), see
//   conv3x3_bn_tc_kernel. USE_TC 0: fp32 SIMT FMAs, 8x8 register tile per thread. Both: double-buffered
//   shared memory with the next K-slice prefetched in registers.
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

// Folds one BatchNorm into a conv weight of K = k columns; writes rows [0, k) of wt ([K_total][Co]).
// A conv bias cb (nullptr: none) is absorbed too: BN(conv + cb) = s * conv + beta + (cb - mean) * s.
__global__ void fold_bn_kernel(const float* __restrict__ w, const float* __restrict__ gamma,
                               const float* __restrict__ beta, const float* __restrict__ mean,
                               const float* __restrict__ var, const float* __restrict__ cb, float eps,
                               float* __restrict__ wt, float* __restrict__ shift, int co_n, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= co_n * k) return;
    const int c = i / k, r = i - c * k;
    const float s = gamma[c] / sqrtf(var[c] + eps);
    wt[(size_t)r * co_n + c] = w[i] * s;
    if (r == 0) shift[c] = beta[c] + ((cb ? cb[c] : 0.0f) - mean[c]) * s;
}

struct ConvArgs {
    const float* x;      // 3x3 conv input [B][c][h][w], padding 1
    int c, h, w, stride;
    const float* xd;     // DOWN: 1x1 conv input [B][cd][hd][wd], no padding
    int cd, hd, wd, stride_d;
    const float* wt;     // [c*9 (+ cd)][co] folded weights
    const float* shift;  // [co]
    const float* shift_d;// DOWN: [co]
    const float* resid;  // RESID: [B][co][ho][wo]
    float* y;            // [B][co][ho][wo]
    int co, ho, wo, ncols;
};

template <bool DOWN, bool RESID>
__global__ void __launch_bounds__(THREADS)
conv3x3_bn_kernel(const ConvArgs p) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];
    constexpr int A_LD = BK * BM / THREADS, A_STEP = THREADS / BM;
    constexpr int B_LD = BK * BN / THREADS, B_STEP = THREADS / BN;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int k3 = p.c * 9;
    const int kdim = k3 + (DOWN ? p.cd : 0);
    const int hw = p.h * p.w, hwd = p.hd * p.wd, howo = p.ho * p.wo;
    const int co_n = p.co;

    // A loader: fixed channel column, rows ak + i*A_STEP of the slice.
    const int am = tid % BM, ak = tid / BM;
    const bool a_ok = m0 + am < co_n;
    const float* wcol = p.wt + m0 + am;
    // B loader: fixed output pixel, rows bk + i*B_STEP of the slice.
    const int bn = tid % BN, bk = tid / BN;
    const int n = n0 + bn;
    const bool b_ok = n < p.ncols;
    const float* xcol = p.x;
    const float* xdcol = p.xd;
    int iy0 = 0, ix0 = 0;
    if (b_ok) {
        const int b = n / howo, q = n - b * howo, oy = q / p.wo, ox = q - oy * p.wo;
        xcol = p.x + (size_t)b * p.c * hw;
        iy0 = oy * p.stride - 1;
        ix0 = ox * p.stride - 1;
        if (DOWN) xdcol = p.xd + (size_t)b * p.cd * hwd + (size_t)(oy * p.stride_d) * p.wd + ox * p.stride_d;
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
            if (b_ok && k < k3) {
                const int c = k / 9, r = k - c * 9, kh = r / 3, kw = r - kh * 3;
                const int iy = iy0 + kh, ix = ix0 + kw;
                if ((unsigned)iy < (unsigned)p.h && (unsigned)ix < (unsigned)p.w) v = xcol[(size_t)c * hw + iy * p.w + ix];
            } else if (DOWN && b_ok && k < kdim) {
                v = xdcol[(size_t)(k - k3) * hwd];  // shortcut rows of K: channel k - k3 of x
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

    // Epilogue: y = relu(acc + shift [+ shift_d] [+ resid]).
    float sh[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int co = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
        sh[i] = co < co_n ? p.shift[co] + (DOWN ? p.shift_d[co] : 0.f) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int col = n0 + (j < 4 ? tx * 4 + j : BN / 2 + tx * 4 + j - 4);
        if (col >= p.ncols) continue;
        const int b = col / howo, q = col - b * howo;
        const size_t off = (size_t)b * co_n * howo + q;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int co = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
            if (co >= co_n) continue;
            float v = acc[i][j] + sh[i];
            if (RESID) v += p.resid[off + (size_t)co * howo];
            p.y[off + (size_t)co * howo] = fmaxf(v, 0.f);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Tensor-core variant of the same implicit GEMM (USE_TC): 3xTF32 on mma.sync m16n8k8.
// Precision: each fp32 operand v is split into hi = tf32(v) and lo = tf32(v - hi), and
// a*b ~= al*bh + ah*bl + ah*bh (the dropped al*bl is ~2^-22 relative). The mma's internal fp32 adds are not
// IEEE round-to-nearest (they truncate), so each BK slice is summed in a fresh accumulator (tacc: 3*BK/8
// mma deep) and promoted into acc with ordinary fp32 adds: the truncation never compounds over K.
// Same loaders, smem double buffer and epilogue semantics as the SIMT kernel; smem rows are padded by 8
// floats so the fragment loads (lanes g = lane/4 along M or N, t = lane%4 along K) hit 32 distinct banks.
#define USE_TC 1     // kbench:knob values=0,1
#define TC_BM 128    // kbench:knob values=64,128
#define TC_BN 64     // kbench:knob values=32,64,128
#define TC_BK 16     // kbench:knob values=8,16,32 requires=TC_BK*(TC_BM+TC_BN+16)*8<=49152
#define TC_WM 4      // kbench:knob values=1,2,4 requires=TC_BM%(16*TC_WM)==0
#define TC_WN 2      // kbench:knob values=1,2,4 requires=TC_BN%(8*TC_WN)==0&&(32*TC_WM*TC_WN)%TC_BM==0&&(32*TC_WM*TC_WN)%TC_BN==0&&(TC_BK*TC_BN)%(32*TC_WM*TC_WN)==0&&(TC_BK*TC_BM)%(32*TC_WM*TC_WN)==0
#define TC_MINB 2    // kbench:knob values=1,2 requires=32*TC_WM*TC_WN*TC_MINB<=512&&(TC_MINB==1||(TC_BM/TC_WM/16)*(TC_BN/TC_WN/8)<=8)

constexpr int TC_THREADS = 32 * TC_WM * TC_WN;
constexpr int TC_MT = TC_BM / TC_WM / 16;  // m16 tiles per warp
constexpr int TC_NT = TC_BN / TC_WN / 8;   // n8 tiles per warp
constexpr int TC_APAD = TC_BM + 8, TC_BPAD = TC_BN + 8;
static_assert(TC_MT >= 1 && TC_NT >= 1 && TC_BM % (16 * TC_WM) == 0 && TC_BN % (8 * TC_WN) == 0, "warp tiling");
static_assert(TC_THREADS % TC_BM == 0 && TC_THREADS % TC_BN == 0, "loaders assume a fixed row/column per thread");
static_assert((TC_BK * TC_BM) % TC_THREADS == 0 && (TC_BK * TC_BN) % TC_THREADS == 0 && TC_BK % 8 == 0, "loader split");

__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
    uint32_t h, l;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(h) : "f"(v));
    const float r = v - __uint_as_float(h);  // exact
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(l) : "f"(r));
    hi = h;
    lo = l;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool DOWN, bool RESID>
__global__ void __launch_bounds__(TC_THREADS, TC_MINB)
conv3x3_bn_tc_kernel(const ConvArgs p) {
    __shared__ __align__(16) float As[2][TC_BK][TC_APAD];
    __shared__ __align__(16) float Bs[2][TC_BK][TC_BPAD];
    constexpr int A_LD = TC_BK * TC_BM / TC_THREADS, A_STEP = TC_THREADS / TC_BM;
    constexpr int B_LD = TC_BK * TC_BN / TC_THREADS, B_STEP = TC_THREADS / TC_BN;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
    const int k3 = p.c * 9;
    const int kdim = k3 + (DOWN ? p.cd : 0);
    const int hw = p.h * p.w, hwd = p.hd * p.wd, howo = p.ho * p.wo;
    const int co_n = p.co;

    const int am = tid % TC_BM, ak = tid / TC_BM;
    const bool a_ok = m0 + am < co_n;
    const float* wcol = p.wt + m0 + am;
    const int bn = tid % TC_BN, bk = tid / TC_BN;
    const int n = n0 + bn;
    const bool b_ok = n < p.ncols;
    const float* xcol = p.x;
    const float* xdcol = p.xd;
    int iy0 = 0, ix0 = 0;
    if (b_ok) {
        const int b = n / howo, q = n - b * howo, oy = q / p.wo, ox = q - oy * p.wo;
        xcol = p.x + (size_t)b * p.c * hw;
        iy0 = oy * p.stride - 1;
        ix0 = ox * p.stride - 1;
        if (DOWN) xdcol = p.xd + (size_t)b * p.cd * hwd + (size_t)(oy * p.stride_d) * p.wd + ox * p.stride_d;
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
            if (b_ok && k < k3) {
                const int c = k / 9, r = k - c * 9, kh = r / 3, kw = r - kh * 3;
                const int iy = iy0 + kh, ix = ix0 + kw;
                if ((unsigned)iy < (unsigned)p.h && (unsigned)ix < (unsigned)p.w) v = xcol[(size_t)c * hw + iy * p.w + ix];
            } else if (DOWN && b_ok && k < kdim) {
                v = xdcol[(size_t)(k - k3) * hwd];
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

    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int mw = (warp % TC_WM) * (TC_BM / TC_WM);
    const int nw = (warp / TC_WM) * (TC_BN / TC_WN);
    float acc[TC_MT][TC_NT][4];
#pragma unroll
    for (int i = 0; i < TC_MT; ++i)
#pragma unroll
        for (int j = 0; j < TC_NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int nk = (kdim + TC_BK - 1) / TC_BK;
    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < nk; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < nk) load((kt + 1) * TC_BK);
        float tacc[TC_MT][TC_NT][4];
#pragma unroll
        for (int i = 0; i < TC_MT; ++i)
#pragma unroll
            for (int j = 0; j < TC_NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) tacc[i][j][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < TC_BK; ks += 8) {
            // B fragment (k x n, "col"): b0 = B[k=t][n=g], b1 = B[k=t+4][n=g].
            uint32_t bh[TC_NT][2], bl[TC_NT][2];
#pragma unroll
            for (int j = 0; j < TC_NT; ++j) {
                const int nn = nw + j * 8 + g;
                split_tf32(Bs[buf][ks + t][nn], bh[j][0], bl[j][0]);
                split_tf32(Bs[buf][ks + t + 4][nn], bh[j][1], bl[j][1]);
            }
#pragma unroll
            for (int i = 0; i < TC_MT; ++i) {
                // A fragment (m x k, "row"): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4].
                const int mm = mw + i * 16 + g;
                uint32_t ah[4], al[4];
                split_tf32(As[buf][ks + t][mm], ah[0], al[0]);
                split_tf32(As[buf][ks + t][mm + 8], ah[1], al[1]);
                split_tf32(As[buf][ks + t + 4][mm], ah[2], al[2]);
                split_tf32(As[buf][ks + t + 4][mm + 8], ah[3], al[3]);
#pragma unroll
                for (int j = 0; j < TC_NT; ++j) {
                    mma_tf32(tacc[i][j], al, bh[j]);
                    mma_tf32(tacc[i][j], ah, bl[j]);
                    mma_tf32(tacc[i][j], ah, bh[j]);
                }
            }
        }
        // Promote this slice's sums with IEEE fp32 adds.
#pragma unroll
        for (int i = 0; i < TC_MT; ++i)
#pragma unroll
            for (int j = 0; j < TC_NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += tacc[i][j][e];
        // buf^1 was last read in iteration kt-1, which every thread finished before that sync.
        if (kt + 1 < nk) store(buf ^ 1);
        __syncthreads();
    }

    // Epilogue. C fragment: c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1].
#pragma unroll
    for (int i = 0; i < TC_MT; ++i) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int co = m0 + mw + i * 16 + g + 8 * hh;
            if (co >= co_n) continue;
            const float sh = p.shift[co] + (DOWN ? p.shift_d[co] : 0.f);
#pragma unroll
            for (int j = 0; j < TC_NT; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = n0 + nw + j * 8 + 2 * t + e;
                    if (col >= p.ncols) continue;
                    const int b = col / howo, q = col - b * howo;
                    const size_t off = ((size_t)b * co_n + co) * howo + q;
                    float v = acc[i][j][2 * hh + e] + sh;
                    if (RESID) v += p.resid[off];
                    p.y[off] = fmaxf(v, 0.f);
                }
            }
        }
    }
}

template <bool DOWN, bool RESID>
void launch_conv(const ConvArgs& a, cudaStream_t stream) {
    if (USE_TC) {
        dim3 grid((a.ncols + TC_BN - 1) / TC_BN, (a.co + TC_BM - 1) / TC_BM);
        conv3x3_bn_tc_kernel<DOWN, RESID><<<grid, TC_THREADS, 0, stream>>>(a);
    } else {
        dim3 grid((a.ncols + BN - 1) / BN, (a.co + BM - 1) / BM);
        conv3x3_bn_kernel<DOWN, RESID><<<grid, THREADS, 0, stream>>>(a);
    }
}

// Without a downsample wd == nullptr (and ci == co, stride == 1: the binding checks).
// scratch: wt1 [Ci*9][Co], wt2 [Co*9 (+Ci)][Co], shifts [3][Co], mid [B][Co][Ho][Wo]
void resnet_block_launch(const float* x, const float* w1, const float* cb1, const float* g1, const float* b1,
                         const float* m1, const float* v1, const float* w2, const float* cb2, const float* g2,
                         const float* b2, const float* m2, const float* v2, const float* wd, const float* cbd,
                         const float* gd, const float* bd, const float* md, const float* vd, int stride, float eps,
                         float* wt1, float* wt2, float* shifts, float* mid, float* y, int batch, int ci, int co, int h,
                         int w, cudaStream_t stream) {
    const int ho = (h - 1) / stride + 1, wo = (w - 1) / stride + 1;
    const int ncols = batch * ho * wo;
    if (ncols == 0 || co == 0) return;
    const int k1 = ci * 9, k2 = co * 9;
    float* t1 = shifts;
    float* t2 = shifts + co;
    float* td = shifts + 2 * co;
    fold_bn_kernel<<<(co * k1 + 255) / 256, 256, 0, stream>>>(w1, g1, b1, m1, v1, cb1, eps, wt1, t1, co, k1);
    fold_bn_kernel<<<(co * k2 + 255) / 256, 256, 0, stream>>>(w2, g2, b2, m2, v2, cb2, eps, wt2, t2, co, k2);
    if (wd) fold_bn_kernel<<<(co * ci + 255) / 256, 256, 0, stream>>>(wd, gd, bd, md, vd, cbd, eps,
                                                                       wt2 + (size_t)k2 * co, td, co, ci);

    ConvArgs a1{x, ci, h, w, stride, nullptr, 0, 0, 0, 1, wt1, t1, nullptr, nullptr, mid, co, ho, wo, ncols};
    launch_conv<false, false>(a1, stream);
    if (wd) {
        ConvArgs a2{mid, co, ho, wo, 1, x, ci, h, w, stride, wt2, t2, td, nullptr, y, co, ho, wo, ncols};
        launch_conv<true, false>(a2, stream);
    } else {
        ConvArgs a2{mid, co, ho, wo, 1, nullptr, 0, 0, 0, 1, wt2, t2, nullptr, x, y, co, ho, wo, ncols};
        launch_conv<false, true>(a2, stream);
    }
}
