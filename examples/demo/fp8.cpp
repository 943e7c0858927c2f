#include "fp8.hpp"

#include <cmath>
#include <cstring>

#include "status.hpp"

namespace demo {

Fp8Scales calibrate_fp8(const ToyModel &model, const int32_t *prompt, int64_t n) {
  const ModelShape &m = model.shape();
  Fp8Scales s;
  s.num_kv_heads = m.num_kv_heads;
  s.k.assign(static_cast<size_t>(m.num_layers) * m.num_kv_heads, 0.0f);
  s.v = s.k;
  for (int32_t layer = 0; layer < m.num_layers; ++layer) {
    const Projections p = model.project(layer, prompt, n, 0);
    for (int64_t t = 0; t < n; ++t)
      for (int32_t h = 0; h < m.num_kv_heads; ++h)
        for (int32_t i = 0; i < m.head_dim; ++i) {
          const size_t e = static_cast<size_t>((t * m.num_kv_heads + h) * m.head_dim + i);
          const size_t at = static_cast<size_t>(layer) * m.num_kv_heads + h;
          s.k[at] = std::fmax(s.k[at], std::fabs(p.k[e]));
          s.v[at] = std::fmax(s.v[at], std::fabs(p.v[e]));
        }
  }
  for (float *x : {s.k.data(), s.v.data()})
    for (size_t i = 0; i < s.k.size(); ++i)
      x[i] = x[i] > 0 ? x[i] / 448.0f * kFp8Headroom : 1.0f;  // all zero: any scale
  return s;
}

void set_fp8_scales(bspa_pool *pool, const Fp8Scales &scales, int32_t num_layers) {
  for (int32_t layer = 0; layer < num_layers; ++layer)
    DEMO_OK(bspa_pool_set_kv_scales(pool, layer, scales.k_of(layer), scales.v_of(layer), scales.num_kv_heads));
}

uint8_t encode_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const float a = std::fabs(x);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);
  if (a < 0.015625f) {                           // subnormal: m * 2^-9, m = a * 512 rounded to nearest even
    const float m = std::nearbyint(a * 512.0f);  // the default rounding mode: ties to even
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(m));  // 8 -> 0x08, the smallest normal
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // 1.mmm * 2^(e-1): the mantissa in eighths, rounded to nearest even (a carry to 16
  // moves to the next binade, which the code arithmetic below does by itself).
  const float mant = std::nearbyint((f * 2.0f - 1.0f) * 8.0f);
  const int code = ((e - 1 + 7) << 3) + static_cast<int>(mant);
  return static_cast<uint8_t>(sign | (code > 0x7e ? 0x7e : code));
}

}  // namespace demo
