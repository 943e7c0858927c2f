// A sequence of one pool (see cache/pool.hpp for the pool's API and page states).
//
//   match(tokens, n)       on an empty sequence: pins the longest verified cached prefix of
//                          whole pages, at most floor((n-1)/page_size) pages; returns its tokens
//   append(tokens, n)      reserves pages for n more tokens; all or nothing (Error(OutOfPages)
//                          changes nothing)
//   commit(computed)       tokens < computed hold valid KV; newly full pages are published
//   info(), copy_pages()   take the pool's lock
//   page_ids(), num_tokens(), num_computed(), num_cached()
//                          unlocked views: hold pool().mutex() while reading them if another
//                          thread may change the sequence (bspa_batch_create does)
//
// Tokens live in the pool (each page keeps its own for verification), not in the sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/chain_tip.hpp"
#include "cache/key.hpp"

namespace bspa::cache {

class Pool;

struct SequenceInfo {
  int64_t num_tokens = 0;
  int64_t num_computed = 0;
  int64_t num_cached = 0;
  int64_t num_pages = 0;
};

class Sequence {
 public:
  Sequence(const Sequence &) = delete;
  Sequence &operator=(const Sequence &) = delete;

  Pool &pool() const { return *pool_; }

  int64_t match(const int32_t *tokens, int64_t n);
  void append(const int32_t *tokens, int64_t n);
  void commit(int64_t computed);

  SequenceInfo info() const;
  // Returns the page count; copies the ids into out only when capacity >= that count.
  int64_t copy_pages(int32_t *out, int64_t capacity) const;

  const std::vector<int32_t> &page_ids() const { return pages_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_computed() const { return num_computed_; }
  int64_t num_cached() const { return num_cached_; }
  uint64_t extra_key() const { return extra_key_; }

 private:
  friend class Pool;
  Sequence(Pool *pool, const Key &salt_digest, uint64_t extra_key, uint32_t salt_index);

  Pool *pool_;
  Key root_digest_;  // untruncated digest of the salt: verifies a chain's first page
  Key root_key_;     // its truncated form: the first parent key
  uint64_t extra_key_;
  uint32_t salt_index_;        // the salt's entry in the pool's event queue (0 without events)
  uint64_t match_resets_ = 0;  // the pool's index_resets_ when match pinned its pages
  std::vector<int32_t> pages_;
  int64_t num_tokens_ = 0;
  int64_t num_computed_ = 0;
  int64_t num_cached_ = 0;
  // The chain so far: pages [0, keyed_pages_) have keys; where it ends (the last one's key
  // and the page that stands for it in the index: ours, or an identical page published
  // before ours).
  int64_t keyed_pages_ = 0;
  ChainTip tip_;
  size_t registry_slot_ = 0;  // its place in the pool's sequences_ (retired_ once retired)
  // Batches planned over this sequence and not released (Pool::hold_sequences_locked). A
  // sequence destroyed while some hold it is retired instead: its pages stay referenced
  // until the last such batch lets go (Pool::release_sequences).
  int32_t batch_refs_ = 0;
  bool retired_ = false;
};

}  // namespace bspa::cache
