// FP8 e4m3 (the "fn" variant of OCP FP8 / NVIDIA __nv_fp8_e4m3: 1 sign, 4 exponent bits of
// bias 7, 3 mantissa bits; no infinities; 0x7f and 0xff are NaN; largest finite 448,
// smallest normal 2^-6, subnormals m * 2^-9 for m = 1..7) <-> fp32, bit-exact and the same
// on host and device, so the CPU oracle and the CUDA kv write store identical bytes.
//
// Encoding (what bspa_kv_write stores for value / scale): round to nearest, ties to even;
// finite values beyond the range and +-inf saturate to +-448 (0x7e / 0xfe), as CUDA's
// cvt.rn.satfinite.e4m3x2.f32 does; NaN stays NaN (0x7f, or 0xff with the sign bit), so a
// NaN in K/V shows in the attention output instead of being hidden as a number; the sign
// of a zero (or of a value that rounds to zero) is kept (0x80 is -0).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.hpp"

namespace bspa::kernels {

constexpr float kFp8E4m3Max = 448.0f;

BSPA_HOST_DEVICE inline uint32_t fp8_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

BSPA_HOST_DEVICE inline float fp8_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

BSPA_HOST_DEVICE inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return fp8_bits_f32(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    // Subnormal (or zero): mant * 2^-9, exact in fp32.
    return fp8_bits_f32(fp8_f32_bits(static_cast<float>(mant) * (1.0f / 512.0f)) | sign);
  }
  return fp8_bits_f32(sign | ((exp - 7u + 127u) << 23) | (mant << 20));
}

BSPA_HOST_DEVICE inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = fp8_f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);   // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  const int32_t exp = static_cast<int32_t>(a >> 23) - 127;
  if (exp < -10) return sign;  // below 2^-10, half the smallest subnormal: rounds to (signed) zero
  const uint32_t mant = a & 0x7fffffu;
  uint32_t r, rem, mid;
  if (exp >= -6) {  // a normal e4m3: keep 3 of the 23 mantissa bits
    r = (static_cast<uint32_t>(exp + 7) << 3) | (mant >> 20);
    rem = mant & 0xfffffu;
    mid = 0x80000u;
  } else {  // a subnormal e4m3: m = a * 2^9 = (mant | 2^23) >> (14 - exp)
    const uint32_t m24 = mant | 0x800000u, shift = static_cast<uint32_t>(14 - exp);
    r = m24 >> shift;
    rem = m24 & ((1u << shift) - 1u);
    mid = 1u << (shift - 1u);
  }
  // A carry out of the mantissa moves to the next binade (7 subnormal -> 2^-6, 0x08), and
  // never past 0x7e: values that would round to 480 were saturated above.
  if (rem > mid || (rem == mid && (r & 1u))) ++r;
  return static_cast<uint8_t>(sign | r);
}

// What kv_write stores for a 16-bit value x under a head's scale: e4m3(x / scale), with a
// NaN keeping its own sign (0x7f / 0xff). The sign is taken before the division because
// dividing a NaN keeps its sign on x86 but yields the canonical (positive) NaN on CUDA, and
// the CPU and CUDA writes must store the same bytes.
BSPA_HOST_DEVICE inline uint8_t quantize_e4m3(float x, float scale) {
  const uint32_t u = fp8_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(((u >> 24) & 0x80u) | 0x7fu);
  return f32_to_fp8_e4m3(x / scale);
}

// x / scale rounded to nearest even, as IEEE division gives it, for many x and one scale
// (the CUDA kv write's quantizer: a division per element held it under the copy
// bandwidth): the scale's reciprocal r = RN(1 / scale) once, then q = RN(x * r) and one
// correction RN(q + (x - q * scale) * r), the remainder exact through an fma. q can miss
// the quotient by a little more than an ulp, so Markstein's theorem does not cover every
// x; for 16-bit x (11 or 8 significant bits) the correction is exact all the same: checked
// exhaustively near rounding midpoints for every scale significand (the session-11 review)
// and bit for bit against division by tests/cpp/test_scale_divider.cpp. The fast path
// takes scales and quotients in [2^-40, 2^40]: a non-zero remainder is at least
// ulp(q) * ulp(scale) >= 2^-126, still normal, and nothing overflows; a group with any
// other quotient (zeros, whose sign the fma would lose; NaN, inf; the far tails) is
// divided instead. Quotients in [2^-40, 2^-10) and (448, 2^40] stay on the fast path
// (e4m3 rounds them to zero or saturates them either way). A normal power-of-two scale skips
// all of it: x times its exact reciprocal is the quotient itself.
struct ScaleDivider {
  float scale, recip;
  bool fast;  // the scale in [2^-40, 2^40]
  // A normal power of two (2^-126..2^127; vLLM's default scale is 1), whose reciprocal is
  // exact (down to the subnormal 2^-127): x * recip is then x / scale itself, both the one
  // rounding of the same real number, for every x (zeros keep their sign, NaN and inf
  // pass), so no correction and no range test.
  bool power_of_two;
  BSPA_HOST_DEVICE explicit ScaleDivider(float s)
      : scale(s),
        recip(1.0f / s),
        fast(s >= 0x1p-40f && s <= 0x1p40f),
        power_of_two(s >= 0x1p-126f && s <= 0x1p127f && (fp8_f32_bits(s) & 0x7fffffu) == 0) {}
  // y[j] = x(j) / scale for j < N, x(j) giving the j-th value (called again for a group
  // that is divided, so the values need not stay in registers meanwhile). Returns whether
  // the fast rule gave them, which tells that none of the x was NaN.
  template <int N, class Values>
  BSPA_HOST_DEVICE bool divide(Values x, float (&y)[N]) const {
    if (power_of_two) {
      bool numbers = true;  // false: some x is NaN
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
      for (int j = 0; j < N; ++j) {
        y[j] = x(j) * recip;
        numbers &= y[j] == y[j];
      }
      return numbers;
    }
    bool in_range = fast;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int j = 0; j < N; ++j) {
      const float xj = x(j), q = xj * recip, aq = fabsf(q);
      in_range &= aq >= 0x1p-40f && aq <= 0x1p40f;
      y[j] = fmaf(fmaf(-q, scale, xj), recip, q);
    }
    if (in_range) return true;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int j = 0; j < N; ++j) y[j] = x(j) / scale;
    return false;
  }
};

}  // namespace bspa::kernels
