// The CUDA kv write's division by a head's scale (ScaleDivider, kernels/fp8_e4m3.hpp:
// reciprocal once, one fma correction per value) against IEEE division, on the host: for
// every bf16 and every f16 value over scales across the whole float range (powers of two,
// values near them, random ones, the fast path's edges, significands where x * RN(1/s)
// misses the quotient by more than an ulp), in the groups of 2 the kernel divides and in
// groups of 16, the quotient must be the same float bit for bit, so the stored e4m3 bytes
// are the ones the CPU backend's x / scale gives; and ordinary values must take the fast
// path (else the test would pass on division alone). Internal (it includes the library's
// kernel headers); no GPU needed.
#include <criterion/criterion.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fp8_e4m3.hpp"

using bspa::kernels::fp8_bits_f32;
using bspa::kernels::fp8_f32_bits;
using bspa::kernels::ScaleDivider;

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return fp8_bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) return std::copysign(static_cast<float>(mant) * 0x1p-24f, sign ? -1.0f : 1.0f);
  return fp8_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

std::vector<float> scales_to_try() {
  std::vector<float> s;
  for (int e = -149; e <= 127; ++e) s.push_back(std::ldexp(1.0f, e));  // powers of two, both paths
  for (float edge : {0x1p-40f, 0x1p40f})
    for (int d = -3; d <= 3; ++d) s.push_back(fp8_bits_f32(fp8_f32_bits(edge) + d));
  for (float v : {1.0f / 128, 0.0123f, 0.1f, 0.3f, 1.0f / 3, 0.7f, 2.5f, 3.0f, 7.0f, 448.0f, 1e-30f, 1e30f, 3e38f})
    s.push_back(v);
  // x * RN(1/s) misses x / s by more than an ulp here (e.g. x = 0x1.e3cp+0): the correction
  // must still land on the quotient.
  for (float v : {0x1.fbe8c6p+0f, 0x1.fbe8c6p-5f, 0x1.fbe8c6p+7f}) s.push_back(v);
  for (uint32_t m : {0x7fffffu, 0x7ffffeu, 0x000001u, 0x400000u})  // significands of all ones, of one ulp
    for (int e = -20; e <= 20; e += 5) s.push_back(fp8_bits_f32((static_cast<uint32_t>(127 + e) << 23) | m));
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> normal(0x00800000u, 0x7f7fffffu), near(0x32800000u, 0x4c000000u);
  for (int i = 0; i < 1500; ++i) s.push_back(fp8_bits_f32(i % 3 == 0 ? normal(rng) : near(rng)));  // any; 2^-26..2^25
  return s;
}

// Every 16-bit value (decoded by `decode`) in groups of N, as the kernel (N = 2) divides them.
template <int N, class Decode>
void check_all(const char *what, Decode decode) {
  std::vector<float> xs(65536);
  for (uint32_t h = 0; h < 65536; ++h) xs[h] = decode(static_cast<uint16_t>(h));
  int64_t mismatches = 0;
  for (float s : scales_to_try()) {
    const ScaleDivider divider(s);
    for (uint32_t base = 0; base < 65536; base += N) {
      float y[N];
      divider.divide<N>([&](int j) { return xs[base + j]; }, y);
      for (int j = 0; j < N; ++j) {
        const float x = xs[base + j], want = x / s;
        const bool same = fp8_f32_bits(y[j]) == fp8_f32_bits(want) || (std::isnan(want) && std::isnan(y[j]));
        if (!same && mismatches++ < 5)
          cr_log_error("%s: %a / %a = %a, the divider gave %a", what, static_cast<double>(x), static_cast<double>(s),
                       static_cast<double>(want), static_cast<double>(y[j]));
      }
    }
  }
  cr_expect_eq(mismatches, 0, "%s: %lld quotients differ from division", what, static_cast<long long>(mismatches));
}

float bf16_to_float(uint16_t h) { return fp8_bits_f32(static_cast<uint32_t>(h) << 16); }

}  // namespace

Test(scale_divider, every_bf16_value_over_many_scales) {
  check_all<2>("bf16, pairs", bf16_to_float);
  check_all<16>("bf16, groups of 16", bf16_to_float);
}

Test(scale_divider, every_f16_value_over_many_scales) {
  check_all<2>("f16, pairs", half_to_float);
  check_all<16>("f16, groups of 16", half_to_float);
}

// Ordinary values take the fast rule (and agree with division); a group with one value out
// of its range (here a zero) is divided, every value of it, the zero's sign included.
Test(scale_divider, fast_path_taken_and_left) {
  const ScaleDivider divider(0.37f);
  float x[16], y[16];
  for (int j = 0; j < 16; ++j) x[j] = 0.1f * static_cast<float>(j + 1);
  cr_expect(divider.divide<16>([&](int j) { return x[j]; }, y), "ordinary values took the division");
  for (int j = 0; j < 16; ++j) cr_expect_eq(fp8_f32_bits(y[j]), fp8_f32_bits(x[j] / 0.37f), "value %d", j);
  x[5] = -0.0f;
  cr_expect_not(divider.divide<16>([&](int j) { return x[j]; }, y), "a zero took the fast rule");
  for (int j = 0; j < 16; ++j) cr_expect_eq(fp8_f32_bits(y[j]), fp8_f32_bits(x[j] / 0.37f), "value %d", j);
  cr_expect(std::signbit(y[5]), "-0 / scale keeps its sign");
  cr_expect_not(ScaleDivider(0x1.8p-41f).divide<16>([&](int j) { return x[j] + 1.0f; }, y), "a scale under 2^-40");
}

// Powers of two multiply by their exact reciprocal, every value of a group, zeros and
// extreme quotients included; only a NaN sends the group to the caller's NaN handling.
Test(scale_divider, powers_of_two_multiply) {
  float x[16], y[16];
  for (int j = 0; j < 16; ++j) x[j] = 0.1f * static_cast<float>(j + 1);
  x[3] = -0.0f, x[4] = 0x1p-133f, x[5] = 3e38f;
  for (float s : {1.0f, 0x1p-41f, 0x1p100f, 0x1p-126f, 0x1p127f}) {
    const ScaleDivider divider(s);
    cr_expect(divider.power_of_two, "%a is a power of two", static_cast<double>(s));
    cr_expect(divider.divide<16>([&](int j) { return x[j]; }, y), "scale %a: the multiply was not taken",
              static_cast<double>(s));
    for (int j = 0; j < 16; ++j) cr_expect_eq(fp8_f32_bits(y[j]), fp8_f32_bits(x[j] / s), "value %d", j);
  }
  x[7] = NAN;
  cr_expect_not(ScaleDivider(1.0f).divide<16>([&](int j) { return x[j]; }, y), "a NaN was not reported");
  cr_expect_not(ScaleDivider(0x1p-127f).power_of_two, "a subnormal scale keeps the general rule");
  cr_expect_not(ScaleDivider(0.37f).power_of_two, "0.37");
}
