#include "cache/key.hpp"

// Inlined (static, namespaced by xxHash itself) so the page hash compiles into the pool:
// 2-3x faster than calls into the shared libxxhash for page-sized inputs.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace bspa::cache {

Key salt_digest(const void *salt, size_t salt_len, uint64_t seed) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(salt_len ? salt : "", salt_len, seed);
  return Key{h.low64, h.high64};
}

PageHasher::PageHasher(int32_t page_size, uint64_t seed)
    : page_size_(page_size), seed_(seed), buffer_bytes_(16 + sizeof(int32_t) * static_cast<size_t>(page_size) + 8) {
  static_assert(sizeof(secret_) == XXH3_SECRET_DEFAULT_SIZE, "secret size");
  XXH3_generateSecret_fromSeed(secret_, seed);
  buffer_ = new unsigned char[buffer_bytes_];
}

PageHasher::~PageHasher() { delete[] buffer_; }

Key PageHasher::page_key(const Key &parent, const int32_t *tokens, uint64_t extra_key) {
  const size_t token_bytes = sizeof(int32_t) * static_cast<size_t>(page_size_);
  std::memcpy(buffer_, &parent.lo, 8);
  std::memcpy(buffer_ + 8, &parent.hi, 8);
  std::memcpy(buffer_ + 16, tokens, token_bytes);
  std::memcpy(buffer_ + 16 + token_bytes, &extra_key, 8);
  const XXH128_hash_t h = XXH3_128bits_withSecretandSeed(buffer_, buffer_bytes_, secret_, sizeof secret_, seed_);
  return truncate_key(Key{h.low64, h.high64});
}

}  // namespace bspa::cache
