#include "cache/prefix_index.hpp"

namespace bspa::cache {

PrefixIndex::PrefixIndex(int64_t max_entries) {
  uint64_t cap = 16;
  while (cap < 2 * static_cast<uint64_t>(max_entries)) cap <<= 1;
  slots_.reset(new Slot[cap]());
  mask_ = cap - 1;
}

void PrefixIndex::insert(const Key &key, int32_t page) {
  const uint64_t t = tag(key);
  uint64_t s = home(t);
  while (slots_[s].page_plus_one != 0) s = (s + 1) & mask_;
  slots_[s].tag = t;
  slots_[s].page_plus_one = page + 1;
  ++size_;
}

bool PrefixIndex::erase(const Key &key, int32_t page) {
  const uint64_t t = tag(key);
  uint64_t s = home(t);
  while (true) {
    if (slots_[s].page_plus_one == 0) return false;
    if (slots_[s].page_plus_one == page + 1) break;
    s = (s + 1) & mask_;
  }
  // Backward-shift deletion: pull later entries of the cluster into the hole when the
  // hole lies between their home and their slot, so no tombstones are needed.
  uint64_t hole = s;
  for (uint64_t j = (s + 1) & mask_; slots_[j].page_plus_one != 0; j = (j + 1) & mask_) {
    const uint64_t h = home(slots_[j].tag);
    const bool movable = ((j - h) & mask_) >= ((j - hole) & mask_);
    if (movable) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  return true;
}

void PrefixIndex::clear() {
  for (uint64_t s = 0; s <= mask_; ++s) slots_[s] = Slot{};
  size_ = 0;
}

bool PrefixIndex::reachable(int64_t slot) const {
  if (slots_[slot].page_plus_one == 0) return true;
  for (uint64_t s = home(slots_[slot].tag); s != static_cast<uint64_t>(slot); s = (s + 1) & mask_) {
    if (slots_[s].page_plus_one == 0) return false;
  }
  return true;
}

}  // namespace bspa::cache
