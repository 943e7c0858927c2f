// Wall-clock seconds for timing host calls (the device is synchronised first).
#pragma once

#include <chrono>

namespace demo {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace demo
