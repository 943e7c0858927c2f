// The demo's own model of what the prefix cache may return: per tenant, the chains of
// full pages that tenant's requests committed. A hit the owning tenant never produced
// (another tenant's pages, or pages that were never written) is a failed check; without
// evictions, every prefix the tenant produced must be found again.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace demo {

class PrefixOracle {
 public:
  explicit PrefixOracle(int64_t page_size) : page_size_(page_size) {}

  // Longest prefix of tokens[0..n) this tenant has committed, in whole pages, at most
  // floor((n-1)/page_size)*page_size tokens (the last prompt token is always computed).
  int64_t expected_hit(int32_t tenant, const int32_t *tokens, int64_t n) const;
  // Records that tokens[0..n) were computed and committed by this tenant.
  void commit(int32_t tenant, const int32_t *tokens, int64_t n);
  bool tenant_seen(int32_t tenant) const { return pages_.count(tenant) != 0; }

 private:
  uint64_t chain(uint64_t parent, const int32_t *page) const;
  int64_t page_size_;
  std::unordered_map<int32_t, std::unordered_set<uint64_t>> pages_;
};

}  // namespace demo
