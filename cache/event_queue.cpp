#include "cache/event_queue.hpp"

#include <cstring>

#include "common/error.hpp"

namespace bspa::cache {

EventQueue::EventQueue(int64_t capacity, int32_t page_size) : capacity_(capacity), page_size_(page_size) {
  // Both reserved up front: recording under the pool lock never allocates, so a commit or
  // an append cannot fail half way for want of memory.
  // One more than the capacity: the record that follows an overflow's "all cleared" fits
  // even when the capacity is 1.
  records_.reserve(static_cast<size_t>(capacity) + 1);
  tokens_.reserve((static_cast<size_t>(capacity) + 1) * static_cast<size_t>(page_size));
  salts_.emplace_back();
}

void EventQueue::push_stored(int32_t page, uint64_t id, uint64_t parent_id, const Key &key, uint64_t extra_key,
                             uint32_t salt, const int32_t *tokens) {
  EventRecord r;
  r.type = EventType::Stored;
  r.page = page;
  r.block_id = id;
  r.parent_block_id = parent_id;
  r.key = key;
  r.extra_key = extra_key;
  r.salt = salt;
  r.token_offset = static_cast<int64_t>(tokens_.size());
  tokens_.insert(tokens_.end(), tokens, tokens + page_size_);
  records_.push_back(r);
  ++recorded_;
}

void EventQueue::push_removed(int32_t page, uint64_t id) {
  EventRecord r;
  r.type = EventType::Removed;
  r.page = page;
  r.block_id = id;
  records_.push_back(r);
  ++recorded_;
}

void EventQueue::reset_to_cleared() {
  clear();
  records_.push_back(EventRecord{});
  ++recorded_;
  ++overflows_;
}

void EventQueue::clear() {
  records_.clear();
  tokens_.clear();
}

uint32_t EventQueue::intern_salt(const void *salt, size_t salt_len) {
  if (salt_len == 0) return 0;
  std::string s(static_cast<const char *>(salt), salt_len);
  auto it = salt_index_.find(s);
  if (it != salt_index_.end()) return it->second;
  check(salts_.size() < UINT32_MAX, Errc::OutOfMemory, "the pool has seen 2^32 - 1 distinct salts");
  const uint32_t index = static_cast<uint32_t>(salts_.size());
  salts_.push_back(s);
  try {
    salt_index_.emplace(std::move(s), index);
  } catch (...) {
    salts_.pop_back();  // a failed call changes nothing
    throw;
  }
  return index;
}

}  // namespace bspa::cache
