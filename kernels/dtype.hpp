// Element types of KV pages and attention tensors (numerically equal to bspa_dtype;
// capi/src/enum_mirrors.cpp checks it).
#pragma once

#include <cstdint>

namespace bspa::kernels {

// FP8_E4M3: KV pages only (value = per-(layer, KV head) fp32 scale x e4m3); q and out of a
// launch over such pages are F16 or BF16 (PrefillProblem::dtype).
enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, FP8_E4M3 = 3 };

inline int dtype_bytes(DType t) { return t == DType::F32 ? 4 : t == DType::FP8_E4M3 ? 1 : 2; }
inline const char *dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::FP8_E4M3: return "fp8_e4m3";
  }
  return "?";
}

}  // namespace bspa::kernels
