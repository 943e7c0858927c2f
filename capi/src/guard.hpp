// The shim machinery every extern "C" function uses: run C++ code, turn any exception
// into a bspa_status plus the thread's last-error message, and check raw arguments.
#pragma once

#include <bspa/bspa.h>

#include <new>
#include <string>

#include "common/error.hpp"

namespace bspa::capi {

// guarded() returns an Errc as a bspa_status: enum_mirrors.cpp proves the codes are equal.

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

// Options and args structs: version 0 means never initialised (the message names `init`, the
// function that initialises it); newer versions than we know are refused.
inline void check_options_version(uint32_t version, uint32_t known, const char *name, const char *init) {
  check(version != 0, Errc::Version, name, "->version = 0: initialise it with ", init);
  check(version <= known, Errc::Version, name, "->version = ", version, " is newer than this library knows (", known,
        ")");
}

}  // namespace bspa::capi
