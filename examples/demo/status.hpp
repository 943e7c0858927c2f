// Turns a failed bspa call into an exception that carries the library's own message,
// so every error the demo prints names the call, the status and the bad argument.
#pragma once

#include <bspa/bspa.h>

#include <stdexcept>
#include <string>

namespace demo {

struct LibraryError : std::runtime_error {
  bspa_status status;
  LibraryError(const char *call, bspa_status s)
      : std::runtime_error(std::string(call).substr(0, std::string(call).find('(')) +
                           " failed: " + bspa_status_string(s) + ": " + bspa_last_error()),
        status(s) {}
};

// An input file (a trace) that cannot be opened or parsed: exit status 4, not 3.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void ok(bspa_status s, const char *call) {
  if (s != BSPA_OK) throw LibraryError(call, s);
}

}  // namespace demo

#define DEMO_OK(call) ::demo::ok((call), #call)
