// The header (capi/include/bspa/bspa.h) is the one definition of the ABI's enumerations.
// Layers that may not include it keep their own copies, numerically equal so that capi/
// converts with a cast: common::Errc (statuses, guard.hpp's guarded()), cache::ElementType
// (pool dtypes, pool.cpp) and kernels::DType (launch dtypes, prefill.cpp). This file only
// proves, at compile time, that every copy matches the header; it holds no code.
#include <bspa/bspa.h>

#include "cache/pool.hpp"
#include "common/error.hpp"
#include "kernels/dtype.hpp"

namespace bspa::capi {

#define BSPA_SAME_STATUS(errc, status) \
  static_assert(static_cast<bspa_status>(Errc::errc) == (status), "Errc::" #errc " != " #status)
BSPA_SAME_STATUS(InvalidArgument, BSPA_ERR_INVALID_ARGUMENT);
BSPA_SAME_STATUS(NullPointer, BSPA_ERR_NULL_POINTER);
BSPA_SAME_STATUS(OutOfRange, BSPA_ERR_OUT_OF_RANGE);
BSPA_SAME_STATUS(ShapeMismatch, BSPA_ERR_SHAPE_MISMATCH);
BSPA_SAME_STATUS(DtypeMismatch, BSPA_ERR_DTYPE_MISMATCH);
BSPA_SAME_STATUS(DeviceMismatch, BSPA_ERR_DEVICE_MISMATCH);
BSPA_SAME_STATUS(BufferTooSmall, BSPA_ERR_BUFFER_TOO_SMALL);
BSPA_SAME_STATUS(InvalidState, BSPA_ERR_INVALID_STATE);
BSPA_SAME_STATUS(NotSupported, BSPA_ERR_NOT_SUPPORTED);
BSPA_SAME_STATUS(NoDevice, BSPA_ERR_NO_DEVICE);
BSPA_SAME_STATUS(OutOfPages, BSPA_ERR_OUT_OF_PAGES);
BSPA_SAME_STATUS(OutOfMemory, BSPA_ERR_OUT_OF_MEMORY);
BSPA_SAME_STATUS(Cuda, BSPA_ERR_CUDA);
BSPA_SAME_STATUS(Version, BSPA_ERR_VERSION);
BSPA_SAME_STATUS(Internal, BSPA_ERR_INTERNAL);
#undef BSPA_SAME_STATUS

#define BSPA_SAME_DTYPE(name, dtype)                                                                  \
  static_assert(static_cast<bspa_dtype>(cache::ElementType::name) == (dtype), "ElementType::" #name); \
  static_assert(static_cast<bspa_dtype>(kernels::DType::name) == (dtype), "DType::" #name)
BSPA_SAME_DTYPE(F32, BSPA_DTYPE_F32);
BSPA_SAME_DTYPE(F16, BSPA_DTYPE_F16);
BSPA_SAME_DTYPE(BF16, BSPA_DTYPE_BF16);
BSPA_SAME_DTYPE(FP8_E4M3, BSPA_DTYPE_FP8_E4M3);
#undef BSPA_SAME_DTYPE

}  // namespace bspa::capi
