// kbench's timing helper: the loop that calls a candidate, times it and reports to the judge.
//
// It runs inside the jailed runner (and, for baselines, inside the judge). Nothing the candidate's Python can
// patch sits between the CUDA events and the numbers the judge receives: this loop is compiled, the key that
// signs its records is read from an inherited descriptor straight into this library's memory (it never exists
// as a Python object), and each record goes out on another inherited descriptor as soon as it exists, signed
// with HMAC-SHA256 and numbered, so the judge detects a forged, dropped or reordered record.
//
// One job = a sequence of calls of `call()` on the live input tensors, each call preceded by
//   refill the live inputs from a variant (a D2D copy, chosen by this library's own random numbers),
//   reset persisting-L2 lines and the persisting carve-out, flush L2 (memset of 2x its size),
// then   start event, call(), end event, device-wide synchronize, end-all event (work the call left on
// other streams lands between end and end-all). After the call: alias checks (an output sharing storage with
// an input, or with the previous call's still-alive output), optional input-mutation and async-completeness
// probes (a keyed fingerprint of each output on the current stream before the sync, compared after it), and for
// checked calls the output itself: a signed header with a keyed fingerprint of its bytes, then the bytes (in the
// shared arena's slot when the judge gave one: engine/pipeline/protocol/arena.py). In a timing job the checked calls are
// a few iterations drawn at random after the iteration count is known: the candidate cannot tell a checked call
// from any other. The inputs the judge names as mutable (those its reference mutates in place: a BatchNorm's
// running statistics) are left out of the mutation probe, watched by the async-completeness probe like outputs,
// listed in every ITER record, and sent after a checked call's outputs as further OUTPUT records, so that the
// judge compares them with what its reference leaves in them.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

int kb_fingerprint_device(const void* data, size_t nbytes, uint64_t seed, cudaStream_t stream, uint64_t* result);
uint64_t kb_fingerprint_host(const void* data, size_t nbytes, uint64_t seed);
int kb_fresh_device(void* dst, const void* src, size_t n, int dtype, uint64_t seed, int mode, float alpha,
                    int64_t side, cudaStream_t stream);
int kb_fresh_host(void* dst, const void* src, size_t n, int dtype, uint64_t seed, int mode, float alpha, int64_t side);

namespace {

// ------------------------------------------------------------------------------------------ SHA-256 / HMAC
struct Sha256 {
  uint32_t h[8];
  uint64_t len = 0;
  uint8_t buf[64];
  size_t n = 0;
  static constexpr uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  Sha256() {
    const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::memcpy(h, init, sizeof(h));
  }
  static uint32_t rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }
  void block(const uint8_t* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  void update(const void* data, size_t len_) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    len += len_;
    while (len_ > 0) {
      size_t take = std::min(len_, (size_t)64 - n);
      std::memcpy(buf + n, p, take);
      n += take; p += take; len_ -= take;
      if (n == 64) { block(buf); n = 0; }
    }
  }
  void final(uint8_t out[32]) {
    uint64_t bits = len * 8;
    uint8_t pad = 0x80, zero = 0;
    update(&pad, 1);
    while (n != 56) update(&zero, 1);
    uint8_t lenb[8];
    for (int i = 0; i < 8; ++i) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    update(lenb, 8);
    for (int i = 0; i < 8; ++i) {
      out[4 * i] = h[i] >> 24; out[4 * i + 1] = h[i] >> 16; out[4 * i + 2] = h[i] >> 8; out[4 * i + 3] = h[i];
    }
  }
};
constexpr uint32_t Sha256::K[64];

void hmac_sha256(const uint8_t key[32], const std::string& a, const std::string& b, uint8_t out[32]) {
  uint8_t ipad[64], opad[64];
  for (int i = 0; i < 64; ++i) {
    uint8_t k = i < 32 ? key[i] : 0;
    ipad[i] = k ^ 0x36; opad[i] = k ^ 0x5c;
  }
  uint8_t inner[32];
  Sha256 s1; s1.update(ipad, 64); s1.update(a.data(), a.size()); s1.update(b.data(), b.size()); s1.final(inner);
  Sha256 s2; s2.update(opad, 64); s2.update(inner, 32); s2.final(out);
}

// ------------------------------------------------------------------------------------------ state
uint8_t g_key[32];
bool g_ready = false;
int g_record_fd = -1;
uint64_t g_seq = 0;
at::Tensor g_flush;

// The shared arena (engine/pipeline/protocol/arena.py): a control page whose first word the judge bumps for every slot
// payload it has taken, then one slot. Absent (nullptr) when the judge gave none. Its layout (where the slot
// starts, the page-locking step) comes from arena.py through init(), the one place it is defined.
size_t g_arena_data = 0;       // offset of the slot in the memfd
size_t g_register_step = 0;    // page-lock the slot in steps of this many bytes, as far as payloads reach
uint8_t* g_arena = nullptr;
size_t g_arena_cap = 0;        // bytes in the slot
size_t g_arena_pinned = 0;     // bytes of the slot page-locked so far
bool g_arena_pin_ok = true;
uint64_t g_arena_sent = 0;     // slot payloads sent
int64_t g_variant = -1;        // the variant the live inputs were refilled from for the call under way

enum RecordType : uint32_t { HELLO = 6, JOB_BEGIN = 1, ITER = 2, OUTPUT = 3, JOB_END = 4, ERROR_ = 5 };

void write_all(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t w = ::write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("kbench timer: cannot write a record: ") + std::strerror(errno));
    }
    p += w; len -= (size_t)w;
  }
}

std::string header(uint32_t type, uint64_t seq, uint64_t job, uint32_t body_len) {
  std::string h(28, '\0');
  std::memcpy(&h[0], "KBR1", 4);
  std::memcpy(&h[4], &type, 4);
  std::memcpy(&h[8], &seq, 8);
  std::memcpy(&h[16], &job, 8);
  std::memcpy(&h[24], &body_len, 4);
  return h;
}

// Signed record: header(28) body mac(32). Returns the sequence number it carried.
uint64_t emit(uint32_t type, uint64_t job, const std::string& body, const void* payload = nullptr,
              size_t payload_len = 0) {
  if (!g_ready) throw std::runtime_error("kbench timer: init() was not called");
  uint64_t seq = g_seq++;
  std::string h = header(type, seq, job, (uint32_t)body.size());
  uint8_t mac[32];
  hmac_sha256(g_key, h, body, mac);
  std::string out = h + body + std::string(reinterpret_cast<char*>(mac), 32);
  write_all(g_record_fd, out.data(), out.size());
  if (payload_len) write_all(g_record_fd, payload, payload_len);
  return seq;
}

uint64_t fp_seed(uint64_t seq, int index) {
  std::string msg = "fp:" + std::to_string(seq) + ":" + std::to_string(index);
  uint8_t mac[32];
  hmac_sha256(g_key, msg, std::string(), mac);
  uint64_t s;
  std::memcpy(&s, mac, 8);
  return s;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += (char)c; }
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += (char)c;
  }
  return o + "\"";
}

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

std::string ints(at::IntArrayRef xs) {
  std::string o = "[";
  for (size_t i = 0; i < xs.size(); ++i) o += (i ? "," : "") + std::to_string(xs[i]);
  return o + "]";
}

uint64_t urandom64() {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof v) {
    ssize_t r = getrandom(reinterpret_cast<char*>(&v) + got, sizeof v - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("kbench timer: getrandom failed");
    }
    got += (size_t)r;
  }
  return v;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// ------------------------------------------------------------------------------------------ outputs
struct Out {
  enum Kind { TENSOR, SCALAR, NONE } kind;
  at::Tensor t;
  double value = 0;
};

std::vector<Out> outputs_of(const py::object& r) {
  std::vector<Out> outs;
  auto one = [&](const py::handle& h) {
    if (THPVariable_Check(h.ptr())) outs.push_back({Out::TENSOR, py::cast<at::Tensor>(h)});
    else if (h.is_none()) outs.push_back({Out::NONE, at::Tensor()});
    else if (py::isinstance<py::bool_>(h) || py::isinstance<py::int_>(h) || py::isinstance<py::float_>(h))
      outs.push_back({Out::SCALAR, at::Tensor(), py::cast<double>(h)});
    else throw std::runtime_error("the candidate returned a " + std::string(py::str(h.get_type().attr("__name__"))) +
                                  ", expected tensors");
  };
  if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
    for (auto item : r) one(item);
  } else {
    one(r);
  }
  return outs;
}

struct Range { uintptr_t lo, hi; };

std::vector<Range> storages(const std::vector<at::Tensor>& ts) {
  std::vector<Range> rs;
  for (auto& t : ts) {
    if (!t.defined() || t.numel() == 0 || !t.has_storage()) continue;
    auto p = reinterpret_cast<uintptr_t>(t.storage().data());
    rs.push_back({p, p + t.storage().nbytes()});
  }
  return rs;
}

bool overlaps(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (auto& x : a)
    for (auto& y : b)
      if (x.lo < y.hi && y.lo < x.hi) return true;
  return false;
}

std::vector<at::Tensor> tensors_of(const std::vector<Out>& outs) {
  std::vector<at::Tensor> ts;
  for (auto& o : outs) if (o.kind == Out::TENSOR) ts.push_back(o.t);
  return ts;
}

// The settle probe's snapshot of an output (its fingerprint on the current stream right after the call, before
// any device-wide synchronisation) instead of a clone: the runner holds no second copy of each output. A CUDA
// error here is left for the device-wide synchronisation after it to report, as the call's own.
cudaError_t snapshot(const at::Tensor& t, uint64_t seed, uint64_t* result) {
  at::Tensor c = t.contiguous();
  const size_t nbytes = (size_t)c.numel() * c.element_size();
  if (!c.is_cuda()) { *result = kb_fingerprint_host(c.data_ptr(), nbytes, seed); return cudaSuccess; }
  auto stream = at::cuda::getCurrentCUDAStream().stream();
  return (cudaError_t)kb_fingerprint_device(c.data_ptr(), nbytes, seed, stream, result);
}

uint64_t fingerprint(const at::Tensor& contiguous, uint64_t seed) {
  const size_t nbytes = (size_t)contiguous.numel() * contiguous.element_size();
  if (contiguous.is_cuda()) {
    uint64_t r = 0;
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    int err = kb_fingerprint_device(contiguous.data_ptr(), nbytes, seed, stream, &r);
    check_cuda((cudaError_t)err, "fingerprint");
    return r;
  }
  return kb_fingerprint_host(contiguous.data_ptr(), nbytes, seed);
}

// ------------------------------------------------------------------------------------------ arena
void map_arena(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || (size_t)st.st_size <= g_arena_data)
    throw std::runtime_error("kbench timer: the arena descriptor is not a usable memfd");
  void* p = mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("kbench timer: cannot map the arena: ") + std::strerror(errno));
  g_arena = static_cast<uint8_t*>(p);
  g_arena_cap = (size_t)st.st_size - g_arena_data;
}

// Page-lock (or release) host memory, clearing the error of a refused registration: the runner's slot, and the
// judge's own arena mapping (through here rather than torch's cudart binding, which would leave the error sticky
// for the judge's next kernel launch check).
bool host_register(uintptr_t ptr, size_t nbytes) {
  if (cudaHostRegister(reinterpret_cast<void*>(ptr), nbytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

void host_unregister(uintptr_t ptr) {
  cudaHostUnregister(reinterpret_cast<void*>(ptr));
  cudaGetLastError();
}

// The first `nbytes` of the slot, page-locked as far as they reach (where the driver lets us).
uint8_t* arena_slot(size_t nbytes) {
  uint8_t* slot = g_arena + g_arena_data;
  if (g_arena_pin_ok && nbytes > g_arena_pinned) {
    size_t want = std::min(g_arena_cap, (nbytes + g_register_step - 1) / g_register_step * g_register_step);
    if (g_arena_pinned) host_unregister(reinterpret_cast<uintptr_t>(slot));
    g_arena_pinned = 0;
    if (host_register(reinterpret_cast<uintptr_t>(slot), want)) g_arena_pinned = want;
    else g_arena_pin_ok = false;
  }
  return slot;
}

// Wait until the judge has taken every payload sent so far: the slot is ours again. The GIL stays held: a
// candidate's Python thread must not learn from getting it here that this iteration is a checked one.
void arena_wait() {
  auto* released = reinterpret_cast<uint64_t*>(g_arena);
  while (__atomic_load_n(released, __ATOMIC_ACQUIRE) < g_arena_sent)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}

// Strings are built with std::string and snprintf only: no iostreams, whose template code compiled into this
// library can disagree with the libstdc++ the process loaded (a crash seen with a newer host compiler).
void send_output(uint64_t job, int64_t i, int k, const Out& o) {
  std::string b = "{\"i\":" + std::to_string(i) + ",\"k\":" + std::to_string(k);
  if (o.kind == Out::NONE) { emit(OUTPUT, job, b + ",\"kind\":\"none\"}"); return; }
  if (o.kind == Out::SCALAR) { emit(OUTPUT, job, b + ",\"kind\":\"scalar\",\"value\":" + num(o.value) + "}"); return; }
  const at::Tensor& t = o.t;
  at::Tensor c = t.contiguous();
  const size_t nbytes = (size_t)c.numel() * c.element_size();
  // The fingerprint first, on the current stream, before anything a candidate's thread could observe (the slot
  // being written, the judge's release word): what is signed is what the call returned, never bytes fixed up
  // after the candidate learnt that this iteration is checked. The seed depends on the sequence number this
  // record will carry: fresh for every output.
  uint64_t seed = fp_seed(g_seq, k);
  uint64_t fp = fingerprint(c, seed);
  const bool in_arena = g_arena != nullptr && nbytes <= g_arena_cap;
  at::Tensor host;
  if (in_arena) {
    arena_wait();
    uint8_t* slot = arena_slot(nbytes);
    if (nbytes && c.is_cuda()) {
      auto stream = at::cuda::getCurrentCUDAStream().stream();   // ordered after contiguous() and the fingerprint
      check_cuda(cudaMemcpyAsync(slot, c.data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream), "arena copy");
      check_cuda(cudaStreamSynchronize(stream), "arena copy");
    } else if (nbytes) {
      std::memcpy(slot, c.data_ptr(), nbytes);
    }
  } else {
    host = c.is_cuda() ? c.to(at::kCPU) : c;
  }
  char fph[17];
  std::snprintf(fph, sizeof fph, "%016llx", (unsigned long long)fp);
  b += ",\"kind\":\"tensor\",\"dtype\":" + json_str(c10::toString(t.scalar_type())) + ",\"shape\":" +
       ints(t.sizes()) + ",\"strides\":" + ints(t.strides()) + ",\"contiguous\":" +
       std::to_string(t.is_contiguous() ? 1 : 0) + ",\"device\":" + json_str(t.device().str()) + ",\"nbytes\":" +
       std::to_string(nbytes) + ",\"fp\":\"" + fph + "\"" + (in_arena ? ",\"arena\":1}" : "}");
  if (in_arena) {
    emit(OUTPUT, job, b);
    ++g_arena_sent;
  } else {
    emit(OUTPUT, job, b, host.data_ptr(), nbytes);
  }
}

// ------------------------------------------------------------------------------------------ one call
struct Events { cudaEvent_t start, end, end_all; };

struct Job {
  uint64_t id;
  std::vector<at::Tensor> live;
  std::vector<std::vector<at::Tensor>> variants;
  py::function call;
  bool flush;
  bool probe_inputs;       // compare the live inputs with their variant after the call
  double settle_ms;        // >= 0: async-completeness probe (fingerprint before sync, compare after a pause)
  std::vector<int64_t> fresh_modes;   // per live tensor: 0 a plain copy of the variant, else kernel.cu's mode
  std::vector<double> fresh_alphas;   // per live tensor: the factor's spread (a power of two)
  std::vector<at::Tensor> prev;   // the previous call's outputs, kept alive for the persistence check
  Events ev;
  std::vector<int64_t> mutable_idx;   // live tensors the call may change (the reference does), ascending
  std::vector<char> is_mutable;       // per live tensor: listed in mutable_idx
};

// ------------------------------------------------------------------------------------------ fresh inputs
// kernel.cu's codes for the dtypes a factor applies to; -1: copied as they are (indices, masks)
int fresh_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    case at::kDouble: return 3;
    default: return -1;
  }
}

// Tensor k of a call whose seed is `seed` draws from its own stream of factors.
uint64_t tensor_seed(uint64_t seed, size_t k) { return seed + (uint64_t)k * 0x9E3779B97F4A7C15ull; }

// dst = src times the call's factors (kernel.cu), on src's device; the factors follow the logical (row-major)
// index, so a strided tensor gets what its contiguous copy would.
void fresh_into(at::Tensor& dst, const at::Tensor& src, uint64_t seed, int64_t mode, double alpha) {
  const int code = fresh_dtype(src.scalar_type());
  if (mode == 0 || code < 0 || src.numel() == 0) { dst.copy_(src, /*non_blocking=*/true); return; }
  const int64_t side = (mode == 2 && src.dim() >= 2) ? src.size(-1) : 0;
  at::Tensor s = src.contiguous();
  const bool direct = dst.is_contiguous() && dst.scalar_type() == s.scalar_type() && dst.device() == s.device();
  at::Tensor d = direct ? dst : at::empty_like(s);
  int err = s.is_cuda()
      ? kb_fresh_device(d.data_ptr(), s.data_ptr(), (size_t)s.numel(), code, seed, (int)mode, (float)alpha, side,
                        at::cuda::getCurrentCUDAStream().stream())
      : kb_fresh_host(d.data_ptr(), s.data_ptr(), (size_t)s.numel(), code, seed, (int)mode, (float)alpha, side);
  check_cuda((cudaError_t)err, "fresh inputs");
  if (!direct) dst.copy_(d, /*non_blocking=*/true);
}

// The live inputs for a call: variant v, each fresh tensor times its factors under the call's seed.
void refill(Job& job, int v, uint64_t seed) {
  if (job.variants.empty()) return;
  auto& src = job.variants[(size_t)v];
  for (size_t k = 0; k < job.live.size(); ++k) {
    const int64_t mode = k < job.fresh_modes.size() ? job.fresh_modes[k] : 0;
    fresh_into(job.live[k], src[k], tensor_seed(seed, k), mode, mode ? job.fresh_alphas[k] : 0.0);
  }
}

bool any_fresh(const Job& job) {
  for (auto m : job.fresh_modes) if (m) return true;
  return false;
}

void prepare_cache(Job& job, cudaStream_t stream, bool flush) {
  // An access-policy window from an earlier call must not keep data resident: drop the stream's window,
  // demote persisting lines, take the carve-out away, then evict everything by writing twice the L2 size.
  cudaStreamAttrValue none{};
  none.accessPolicyWindow.num_bytes = 0;
  cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &none);
  cudaCtxResetPersistingL2Cache();
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
  cudaGetLastError();  // these fail harmlessly on GPUs without persisting L2
  if (flush && job.flush) g_flush.zero_();
}

// Returns false when the job must stop (the call raised, or a CUDA error).
bool one_call(Job& job, int64_t i, char phase, int v, bool checked) {
  auto stream = at::cuda::getCurrentCUDAStream().stream();
  prepare_cache(job, stream, false);  // before the refill too: a window left on the stream would mark its writes
  // drawn now, after the previous call returned: no call's inputs were given to any earlier call
  const uint64_t seed = any_fresh(job) ? urandom64() : 0;
  refill(job, v, seed);
  // the input-mutation probe: what the call was given, as a keyed fingerprint (compared after the call)
  std::vector<uint64_t> given;
  const uint64_t probe_seed = job.probe_inputs ? urandom64() : 0;
  if (job.probe_inputs && !job.variants.empty())
    for (auto& t : job.live) given.push_back(fingerprint(t.contiguous(), probe_seed));
  prepare_cache(job, stream, true);
  g_variant = v;
  check_cuda(cudaEventRecord(job.ev.start, stream), "cudaEventRecord");
  py::object r;
  try {
    r = job.call();
  } catch (py::error_already_set& e) {
    cudaDeviceSynchronize();
    cudaGetLastError();
    emit(ERROR_, job.id, "{\"where\":\"call\",\"i\":" + std::to_string(i) + ",\"message\":" + json_str(e.what()) + "}");
    return false;
  }
  check_cuda(cudaEventRecord(job.ev.end, stream), "cudaEventRecord");
  std::vector<Out> outs;
  std::string bad_output;
  try {
    outs = outputs_of(r);
  } catch (std::exception& e) {
    bad_output = e.what();
  }
  std::vector<uint64_t> snaps;
  std::vector<char> snapped;
  std::vector<at::Tensor> watched;   // the settle probe's: each output (undefined: none), then the mutable inputs
  for (auto& o : outs) watched.push_back(o.kind == Out::TENSOR ? o.t : at::Tensor());
  for (auto k : job.mutable_idx) watched.push_back(job.live[(size_t)k]);
  const uint64_t snap_seed = job.settle_ms >= 0 ? urandom64() : 0;
  if (job.settle_ms >= 0)
    for (auto& t : watched) {  // before any device-wide sync: what the current stream's work left in the tensor
      uint64_t fp = 0;
      snapped.push_back(t.defined() && snapshot(t, snap_seed, &fp) == cudaSuccess ? 1 : 0);
      snaps.push_back(fp);
    }
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaEventRecord(job.ev.end_all, stream);
  if (err == cudaSuccess) err = cudaEventSynchronize(job.ev.end_all);
  if (err != cudaSuccess) {
    emit(ERROR_, job.id, "{\"where\":\"cuda\",\"i\":" + std::to_string(i) + ",\"message\":" +
                             json_str(cudaGetErrorString(err)) + "}");
    return false;
  }
  float ms = 0, ms_all = 0;
  cudaEventElapsedTime(&ms, job.ev.start, job.ev.end);
  cudaEventElapsedTime(&ms_all, job.ev.start, job.ev.end_all);
  if (!bad_output.empty()) {
    emit(ERROR_, job.id, "{\"where\":\"output\",\"i\":" + std::to_string(i) + ",\"message\":" + json_str(bad_output) + "}");
    return false;
  }
  int async_diff = -1;
  if (job.settle_ms >= 0) {
    {
      py::gil_scoped_release release;  // a host thread of the candidate may run now, as it would in real use
      std::this_thread::sleep_for(std::chrono::microseconds((int64_t)(job.settle_ms * 1000)));
      cudaDeviceSynchronize();
    }
    async_diff = 0;
    for (size_t k = 0; k < watched.size(); ++k) {
      uint64_t settled = 0;
      if (!snapped[k]) continue;
      check_cuda(snapshot(watched[k], snap_seed, &settled), "settle probe");   // an error since the sync: the job's
      if (settled != snaps[k]) async_diff = 1;
    }
  }
  auto out_tensors = tensors_of(outs);
  auto out_ranges = storages(out_tensors);
  int alias_in = overlaps(out_ranges, storages(job.live)) ? 1 : 0;
  int persist = overlaps(out_ranges, storages(job.prev)) ? 1 : 0;
  int mutated = -1;
  if (job.probe_inputs && !job.variants.empty())
    for (size_t k = 0; k < job.live.size(); ++k)
      if (!job.is_mutable[k] && fingerprint(job.live[k].contiguous(), probe_seed) != given[k]) {
        mutated = (int)k;
        break;
      }
  const long long t_ns = (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch()).count();
  std::string b = "{\"i\":" + std::to_string(i) + ",\"t_ns\":" + std::to_string(t_ns) + ",\"phase\":\"" +
                  std::string(1, phase) + "\",\"v\":" + std::to_string(v) + ",\"seed\":\"" + hex64(seed) +
                  "\",\"ms\":" + num(ms) + ",\"ms_all\":" + num(ms_all) + ",\"outputs\":" +
                  std::to_string(outs.size()) + ",\"checked\":" + std::to_string(checked ? 1 : 0) +
                  ",\"alias_input\":" + std::to_string(alias_in) + ",\"persistent_output\":" + std::to_string(persist) +
                  ",\"mutated_input\":" + std::to_string(mutated) + ",\"async_diff\":" + std::to_string(async_diff) +
                  ",\"mutable\":" + ints(job.mutable_idx) + "}";
  emit(ITER, job.id, b);
  if (checked) {
    for (size_t k = 0; k < outs.size(); ++k) send_output(job.id, i, (int)k, outs[k]);
    for (size_t j = 0; j < job.mutable_idx.size(); ++j)   // as the call left them, after the outputs
      send_output(job.id, i, (int)(outs.size() + j), Out{Out::TENSOR, job.live[(size_t)job.mutable_idx[j]]});
  }
  job.prev = out_tensors;
  return true;
}

// ------------------------------------------------------------------------------------------ crashes
// A crash inside a call (the candidate's host code, or this loop) leaves the native stack in the runner's log,
// after which the previous handler (Python's faulthandler) adds the Python stack.
struct sigaction g_previous_segv;

void on_fatal_signal(int sig, siginfo_t* info, void* ctx) {
  static const char msg[] = "kbench timer: fatal signal; native stack:\n";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  if (g_previous_segv.sa_flags & SA_SIGINFO && g_previous_segv.sa_sigaction) {
    g_previous_segv.sa_sigaction(sig, info, ctx);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

// ------------------------------------------------------------------------------------------ API
void init(int key_fd, int record_fd, int arena_fd, int64_t arena_data_offset, int64_t register_step) {
  if (g_ready) throw std::runtime_error("kbench timer: already initialised");
  if (arena_fd >= 0) {
    // the slot must start past the control word, on a page (it is page-locked), and be locked in real steps
    if (arena_data_offset < 8 || arena_data_offset % 4096 != 0 || register_step <= 0)
      throw std::runtime_error("kbench timer: an arena layout without a page-aligned slot or a locking step");
    g_arena_data = (size_t)arena_data_offset;
    g_register_step = (size_t)register_step;
    map_arena(arena_fd);
  }
  size_t got = 0;
  while (got < 32) {
    ssize_t r = ::read(key_fd, g_key + got, 32 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error("kbench timer: the key descriptor gave fewer than 32 bytes");
    got += (size_t)r;
  }
  ::close(key_fd);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, &g_previous_segv);
  g_record_fd = record_fd;
  g_ready = true;
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  int64_t bytes = std::max<int64_t>(2 * (int64_t)l2, 8 << 20);
  g_flush = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  emit(HELLO, 0, "{\"pid\":" + std::to_string(::getpid()) + ",\"l2_bytes\":" + std::to_string(l2) + "}");
}

// mode "check": one call per entry of `schedule` (variant indices), every call checked.
// mode "time":  `warmup` calls, then n timed iterations (n from the warm-up's median time and `budget_s`,
//               clamped to [min_iters, max_iters]), `checks` of them checked, drawn at random, and one more in
//               the last tenth; variants at random.
// Every call's live inputs are its variant's, the tensors with a fresh mode times factors drawn from the call's
// own seed (kernel.cu), which its ITER record carries: no call is given content an earlier one was given.
std::string run(uint64_t job_id, const std::string& mode, py::function call, std::vector<at::Tensor> live,
                std::vector<std::vector<at::Tensor>> variants, std::vector<int64_t> schedule, int64_t warmup,
                int64_t min_iters, int64_t max_iters, double budget_s, int64_t checks, bool flush_l2,
                bool probe_inputs, double settle_ms, std::vector<int64_t> fresh_modes,
                std::vector<double> fresh_alphas, std::vector<int64_t> mutable_inputs) {
  for (auto& v : variants)
    if (v.size() != live.size()) throw std::runtime_error("kbench timer: a variant has the wrong number of tensors");
  if (mode != "check" && mode != "time") throw std::runtime_error("kbench timer: unknown mode " + mode);
  if (!fresh_modes.empty() && (fresh_modes.size() != live.size() || fresh_alphas.size() != live.size()))
    throw std::runtime_error("kbench timer: fresh-input modes for another number of tensors");
  for (size_t j = 0; j < mutable_inputs.size(); ++j)
    if (mutable_inputs[j] < 0 || (size_t)mutable_inputs[j] >= live.size() ||
        (j && mutable_inputs[j] <= mutable_inputs[j - 1]))
      throw std::runtime_error("kbench timer: mutable inputs out of range or not ascending");
  Job job{job_id, std::move(live), std::move(variants), std::move(call), flush_l2, probe_inputs, settle_ms,
          std::move(fresh_modes), std::move(fresh_alphas), {}, {}, std::move(mutable_inputs), {}};
  job.is_mutable.assign(job.live.size(), 0);
  for (auto k : job.mutable_idx) job.is_mutable[(size_t)k] = 1;
  check_cuda(cudaEventCreate(&job.ev.start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&job.ev.end), "cudaEventCreate");
  check_cuda(cudaEventCreate(&job.ev.end_all), "cudaEventCreate");
  const int K = job.variants.empty() ? 1 : (int)job.variants.size();
  std::mt19937_64 pick(urandom64());
  emit(JOB_BEGIN, job_id, "{\"mode\":" + json_str(mode) + ",\"variants\":" + std::to_string(K) + ",\"live\":" +
                              std::to_string(job.live.size()) + ",\"flush\":" + std::to_string(flush_l2 ? 1 : 0) + "}");
  bool ok = true;
  int64_t n = 0;
  std::vector<int64_t> chosen;
  // Anything thrown between JOB_BEGIN and JOB_END (an allocation that fails under memory pressure, a failed
  // copy) still ends the job on the record stream: the judge reads records until JOB_END, and a job that ended
  // only on the control channel would leave it waiting out its whole deadline.
  try {
    if (mode == "check") {
      for (size_t s = 0; s < schedule.size() && ok; ++s) {
        int v = (int)(schedule[s] % K);
        ok = one_call(job, (int64_t)s, 'c', v, true);
      }
      n = (int64_t)schedule.size();
    } else if (mode == "time") {
      std::vector<float> warm;
      for (int64_t w = 0; w < warmup && ok; ++w) {
        ok = one_call(job, w, 'w', (int)(pick() % K), false);
        if (ok) {
          float ms = 0;
          cudaEventElapsedTime(&ms, job.ev.start, job.ev.end);
          warm.push_back(ms);
        }
      }
      if (ok) {
        std::sort(warm.begin(), warm.end());
        double est = warm.empty() ? 1.0 : std::max<double>(warm[warm.size() / 2], 1e-3);
        n = (int64_t)std::min<double>((double)max_iters, std::max<double>((double)min_iters, budget_s * 1e3 / (est + 0.02)));
        // The checked iterations: distinct, uniform, from the OS's random source (not `pick`, whose
        // outputs show through the variant choices).
        std::vector<int64_t> idx(n);
        for (int64_t j = 0; j < n; ++j) idx[j] = j;
        for (int64_t j = 0; j < std::min(checks, n); ++j) {
          int64_t r = j + (int64_t)(urandom64() % (uint64_t)(n - j));
          std::swap(idx[j], idx[r]);
          chosen.push_back(idx[j]);
        }
        std::vector<char> is_checked(n, 0);
        for (auto c : chosen) is_checked[c] = 1;
        // One more in the last tenth of the job: the last check (which the arena's release word shows) leaves at
        // most a tenth of the iterations unchecked after it, too few to move the median.
        const int64_t window = std::max<int64_t>(1, n / 10);
        const int64_t last = n - window + (int64_t)(urandom64() % (uint64_t)window);
        if (checks > 0 && n > 0 && !is_checked[last]) {
          is_checked[last] = 1;
          chosen.push_back(last);
        }
        for (int64_t it = 0; it < n && ok; ++it) ok = one_call(job, it, 't', (int)(pick() % K), is_checked[it]);
      }
    }
  } catch (std::exception& e) {
    ok = false;
    cudaGetLastError();
    emit(ERROR_, job.id, "{\"where\":\"runner\",\"i\":-1,\"message\":" + json_str(e.what()) + "}");
  }
  job.prev.clear();
  cudaEventDestroy(job.ev.start);
  cudaEventDestroy(job.ev.end);
  cudaEventDestroy(job.ev.end_all);
  std::sort(chosen.begin(), chosen.end());
  std::string cs = "[";
  for (size_t j = 0; j < chosen.size(); ++j) cs += (j ? "," : "") + std::to_string(chosen[j]);
  cs += "]";
  emit(JOB_END, job_id, "{\"status\":" + json_str(ok ? "ok" : "error") + ",\"n\":" + std::to_string(n) +
                            ",\"checked\":" + cs + "}");
  return ok ? "ok" : "error";
}

// The runner's view of the slot's first `nbytes` (a config's arguments the judge placed there), page-locked.
at::Tensor arena_view(int64_t nbytes) {
  if (g_arena == nullptr) throw std::runtime_error("kbench timer: no arena");
  if (nbytes < 0 || (size_t)nbytes > g_arena_cap) throw std::runtime_error("kbench timer: outside the arena");
  return at::from_blob(arena_slot((size_t)nbytes), {nbytes}, at::TensorOptions().dtype(at::kByte));
}

std::vector<at::Tensor> fresh_args(std::vector<at::Tensor> tensors, uint64_t seed, std::vector<int64_t> modes,
                                   std::vector<double> alphas) {
  if (modes.size() != tensors.size() || alphas.size() != tensors.size())
    throw std::runtime_error("kbench timer: fresh-input modes for another number of tensors");
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < tensors.size(); ++k) {
    at::Tensor d = at::empty_like(tensors[k], at::MemoryFormat::Contiguous);
    fresh_into(d, tensors[k], tensor_seed(seed, k), modes[k], alphas[k]);
    out.push_back(d);
  }
  return out;
}

uint64_t py_fingerprint(at::Tensor t, uint64_t seed) {
  return fingerprint(t.contiguous(), seed);
}

}  // namespace

// `run` is called from one place, engine/pipeline/protocol/helper_call.py, with every argument by name; the timing loop's
// (warmup .. checks) are named as the fields of TimingParams (engine/config/sections.py), and
// tests/pipeline/test_timing_params.py reads the py::arg names below to hold both sides to the same list.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kbench timing helper: signed, compiled call-and-time loop (see engine/pipeline/timer)";
  m.def("init", &init, py::arg("key_fd"), py::arg("record_fd"), py::arg("arena_fd") = -1,
        py::arg("arena_data_offset") = 0, py::arg("register_step") = 0);
  m.def("arena_view", &arena_view, py::arg("nbytes"));
  m.def("host_register", &host_register, py::arg("ptr"), py::arg("nbytes"));
  m.def("host_unregister", &host_unregister, py::arg("ptr"));
  m.def("run", &run, py::arg("job_id"), py::arg("mode"), py::arg("call"), py::arg("live"), py::arg("variants"),
        py::arg("schedule"), py::arg("warmup"), py::arg("min_iters"), py::arg("max_iters"), py::arg("budget_s"),
        py::arg("checks"), py::arg("flush_l2"), py::arg("probe_inputs"), py::arg("settle_ms"),
        py::arg("fresh_modes") = std::vector<int64_t>(), py::arg("fresh_alphas") = std::vector<double>(),
        py::arg("mutable_inputs") = std::vector<int64_t>());
  // a call's fresh inputs rebuilt from its variant's tensors and the seed its ITER record carries (the judge's)
  m.def("fresh_args", &fresh_args, py::arg("tensors"), py::arg("seed"), py::arg("modes"), py::arg("alphas"));
  m.def("fingerprint", &py_fingerprint, py::arg("tensor"), py::arg("seed"));
  // the variant of the call under way: a seeded call (a reference that draws random numbers) seeds from it
  m.def("current_variant", []() { return g_variant; });
}
