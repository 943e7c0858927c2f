// Helpers shared by the GPU check and benchmark programs (public header + CUDA runtime
// only): flag parsing, CUDA error checks, bf16/f16 conversion, random fill, DLTensor
// construction.
#pragma once

#include <CLI/CLI.hpp>
#include <bspa/bspa.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "cuda_ok.hpp"

#define BSPA_OK_OR_DIE(call)                                                                         \
  do {                                                                                               \
    bspa_status s_ = (call);                                                                         \
    if (s_ != BSPA_OK) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, bspa_status_string(s_), \
                   bspa_last_error());                                                               \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

namespace gpu {

// Parses the flags: -1 to go on, else the exit status (0 after --help; 2 for a bad flag, with
// CLI11's message on stderr, the status these programs give every usage error).
inline int parse_flags(CLI::App &app, int argc, char **argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

// Integer flags are read in decimal, as the atoi/strtoull(.., 10) that parsed them before
// CLI11 did (CLI11 2.1 reads "010" as octal 8): leading zeros are dropped, anything but an
// optional '-' and digits is refused.
inline CLI::Validator decimal() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        const size_t sign = !text.empty() && text[0] == '-';
        if (text.size() == sign || text.find_first_not_of("0123456789", sign) != std::string::npos)
          return "not a decimal integer: " + text;
        const size_t first = text.find_first_not_of('0', sign);
        text.erase(sign, (first == std::string::npos ? text.size() - 1 : first) - sign);
        return std::string();
      },
      "DECIMAL");
}

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  int range(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  float normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (ax < 0x38800000u) {                                               // subnormal
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  uint32_t u;
  if (e == 0) {
    float f = std::ldexp(static_cast<float>(m), -24);
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_half(bspa_dtype dt, float f) { return dt == BSPA_DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f); }
inline float from_half(bspa_dtype dt, uint16_t h) { return dt == BSPA_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

inline DLDataType dl_dtype(bspa_dtype dt) {
  DLDataType d;
  d.code = dt == BSPA_DTYPE_BF16 ? kDLBfloat : kDLFloat;
  d.bits = dt == BSPA_DTYPE_F32 ? 32 : 16;
  d.lanes = 1;
  return d;
}
inline DLDataType dl_i32() { return DLDataType{kDLInt, 32, 1}; }
inline DLDataType dl_f32() { return DLDataType{kDLFloat, 32, 1}; }

// A DLTensor that owns its shape and stride arrays.
struct Tensor {
  DLTensor t{};
  int64_t shape[4]{}, strides[4]{};
  Tensor() = default;
  Tensor(void *data, DLDevice dev, DLDataType dt, std::vector<int64_t> shp, std::vector<int64_t> str = {}) {
    t.data = data;
    t.device = dev;
    t.dtype = dt;
    t.ndim = static_cast<int32_t>(shp.size());
    for (size_t i = 0; i < shp.size(); ++i) shape[i] = shp[i];
    if (str.empty()) {
      int64_t s = 1;
      for (int i = t.ndim - 1; i >= 0; --i) strides[i] = s, s *= shape[i];
    } else {
      for (size_t i = 0; i < str.size(); ++i) strides[i] = str[i];
    }
    t.shape = shape;
    t.strides = strides;
    t.byte_offset = 0;
  }
  Tensor(const Tensor &o) : t(o.t) {
    std::memcpy(shape, o.shape, sizeof shape);
    std::memcpy(strides, o.strides, sizeof strides);
    t.shape = shape;
    t.strides = strides;
  }
  Tensor &operator=(const Tensor &o) {
    t = o.t;
    std::memcpy(shape, o.shape, sizeof shape);
    std::memcpy(strides, o.strides, sizeof strides);
    t.shape = shape;
    t.strides = strides;
    return *this;
  }
  DLTensor *dl() { return &t; }
};

// e4m3 ("e4m3fn") of a float, written independently of the library's encoder so the checks
// compare two implementations: round to nearest even, saturation to +-448, NaN -> 0x7f.
inline uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (std::isnan(x)) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // subnormals (8 = 2^-6)
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int m = static_cast<int>(std::nearbyint((f * 2.0f - 1.0f) * 8.0f));
  int be = e - 1 + 7;
  if (m == 8) m = 0, ++be;
  const int code = be << 3 | m;
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}
inline float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float a = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (b & 0x80) ? -a : a;
}

// Random e4m3 codes for timing over FP8 pages (values do not change a kernel's time; the
// NaN codes 0x7f / 0xff, which kv_write never writes, are left out).
inline std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> h(n);
  for (auto &b : h) {
    b = static_cast<uint8_t>(rng.next());
    if ((b & 0x7f) == 0x7f) b ^= 1;
  }
  return h;
}

inline void *dmalloc(size_t bytes) {
  void *p = nullptr;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}
template <class T>
T *upload(const std::vector<T> &v) {
  T *p = static_cast<T *>(dmalloc(v.size() * sizeof(T)));
  if (!v.empty()) CUDA_OK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <class T>
std::vector<T> download(const T *p, size_t n) {
  std::vector<T> v(n);
  if (n) CUDA_OK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Fills device bf16 buffers (pointer, element count) with N(0,1) values (never all zeros:
// the kernels' time depends on the values): one random chunk of 16M elements (seed), tiled
// over every buffer, so large buffers cost one chunk's generation.
inline void fill_normal_bf16(std::initializer_list<std::pair<uint16_t *, size_t> > buffers, uint64_t seed) {
  const size_t chunk = 16u << 20;
  std::vector<uint16_t> h(chunk);
  Rng rng(seed);
  for (auto &x : h) x = f32_to_bf16(rng.normal());
  uint16_t *d = upload(h);
  for (auto [p, n] : buffers)
    for (size_t off = 0; off < n; off += chunk)
      CUDA_OK(cudaMemcpy(p + off, d, std::min(chunk, n - off) * 2, cudaMemcpyDeviceToDevice));
  cudaFree(d);
}

// bspa_kv_write / bspa_prefill on the default stream, their args structs filled from the
// arguments the benches vary (one place to follow when the structs grow).
inline bspa_status kv_write(bspa_pool *pool, const bspa_batch *batch, int32_t layer, const DLTensor *k_new,
                            const DLTensor *v_new) {
  bspa_kv_write_args a;
  bspa_kv_write_args_init(&a);
  a.layer = layer;
  a.k_new = k_new;
  a.v_new = v_new;
  return bspa_kv_write(pool, batch, &a, nullptr);
}
inline bspa_status prefill(bspa_pool *pool, const bspa_batch *batch, int32_t layer, const bspa_layout *layout,
                           const DLTensor *q, DLTensor *out, float scale, DLTensor *lse) {
  bspa_prefill_args a;
  bspa_prefill_args_init(&a);
  a.layer = layer;
  a.layout = layout;
  a.q = q;
  a.out = out;
  a.lse = lse;
  a.scale = scale;
  return bspa_prefill(pool, batch, &a, nullptr);
}

// Writes the K/V of the first tokens[i] appended, uncomputed tokens of each sequence for
// layers [0, layers) from k and v ([sum of tokens, Hkv, D]) through a one-step batch on the
// default stream (synchronised before it returns), then commits committed[i] tokens of each:
// so that a timed step reads written values (pages a fresh pool never wrote hold zeros, over
// which the prefill runs faster; bench/NOTES.md, "Session 30", item 6).
inline void write_contexts(bspa_pool *pool, const std::vector<bspa_seq *> &seqs, const std::vector<int32_t> &tokens,
                           const std::vector<int32_t> &committed, int32_t layers, const DLTensor *k,
                           const DLTensor *v) {
  bspa_batch *fill = nullptr;
  BSPA_OK_OR_DIE(
      bspa_batch_create(&fill, pool, seqs.data(), tokens.data(), static_cast<int32_t>(seqs.size()), nullptr));
  for (int32_t l = 0; l < layers; ++l) BSPA_OK_OR_DIE(kv_write(pool, fill, l, k, v));
  CUDA_OK(cudaDeviceSynchronize());
  bspa_batch_destroy(fill);
  for (size_t i = 0; i < seqs.size(); ++i) BSPA_OK_OR_DIE(bspa_seq_commit(seqs[i], committed[i]));
}

}  // namespace gpu
