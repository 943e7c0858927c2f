#include "capi/src/tensor_checks.hpp"

#include <sstream>
#include <string>

#include "common/error.hpp"

namespace bspa::capi {

namespace {

std::string shape_string(const int64_t *shape, int ndim) {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < ndim; ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

std::string expected_string(std::initializer_list<int64_t> shape) {
  std::ostringstream s;
  s << '[';
  int i = 0;
  for (int64_t d : shape) s << (i++ ? ", " : "") << (d < 0 ? std::string("*") : std::to_string(d));
  s << ']';
  return s.str();
}

std::string dtype_string(DLDataType d) {
  const char *code = d.code == kDLFloat ? "float" : d.code == kDLBfloat ? "bfloat" : d.code == kDLInt ? "int"
                     : d.code == kDLUInt ? "uint" : "code";
  return cat(code, static_cast<int>(d.bits), d.lanes != 1 ? cat("x", d.lanes) : std::string());
}

TensorView view(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape, bool compact) {
  check(t != nullptr, Errc::NullPointer, name, " is NULL");
  const int ndim = static_cast<int>(shape.size());
  check(t->ndim == ndim, Errc::ShapeMismatch, name, ".ndim = ", t->ndim, " but expected ", ndim, " (",
        expected_string(shape), ")");
  check(t->shape != nullptr, Errc::NullPointer, name, ".shape is NULL");
  int i = 0;
  int64_t numel = 1;
  // The product of the dimensions counted as at least 1 bounds numel and every compact
  // stride below: once it fits in int64, none of those products overflows.
  int64_t bound = 1;
  for (int64_t want : shape) {
    check(t->shape[i] >= 0 && (want < 0 || t->shape[i] == want), Errc::ShapeMismatch, name, ".shape = ",
          shape_string(t->shape, ndim), " but expected ", expected_string(shape), " (dimension ", i, ")");
    check(!__builtin_mul_overflow(bound, t->shape[i] > 1 ? t->shape[i] : 1, &bound), Errc::ShapeMismatch, name,
          ".shape = ", shape_string(t->shape, ndim), " has more elements than int64 can count");
    numel *= t->shape[i];
    ++i;
  }
  TensorView v;
  v.t = t;
  int64_t compact_stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    v.stride[d] = t->strides ? t->strides[d] : compact_stride;
    compact_stride *= t->shape[d];
  }
  if (t->strides && numel > 0) {
    compact_stride = 1;
    int64_t extent = 0;  // offset of the last element: the kernels index up to it in int64
    for (int d = ndim - 1; d >= 0; --d) {
      check(v.stride[d] >= 0, Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d], " is negative");
      int64_t span = 0;
      check(!__builtin_mul_overflow(t->shape[d] - 1, v.stride[d], &span) &&
                !__builtin_add_overflow(extent, span, &extent),
            Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d],
            " reaches past the largest offset int64 can hold");
      if (t->shape[d] > 1 && (compact || d == ndim - 1))
        check(v.stride[d] == compact_stride, Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d],
              " but ", compact ? "the tensor must be compact" : "the last dimension must be contiguous",
              " (expected ", compact_stride, ")");
      compact_stride *= t->shape[d];
    }
  }
  check(numel == 0 || t->data != nullptr, Errc::NullPointer, name, ".data is NULL");
  v.data = static_cast<char *>(t->data) + t->byte_offset;
  return v;
}

}  // namespace

TensorView view_tensor(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape) {
  return view(t, name, shape, false);
}

TensorView view_compact(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape) {
  return view(t, name, shape, true);
}

kernels::DType attention_dtype(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 32) return kernels::DType::F32;
    if (d.code == kDLFloat && d.bits == 16) return kernels::DType::F16;
    if (d.code == kDLBfloat && d.bits == 16) return kernels::DType::BF16;
  }
  fail(Errc::DtypeMismatch, name, ".dtype = ", dtype_string(d), " is none of float32, float16, bfloat16");
}

void check_dtype(const DLTensor *t, kernels::DType want, const char *name) {
  const DLDataType d = t->dtype;
  const bool ok = d.lanes == 1 && ((want == kernels::DType::F32 && d.code == kDLFloat && d.bits == 32) ||
                                   (want == kernels::DType::F16 && d.code == kDLFloat && d.bits == 16) ||
                                   (want == kernels::DType::BF16 && d.code == kDLBfloat && d.bits == 16));
  check(ok, Errc::DtypeMismatch, name, ".dtype = ", dtype_string(d), " but expected ", kernels::dtype_name(want));
}

void check_float32(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLFloat && d.bits == 32, Errc::DtypeMismatch, name, ".dtype = ",
        dtype_string(d), " but expected float32");
}

void check_int32(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLInt && d.bits == 32, Errc::DtypeMismatch, name, ".dtype = ",
        dtype_string(d), " but expected int32");
}

void check_uint8(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLUInt && d.bits == 8, Errc::DtypeMismatch, name, ".dtype = ",
        dtype_string(d), " but expected uint8");
}

const char *device_name(int32_t device_type) {
  switch (device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "other";
  }
}

void check_device(const DLTensor *t, DLDevice want, const char *name, const char *want_from) {
  const DLDevice d = t->device;
  check(d.device_type == want.device_type && (d.device_type == kDLCPU || d.device_id == want.device_id),
        Errc::DeviceMismatch, name, " is on ", device_name(d.device_type), ":", d.device_id, " but ", want_from,
        " is on ", device_name(want.device_type), ":", want.device_id);
}

}  // namespace bspa::capi
