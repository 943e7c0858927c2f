// DLTensor validation for the launch shims: every check throws Error with the tensor's
// name and the offending value (shape, dtype, device, strides).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/dtype.hpp"

namespace bspa::capi {

// A validated tensor: its element pointer (data + byte_offset) and element strides.
struct TensorView {
  const DLTensor *t = nullptr;
  char *data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
  int64_t dim(int i) const { return t->shape[i]; }
};

// Checks ndim and dims (-1 = any; the message shows both shapes), non-negative strides,
// the last dimension contiguous, and data non-NULL unless empty.
TensorView view_tensor(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape);
// Same, but every dimension must be compact (integer metadata arrays).
TensorView view_compact(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape);

// float32 / float16 / bfloat16 with one lane -> DType, else Error(DtypeMismatch).
kernels::DType attention_dtype(const DLTensor *t, const char *name);
void check_dtype(const DLTensor *t, kernels::DType want, const char *name);
void check_float32(const DLTensor *t, const char *name);
void check_int32(const DLTensor *t, const char *name);
void check_uint8(const DLTensor *t, const char *name);
// Error(DeviceMismatch) naming both devices.
void check_device(const DLTensor *t, DLDevice want, const char *name, const char *want_from);

const char *device_name(int32_t device_type);

}  // namespace bspa::capi
