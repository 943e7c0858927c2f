#include "kernels/cuda/env_switch.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace bspa::kernels::cuda {

bool env_flag(const char *name, bool unset) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  return std::strcmp(v, "0") != 0;
}

int env_int(const char *name, int lo, int hi, int otherwise) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return otherwise;
  char *end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < lo || n > hi) return otherwise;
  return static_cast<int>(n);
}

}  // namespace bspa::kernels::cuda
