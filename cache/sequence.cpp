#include "cache/sequence.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>

#include "cache/pool.hpp"
#include "common/error.hpp"

namespace bspa::cache {

Sequence::Sequence(Pool *pool, const Key &salt_digest, uint64_t extra_key, uint32_t salt_index)
    : pool_(pool),
      root_digest_(salt_digest),
      root_key_(truncate_key(salt_digest)),
      extra_key_(extra_key),
      salt_index_(salt_index) {
  tip_.key = root_key_;
}

int64_t Sequence::match(const int32_t *tokens, int64_t n) {
  check(n >= 0, Errc::InvalidArgument, "n = ", n, " is negative");
  check(tokens != nullptr || n == 0, Errc::NullPointer, "tokens is NULL but n = ", n);
  Pool &p = *pool_;
  std::lock_guard<std::mutex> lock(p.mutex_);
  check(num_tokens_ == 0, Errc::InvalidState, "the sequence already holds ", num_tokens_,
        " tokens: match is only valid on an empty sequence");
  const int64_t ps = p.config_.page_size;
  const int64_t limit = n > 0 ? (n - 1) / ps : 0;  // the last prompt token is always computed
  // Room for the whole prompt, so the append that follows does not reallocate either.
  pages_.reserve(static_cast<size_t>(std::min<int64_t>(n / ps + 1, p.num_pages_)));  // n + ps - 1 could overflow

  // Keys are computed a few pages ahead and their index slots and likely pages prefetched,
  // so the verification of one page overlaps the memory traffic of the next ones. A miss
  // wastes at most kAhead - 1 hashes.
  constexpr int64_t kAhead = 8;
  Key keys[kAhead];
  Key key = root_key_;
  int32_t parent = -1;
  uint32_t parent_gen = 0;
  int64_t hashed = 0;
  bool missed = false;
  for (int64_t i = 0; i < limit && !missed; i += kAhead) {
    const int64_t m = std::min(kAhead, limit - i);
    for (int64_t j = 0; j < m; ++j) {
      keys[j] = p.hasher_.page_key(j == 0 ? key : keys[j - 1], tokens + (i + j) * ps, extra_key_);
      p.index_.prefetch(keys[j]);
    }
    hashed += m * ps;
    for (int64_t j = 0; j < m; ++j) {
      if (j + 1 < m) {
        const int32_t next = p.index_.home_page(keys[j + 1]);
        if (next >= 0) p.prefetch_page(next);
      }
      const int32_t *page_tokens = tokens + (i + j) * ps;
      const int32_t c = p.find_published(keys[j], page_tokens, extra_key_, parent, parent_gen, root_digest_);
      if (c < 0) {
        missed = true;
        break;
      }
      pages_.push_back(c);
      key = keys[j];
      parent = c;
      parent_gen = p.pages_[static_cast<size_t>(c)].gen;
    }
  }
  // Pinned before any new page is taken, so a later append cannot evict them.
  for (int32_t c : pages_) p.pin(c);
  match_resets_ = p.index_resets_;
  // An overflow during the append that follows (its evictions) is caught at commit.
  tip_ = ChainTip{key, parent, parent_gen, p.index_resets_};

  const int64_t found = static_cast<int64_t>(pages_.size()) * ps;
  num_tokens_ = num_computed_ = num_cached_ = found;
  keyed_pages_ = static_cast<int64_t>(pages_.size());

  PoolStats &s = p.counters_;
  ++s.match_calls;
  if (found > 0) {
    ++s.hits;
  } else {
    ++s.misses;
  }
  s.matched_tokens += static_cast<uint64_t>(found);
  s.queried_tokens += static_cast<uint64_t>(n);
  s.hashed_tokens += static_cast<uint64_t>(hashed);
  return found;
}

void Sequence::append(const int32_t *tokens, int64_t n) {
  check(n >= 0, Errc::InvalidArgument, "n = ", n, " is negative");
  check(tokens != nullptr || n == 0, Errc::NullPointer, "tokens is NULL but n = ", n);
  Pool &p = *pool_;
  std::lock_guard<std::mutex> lock(p.mutex_);
  const int64_t ps = p.config_.page_size;
  check(n <= std::numeric_limits<int64_t>::max() - ps - num_tokens_, Errc::InvalidArgument, "n = ", n, " is too large");
  const int64_t total = num_tokens_ + n;
  const int64_t pages_needed = (total + ps - 1) / ps;
  const int64_t more = pages_needed - static_cast<int64_t>(pages_.size());
  if (more > p.available_pages()) {
    fail(Errc::OutOfPages, "appending n = ", n, " tokens to a sequence of ", num_tokens_, " needs ", more,
         " more pages but only ", p.free_.size(), " free and ", p.lru_size_, " cached pages are left of ",
         p.num_pages_);
  }
  pages_.reserve(static_cast<size_t>(pages_needed));  // the only step that can throw: before any change
  for (int64_t j = 0; j < more; ++j) pages_.push_back(p.take_page());

  int64_t t = num_tokens_;
  const int32_t *src = tokens;
  while (t < total) {
    const int64_t slot = t % ps;
    const int64_t len = std::min(ps - slot, total - t);
    std::memcpy(p.page_tokens(pages_[static_cast<size_t>(t / ps)]) + slot, src, sizeof(int32_t) * len);
    src += len;
    t += len;
  }
  num_tokens_ = total;
}

void Sequence::commit(int64_t computed) {
  Pool &p = *pool_;
  std::lock_guard<std::mutex> lock(p.mutex_);
  check(computed >= num_computed_, Errc::InvalidArgument, "computed = ", computed,
        " is below the sequence's num_computed = ", num_computed_, " (it may not decrease)");
  check(computed <= num_tokens_, Errc::InvalidArgument, "computed = ", computed,
        " is past the sequence's num_tokens = ", num_tokens_);
  const int64_t ps = p.config_.page_size;
  const int64_t full = computed / ps;
  // A commit also republishes a chain an event-queue overflow took out of the index, even
  // when it adds no full page (the header promises it at the next commit).
  if (full > keyed_pages_ || (tip_.lost(p.index_resets_) && full > 0)) {
    p.counters_.hashed_tokens += static_cast<uint64_t>((full - keyed_pages_) * ps);
    p.publish_chain_locked(pages_.data(), keyed_pages_, full, root_digest_, extra_key_, salt_index_, tip_);
    keyed_pages_ = full;
  }
  num_computed_ = computed;
}

SequenceInfo Sequence::info() const {
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  return SequenceInfo{num_tokens_, num_computed_, num_cached_, static_cast<int64_t>(pages_.size())};
}

int64_t Sequence::copy_pages(int32_t *out, int64_t capacity) const {
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  const int64_t count = static_cast<int64_t>(pages_.size());
  if (out && capacity >= count) std::copy(pages_.begin(), pages_.end(), out);
  return count;
}

}  // namespace bspa::cache
