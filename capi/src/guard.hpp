// The shim machinery every extern "C" function uses: run C++ code, turn any exception
// into a bspa_status plus the thread's last-error message, and check raw arguments.
#pragma once

#include <bspa/bspa.h>

#include <new>
#include <string>

#include "common/error.hpp"

namespace bspa::capi {

// guarded() returns an Errc as a bspa_status: the header is the one definition of the codes,
// Errc (common/error.hpp, which cannot see the header) mirrors it, and this proves it does.
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

void set_last_error(const std::string &message) noexcept;
const char *last_error_cstr() noexcept;

// Runs body(); returns BSPA_OK, or the status of the exception it threw.
template <class Body>
bspa_status guarded(const char *function, Body &&body) noexcept {
  try {
    body();
    return BSPA_OK;
  } catch (const Error &e) {
    set_last_error(std::string(function) + ": " + e.what());
    return static_cast<bspa_status>(e.code());
  } catch (const std::bad_alloc &) {
    set_last_error(std::string(function) + ": host memory allocation failed");
    return BSPA_ERR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    set_last_error(std::string(function) + ": internal error: " + e.what());
    return BSPA_ERR_INTERNAL;
  } catch (...) {
    set_last_error(std::string(function) + ": internal error: unknown exception");
    return BSPA_ERR_INTERNAL;
  }
}

template <class T>
T *require(T *pointer, const char *name) {
  check(pointer != nullptr, Errc::NullPointer, name, " is NULL");
  return pointer;
}

// Options structs: version 0 means never initialised; newer versions than we know are refused.
inline void check_options_version(uint32_t version, uint32_t known, const char *name) {
  check(version != 0, Errc::Version, name, "->version = 0: initialise it with its *_options_init function");
  check(version <= known, Errc::Version, name, "->version = ", version, " is newer than this library knows (",
        known, ")");
}

}  // namespace bspa::capi
