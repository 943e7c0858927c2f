// A reference to pages held by something other than a sequence: a batch keeps the pages it
// snapshotted referenced for its whole life (Pool::hold_pages / release_hold), so a sequence
// destroyed while a batch of it lives cannot have its pages reused under the batch's
// launches (they would write another sequence's KV).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bspa::cache {

class Pool;
class Sequence;

class PageHold {
 public:
  PageHold(const PageHold &) = delete;
  PageHold &operator=(const PageHold &) = delete;
  // The held page ids, in the order given to hold_pages (a page may occur more than once).
  const std::vector<int32_t> &pages() const { return pages_; }

 private:
  friend class Pool;
  PageHold() = default;
  std::vector<int32_t> pages_;
  size_t registry_slot_ = 0;  // its place in the pool's list of holds
};

// A batch's reference to the sequences it planned (Pool::hold_sequences_locked): cheaper
// than a PageHold of their pages (one count per sequence, not per page) and as safe, since
// a sequence's page list only grows: a destroyed sequence that a batch still holds keeps
// all its pages, a superset of the batch's snapshot, until the batch releases it.
class SequenceHold {
 public:
  SequenceHold(const SequenceHold &) = delete;
  SequenceHold &operator=(const SequenceHold &) = delete;

 private:
  friend class Pool;
  SequenceHold() = default;
  std::vector<Sequence *> seqs_;
};

}  // namespace bspa::cache
