// Library-wide entry points: versions, build info, status strings, last error, devices.
#include <bspa/bspa.h>

#include <string>

#include "capi/src/guard.hpp"
#include "common/device.hpp"

namespace bspa::capi {

namespace {
thread_local std::string last_error;
}

void set_last_error(const std::string &message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    // Out of memory while recording an error: keep the previous message.
  }
}

const char *last_error_cstr() noexcept { return last_error.c_str(); }

}  // namespace bspa::capi

#ifndef BSPA_CUDA_ARCHS_STRING
#define BSPA_CUDA_ARCHS_STRING ""
#endif

extern "C" {

BSPA_API uint32_t bspa_version_number(void) { return BSPA_VERSION_NUMBER; }
BSPA_API const char *bspa_version_string(void) { return BSPA_VERSION_STRING; }
BSPA_API uint32_t bspa_abi_version(void) { return BSPA_ABI_VERSION; }

BSPA_API const char *bspa_build_info(void) {
#ifdef BSPA_HAVE_CUDA
  return "bspa " BSPA_VERSION_STRING "; backends: cpu,cuda; cuda_archs: " BSPA_CUDA_ARCHS_STRING
         "; dtypes: f32,f16,bf16 (cuda: f16,bf16); kv_dtypes: f32,f16,bf16,fp8_e4m3 (cuda: f16,bf16,fp8_e4m3); "
         "head_dims: any (cuda: 64,128)";
#else
  return "bspa " BSPA_VERSION_STRING
         "; backends: cpu; cuda_archs: none; dtypes: f32,f16,bf16; kv_dtypes: f32,f16,bf16,fp8_e4m3; head_dims: any";
#endif
}

BSPA_API const char *bspa_status_string(bspa_status status) {
  switch (status) {
    case BSPA_OK: return "BSPA_OK";
    case BSPA_ERR_INVALID_ARGUMENT: return "BSPA_ERR_INVALID_ARGUMENT";
    case BSPA_ERR_NULL_POINTER: return "BSPA_ERR_NULL_POINTER";
    case BSPA_ERR_OUT_OF_RANGE: return "BSPA_ERR_OUT_OF_RANGE";
    case BSPA_ERR_SHAPE_MISMATCH: return "BSPA_ERR_SHAPE_MISMATCH";
    case BSPA_ERR_DTYPE_MISMATCH: return "BSPA_ERR_DTYPE_MISMATCH";
    case BSPA_ERR_DEVICE_MISMATCH: return "BSPA_ERR_DEVICE_MISMATCH";
    case BSPA_ERR_BUFFER_TOO_SMALL: return "BSPA_ERR_BUFFER_TOO_SMALL";
    case BSPA_ERR_INVALID_STATE: return "BSPA_ERR_INVALID_STATE";
    case BSPA_ERR_NOT_SUPPORTED: return "BSPA_ERR_NOT_SUPPORTED";
    case BSPA_ERR_NO_DEVICE: return "BSPA_ERR_NO_DEVICE";
    case BSPA_ERR_OUT_OF_PAGES: return "BSPA_ERR_OUT_OF_PAGES";
    case BSPA_ERR_OUT_OF_MEMORY: return "BSPA_ERR_OUT_OF_MEMORY";
    case BSPA_ERR_CUDA: return "BSPA_ERR_CUDA";
    case BSPA_ERR_VERSION: return "BSPA_ERR_VERSION";
    case BSPA_ERR_INTERNAL: return "BSPA_ERR_INTERNAL";
    default: return "BSPA_UNKNOWN_STATUS";
  }
}

BSPA_API const char *bspa_last_error(void) { return bspa::capi::last_error_cstr(); }

BSPA_API bspa_status bspa_device_count(int32_t device_type, int32_t *count) {
  return bspa::capi::guarded(__func__, [&] {
    bspa::capi::require(count, "count");
    if (device_type == kDLCPU) {
      *count = 1;
    } else if (device_type == kDLCUDA) {
      *count = bspa::cuda_device_count();
    } else {
      bspa::fail(bspa::Errc::NotSupported, "device_type = ", device_type, " is neither kDLCPU (1) nor kDLCUDA (2)");
    }
  });
}

}  // extern "C"
