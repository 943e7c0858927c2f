// DLTensor validation for the launch shims: every check throws Error with the tensor's
// name and the offending value (shape, dtype, device, strides).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/dtype.hpp"

namespace bspa::capi {

// A validated tensor: its element pointer (data + byte_offset), element strides and the
// bytes [begin, end) from its first element to the end of its last (empty: begin == end).
struct TensorView {
  const DLTensor *t = nullptr;
  char *data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
  const char *begin = nullptr, *end = nullptr;
  int64_t dim(int i) const { return t->shape[i]; }
};

// Checks ndim and dims (-1 = any; the message shows both shapes), non-negative strides,
// the last dimension contiguous, data non-NULL unless empty, and that the span in bytes
// (of the tensor's own dtype) plus byte_offset stays within kMaxBytes and the address
// space, so no element offset * element size the backends form can overflow.
TensorView view_tensor(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape);
// Same, but every dimension must be compact (integer metadata arrays).
TensorView view_compact(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape);

// The dtype checks also require data + byte_offset to be a multiple of the element size
// (Error(InvalidArgument) naming both): every backend accesses whole, aligned elements.
// float32 / float16 / bfloat16 with one lane -> DType, else Error(DtypeMismatch).
kernels::DType attention_dtype(const DLTensor *t, const char *name);
void check_dtype(const DLTensor *t, kernels::DType want, const char *name);
// FP8 e4m3 data: {BSPA_DL_FLOAT8_E4M3FN, 8, 1} (torch.float8_e4m3fn) or {kDLUInt, 8, 1}.
bool is_fp8_e4m3(DLDataType d);
// The 16-bit dtype of what goes with FP8 pages (k_new/v_new, q/out): float16 or bfloat16,
// else Error(DtypeMismatch) saying why (`with` names the pages, e.g. "an fp8_e4m3 pool").
kernels::DType fp8_companion_dtype(const DLTensor *t, const char *name, const char *with);
void check_float32(const DLTensor *t, const char *name);
void check_int32(const DLTensor *t, const char *name);
void check_uint8(const DLTensor *t, const char *name);
// Outputs: Error(ShapeMismatch) when two indices of the tensor reach the same element
// (e.g. out strides {0, 0, 1}: every row the same memory; the CUDA kernels would race).
void check_elements_distinct(const TensorView &v, const char *name);
// Error(InvalidArgument) when a's byte span overlaps [begin, end) of another argument,
// for pairs of which the call writes one and reads the other (out and q, k_new and the
// pool's storage, ...). Spans are compared whole, so two strided views that interleave
// without sharing an element are refused too.
void check_disjoint(const TensorView &a, const char *a_name, const char *begin, const char *end,
                    const char *other_name);
inline void check_disjoint(const TensorView &a, const char *a_name, const TensorView &other, const char *other_name) {
  check_disjoint(a, a_name, other.begin, other.end, other_name);
}

// Error(DeviceMismatch) naming both devices.
void check_device(const DLTensor *t, DLDevice want, const char *name, const char *want_from);

const char *device_name(int32_t device_type);

}  // namespace bspa::capi
