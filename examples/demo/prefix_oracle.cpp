#include "prefix_oracle.hpp"

#include "rng.hpp"

namespace demo {

uint64_t PrefixOracle::chain(uint64_t parent, const int32_t *page) const {
  uint64_t h = splitmix64(parent);
  for (int64_t i = 0; i < page_size_; ++i) h = splitmix64(h ^ static_cast<uint32_t>(page[i]));
  return h;
}

int64_t PrefixOracle::expected_hit(int32_t tenant, const int32_t *tokens, int64_t n) const {
  auto it = pages_.find(tenant);
  if (it == pages_.end() || n < 1) return 0;
  const int64_t max_pages = (n - 1) / page_size_;
  uint64_t key = 0;
  int64_t hit = 0;
  for (int64_t p = 0; p < max_pages; ++p) {
    key = chain(key, tokens + p * page_size_);
    if (!it->second.count(key)) break;
    hit += page_size_;
  }
  return hit;
}

void PrefixOracle::commit(int32_t tenant, const int32_t *tokens, int64_t n) {
  auto &set = pages_[tenant];
  uint64_t key = 0;
  for (int64_t p = 0; p < n / page_size_; ++p) set.insert(key = chain(key, tokens + p * page_size_));
}

}  // namespace demo
