// Pool::hold_pages / release_hold (cache/page_hold.hpp).
#include "cache/page_hold.hpp"

#include <memory>
#include <mutex>

#include "cache/pool.hpp"

namespace bspa::cache {

PageHold *Pool::hold_pages_locked(std::vector<int32_t> pages) {
  // Everything that can throw comes before the first reference is taken.
  auto hold = std::unique_ptr<PageHold>(new PageHold);
  hold->pages_ = std::move(pages);
  holds_.reserve(holds_.size() + 1);
  // Each page is in use by a sequence of the caller's, so only its count moves (it is in
  // neither the free list nor the LRU queue), and a failed batch that drops the hold again
  // leaves no trace.
  for (int32_t p : hold->pages_) pin(p);
  hold->registry_slot_ = holds_.size();
  holds_.push_back(hold.get());
  return hold.release();
}

PageHold *Pool::empty_hold_locked(size_t capacity) {
  auto hold = std::unique_ptr<PageHold>(new PageHold);
  hold->pages_.reserve(capacity);
  holds_.reserve(holds_.size() + 1);
  hold->registry_slot_ = holds_.size();
  holds_.push_back(hold.get());
  return hold.release();
}

void Pool::adopt_into_hold(PageHold *hold, int32_t page) noexcept { hold->pages_.push_back(page); }

void Pool::release_hold(PageHold *hold) noexcept {
  if (!hold) return;
  std::lock_guard<std::mutex> lock(mutex_);
  release_hold_locked(hold);
}

void Pool::release_hold_locked(PageHold *hold) noexcept {
  // Last page first, as a sequence releases its own: chain tails are then evicted first.
  for (auto it = hold->pages_.rbegin(); it != hold->pages_.rend(); ++it) release(*it);
  const size_t slot = hold->registry_slot_;
  holds_[slot] = holds_.back();
  holds_[slot]->registry_slot_ = slot;
  holds_.pop_back();
  delete hold;
}

}  // namespace bspa::cache
