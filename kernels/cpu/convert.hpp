// Scalar conversions between the storage dtypes and fp32 (round to nearest even), so
// the CPU backend loads every dtype into fp32 and writes results back in the storage type.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.hpp"

namespace bspa::kernels::cpu {

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

// n contiguous elements of `t` at `src` into fp32.
inline void load_f32(DType t, const void *src, float *dst, int n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, sizeof(float) * n);
  } else if (t == DType::BF16) {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    for (int i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    for (int i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  }
}

inline void store_from_f32(DType t, const float *src, void *dst, int n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, sizeof(float) * n);
  } else if (t == DType::BF16) {
    uint16_t *d = static_cast<uint16_t *>(dst);
    for (int i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  } else {
    uint16_t *d = static_cast<uint16_t *>(dst);
    for (int i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
  }
}

}  // namespace bspa::kernels::cpu
