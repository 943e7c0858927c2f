// Pages moving between pools (disaggregated serving, NIXL): the exporter pins the cached
// pages of a prompt while a transport reads them; the importer reserves pages for the ones
// it lacks, lets the transport write them, then commits (publishes them like pages it had
// computed) or aborts (they go back unpublished). bspa moves no bytes: the caller's transport
// does, between addresses the pool describes (capi/src/kv_transfer.cpp).
//
//   KvExport::create(pool, salt, extra_key, tokens, n)
//                          pins the longest verified chain of full cached pages of tokens[0, n)
//                          (every full page: no n-1 cap); pages() and keys() in block order
//   KvImport::create(pool, salt, extra_key, tokens, n, peer fingerprint, peer keys)
//                          checks the fingerprint (and the peer's keys), pins the leading
//                          blocks the pool already has, reserves pages for the rest
//   import.commit() / abort()   publish / unpublish-and-free; the destructor aborts
//
// Both hold their page references as a PageHold, so Pool::check() counts them and no page of
// theirs is reused while they live. Neither changes a stats counter (match counters, hashed
// tokens) except through what it really does: reserving may evict cached pages (evictions),
// commit publishes pages (published_pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/chain_tip.hpp"
#include "cache/key.hpp"

namespace bspa::cache {

class Pool;
class PageHold;

// The storage layout the fingerprint and the capi's address arithmetic describe: one
// allocation, region r = 2 * layer + (0 for K, 1 for V), each [num_pages, num_kv_heads,
// page_size, head_dim] row-major, so page p of region r starts at base + (r * num_pages + p) *
// page_bytes. Bumped whenever that changes.
constexpr uint32_t kKvLayoutVersion = 1;

class KvExport {
 public:
  KvExport(const KvExport &) = delete;
  KvExport &operator=(const KvExport &) = delete;
  // Releases the pins (the pages stay cached).
  ~KvExport();

  // Throws Error(InvalidArgument / NullPointer) naming the argument; changes nothing then.
  static KvExport *create(Pool &pool, const void *salt, size_t salt_len, uint64_t extra_key, const int32_t *tokens,
                          int64_t n);

  Pool &pool() const { return *pool_; }
  // Immutable after create: readable without the pool's lock.
  const std::vector<int32_t> &pages() const { return pages_; }
  const std::vector<Key> &keys() const { return keys_; }

 private:
  friend class KvImport;
  KvExport() = default;
  // Under the pool's lock: the keys of the first `blocks` full pages of tokens (all of them
  // when hash_all, else up to the first miss) and the verified cached chain prefix (found).
  static void walk(Pool &p, const Key &root_key, const Key &root_digest, uint64_t extra_key, const int32_t *tokens,
                   int64_t blocks, bool hash_all, std::vector<Key> &keys, std::vector<int32_t> &found);

  Pool *pool_ = nullptr;
  PageHold *hold_ = nullptr;
  std::vector<int32_t> pages_;
  std::vector<Key> keys_;
};

enum class ImportState : int32_t { Reserved = 1, Committed = 2, Aborted = 3 };

struct ImportInfo {
  ImportState state = ImportState::Reserved;
  int64_t blocks = 0;     // full pages of the prompt
  int64_t cached = 0;     // leading blocks the pool already had (pinned, nothing to move)
  int64_t reserved = 0;   // blocks [cached, blocks): pages to write
  int64_t published = 0;  // after commit: reserved pages that entered the prefix index
};

class KvImport {
 public:
  KvImport(const KvImport &) = delete;
  KvImport &operator=(const KvImport &) = delete;
  // Aborts a reservation still open.
  ~KvImport();

  // Throws Error: InvalidArgument (fingerprint, key count, a peer key that differs: the
  // message names the block), NullPointer, OutOfPages (fewer free + evictable pages than
  // blocks to reserve); a failed create changes nothing.
  static KvImport *create(Pool &pool, const void *salt, size_t salt_len, uint64_t extra_key, const int32_t *tokens,
                          int64_t n, uint64_t peer_fingerprint, const Key *peer_keys, int64_t num_peer_keys);

  Pool &pool() const { return *pool_; }
  // Publishes the reserved pages in block order (each verified against its tokens, as a
  // sequence's commit does; one that another sequence published meanwhile keeps that
  // page as the index entry) and releases every page. Returns the pages published.
  // Error(InvalidState) after commit or abort.
  int64_t commit();
  // Releases every page; the reserved ones go back to the free list unpublished. A second
  // abort is a no-op; Error(InvalidState) after commit.
  void abort();

  ImportInfo info() const;
  // The reserved pages and their block indices; count returned, copied only when
  // capacity >= count (either pointer may be null). Error(InvalidState) unless reserved.
  int64_t copy_reserved(int32_t *pages, int64_t *blocks, int64_t capacity) const;

 private:
  KvImport() = default;
  void abort_locked() noexcept;

  Pool *pool_ = nullptr;
  PageHold *hold_ = nullptr;  // the blocks' pages in order: [0, cached) pinned, the rest reserved
  Key root_digest_;
  uint64_t extra_key_ = 0;
  uint32_t salt_index_ = 0;
  int64_t blocks_ = 0;
  int64_t cached_ = 0;
  int64_t published_ = 0;
  ImportState state_ = ImportState::Reserved;
  // The chain after the cached blocks, where commit continues it.
  ChainTip tip_;
};

}  // namespace bspa::cache
