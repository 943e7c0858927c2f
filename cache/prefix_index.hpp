// The prefix index: page key -> published pages. An open-addressing multimap (linear
// probing, backward-shift deletion, fixed capacity of at least twice the page count) so
// lookups and inserts never allocate and colliding keys simply sit side by side; the
// caller verifies each candidate against the page itself.
#pragma once

#include <cstdint>
#include <memory>

#include "cache/key.hpp"

namespace bspa::cache {

class PrefixIndex {
 public:
  explicit PrefixIndex(int64_t max_entries);

  int64_t size() const { return size_; }
  int64_t capacity() const { return mask_ + 1; }

  // Precondition: fewer than max_entries entries.
  void insert(const Key &key, int32_t page);
  // Removes the entry (key, page); returns false if there is none.
  bool erase(const Key &key, int32_t page);
  // Removes every entry. O(capacity).
  void clear();

  // Calls accept(page) for each page stored under `key` until it returns true; returns
  // that page or -1.
  template <class Accept>
  int32_t find(const Key &key, Accept &&accept) const {
    const uint64_t t = tag(key);
    for (uint64_t s = home(t);; s = (s + 1) & mask_) {
      const Slot &e = slots_[s];
      if (e.page_plus_one == 0) return -1;
      if (e.tag == t && accept(e.page_plus_one - 1)) return e.page_plus_one - 1;
    }
  }

  // Hints for lookups to come: fetch the key's home slot; peek at the page stored there
  // (-1 if empty), most likely the one find() will verify.
  void prefetch(const Key &key) const { __builtin_prefetch(&slots_[home(tag(key))]); }
  int32_t home_page(const Key &key) const { return slots_[home(tag(key))].page_plus_one - 1; }

  // For the invariant check: the page at a slot (-1 if empty), and whether the entry
  // there is reachable from its home slot (no empty slot in between).
  int32_t page_at(int64_t slot) const { return slots_[slot].page_plus_one - 1; }
  bool reachable(int64_t slot) const;
  uint64_t tag_at(int64_t slot) const { return slots_[slot].tag; }
  static uint64_t tag(const Key &key) { return key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull); }

 private:
  struct Slot {
    uint64_t tag;
    int32_t page_plus_one;  // 0 = empty, so zeroed memory is an empty table
    int32_t unused;
  };
  uint64_t home(uint64_t t) const { return ((t ^ (t >> 29)) * 0xbf58476d1ce4e5b9ull >> 17) & mask_; }

  std::unique_ptr<Slot[]> slots_;
  uint64_t mask_ = 0;
  int64_t size_ = 0;
};

}  // namespace bspa::cache
