// conv2d with bias, stride and padding as an implicit GEMM on CUDA cores (fp32 FMA, no tensor cores):
//   M = B * Ho * Wo output pixels, N = Co output channels, K = Ci * KH * KW, y[m, n] = sum_k A[m, k] * W[n, k] + bias[n]
// where A is the im2col view of x, gathered on the fly (zero outside the padded image). Each 256-thread block owns a
// BM x BN tile of y and walks K in BK slices staged through shared memory; thread (tx, ty) holds the TM x TN outputs
// m = tx + 16 i, n = ty + 16 j, so a warp's loads and stores along m are consecutive addresses.
#include <cuda_runtime.h>
#include <stdint.h>

#define BM 64   // kbench:knob values=32,64,128
#define BN 64   // kbench:knob values=32,64,128
#define BK 16   // kbench:knob values=8,16,32
#define THREADS 256
#define TM (BM / 16)
#define TN (BN / 16)

struct ConvShape {
    int batch, ci, h, w, co, kh, kw, stride, pad, ho, wo;
};

__global__ void __launch_bounds__(THREADS)
conv2d_igemm_kernel(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                    float* __restrict__ y, ConvShape s) {
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const long long M = (long long)s.batch * s.ho * s.wo;
    const int N = s.co;
    const int K = s.ci * s.kh * s.kw;
    const long long m0 = (long long)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A slice: BK x BM gathered from x; consecutive threads take consecutive output pixels.
        for (int e = tid; e < BK * BM; e += THREADS) {
            const int kk = e / BM, mm = e % BM;
            const long long m = m0 + mm;
            const int k = k0 + kk;
            float v = 0.f;
            if (m < M && k < K) {
                const int wo = (int)(m % s.wo);
                const long long t = m / s.wo;
                const int ho = (int)(t % s.ho);
                const int b = (int)(t / s.ho);
                const int kx = k % s.kw;
                const int t2 = k / s.kw;
                const int ky = t2 % s.kh;
                const int c = t2 / s.kh;
                const int hi = ho * s.stride - s.pad + ky;
                const int wi = wo * s.stride - s.pad + kx;
                if (hi >= 0 && hi < s.h && wi >= 0 && wi < s.w)
                    v = x[(((long long)b * s.ci + c) * s.h + hi) * s.w + wi];
            }
            As[kk][mm] = v;
        }
        // W slice: BK x BN; the weights are [Co, K] row-major, so consecutive threads read consecutive k.
        for (int e = tid; e < BK * BN; e += THREADS) {
            const int kk = e % BK, nn = e / BK;
            const int n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? wt[(long long)n * K + k] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][tx + 16 * i];
#pragma unroll
            for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][ty + 16 * j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const long long m = m0 + tx + 16 * i;
        if (m >= M) continue;
        const int wo = (int)(m % s.wo);
        const long long t = m / s.wo;
        const int ho = (int)(t % s.ho);
        const int b = (int)(t / s.ho);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + ty + 16 * j;
            if (n >= N) continue;
            y[(((long long)b * s.co + n) * s.ho + ho) * s.wo + wo] = acc[i][j] + (bias ? bias[n] : 0.f);
        }
    }
}

// bias may be null (no bias). Shapes: x [batch, ci, h, w], wt [co, ci, kh, kw], y [batch, co, ho, wo].
void conv2d_forward_launch(const float* x, const float* wt, const float* bias, float* y, int batch, int ci, int h,
                           int w, int co, int kh, int kw, int stride, int pad, int ho, int wo, cudaStream_t stream) {
    const long long M = (long long)batch * ho * wo;
    if (M == 0 || co == 0) return;
    ConvShape s{batch, ci, h, w, co, kh, kw, stride, pad, ho, wo};
    const dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((co + BN - 1) / BN));
    conv2d_igemm_kernel<<<grid, THREADS, 0, stream>>>(x, wt, bias, y, s);
}
