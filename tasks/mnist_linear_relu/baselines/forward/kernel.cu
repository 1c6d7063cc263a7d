// Fused Linear + bias + ReLU forward: y = relu(x @ W^T + b) in one GEMM kernel whose epilogue adds
// the bias and clamps before the single store (eager runs cuBLAS SGEMM + a separate ReLU pass).
// x [M,K] and W [N,K] are both K-major, the natural "TN" layout for 16-byte cp.async tiles.
#include <cuda_runtime.h>
#include <stdint.h>
#include <algorithm>

// ---- GEMM core: C[M,N] = sum_k A(m,k) * B(n,k), 3xTF32 on tensor cores -------------------------
// Precision: every fp32 operand v is split into hi = tf32(v) and lo = tf32(v - hi) (v - hi is exact),
// and acc += a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (mma.sync m16n8k8, fp32 accumulate). The dropped
// a_lo*b_lo term and the rounding of lo are ~2^-21 relative per product, fp32-level accuracy: the
// error per output is ~1e-6 at these sizes against atol = rtol = 1e-4, where plain TF32 (2^-11 per
// product) fails. Costs 3 MMAs per product, still well above the fp32 SIMT rate of H100.
// Accumulation: the mma's own fp32 add is not IEEE. It aligns the addends to the largest exponent,
// keeps only a couple of guard bits and truncates toward zero, so every mma into a large accumulator
// loses up to ~1 ulp(acc), always toward zero: over one long chain (K = 16384 rows of unet_linear's
// grad_weight, partial sums ~50) that drifted by 1e-2, past atol. So each BK tile is summed in a
// fresh accumulator (tacc: sums of PROMOTE*BK products) and promoted into acc with an ordinary
// round-to-nearest FADD. A tile's truncation bias then follows the sign of that tile's own small
// sum, which varies from tile to tile, so it no longer adds up coherently over K. A bit-level CPU
// emulation of that mma rounding (it reproduces the failing element, -14.0026, to 1e-4) gives a
// max error of 2e-4 on that config (3e-4 with PROMOTE 2), against 1.1e-2 before and an allowance
// of >= 3e-3.
//
// Operands are read straight from their torch layout, either K-major (row r at base + r*K, the
// x @ W^T case) or MN-major (element (r, k) at base + k*R: W or x read transposed in backward);
// shared memory keeps the global layout so cp.async can copy 16-byte chunks untransposed.
// Pipeline: STAGES-deep cp.async ring, one __syncthreads per BK step.

#define BM 128        // kbench:knob values=64,128,256
#define BN 128        // kbench:knob values=64,128,256
#define BK 32         // kbench:knob values=16,32
#define WARPS_M 2     // kbench:knob values=1,2,4 requires=(BM/WARPS_M)%16==0 && (BM/WARPS_M)*(BN/WARPS_N)<=2048 && (BM/WARPS_M)*(BN/WARPS_N)/16+72<=2048/(WARPS_M*WARPS_N)
#define WARPS_N 4     // kbench:knob values=1,2,4 requires=(BN/WARPS_N)%16==0
#define STAGES 3      // kbench:knob values=2,3,4 requires=STAGES*(BM+BN)*(BK+8)*4<=227*1024
// BK tiles summed in one fresh mma accumulator before promotion (see "Accumulation"); 1 lets the
// first mma of each tile take a zero C operand instead of zeroing tacc
#define PROMOTE 1     // kbench:knob values=1,2
// 2 asks ptxas for <= 65536/(2*THREADS) registers; only legal where the accumulators (acc and tacc,
// 2 * WTM * WTN / 32 per thread) leave room
#define MIN_BLOCKS 1  // kbench:knob values=1,2 requires=MIN_BLOCKS==1 || (BM/WARPS_M)*(BN/WARPS_N)/16+72<=1024/(WARPS_M*WARPS_N)
// Skinny problems (batch 4-64, robust-kbench's own configs: 64 or 4 rows, 128-256 outputs, K 128-1600): the
// tensor-core tile is 128 x 128, so the whole output is one block walking all of K. 1 sends them to
// skinny_linear_relu below (fp32 FMAs, one warp per output column and group of up to 8 rows) where W is small
// enough to be re-read from L2 by each row group, or there are at most 8 rows (W read once).
#define SKINNY 1      // kbench:knob values=0,1
#define SKINNY_ROWS 8 // most rows of x per warp (accumulators per lane); fewer where that leaves SMs idle
#define SKINNY_WARPS 8
// K from which a skinny problem with too few warps is also split over K (atomics into a zeroed y, then a ReLU
// pass: three launches). Below it, one launch with fewer rows per warp: these problems take a few microseconds,
// so each launch counts (the reason; the gain is not yet measured on a GPU, BENCHMARKS.md).
#define SKINNY_SPLIT_K 4096  // kbench:knob values=1024,4096,16384

#define THREADS (WARPS_M * WARPS_N * 32)
#define WTM (BM / WARPS_M)   // warp tile
#define WTN (BN / WARPS_N)
#define MT (WTM / 16)        // m16 x n8 MMA tiles per warp
#define NT (WTN / 8)
#define KPAD 8  // K-major smem row = BK + 8 floats: float2 fragment reads hit 32 distinct banks
#define MPAD 4  // MN-major smem row = rows + 4 floats: the 4 k-rows of a fragment land 8 banks apart

static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile must be a multiple of 16x16");

enum { EPI_BIAS = 0, EPI_BIAS_RELU = 1, EPI_RELU_MASK = 2, EPI_ATOMIC = 3, EPI_SWIGLU = 4 };

struct GemmArgs {
    const float* a;      // A: [M,K] (K-major) or [K,M] (MN-major)
    const float* b0;     // B: [N,K] (K-major) or [K,N] (MN-major)
    const float* b1;     // second B for the dual (gate/up) GEMM, else unused
    float* c;            // C: [M,N] row-major
    const float* bias;   // [N] or nullptr
    const float* aux;    // [M,N] grad_y for EPI_RELU_MASK
    int M, N, K;
    int k_chunk;         // K range per blockIdx.z (a multiple of BK); K when not split
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// Out-of-range chunks copy 0 bytes and zero-fill, so tails contribute nothing to the sums.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
    uint32_t h, l;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(h) : "f"(v));
    const float r = v - __uint_as_float(h);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(l) : "f"(r));
    hi = h;
    lo = l;
}

__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d = a * b + 0: starts a fresh accumulator without zeroing it first.
__device__ __forceinline__ void mma_tf32_z(float* d, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f));
}

// Smem row r of the B tile -> global row and source matrix. Dual mode (gate/up in one GEMM): each
// warp's WTN columns are WTN/2 gate rows followed by the WTN/2 up rows of the same outputs, so one
// thread ends up holding gate and up accumulators for the same (m, n).
template <bool DUAL>
__device__ __forceinline__ const float* map_row(int r, int row0, const float* g0, const float* g1, int& row) {
    if (!DUAL) { row = row0 + r; return g0; }
    const int w = r / WTN, j = r % WTN;
    const bool up = j >= WTN / 2;
    row = row0 + w * (WTN / 2) + (up ? j - WTN / 2 : j);
    return up ? g1 : g0;
}

// K-major tile: ROWS x BK, smem [ROWS][BK + KPAD]; global (row, k) at base[row * K + k].
template <int ROWS, bool VEC, bool DUAL>
__device__ __forceinline__ void load_kmajor(float* s, const float* g0, const float* g1, int row0, int R,
                                            int K, int k0, int kend) {
    constexpr int SROW = BK + KPAD;
    constexpr int W = VEC ? 4 : 1;
    constexpr int CPR = BK / W;  // copies per row
    constexpr int TOTAL = ROWS * CPR;
    // The 4-byte path (odd K) is only for awkward shapes: keep it rolled to save registers.
#pragma unroll VEC ? 16 : 1
    for (int i = 0; i < (TOTAL + THREADS - 1) / THREADS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (TOTAL % THREADS != 0 && idx >= TOTAL) break;
        const int r = idx / CPR, c = (idx % CPR) * W;
        int row;
        const float* base = map_row<DUAL>(r, row0, g0, g1, row);
        const int k = k0 + c;
        const bool ok = row < R && k < kend;  // VEC: K % 4 == 0, so a chunk is all in or all out
        const float* src = ok ? base + (size_t)row * K + k : g0;
        if (VEC) cp_async16(s + r * SROW + c, src, ok);
        else     cp_async4(s + r * SROW + c, src, ok);
    }
}

// MN-major tile: BK x ROWS, smem [BK][ROWS + MPAD]; global (row, k) at base[k * R + row].
template <int ROWS, bool VEC>
__device__ __forceinline__ void load_mnmajor(float* s, const float* g, int row0, int R, int k0, int kend) {
    constexpr int SROW = ROWS + MPAD;
    constexpr int W = VEC ? 4 : 1;
    constexpr int CPR = ROWS / W;
    constexpr int TOTAL = BK * CPR;
#pragma unroll VEC ? 16 : 1
    for (int i = 0; i < (TOTAL + THREADS - 1) / THREADS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (TOTAL % THREADS != 0 && idx >= TOTAL) break;
        const int kr = idx / CPR, c = (idx % CPR) * W;
        const int row = row0 + c, k = k0 + kr;
        const bool ok = row < R && k < kend;  // VEC: R % 4 == 0
        const float* src = ok ? g + (size_t)k * R + row : g;
        if (VEC) cp_async16(s + kr * SROW + c, src, ok);
        else     cp_async4(s + kr * SROW + c, src, ok);
    }
}

// Operand value pair (row r; k, k+1) of a smem stage. Fragments use a permuted k order: register
// slot "k = t" holds column 2t and slot "k = t + 4" column 2t + 1, identically for A and B, which
// leaves the sum unchanged and lets K-major tiles use one 8-byte load per pair.
template <bool KMAJ, int ROWS>
__device__ __forceinline__ float2 frag_pair(const float* s, int r, int k) {
    if (KMAJ) return *reinterpret_cast<const float2*>(s + r * (BK + KPAD) + k);
    return make_float2(s[k * (ROWS + MPAD) + r], s[(k + 1) * (ROWS + MPAD) + r]);
}

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

template <int EPI>
__device__ __forceinline__ void store_pair(const GemmArgs& p, int row, int col, float v0, float v1) {
    if (row >= p.M || col >= p.N) return;
    const bool two = col + 1 < p.N;
    const size_t off = (size_t)row * p.N + col;
    if (EPI == EPI_ATOMIC) {
        atomicAdd(p.c + off, v0);
        if (two) atomicAdd(p.c + off + 1, v1);
        return;
    }
    if (EPI != EPI_SWIGLU && p.bias) {
        v0 += p.bias[col];
        if (two) v1 += p.bias[col + 1];
    }
    if (EPI == EPI_BIAS_RELU) { v0 = fmaxf(v0, 0.f); v1 = fmaxf(v1, 0.f); }
    if (EPI == EPI_RELU_MASK) {  // masked upstream gradient: grad_y * (pre-activation > 0)
        v0 = v0 > 0.f ? p.aux[off] : 0.f;
        if (two) v1 = v1 > 0.f ? p.aux[off + 1] : 0.f;
    }
    if (two && (p.N % 2) == 0) {  // even N: off is even, the pair is 8-byte aligned
        *reinterpret_cast<float2*>(p.c + off) = make_float2(v0, v1);
    } else {
        p.c[off] = v0;
        if (two) p.c[off + 1] = v1;
    }
}

template <bool A_KMAJ, bool B_KMAJ>
__host__ __device__ constexpr int stage_floats() {
    return (A_KMAJ ? BM * (BK + KPAD) : BK * (BM + MPAD)) + (B_KMAJ ? BN * (BK + KPAD) : BK * (BN + MPAD));
}

template <bool A_KMAJ, bool B_KMAJ, bool VEC, bool DUAL, int EPI>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) gemm_3xtf32(GemmArgs p) {
    static_assert(!DUAL || B_KMAJ, "dual mode maps K-major weight rows");
    extern __shared__ __align__(16) float smem[];
    constexpr int A_ST = A_KMAJ ? BM * (BK + KPAD) : BK * (BM + MPAD);
    constexpr int ST = stage_floats<A_KMAJ, B_KMAJ>();
    constexpr int BN_OUT = DUAL ? BN / 2 : BN;  // output columns per block

    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN_OUT;
    const int kb = blockIdx.z * p.k_chunk;
    const int ke = min(p.K, kb + p.k_chunk);
    const int ktiles = ke > kb ? (ke - kb + BK - 1) / BK : 0;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int g = lane >> 2, t = lane & 3;

    float acc[MT][NT][4];
    float tacc[MT][NT][4];  // the current PROMOTE tiles' sums, added into acc (see "Accumulation")
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

    auto load_stage = [&](int stage, int kt) {
        float* as = smem + stage * ST;
        float* bs = as + A_ST;
        const int k0 = kb + kt * BK;
        if (A_KMAJ) load_kmajor<BM, VEC, false>(as, p.a, p.a, m0, p.M, p.K, k0, ke);
        else        load_mnmajor<BM, VEC>(as, p.a, m0, p.M, k0, ke);
        if (B_KMAJ) load_kmajor<BN, VEC, DUAL>(bs, p.b0, p.b1, n0, p.N, p.K, k0, ke);
        else        load_mnmajor<BN, VEC>(bs, p.b0, n0, p.N, k0, ke);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();  // empty groups keep the wait_group count uniform
    }

    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (for this thread) ...
        __syncthreads();              // ... for all threads, and stage (kt-1) % STAGES is free
        {
            const int nk = kt + STAGES - 1;
            if (nk < ktiles) load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const float* as = smem + (kt % STAGES) * ST;
        const float* bs = as + A_ST;
        if (PROMOTE > 1 && kt % PROMOTE == 0) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int v = 0; v < 4; ++v) tacc[i][j][v] = 0.f;
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const float2 v = frag_pair<B_KMAJ, BN>(bs, wn * WTN + j * 8 + g, kk + 2 * t);
                split_tf32(v.x, bh[j][0], bl[j][0]);
                split_tf32(v.y, bh[j][1], bl[j][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = wm * WTM + i * 16 + g;
                const float2 v0 = frag_pair<A_KMAJ, BM>(as, r, kk + 2 * t);
                const float2 v1 = frag_pair<A_KMAJ, BM>(as, r + 8, kk + 2 * t);
                uint32_t ah[4], al[4];  // a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4)
                split_tf32(v0.x, ah[0], al[0]);
                split_tf32(v1.x, ah[1], al[1]);
                split_tf32(v0.y, ah[2], al[2]);
                split_tf32(v1.y, ah[3], al[3]);
#pragma unroll
                for (int j = 0; j < NT; ++j) {  // small terms first
                    if (PROMOTE == 1 && kk == 0) mma_tf32_z(tacc[i][j], al, bh[j]);
                    else                         mma_tf32(tacc[i][j], al, bh[j]);
                    mma_tf32(tacc[i][j], ah, bl[j]);
                    mma_tf32(tacc[i][j], ah, bh[j]);
                }
            }
        }
        if (PROMOTE == 1 || kt % PROMOTE == PROMOTE - 1 || kt == ktiles - 1) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int v = 0; v < 4; ++v) acc[i][j][v] += tacc[i][j][v];  // IEEE round-to-nearest
        }
    }
    cp_async_wait<0>();

    // Epilogue. Accumulator c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, same cols).
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * WTM + i * 16 + g + h * 8;
            if (DUAL) {
#pragma unroll
                for (int j = 0; j < NT / 2; ++j) {
                    const int col = n0 + wn * (WTN / 2) + j * 8 + 2 * t;
                    const float* gt = acc[i][j] + 2 * h;
                    const float* up = acc[i][j + NT / 2] + 2 * h;
                    store_pair<EPI_SWIGLU>(p, row, col, silu(gt[0]) * up[0], silu(gt[1]) * up[1]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int col = n0 + wn * WTN + j * 8 + 2 * t;
                    store_pair<EPI>(p, row, col, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
            }
        }
    }
}

static int sm_count() {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (sms <= 0) sms = 1;
    }
    return sms;
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Launch one GEMM. EPI_ATOMIC zeroes C and may split K over blockIdx.z when the output has too few
// tiles to fill the GPU (the grad_weight and llama down-projection shapes).
template <bool A_KMAJ, bool B_KMAJ, bool VEC, bool DUAL, int EPI>
static void launch_gemm_t(GemmArgs p, cudaStream_t stream) {
    auto kern = gemm_3xtf32<A_KMAJ, B_KMAJ, VEC, DUAL, EPI>;
    constexpr int smem = STAGES * stage_floats<A_KMAJ, B_KMAJ>() * (int)sizeof(float);
    static int occupancy = -1;  // per instantiation
    if (occupancy < 0) {
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kern, THREADS, smem);
        if (occupancy < 1) occupancy = 1;
    }
    constexpr int BN_OUT = DUAL ? BN / 2 : BN;
    const int gm = (p.M + BM - 1) / BM, gn = (p.N + BN_OUT - 1) / BN_OUT;
    const int ktiles = (p.K + BK - 1) / BK;
    int splits = 1;
    if (EPI == EPI_ATOMIC && ktiles > 1) {
        // Pick the split count minimising (waves / split) plus a small per-split cost (atomics,
        // pipeline fill); each split keeps at least 4 K tiles.
        const long slots = (long)sm_count() * occupancy, tiles = (long)gm * gn;
        double best = 1e30;
        for (int s = 1; s <= 32 && (s == 1 || ktiles / s >= 4); ++s) {
            const double waves = (double)((tiles * s + slots - 1) / slots);
            const double cost = waves / s + 0.02 * s;
            if (cost < best) { best = cost; splits = s; }
        }
    }
    const int tiles_per_split = (ktiles + splits - 1) / splits;
    p.k_chunk = tiles_per_split * BK;
    if (p.k_chunk == 0) p.k_chunk = BK;
    splits = ktiles ? (ktiles + tiles_per_split - 1) / tiles_per_split : 1;
    if (EPI == EPI_ATOMIC) cudaMemsetAsync(p.c, 0, (size_t)p.M * p.N * sizeof(float), stream);
    dim3 grid(gm, gn, splits);
    kern<<<grid, THREADS, smem, stream>>>(p);
}

// VEC (16-byte cp.async) needs every contiguous extent % 4 == 0 and 16-byte aligned bases.
template <bool A_KMAJ, bool B_KMAJ, bool DUAL, int EPI>
static void launch_gemm(const GemmArgs& p, bool vec, cudaStream_t stream) {
    if (p.M == 0 || p.N == 0) return;
    if (vec) launch_gemm_t<A_KMAJ, B_KMAJ, true, DUAL, EPI>(p, stream);
    else     launch_gemm_t<A_KMAJ, B_KMAJ, false, DUAL, EPI>(p, stream);
}

// ---- skinny path: y[m, n] = relu(b[n] + sum_k x[m, k] * w[n, k]) for few rows -----------------------
// Warp (n, g, s) owns column n for rows g*R.. over K slice s: lanes stride the slice (float4 when VEC4), each
// lane keeps R partial sums, a shuffle tree adds them. One slice: the warp adds the bias, clamps and stores.
// Several: atomicAdd into y zeroed first (the bias added by slice 0), and relu_inplace clamps once every slice
// has landed (the ReLU of a sum is not the sum of ReLUs).
template <bool VEC4, int R>
__global__ void __launch_bounds__(SKINNY_WARPS * 32)
skinny_linear_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                   float* __restrict__ y, int M, int N, int K, int groups, int slices, int kslice) {
    const int lane = threadIdx.x & 31;
    const long gw = (long)blockIdx.x * SKINNY_WARPS + (threadIdx.x >> 5);
    if (gw >= (long)N * groups * slices) return;
    const int s = (int)(gw % slices), g = (int)(gw / slices % groups), n = (int)(gw / slices / groups);
    const int k0 = s * kslice, k1 = min(K, k0 + kslice);
    const int m0 = g * R, rows = min(R, M - m0);
    const float* wn = w + (size_t)n * K;
    const float* xm = x + (size_t)m0 * K;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    if (VEC4) {
#pragma unroll 4
        for (int k = k0 + 4 * lane; k < k1; k += 128) {  // kslice % 128 == 0 and K % 4 == 0: no tail
            const float4 wv = __ldg(reinterpret_cast<const float4*>(wn + k));
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r < rows) {
                    const float4 xv = __ldg(reinterpret_cast<const float4*>(xm + (size_t)r * K + k));
                    acc[r] = fmaf(xv.x, wv.x, fmaf(xv.y, wv.y, fmaf(xv.z, wv.z, fmaf(xv.w, wv.w, acc[r]))));
                }
            }
        }
    } else {
#pragma unroll 4
        for (int k = k0 + lane; k < k1; k += 32) {
            const float wv = __ldg(wn + k);
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (r < rows) acc[r] = fmaf(__ldg(xm + (size_t)r * K + k), wv, acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (lane == 0) {
        const float bias = (s == 0 && b) ? b[n] : 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r >= rows) break;
            float* dst = y + (size_t)(m0 + r) * N + n;
            if (slices == 1) *dst = fmaxf(acc[r] + bias, 0.f);
            else atomicAdd(dst, acc[r] + bias);
        }
    }
}

__global__ void relu_inplace(float* __restrict__ y, long n) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] = fmaxf(y[i], 0.f);
}

template <int R>
static void launch_skinny_rows(const float* x, const float* w, const float* b, float* y, int M, int N, int K,
                               bool vec, long want, cudaStream_t stream) {
    const int groups = (M + R - 1) / R;
    const long have = (long)N * groups;
    // Split K only where it is long: below SKINNY_SPLIT_K the zeroing and the ReLU pass cost more than the idle
    // SMs of a single launch. Each slice keeps at least 128 elements of K.
    int slices = 1;
    if (have < want && K >= SKINNY_SPLIT_K)
        slices = (int)std::min<long>((want + have - 1) / have, (K + 127) / 128);
    int kslice = (K + slices - 1) / slices;
    kslice = (kslice + 127) / 128 * 128;
    slices = (K + kslice - 1) / kslice;
    if (slices > 1) cudaMemsetAsync(y, 0, (size_t)M * N * sizeof(float), stream);
    const long warps = have * slices;
    const unsigned blocks = (unsigned)((warps + SKINNY_WARPS - 1) / SKINNY_WARPS);
    if (vec) skinny_linear_relu<true, R><<<blocks, SKINNY_WARPS * 32, 0, stream>>>(x, w, b, y, M, N, K, groups, slices, kslice);
    else     skinny_linear_relu<false, R><<<blocks, SKINNY_WARPS * 32, 0, stream>>>(x, w, b, y, M, N, K, groups, slices, kslice);
    if (slices > 1) {
        const long n = (long)M * N;
        const unsigned rb = (unsigned)std::min<long>((n + 255) / 256, 4L * sm_count());
        relu_inplace<<<rb, 256, 0, stream>>>(y, n);
    }
}

static void launch_skinny(const float* x, const float* w, const float* b, float* y, int M, int N, int K, bool vec,
                          cudaStream_t stream) {
    // Enough warps to keep every SM busy (~16 per SM): the most rows per warp (W read fewest times) that still
    // give that many warps, else one row per warp.
    const long want = 16L * sm_count();
    auto enough = [&](int r) { return (long)N * ((M + r - 1) / r) >= want; };
    if (SKINNY_ROWS >= 8 && enough(8)) launch_skinny_rows<8>(x, w, b, y, M, N, K, vec, want, stream);
    else if (SKINNY_ROWS >= 4 && enough(4)) launch_skinny_rows<4>(x, w, b, y, M, N, K, vec, want, stream);
    else if (SKINNY_ROWS >= 2 && enough(2)) launch_skinny_rows<2>(x, w, b, y, M, N, K, vec, want, stream);
    else launch_skinny_rows<1>(x, w, b, y, M, N, K, vec, want, stream);
}

void linear_relu_forward_launch(const float* x, const float* w, const float* b, float* y, int M, int N,
                                int K, cudaStream_t stream) {
    GemmArgs p{x, w, w, y, b, nullptr, M, N, K, K};
    const bool vec = K % 4 == 0 && aligned16(x) && aligned16(w);
    if (SKINNY && M > 0 && N > 0 && M <= 64 && (M <= SKINNY_ROWS || (long)N * K * 4 <= (8L << 20))) {
        launch_skinny(x, w, b, y, M, N, K, vec, stream);
        return;
    }
    launch_gemm<true, true, false, EPI_BIAS_RELU>(p, vec, stream);
}
