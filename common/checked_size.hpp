// Overflow-safe size arithmetic. Every byte or element count the library derives from
// caller values (pool geometry, tensor shapes and strides, layout and batch sizes) is
// computed here, factor by factor against a limit, so a product that would wrap is an
// error naming its factors instead of a small wrong number that is then allocated and
// indexed past (the 128-bit pool size of issue 24 wrapped at 2^128 and was accepted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include "common/error.hpp"

namespace bspa {

// The most bytes any object, tensor span or byte offset may cover: pointer differences
// (ptrdiff_t) and the backends' int64 offsets (element offset * element size) must hold
// it. No machine has that much memory, so nothing real is refused by it; a size above it
// can only come from a wrapped or nonsensical value.
constexpr uint64_t kMaxBytes = static_cast<uint64_t>(PTRDIFF_MAX);

// One named factor of a product; the value must be >= 0 (checked by the caller first).
struct SizeFactor {
  const char *name;  // "num_layers", "K and V", ... (nullptr: an unnamed constant)
  uint64_t value;
};

// a * b when it stays <= limit.
inline bool mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > limit) return false;
  *out = r;
  return true;
}

// a + b when it stays <= limit.
inline bool add_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > limit) return false;
  *out = r;
  return true;
}

// The product of factors, multiplied one at a time; every partial product must stay
// <= limit (so a zero factor late in the list does not hide an overflow before it).
// Throws Error(code, "<what> = a (name) x b (name) x ... exceeds <limit> <unit>").
inline uint64_t checked_product(Errc code, const std::string &what, std::initializer_list<SizeFactor> factors,
                                uint64_t limit = kMaxBytes, const char *unit = "bytes") {
  uint64_t r = 1;
  for (const SizeFactor &f : factors) {
    if (mul_within(r, f.value, limit, &r)) continue;
    std::ostringstream s;
    s << what << " = ";
    bool first = true;
    for (const SizeFactor &g : factors) {
      s << (first ? "" : " x ") << g.value;
      if (g.name) s << " (" << g.name << ")";
      first = false;
    }
    s << " exceeds " << limit << ' ' << unit << " (the product overflows at " << (f.name ? f.name : "a factor") << ")";
    fail(code, s.str());
  }
  return r;
}

}  // namespace bspa
