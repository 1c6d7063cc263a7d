// LayerNorm backward: grad_x, grad_weight, grad_bias in one pass over grad_y and x.
//
//   xhat = (x - mean) * rstd                       (mean, rstd recomputed per row, centred variance)
//   dx   = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat))
//   dw   = sum_rows g * xhat,  db = sum_rows g
//
// Main path (n <= 1024 * VPT): persistent blocks stride over rows; each thread keeps its VPT elements of
// the row (g and x) in registers, so device memory sees g and x once and dx once. Two block reductions
// per row: sum(x), then {sum((x-mean)^2), sum(g*w), sum(g*w*(x-mean))}. Rows of length % 4 == 0 stream
// through a STAGES-deep cp.async shared-memory ring (layernorm_backward_async: STAGES-1 rows in flight per
// block); otherwise (or USE_ASYNC 0) the next row is prefetched into registers (PREFETCH). Each thread owns fixed
// columns, so it accumulates its dw/db partials in registers across all rows its block handles and writes
// them once at the end: partials[block][col]. A small kernel then sums the partials per column in a fixed
// order (deterministic, no atomics), launched with PDL so its launch overlaps the row kernel's tail.
// Fallback (longer rows): same persistent structure, the row is swept three times from global memory
// (L1/L2 hits after the first sweep) and the block's partial row is read-modify-written per row.
#include <cuda_runtime.h>
#include <stdint.h>

#define VPT 8              // kbench:knob values=4,8
#define PREFETCH 1         // kbench:knob values=0,1
#define USE_ASYNC 1        // kbench:knob values=0,1
#define STAGES 3           // kbench:knob values=2,3,4
#define BLOCKS_PER_SM 0    // kbench:knob values=0,1,2,4
#define FB_THREADS 512     // kbench:knob values=256,512,1024
#define RED_Y 16           // kbench:knob values=4,8,16,32
#define PDL 1              // kbench:knob values=0,1

// ------------------------------------------------------------------------------------------ helpers
// Programmatic dependent launch (sm_90+): let the reduce kernel get scheduled early / make it wait for
// the row kernel's completion and memory. Both are no-ops without PDL.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum of one value over the block; every thread gets the same result (fixed order: each warp redoes the
// same butterfly over the per-warp sums, and a butterfly leaves identical values in all lanes).
// `sm` holds NW floats. One __syncthreads per call: a barrier always separates a thread's read of a buffer
// from any later write to it (callers alternate between reductions with their own buffers).
template <int NW>
__device__ __forceinline__ float block_sum1(float v, float* sm) {
    const int lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum(lane < NW ? sm[lane] : 0.f);
}

// Sum of three values over the block, every thread gets the results. `sm` holds NW float4s.
template <int NW>
__device__ __forceinline__ float3 block_sum3(float a, float b, float c, float4* sm) {
    const int lane = threadIdx.x & 31;
    a = warp_sum(a);
    b = warp_sum(b);
    c = warp_sum(c);
    if (lane == 0) sm[threadIdx.x >> 5] = make_float4(a, b, c, 0.f);
    __syncthreads();
    float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
    if (lane < NW) t = sm[lane];
    return make_float3(warp_sum(t.x), warp_sum(t.y), warp_sum(t.z));
}

// Column of register element e (0 <= e < VPT) of thread tid. VEC: float4 chunks, chunk i*T + tid holds
// elements 4i..4i+3; scalar: element e at column e*T + tid. Both coalesced.
template <int T, bool VEC>
__device__ __forceinline__ int col_of(int e, int tid) {
    return VEC ? 4 * ((e >> 2) * T + tid) + (e & 3) : e * T + tid;
}

// Load this thread's VPT elements of a row (zeros past the end). Streaming loads: read once.
template <int T, bool VEC>
__device__ __forceinline__ void load_row(const float* __restrict__ p, float (&v)[VPT], int n, int tid) {
    if (VEC) {
#pragma unroll
        for (int i = 0; i < VPT / 4; ++i) {
            const int j = i * T + tid;
            float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
            if (4 * j < n) t = __ldcs(reinterpret_cast<const float4*>(p) + j);
            v[4 * i + 0] = t.x;
            v[4 * i + 1] = t.y;
            v[4 * i + 2] = t.z;
            v[4 * i + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < VPT; ++e) {
            const int c = e * T + tid;
            v[e] = c < n ? __ldcs(p + c) : 0.f;
        }
    }
}

// ------------------------------------------------------------------------------------------ main path
// The math of one row on this thread's VPT elements. gc, xc: g and x (zeros past the end of the row);
// on return o holds dx, and dwa/dba have g*xhat and g added.
template <int T, bool VEC>
__device__ __forceinline__ void row_math(const float (&gc)[VPT], const float (&xc)[VPT], const float (&wv)[VPT],
                                         float (&dwa)[VPT], float (&dba)[VPT], float (&o)[VPT], int n,
                                         float inv_n, float eps, float* red1, float4* red3, int tid) {
    constexpr int NW = T / 32;
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < VPT; ++e) s += xc[e];
    const float mean = block_sum1<NW>(s, red1) * inv_n;

    float d[VPT];
    float sq = 0.f, sa = 0.f, sb = 0.f;
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
        const int c = col_of<T, VEC>(e, tid);
        d[e] = c < n ? xc[e] - mean : 0.f;
        const float gw = gc[e] * wv[e];
        sq += d[e] * d[e];
        sa += gw;
        sb += gw * d[e];
    }
    const float3 t = block_sum3<NW>(sq, sa, sb, red3);
    const float rstd = rsqrtf(t.x * inv_n + eps);
    const float m1 = t.y * inv_n;
    const float m2 = t.z * rstd * inv_n;
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
        const float xhat = d[e] * rstd;
        o[e] = rstd * (gc[e] * wv[e] - m1 - xhat * m2);
        dwa[e] += gc[e] * xhat;
        dba[e] += gc[e];
    }
}

template <int T, bool VEC>
__device__ __forceinline__ void store_row(float* __restrict__ p, const float (&o)[VPT], int n, int tid) {
    if (VEC) {
#pragma unroll
        for (int i = 0; i < VPT / 4; ++i) {
            const int j = i * T + tid;
            if (4 * j < n)
                __stcs(reinterpret_cast<float4*>(p) + j, make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]));
        }
    } else {
#pragma unroll
        for (int e = 0; e < VPT; ++e) {
            const int c = e * T + tid;
            if (c < n) __stcs(p + c, o[e]);
        }
    }
}

// The block's dw/db partials: part[block][col], plain stores (read back soon by the reduce kernel).
template <int T, bool VEC>
__device__ __forceinline__ void store_partials(float* __restrict__ pw, float* __restrict__ pb,
                                               const float (&dwa)[VPT], const float (&dba)[VPT], int n, int tid) {
    if (VEC) {
#pragma unroll
        for (int i = 0; i < VPT / 4; ++i) {
            const int j = i * T + tid;
            if (4 * j < n) {
                reinterpret_cast<float4*>(pw)[j] = make_float4(dwa[4 * i], dwa[4 * i + 1], dwa[4 * i + 2], dwa[4 * i + 3]);
                reinterpret_cast<float4*>(pb)[j] = make_float4(dba[4 * i], dba[4 * i + 1], dba[4 * i + 2], dba[4 * i + 3]);
            }
        }
    } else {
#pragma unroll
        for (int e = 0; e < VPT; ++e) {
            const int c = e * T + tid;
            if (c < n) {
                pw[c] = dwa[e];
                pb[c] = dba[e];
            }
        }
    }
}

template <int T, bool VEC>
__device__ __forceinline__ void load_weight(const float* __restrict__ w, float (&wv)[VPT], float (&dwa)[VPT],
                                            float (&dba)[VPT], int n, int tid) {
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
        const int c = col_of<T, VEC>(e, tid);
        wv[e] = c < n ? w[c] : 0.f;
        dwa[e] = 0.f;
        dba[e] = 0.f;
    }
}

// Register pipeline: the next row's g and x are loaded into registers (PREFETCH) before the current row
// is reduced. Used for rows whose length is not a multiple of 4 (scalar loads), or with USE_ASYNC 0.
template <int T, bool VEC>
__global__ void __launch_bounds__(T)
layernorm_backward_regs(const float* __restrict__ g, const float* __restrict__ x, const float* __restrict__ w,
                        float* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b,
                        int rows, int n, float eps) {
    constexpr int NW = T / 32;
    __shared__ float red1[2][NW];
    __shared__ float4 red3[NW];
    const int tid = threadIdx.x;
    const float inv_n = 1.f / (float)n;

    float wv[VPT], dwa[VPT], dba[VPT], gc[VPT], xc[VPT];
    load_weight<T, VEC>(w, wv, dwa, dba, n, tid);

    int r = blockIdx.x;
    if (r < rows) {
        load_row<T, VEC>(g + (size_t)r * n, gc, n, tid);
        load_row<T, VEC>(x + (size_t)r * n, xc, n, tid);
    }
    int parity = 0;
    for (; r < rows; r += gridDim.x) {
        const int rn = r + gridDim.x;
        float gn[VPT], xn[VPT];
        if (PREFETCH && rn < rows) {
            load_row<T, VEC>(g + (size_t)rn * n, gn, n, tid);
            load_row<T, VEC>(x + (size_t)rn * n, xn, n, tid);
        }
        float o[VPT];
        // red1 alternates between rows: see block_sum1.
        row_math<T, VEC>(gc, xc, wv, dwa, dba, o, n, inv_n, eps, red1[parity], red3, tid);
        parity ^= 1;
        store_row<T, VEC>(dx + (size_t)r * n, o, n, tid);
        if (PREFETCH) {
#pragma unroll
            for (int e = 0; e < VPT; ++e) {
                gc[e] = gn[e];
                xc[e] = xn[e];
            }
        } else if (rn < rows) {
            load_row<T, VEC>(g + (size_t)rn * n, gc, n, tid);
            load_row<T, VEC>(x + (size_t)rn * n, xc, n, tid);
        }
    }
    pdl_trigger();
    if (blockIdx.x < rows)
        store_partials<T, VEC>(part_w + (size_t)blockIdx.x * n, part_b + (size_t)blockIdx.x * n, dwa, dba, n, tid);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Shared-memory pipeline (n % 4 == 0, 16-byte aligned): STAGES rows of g and x in flight per block via
// cp.async. Every thread copies exactly the float4 chunks it later reads, so waiting on its own cp.async
// groups is all the synchronisation the ring needs (no barrier); a stage is refilled one iteration after
// this thread read it into registers.
template <int T>
__global__ void __launch_bounds__(T)
layernorm_backward_async(const float* __restrict__ g, const float* __restrict__ x, const float* __restrict__ w,
                         float* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b,
                         int rows, int n, float eps) {
    constexpr int NW = T / 32;
    constexpr int CH = VPT / 4;  // float4 chunks per thread per row
    extern __shared__ float4 ring[];  // [STAGES][2 (g, x)][CH][T]
    __shared__ float red1[2][NW];
    __shared__ float4 red3[NW];
    const int tid = threadIdx.x;
    const float inv_n = 1.f / (float)n;
    const int step = gridDim.x;

    auto issue = [&](int row, int stage) {
        if (row < rows) {
            const float4* gs = reinterpret_cast<const float4*>(g + (size_t)row * n);
            const float4* xs = reinterpret_cast<const float4*>(x + (size_t)row * n);
            float4* dst = ring + (size_t)stage * 2 * CH * T;
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                const int j = i * T + tid;
                if (4 * j < n) {
                    cp_async16(dst + i * T + tid, gs + j);
                    cp_async16(dst + (CH + i) * T + tid, xs + j);
                }
            }
        }
        cp_async_commit();  // always one group per call, so wait_group counts rows
    };

    float wv[VPT], dwa[VPT], dba[VPT];
    load_weight<T, true>(w, wv, dwa, dba, n, tid);

    int r = blockIdx.x;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(r + s * step, s);
    int stage = 0, parity = 0;
    for (; r < rows; r += step) {
        issue(r + (STAGES - 1) * step, stage == 0 ? STAGES - 1 : stage - 1);
        cp_async_wait<STAGES - 1>();  // this thread's copies of row r have landed
        const float4* src = ring + (size_t)stage * 2 * CH * T;
        float gc[VPT], xc[VPT];
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int j = i * T + tid;
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
            if (4 * j < n) {
                a = src[i * T + tid];
                b = src[(CH + i) * T + tid];
            }
            gc[4 * i] = a.x; gc[4 * i + 1] = a.y; gc[4 * i + 2] = a.z; gc[4 * i + 3] = a.w;
            xc[4 * i] = b.x; xc[4 * i + 1] = b.y; xc[4 * i + 2] = b.z; xc[4 * i + 3] = b.w;
        }
        float o[VPT];
        row_math<T, true>(gc, xc, wv, dwa, dba, o, n, inv_n, eps, red1[parity], red3, tid);
        parity ^= 1;
        store_row<T, true>(dx + (size_t)r * n, o, n, tid);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    pdl_trigger();
    if (blockIdx.x < rows)
        store_partials<T, true>(part_w + (size_t)blockIdx.x * n, part_b + (size_t)blockIdx.x * n, dwa, dba, n, tid);
}

// ------------------------------------------------------------------------------------------ fallback
__global__ void __launch_bounds__(FB_THREADS)
layernorm_backward_sweep(const float* __restrict__ g, const float* __restrict__ x, const float* __restrict__ w,
                         float* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b,
                         int rows, int n, float eps) {
    constexpr int NW = FB_THREADS / 32;
    __shared__ float red1[2][NW];
    __shared__ float4 red3[NW];
    const int tid = threadIdx.x;
    const float inv_n = 1.f / (float)n;
    const int r0 = blockIdx.x;
    float* pw = part_w + (size_t)r0 * n;
    float* pb = part_b + (size_t)r0 * n;
    // Each thread owns columns tid, tid + FB_THREADS, ...: it alone touches them in pw/pb.
    for (int c = tid; c < n; c += FB_THREADS) {
        pw[c] = 0.f;
        pb[c] = 0.f;
    }
    int parity = 0;
    for (int r = r0; r < rows; r += gridDim.x) {
        const float* gr = g + (size_t)r * n;
        const float* xr = x + (size_t)r * n;
        float* dxr = dx + (size_t)r * n;

        float s = 0.f;
        for (int c = tid; c < n; c += FB_THREADS) s += xr[c];
        const float mean = block_sum1<NW>(s, red1[parity]) * inv_n;
        parity ^= 1;

        float sq = 0.f, sa = 0.f, sb = 0.f;
        for (int c = tid; c < n; c += FB_THREADS) {
            const float dv = xr[c] - mean;
            const float gw = gr[c] * w[c];
            sq += dv * dv;
            sa += gw;
            sb += gw * dv;
        }
        const float3 t = block_sum3<NW>(sq, sa, sb, red3);
        const float rstd = rsqrtf(t.x * inv_n + eps);
        const float m1 = t.y * inv_n;
        const float m2 = t.z * rstd * inv_n;

        for (int c = tid; c < n; c += FB_THREADS) {
            const float gv = gr[c];
            const float xhat = (xr[c] - mean) * rstd;
            dxr[c] = rstd * (gv * w[c] - m1 - xhat * m2);
            float acc_w = pw[c], acc_b = pb[c];
            acc_w += gv * xhat;
            acc_b += gv;
            pw[c] = acc_w;
            pb[c] = acc_b;
        }
    }
}

// ------------------------------------------------------------------------------------------ partials
// dw[c] = sum_p part_w[p][c] (same for db). Block (32, RED_Y): 32 columns, RED_Y strided partial sums per
// column, combined in a fixed order through shared memory.
__global__ void __launch_bounds__(32 * RED_Y)
layernorm_backward_reduce(const float* __restrict__ part_w, const float* __restrict__ part_b,
                          float* __restrict__ dw, float* __restrict__ db, int parts, int n) {
    __shared__ float sw[RED_Y][33], sb[RED_Y][33];
    // Launched with programmatic dependent launch (PDL): this waits until the row kernel has completed and
    // its writes are visible (a no-op when launched normally).
    pdl_wait();
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float aw = 0.f, ab = 0.f;
    if (c < n) {
        for (int p = ty; p < parts; p += RED_Y) {
            aw += part_w[(size_t)p * n + c];
            ab += part_b[(size_t)p * n + c];
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < n) {
        float tw = 0.f, tb = 0.f;
#pragma unroll
        for (int i = 0; i < RED_Y; ++i) {
            tw += sw[i][tx];
            tb += sb[i][tx];
        }
        dw[c] = tw;
        db[c] = tb;
    }
}

// ------------------------------------------------------------------------------------------ host side
namespace {

typedef void (*ln_kernel_t)(const float*, const float*, const float*, float*, float*, float*, int, int, float);

struct Plan {
    ln_kernel_t kernel;
    int threads;
    int smem;  // dynamic shared memory bytes
    int grid;
};

struct DeviceInfo {
    int sms = 0;
    int smem_optin = 0;
};

const DeviceInfo& device_info() {
    static DeviceInfo cached[64];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64) dev = 0;
    DeviceInfo& d = cached[dev];
    if (!d.sms) {
        int v = 0;
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        d.smem_optin = v;
        v = 0;
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
        d.sms = v > 0 ? v : 1;
    }
    return d;
}

// Resident blocks per SM of `kernel` (cached per kernel and device: its threads and dynamic smem are fixed
// by the kernel's template arguments). Also raises the kernel's dynamic shared memory limit when needed.
int blocks_per_sm(ln_kernel_t kernel, int threads, int smem) {
    static ln_kernel_t keys[64];
    static int devs[64];
    static int vals[64];
    static int used = 0;
    int dev = 0;
    cudaGetDevice(&dev);
    for (int i = 0; i < used; ++i)
        if (keys[i] == kernel && devs[i] == dev) return vals[i];
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, threads, smem) != cudaSuccess || nb < 1) {
        cudaGetLastError();
        nb = 1;
    }
    if (used < 64) {
        keys[used] = kernel;
        devs[used] = dev;
        vals[used] = nb;
        ++used;
    }
    return nb;
}

int threads_for(int n) {
    if (n <= 128 * VPT) return 128;
    if (n <= 256 * VPT) return 256;
    if (n <= 512 * VPT) return 512;
    return 1024;
}

template <bool VEC>
ln_kernel_t regs_kernel(int threads) {
    switch (threads) {
        case 128: return layernorm_backward_regs<128, VEC>;
        case 256: return layernorm_backward_regs<256, VEC>;
        case 512: return layernorm_backward_regs<512, VEC>;
        default: return layernorm_backward_regs<1024, VEC>;
    }
}

ln_kernel_t async_kernel(int threads) {
    switch (threads) {
        case 128: return layernorm_backward_async<128>;
        case 256: return layernorm_backward_async<256>;
        case 512: return layernorm_backward_async<512>;
        default: return layernorm_backward_async<1024>;
    }
}

Plan make_plan(const float* g, const float* x, const float* w, const float* dx, int rows, int n) {
    Plan p;
    p.smem = 0;
    const bool aligned = ((reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(x) |
                           reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(dx)) & 15) == 0;
    const bool vec = aligned && n % 4 == 0;
    if (n <= 1024 * VPT) {
        p.threads = threads_for(n);
        const int ring = STAGES * 2 * p.threads * VPT * (int)sizeof(float);
        if (vec && USE_ASYNC && ring <= device_info().smem_optin) {
            p.kernel = async_kernel(p.threads);
            p.smem = ring;
        } else {
            p.kernel = vec ? regs_kernel<true>(p.threads) : regs_kernel<false>(p.threads);
        }
    } else {
        p.kernel = layernorm_backward_sweep;
        p.threads = FB_THREADS;
    }
    int per_sm = blocks_per_sm(p.kernel, p.threads, p.smem);
    if (BLOCKS_PER_SM > 0 && per_sm > BLOCKS_PER_SM) per_sm = BLOCKS_PER_SM;
    const long long cap = (long long)device_info().sms * per_sm;
    p.grid = (int)(rows < cap ? rows : cap);
    if (p.grid < 1) p.grid = 1;
    return p;
}

}  // namespace

// Floats of scratch space the launch needs (dw and db partials: 2 * grid * n).
long long layernorm_backward_workspace(const float* g, const float* x, const float* w, const float* dx, int rows,
                                       int n) {
    if (rows <= 0 || n <= 0) return 0;
    const Plan p = make_plan(g, x, w, dx, rows, n);
    return 2LL * p.grid * n;
}

void layernorm_backward_launch(const float* g, const float* x, const float* w, float* dx, float* dw, float* db,
                               float* workspace, int rows, int n, float eps, cudaStream_t stream) {
    if (rows <= 0 || n <= 0) return;
    const Plan p = make_plan(g, x, w, dx, rows, n);
    float* part_w = workspace;
    float* part_b = workspace + (size_t)p.grid * n;
    p.kernel<<<p.grid, p.threads, p.smem, stream>>>(g, x, w, dx, part_w, part_b, rows, n, eps);
    const dim3 block(32, RED_Y), rgrid((n + 31) / 32);
    if (PDL) {
        // The reduce kernel may be scheduled while the row kernel's last blocks finish; it waits for them
        // (griddepcontrol.wait) before reading the partials.
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = rgrid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = 0;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, layernorm_backward_reduce, (const float*)part_w, (const float*)part_b, dw, db,
                               p.grid, n) == cudaSuccess)
            return;
        cudaGetLastError();  // PDL unavailable: fall back to an ordinary launch
    }
    layernorm_backward_reduce<<<rgrid, block, 0, stream>>>(part_w, part_b, dw, db, p.grid, n);
}
