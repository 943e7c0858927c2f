// Where a chain of published pages ends: shared by the pool, which publishes and checks
// chains, and their owners (Sequence, KvImport), which keep their chain's tip between calls.
#pragma once

#include <cstdint>

#include "cache/key.hpp"

namespace bspa::cache {

// Where a chain of published pages ends (a sequence's, an import's): the key of its last
// page, the page that stands for it in the index (-1 before the first: the chain hangs from
// the salt's root key), that page's generation then (it may be evicted and handed out
// since), and the pool's count of index resets then (an event-queue overflow since took the
// whole chain out of the index: Pool::publish_chain_locked starts it again).
struct ChainTip {
  Key key;
  int32_t page = -1;
  uint32_t gen = 0;
  uint64_t resets = 0;

  // Whether the chain left the index since the tip was set: an event-queue overflow
  // (`index_resets`, the pool's count of them, moved on) took its pages, which a tip at
  // the root never has.
  bool lost(uint64_t index_resets) const { return page >= 0 && resets != index_resets; }

  // Field by field: the next page's key is hashed from `key` at once, and a whole-struct
  // copy (one wide store) made that load wait (commits of 2048 pages took 16% longer).
  void set(const Key &k, int32_t p, uint32_t g, uint64_t r) {
    key = k;
    page = p;
    gen = g;
    resets = r;
  }
};

}  // namespace bspa::cache
