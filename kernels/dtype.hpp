// Element types of KV pages and attention tensors (numerically equal to bspa_dtype).
#pragma once

#include <cstdint>

namespace bspa::kernels {

enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2 };

inline int dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char *dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }

}  // namespace bspa::kernels
