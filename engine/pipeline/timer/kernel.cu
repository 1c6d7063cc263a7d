// kbench's timing helper, device side: the keyed fingerprint of an output's bytes.
//
// fp(bytes, seed) = sum over 32-bit little-endian words w_i (zero-padded tail) of w_i * r_i  (mod 2^64),
// r_i = splitmix64(seed + i). With r secret (seed derived from the per-run key), a different payload has
// the same fingerprint with probability <= 2^-33, so the judge can authenticate a large output by a small,
// HMAC-signed number while the bytes themselves travel unsigned. Integer arithmetic mod 2^64 is associative,
// so the result does not depend on the reduction order: the runner's GPU, the judge's GPU and the CPU
// version in binding.cpp agree bit for bit.
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

__host__ __device__ inline uint64_t kb_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void kb_fingerprint_kernel(const uint8_t* data, size_t nbytes, uint64_t seed,
                                      unsigned long long* out) {
  const size_t nwords = (nbytes + 3) / 4;
  uint64_t acc = 0;
  for (size_t w = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w < nwords; w += (size_t)gridDim.x * blockDim.x) {
    const size_t b = 4 * w;
    uint32_t word = 0;
    if (b + 4 <= nbytes) {
      word = (uint32_t)data[b] | ((uint32_t)data[b + 1] << 8) | ((uint32_t)data[b + 2] << 16) |
             ((uint32_t)data[b + 3] << 24);
    } else {
      for (size_t j = 0; b + j < nbytes; ++j) word |= (uint32_t)data[b + j] << (8 * j);
    }
    acc += (uint64_t)word * kb_splitmix64(seed + w);
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, (unsigned long long)acc);
}

// Launch on `stream`, wait, return the fingerprint (0 for an empty payload). Returns the CUDA error code.
int kb_fingerprint_device(const void* data, size_t nbytes, uint64_t seed, cudaStream_t stream, uint64_t* result) {
  *result = 0;
  if (nbytes == 0) return 0;
  unsigned long long* dev = nullptr;
  cudaError_t err = cudaMallocAsync(&dev, sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return (int)err;
  cudaMemsetAsync(dev, 0, sizeof(unsigned long long), stream);
  const size_t nwords = (nbytes + 3) / 4;
  int blocks = (int)((nwords + 255) / 256);
  if (blocks > 4096) blocks = 4096;
  kb_fingerprint_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint8_t*>(data), nbytes, seed, dev);
  unsigned long long host = 0;
  cudaMemcpyAsync(&host, dev, sizeof(host), cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(dev, stream);
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return (int)err;
  *result = (uint64_t)host;
  return 0;
}

uint64_t kb_fingerprint_host(const void* data, size_t nbytes, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t acc = 0;
  const size_t nwords = (nbytes + 3) / 4;
  for (size_t w = 0; w < nwords; ++w) {
    uint32_t word = 0;
    for (size_t j = 0; j < 4 && 4 * w + j < nbytes; ++j) word |= (uint32_t)p[4 * w + j] << (8 * j);
    acc += (uint64_t)word * kb_splitmix64(seed + w);
  }
  return acc;
}

// ------------------------------------------------------------------------------------------ fresh inputs
// Every call's inputs are a variant times a per-element factor drawn from the call's seed (binding.cpp refill):
// content no earlier call was given. The same function runs in the judge to rebuild a checked call's inputs, so
// the factor depends only on (seed, logical index) and is computed exactly alike on host and device: u has 24
// bits, alpha is a power of two (1 + alpha * u is then the correctly rounded sum whatever the compiler does),
// and the product is rounded once, in the tensor's own dtype.
//   mode 1: x * (1 + alpha * u)             u uniform in [-1, 1): sign and zeros kept (a log's positive input,
//                                            a triangular matrix)
//   mode 2: the same with u drawn for (min(r, c), max(r, c)) of the last two dims: a symmetric matrix stays so
//   mode 3: x * (+1 or -1)                  a tensor of signs (+-1 targets) keeps its values
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__host__ __device__ inline uint64_t kb_fresh_index(uint64_t i, int mode, int64_t side) {
  if (mode != 2 || side <= 0) return i;
  const uint64_t plane = (uint64_t)side * (uint64_t)side;
  const uint64_t b = i / plane, r = (i / (uint64_t)side) % (uint64_t)side, c = i % (uint64_t)side;
  return b * plane + (r < c ? r * (uint64_t)side + c : c * (uint64_t)side + r);
}

__host__ __device__ inline float kb_fresh_factor(uint64_t seed, uint64_t i, int mode, float alpha, int64_t side) {
  const uint64_t h = kb_splitmix64(seed + kb_fresh_index(i, mode, side));
  if (mode == 3) return (h & 1) ? -1.0f : 1.0f;
  const float u = (float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  return 1.0f + alpha * u;
}

template <typename T> __host__ __device__ inline float kb_to_float(T v) { return (float)v; }
template <> __host__ __device__ inline float kb_to_float<__half>(__half v) { return __half2float(v); }
template <> __host__ __device__ inline float kb_to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __host__ __device__ inline T kb_from_float(float v) { return (T)v; }
template <> __host__ __device__ inline __half kb_from_float<__half>(float v) { return __float2half_rn(v); }
template <> __host__ __device__ inline __nv_bfloat16 kb_from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__host__ __device__ inline T kb_fresh_value(T x, uint64_t seed, uint64_t i, int mode, float alpha, int64_t side) {
  return kb_from_float<T>(kb_to_float<T>(x) * kb_fresh_factor(seed, i, mode, alpha, side));
}

template <>
__host__ __device__ inline double kb_fresh_value<double>(double x, uint64_t seed, uint64_t i, int mode, float alpha,
                                                       int64_t side) {
  return x * (double)kb_fresh_factor(seed, i, mode, alpha, side);
}

template <typename T>
__global__ void kb_fresh_kernel(T* dst, const T* src, size_t n, uint64_t seed, int mode, float alpha, int64_t side) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = kb_fresh_value<T>(src[i], seed, i, mode, alpha, side);
}

template <typename T>
static int kb_fresh_launch(void* dst, const void* src, size_t n, uint64_t seed, int mode, float alpha, int64_t side,
                           cudaStream_t stream) {
  if (n == 0) return 0;
  int blocks = (int)((n + 255) / 256);
  if (blocks > 65536) blocks = 65536;
  kb_fresh_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, seed, mode,
                                                 alpha, side);
  return (int)cudaGetLastError();
}

// dtype: 0 float32, 1 float16, 2 bfloat16, 3 float64. Contiguous tensors of n elements; side: the last two dims'
// size for mode 2. Returns the CUDA error code (queued on `stream`, not waited for).
int kb_fresh_device(void* dst, const void* src, size_t n, int dtype, uint64_t seed, int mode, float alpha,
                    int64_t side, cudaStream_t stream) {
  switch (dtype) {
    case 0: return kb_fresh_launch<float>(dst, src, n, seed, mode, alpha, side, stream);
    case 1: return kb_fresh_launch<__half>(dst, src, n, seed, mode, alpha, side, stream);
    case 2: return kb_fresh_launch<__nv_bfloat16>(dst, src, n, seed, mode, alpha, side, stream);
    case 3: return kb_fresh_launch<double>(dst, src, n, seed, mode, alpha, side, stream);
    default: return (int)cudaErrorInvalidValue;
  }
}

template <typename T>
static void kb_fresh_loop(void* dst, const void* src, size_t n, uint64_t seed, int mode, float alpha, int64_t side) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = kb_fresh_value<T>(s[i], seed, i, mode, alpha, side);
}

int kb_fresh_host(void* dst, const void* src, size_t n, int dtype, uint64_t seed, int mode, float alpha,
                  int64_t side) {
  switch (dtype) {
    case 0: kb_fresh_loop<float>(dst, src, n, seed, mode, alpha, side); return 0;
    case 1: kb_fresh_loop<__half>(dst, src, n, seed, mode, alpha, side); return 0;
    case 2: kb_fresh_loop<__nv_bfloat16>(dst, src, n, seed, mode, alpha, side); return 0;
    case 3: kb_fresh_loop<double>(dst, src, n, seed, mode, alpha, side); return 0;
    default: return (int)cudaErrorInvalidValue;
  }
}
