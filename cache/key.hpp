// Page keys of the prefix index: XXH3-128 chained over (parent key, the page's tokens,
// extra key), the first parent derived from the sequence's salt. Keys are stable across
// processes and machines for a given seed (byte layout: little-endian, parent lo then hi,
// tokens as int32, extra key as uint64), so external indexers and routers can compute them.
//
// BSPA_KEY_BITS (a compile definition, default 128) keeps only that many low bits of
// every key; test builds shrink it to force collisions. Hits stay correct regardless,
// because a hit is verified against the page's stored tokens, extra key and parent.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef BSPA_KEY_BITS
#define BSPA_KEY_BITS 128
#endif
static_assert(BSPA_KEY_BITS >= 1 && BSPA_KEY_BITS <= 128, "BSPA_KEY_BITS must be in [1, 128]");

namespace bspa::cache {

struct Key {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Key &a, const Key &b) { return a.lo == b.lo && a.hi == b.hi; }
  friend bool operator!=(const Key &a, const Key &b) { return !(a == b); }
};

// Keeps the low BSPA_KEY_BITS bits.
inline Key truncate_key(Key k) {
  constexpr int bits = BSPA_KEY_BITS;
  if constexpr (bits < 64) {
    k.lo &= (uint64_t{1} << bits) - 1;
    k.hi = 0;
  } else if constexpr (bits == 64) {
    k.hi = 0;
  } else if constexpr (bits < 128) {
    k.hi &= (uint64_t{1} << (bits - 64)) - 1;
  }
  return k;
}

// The untruncated digest of a salt: it tells tenants apart when root pages are verified,
// so shrinking keys for tests never lets two salts share a page.
Key salt_digest(const void *salt, size_t salt_len, uint64_t seed);

// Hashes pages with one XXH3 call over a contiguous buffer it owns (no allocation per call).
class PageHasher {
 public:
  PageHasher(int32_t page_size, uint64_t seed);
  PageHasher(const PageHasher &) = delete;
  PageHasher &operator=(const PageHasher &) = delete;
  ~PageHasher();

  // Truncated key of one full page of page_size tokens.
  Key page_key(const Key &parent, const int32_t *tokens, uint64_t extra_key);

 private:
  int32_t page_size_;
  uint64_t seed_;
  unsigned char *buffer_;
  size_t buffer_bytes_;
  // XXH3's secret for this seed, made once: identical results to XXH3_128bits_withSeed
  // without regenerating the secret on every page (pages are above XXH3's 240-byte midsize).
  alignas(64) unsigned char secret_[192];
};

}  // namespace bspa::cache
