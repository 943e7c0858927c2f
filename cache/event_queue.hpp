// The pool's KV cache event queue (DESIGN §13): what entered and left the prefix index, in
// the order the index changed, for a KV-aware router to mirror. The pool records into it
// under its lock; the runtime drains it (capi/src/events.cpp). Fixed capacity, reserved at
// creation, so recording never allocates: a record that does not fit drops the queue's
// contents, and the pool then empties its prefix index and records one "all cleared"
// (Pool::overflow_events), so a consumer that rebuilds from the events that follow sees
// exactly what the pool can match.
//
// Block ids: a page's stay in the index is named (generation << 32) | page. The generation
// is bumped whenever the page is handed out, so ids are unique over the pool's life (until
// a page is reused 2^32 times), never 0, and the same published page keeps its id; a
// content key would not do, because the index may hold two pages of equal key (an orphan
// whose parent was evicted, or a hash collision) and a router must be told which one left.
#pragma once

#include <cstdint>
#include <string>
#include <deque>
#include <unordered_map>
#include <vector>

#include "cache/key.hpp"

namespace bspa::cache {

enum class EventType : int32_t { Stored = 1, Removed = 2, AllCleared = 3 };

inline uint64_t block_id(int32_t page, uint32_t gen) {
  return (static_cast<uint64_t>(gen) << 32) | static_cast<uint32_t>(page);
}

struct EventRecord {
  EventType type = EventType::AllCleared;
  int32_t page = -1;
  uint64_t block_id = 0;
  uint64_t parent_block_id = 0;  // stored: 0 = the first page of a chain
  Key key;                       // stored: the page key
  uint64_t extra_key = 0;        // stored
  uint32_t salt = 0;             // stored: index into salts(); 0 = no salt
  int64_t token_offset = -1;     // stored: the page's tokens in tokens()
};

class EventQueue {
 public:
  // capacity >= 1 records; each stored record also reserves page_size tokens.
  EventQueue(int64_t capacity, int32_t page_size);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  bool full() const { return size() >= capacity_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<EventRecord> &records() const { return records_; }
  const int32_t *tokens() const { return tokens_.data(); }

  // Preconditions: !full().
  void push_stored(int32_t page, uint64_t id, uint64_t parent_id, const Key &key, uint64_t extra_key, uint32_t salt,
                   const int32_t *tokens);
  void push_removed(int32_t page, uint64_t id);
  // Drops everything and leaves one all-cleared record; counts an overflow.
  void reset_to_cleared();
  // After a successful drain.
  void clear();

  // Salts of sequences, interned at sequence creation (which may allocate); index 0 is
  // "no salt". Kept for the pool's life: a pool keeps one copy of each distinct salt.
  uint32_t intern_salt(const void *salt, size_t salt_len);
  const std::string &salt(uint32_t index) const { return salts_[index]; }

  uint64_t overflows() const { return overflows_; }
  uint64_t recorded() const { return recorded_; }

 private:
  int64_t capacity_;
  int32_t page_size_;
  std::vector<EventRecord> records_;
  std::vector<int32_t> tokens_;
  std::deque<std::string> salts_;  // a deque: elements never move, so salt pointers handed out stay valid
  std::unordered_map<std::string, uint32_t> salt_index_;
  uint64_t overflows_ = 0;
  uint64_t recorded_ = 0;
};

}  // namespace bspa::cache
