// Pool::check: every invariant of the page states, the LRU list, the prefix index and the
// sequences, for tests and debugging. O(pages + index slots + sequences' pages).
#include <algorithm>
#include <utility>
#include <vector>

#include "cache/pool.hpp"
#include "cache/sequence.hpp"
#include "common/error.hpp"

namespace bspa::cache {

namespace {
template <class... Parts>
void expect(bool ok, Parts &&...parts) {
  if (!ok) fail(Errc::Internal, "invariant broken: ", std::forward<Parts>(parts)...);
}
}  // namespace

void Pool::check() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = static_cast<size_t>(num_pages_);
  const int64_t ps = config_.page_size;

  // Reference counts equal the occurrences in live sequences' page lists and page holds.
  std::vector<int64_t> refs(n, 0);
  // Retired sequences (destroyed, still held by batches) keep their pages referenced.
  for (size_t i = 0; i < retired_.size(); ++i) {
    const Sequence *s = retired_[i];
    expect(s->registry_slot_ == i && s->retired_ && s->batch_refs_ > 0, "retired sequence at ", i, ": slot ",
           s->registry_slot_, ", batch references ", s->batch_refs_);
    for (int32_t p : s->pages_) {
      expect(p >= 0 && p < num_pages_, "retired sequence page id ", p, " out of [0, ", num_pages_, ")");
      ++refs[static_cast<size_t>(p)];
    }
  }
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const Sequence *s = sequences_[i];
    expect(s->registry_slot_ == i, "sequence registry slot ", s->registry_slot_, " stored at ", i);
    expect(s->num_cached_ <= s->num_computed_ && s->num_computed_ <= s->num_tokens_ && s->num_cached_ >= 0,
           "sequence counts cached ", s->num_cached_, " <= computed ", s->num_computed_, " <= tokens ", s->num_tokens_);
    expect(static_cast<int64_t>(s->pages_.size()) == (s->num_tokens_ + ps - 1) / ps, "a sequence of ", s->num_tokens_,
           " tokens holds ", s->pages_.size(), " pages");
    expect(s->keyed_pages_ == s->num_computed_ / ps, "a sequence with ", s->num_computed_, " computed tokens has ",
           s->keyed_pages_, " keyed pages");
    for (int32_t p : s->pages_) {
      expect(p >= 0 && p < num_pages_, "sequence page id ", p, " out of [0, ", num_pages_, ")");
      ++refs[static_cast<size_t>(p)];
    }
    // An event-queue overflow since the match unpublished everything (overflow_events).
    for (int64_t j = 0; s->match_resets_ == index_resets_ && j < s->num_cached_ / ps; ++j) {
      expect(pages_[static_cast<size_t>(s->pages_[static_cast<size_t>(j)])].published, "matched page ",
             s->pages_[static_cast<size_t>(j)], " is not published");
    }
  }
  for (size_t i = 0; i < holds_.size(); ++i) {
    expect(holds_[i]->registry_slot_ == i, "page hold registry slot ", holds_[i]->registry_slot_, " stored at ", i);
    for (int32_t p : holds_[i]->pages_) {
      expect(p >= 0 && p < num_pages_, "held page id ", p, " out of [0, ", num_pages_, ")");
      ++refs[static_cast<size_t>(p)];
    }
  }
  int64_t in_use = 0, published = 0, unreferenced_published = 0, unreferenced_unpublished = 0;
  for (size_t p = 0; p < n; ++p) {
    const Page &pg = pages_[p];
    expect(pg.ref == refs[p], "page ", p, " has ref count ", pg.ref, " but live sequences and holds have it ", refs[p],
           " times");
    if (pg.ref > 0) ++in_use;
    if (pg.published) ++published;
    if (pg.ref == 0 && pg.published) ++unreferenced_published;
    if (pg.ref == 0 && !pg.published) ++unreferenced_unpublished;
  }
  expect(in_use == in_use_, "in-use count ", in_use_, " but ", in_use, " pages are referenced");

  // The LRU list holds exactly the unreferenced published pages, linked both ways.
  int64_t count = 0;
  int32_t prev = -1;
  for (int32_t p = lru_head_; p >= 0; p = pages_[static_cast<size_t>(p)].lru_next) {
    expect(count < num_pages_, "the LRU list has a cycle");
    const Page &pg = pages_[static_cast<size_t>(p)];
    expect(pg.lru_prev == prev, "LRU page ", p, " links back to ", pg.lru_prev, " instead of ", prev);
    expect(pg.ref == 0 && pg.published, "LRU page ", p, " has ref ", pg.ref, " and published ", pg.published);
    prev = p;
    ++count;
  }
  expect(prev == lru_tail_, "LRU tail is ", lru_tail_, " but the list ends at ", prev);
  expect(count == lru_size_, "LRU size ", lru_size_, " but the list holds ", count);
  expect(count == unreferenced_published, "LRU holds ", count, " pages but ", unreferenced_published,
         " unreferenced pages are published");

  // The free stack holds exactly the unreferenced unpublished pages, each once.
  std::vector<char> seen(n, 0);
  for (int32_t p : free_) {
    expect(p >= 0 && p < num_pages_, "free page id ", p, " out of range");
    expect(!seen[static_cast<size_t>(p)], "page ", p, " is on the free list twice");
    seen[static_cast<size_t>(p)] = 1;
    const Page &pg = pages_[static_cast<size_t>(p)];
    expect(pg.ref == 0 && !pg.published, "free page ", p, " has ref ", pg.ref, " and published ", pg.published);
  }
  expect(static_cast<int64_t>(free_.size()) == unreferenced_unpublished, "free list holds ", free_.size(),
         " pages but ", unreferenced_unpublished, " unreferenced pages are unpublished");
  expect(static_cast<int64_t>(free_.size()) + lru_size_ + in_use_ == num_pages_, "free ", free_.size(), " + cached ",
         lru_size_, " + in use ", in_use_, " != total ", num_pages_);

  // The prefix index holds each published page once, under its key, reachable by probing.
  std::fill(seen.begin(), seen.end(), 0);
  int64_t entries = 0;
  for (int64_t slot = 0; slot < index_.capacity(); ++slot) {
    const int32_t p = index_.page_at(slot);
    if (p < 0) continue;
    ++entries;
    expect(p < num_pages_, "index entry page ", p, " out of range");
    const Page &pg = pages_[static_cast<size_t>(p)];
    expect(pg.published, "index entry for unpublished page ", p);
    expect(!seen[static_cast<size_t>(p)], "page ", p, " is in the index twice");
    seen[static_cast<size_t>(p)] = 1;
    expect(index_.tag_at(slot) == PrefixIndex::tag(pg.key), "index entry of page ", p, " has a stale key");
    expect(index_.reachable(slot), "index entry of page ", p, " is unreachable from its home slot");
  }
  expect(entries == index_.size(), "index size ", index_.size(), " but ", entries, " entries");
  expect(entries == published, "index holds ", entries, " entries but ", published, " pages are published");
}

}  // namespace bspa::cache
