// The one error type of bspa's C++ core. cache/ and kernels/ throw bspa::Error; the
// C ABI shims in capi/ turn it into a bspa_status (the numeric codes are the same) and
// the thread's last-error message. Nothing here knows of the ABI header.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace bspa {

// The codes of bspa_status (capi/include/bspa/bspa.h), which this layer may not include;
// capi/src/enum_mirrors.cpp static_asserts that every value here equals the header's.
enum class Errc : int32_t {
  InvalidArgument = 100,
  NullPointer = 101,
  OutOfRange = 102,
  ShapeMismatch = 103,
  DtypeMismatch = 104,
  DeviceMismatch = 105,
  BufferTooSmall = 106,
  InvalidState = 107,
  NotSupported = 200,
  NoDevice = 201,
  OutOfPages = 300,
  OutOfMemory = 301,
  Cuda = 400,
  Version = 500,
  Internal = 900,
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string &message) : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

// Concatenates anything streamable: fail(Errc::OutOfRange, "layer = ", layer, " is not in [0, ", n, ")").
template <class... Parts>
std::string cat(Parts &&...parts) {
  std::ostringstream s;
  (s << ... << std::forward<Parts>(parts));
  return s.str();
}

template <class... Parts>
[[noreturn]] void fail(Errc code, Parts &&...parts) {
  throw Error(code, cat(std::forward<Parts>(parts)...));
}

// Argument checks that name the argument: check(n >= 0, Errc::InvalidArgument, "n = ", n, " is negative").
template <class... Parts>
void check(bool ok, Errc code, Parts &&...parts) {
  if (!ok) fail(code, std::forward<Parts>(parts)...);
}

}  // namespace bspa
