#include "capi/src/tensor_checks.hpp"

#include <cstdint>
#include <initializer_list>
#include <ostream>

#include <bspa/bspa.h>

#include "common/checked_size.hpp"
#include "common/error.hpp"

namespace bspa::capi {

namespace {

// Message parts that format themselves only when streamed into a failure's message.
// check() evaluates its arguments before it tests the condition, and these strings, built
// for every dimension of every tensor of a launch that then passed, were most of a launch's
// host time (about 10 of 15 us per bspa_kv_write on the H200 host; bench/NOTES.md, "Engine
// step").
struct ShapeText {  // [2, 3, 4]
  const int64_t *dims;
  int ndim;
};
std::ostream &operator<<(std::ostream &s, const ShapeText &t) {
  s << '[';
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.dims[i];
  return s << ']';
}
ShapeText shape_text(const int64_t *dims, int ndim) { return {dims, ndim}; }

struct ExpectedShapeText {  // [*, 4, 8]: -1 is any extent
  std::initializer_list<int64_t> dims;
};
std::ostream &operator<<(std::ostream &s, const ExpectedShapeText &t) {
  s << '[';
  int i = 0;
  for (int64_t d : t.dims) {
    s << (i++ ? ", " : "");
    if (d < 0)
      s << '*';
    else
      s << d;
  }
  return s << ']';
}
ExpectedShapeText expected_text(std::initializer_list<int64_t> dims) { return {dims}; }

struct DtypeText {  // float16, bfloat16, float8_e4m3fn, int32x4, ...
  DLDataType d;
};
std::ostream &operator<<(std::ostream &s, const DtypeText &t) {
  const DLDataType d = t.d;
  if (d.code == BSPA_DL_FLOAT8_E4M3FN && d.bits == 8) {
    s << "float8_e4m3fn";
  } else {
    const char *code = d.code == kDLFloat    ? "float"
                       : d.code == kDLBfloat ? "bfloat"
                       : d.code == kDLInt    ? "int"
                       : d.code == kDLUInt   ? "uint"
                                             : "code";
    s << code << static_cast<int>(d.bits);
  }
  if (d.lanes != 1) s << 'x' << d.lanes;
  return s;
}
DtypeText dtype_text(DLDataType d) { return {d}; }

struct SpanText {  // [0x..., 0x...)
  const void *begin, *end;
};
std::ostream &operator<<(std::ostream &s, const SpanText &t) { return s << '[' << t.begin << ", " << t.end << ')'; }
SpanText span_text(const char *begin, const char *end) { return {begin, end}; }

// Bytes of one element of any dtype (lanes included), at least 1: spans are bounded before
// the dtype is checked, so a wrong dtype is still reported as a dtype.
uint64_t element_bytes(DLDataType d) {
  const uint64_t bits = static_cast<uint64_t>(d.bits) * d.lanes;
  return bits >= 8 ? (bits + 7) / 8 : 1;
}

TensorView view(const DLTensor *t, const char *name, std::initializer_list<int64_t> shape, bool compact) {
  check(t != nullptr, Errc::NullPointer, name, " is NULL");
  const int ndim = static_cast<int>(shape.size());
  check(t->ndim == ndim, Errc::ShapeMismatch, name, ".ndim = ", t->ndim, " but expected ", ndim, " (",
        expected_text(shape), ")");
  check(t->shape != nullptr, Errc::NullPointer, name, ".shape is NULL");
  int i = 0;
  int64_t numel = 1;
  // The product of the dimensions counted as at least 1 bounds numel and every compact
  // stride below: once it fits in int64, none of those products overflows.
  uint64_t bound = 1;
  for (int64_t want : shape) {
    check(t->shape[i] >= 0 && (want < 0 || t->shape[i] == want), Errc::ShapeMismatch, name,
          ".shape = ", shape_text(t->shape, ndim), " but expected ", expected_text(shape), " (dimension ", i, ")");
    check(mul_within(bound, static_cast<uint64_t>(t->shape[i] > 1 ? t->shape[i] : 1), INT64_MAX, &bound),
          Errc::ShapeMismatch, name, ".shape = ", shape_text(t->shape, ndim),
          " has more elements than int64 can count");
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
  int64_t extent = numel > 0 ? numel - 1 : 0;  // offset of the last element, in elements
  if (t->strides) {                            // as the header says, for empty tensors too
    for (int d = 0; d < ndim; ++d)
      check(v.stride[d] >= 0, Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d], " is negative");
  }
  if (t->strides && numel > 0) {
    compact_stride = 1;
    extent = 0;  // the kernels index up to it in int64
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t span = 0;
      check(!__builtin_mul_overflow(t->shape[d] - 1, v.stride[d], &span) &&
                !__builtin_add_overflow(extent, span, &extent),
            Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d],
            " reaches past the largest offset int64 can hold");
      if (t->shape[d] > 1 && (compact || d == ndim - 1))
        check(v.stride[d] == compact_stride, Errc::ShapeMismatch, name, ".strides[", d, "] = ", v.stride[d], " but ",
              compact ? "the tensor must be compact" : "the last dimension must be contiguous", " (expected ",
              compact_stride, ")");
      compact_stride *= t->shape[d];
    }
  }
  check(numel == 0 || t->data != nullptr, Errc::NullPointer, name, ".data is NULL");
  // Bounded in bytes, not elements: the backends form byte offsets as element offset *
  // element size, which overflowed int64 for strides near 2^62 and read before the buffer.
  const uint64_t elem = element_bytes(t->dtype);
  uint64_t span_bytes = 0, end_offset = 0;
  if (numel > 0)
    check(mul_within(static_cast<uint64_t>(extent) + 1, elem, kMaxBytes, &span_bytes), Errc::ShapeMismatch, name,
          t->strides ? ".strides = " : ".shape = ",
          t->strides ? shape_text(t->strides, ndim) : shape_text(t->shape, ndim), ": its elements span ",
          static_cast<uint64_t>(extent) + 1, " x ", elem, " bytes, more than the ", kMaxBytes,
          " bytes an offset may reach");
  check(add_within(t->byte_offset, span_bytes, kMaxBytes, &end_offset), Errc::InvalidArgument, name,
        ".byte_offset = ", t->byte_offset, " + its ", span_bytes, " bytes pass the ", kMaxBytes,
        " bytes an offset may reach");
  const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
  check(base <= UINTPTR_MAX - end_offset, Errc::InvalidArgument, name, ".data = ", t->data, " + byte_offset ",
        t->byte_offset, " + its ", span_bytes, " bytes wrap around the address space");
  // Integer arithmetic: an empty tensor may have NULL data, which no offset may be added to.
  v.data = reinterpret_cast<char *>(base + t->byte_offset);
  v.begin = v.data;
  v.end = reinterpret_cast<const char *>(base + end_offset);
  return v;
}

// The element address of t must be a multiple of the element size: the backends load and
// store whole elements (a misaligned f16 or lse is undefined behaviour on every path).
void check_aligned(const DLTensor *t, uint64_t elem, const char *name) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  check(address % elem == 0, Errc::InvalidArgument, name, ".data = ", t->data, " + byte_offset ", t->byte_offset,
        " is not a multiple of its ", elem, "-byte element size");
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
    kernels::DType r;
    if (d.code == kDLFloat && d.bits == 32)
      r = kernels::DType::F32;
    else if (d.code == kDLFloat && d.bits == 16)
      r = kernels::DType::F16;
    else if (d.code == kDLBfloat && d.bits == 16)
      r = kernels::DType::BF16;
    else
      fail(Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d), " is none of float32, float16, bfloat16");
    check_aligned(t, static_cast<uint64_t>(kernels::dtype_bytes(r)), name);
    return r;
  }
  fail(Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d), " is none of float32, float16, bfloat16");
}

void check_dtype(const DLTensor *t, kernels::DType want, const char *name) {
  const DLDataType d = t->dtype;
  const bool ok = d.lanes == 1 && ((want == kernels::DType::F32 && d.code == kDLFloat && d.bits == 32) ||
                                   (want == kernels::DType::F16 && d.code == kDLFloat && d.bits == 16) ||
                                   (want == kernels::DType::BF16 && d.code == kDLBfloat && d.bits == 16));
  check(ok, Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d), " but expected ", kernels::dtype_name(want));
  check_aligned(t, static_cast<uint64_t>(kernels::dtype_bytes(want)), name);
}

bool is_fp8_e4m3(DLDataType d) {
  return d.lanes == 1 && d.bits == 8 && (d.code == BSPA_DL_FLOAT8_E4M3FN || d.code == kDLUInt);
}

kernels::DType fp8_companion_dtype(const DLTensor *t, const char *name, const char *with) {
  const DLDataType d = t->dtype;
  const bool ok = d.lanes == 1 && d.bits == 16 && (d.code == kDLFloat || d.code == kDLBfloat);
  check(ok, Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d), " but ", with,
        " takes bfloat16 or float16 (only the pages are fp8_e4m3)");
  return attention_dtype(t, name);
}

void check_float32(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLFloat && d.bits == 32, Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d),
        " but expected float32");
  check_aligned(t, 4, name);
}

void check_int32(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLInt && d.bits == 32, Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d),
        " but expected int32");
  check_aligned(t, 4, name);
}

void check_uint8(const DLTensor *t, const char *name) {
  const DLDataType d = t->dtype;
  check(d.lanes == 1 && d.code == kDLUInt && d.bits == 8, Errc::DtypeMismatch, name, ".dtype = ", dtype_text(d),
        " but expected uint8");
}

void check_elements_distinct(const TensorView &v, const char *name) {
  const DLTensor *t = v.t;
  // Compact, or empty (no elements to collide, and view() bounded no stride).
  if (!t->strides || v.begin == v.end) return;
  // Dimensions of more than one element, by increasing stride: each stride must step past
  // everything the smaller ones span, or two indices reach the same element.
  int dims[4], n = 0;
  for (int d = 0; d < t->ndim && d < 4; ++d) {
    if (t->shape[d] <= 1) continue;
    int j = n++;  // insertion sort of at most 4
    for (; j > 0 && v.stride[dims[j - 1]] > v.stride[d]; --j) dims[j] = dims[j - 1];
    dims[j] = d;
  }
  int64_t span = 1;  // elements covered by the dimensions so far
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    check(v.stride[d] >= span, Errc::ShapeMismatch, name, ".strides = ", shape_text(t->strides, t->ndim),
          " with shape ", shape_text(t->shape, t->ndim), ": dimension ", d, "'s stride ", v.stride[d], " is below the ",
          span, " elements the smaller strides span, so its rows overlap (an output's ", "elements must be distinct)");
    span += (t->shape[d] - 1) * v.stride[d];  // bounded by view()'s extent check
  }
}

void check_disjoint(const TensorView &a, const char *a_name, const char *begin, const char *end,
                    const char *other_name) {
  const bool overlap = a.begin < a.end && begin < end && a.begin < end && begin < a.end;
  check(!overlap, Errc::InvalidArgument, a_name, " spans bytes ", span_text(a.begin, a.end), ", which overlap ",
        other_name, " at ", span_text(begin, end), ": the call writes one while it reads the other");
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
