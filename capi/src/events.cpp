// C shims of the KV cache event queue: structured drain and the vLLM msgpack drain.
// Both run under the pool's lock, so a drain sees a prefix of the index's history and
// nothing recorded meanwhile is lost; a buffer too small leaves the queue as it was.
#include <bspa/bspa.h>

#include <cmath>
#include <mutex>

#include "capi/src/guard.hpp"
#include "capi/src/handles.hpp"
#include "capi/src/kv_event_msgpack.hpp"

namespace {

using bspa::Errc;
using bspa::capi::pool_of;
using bspa::capi::require;

bspa::cache::EventQueue &queue_of(bspa::cache::Pool &p) {
  bspa::cache::EventQueue *q = p.events();
  bspa::check(q != nullptr, Errc::InvalidState,
              "the pool was created with events_capacity = 0 and records no events "
              "(set bspa_pool_options.events_capacity)");
  return *q;
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_pool_events_drain(bspa_pool *pool, bspa_kv_event *events, int64_t capacity, int32_t *tokens,
                                            int64_t token_capacity, int64_t *num_events, int64_t *num_tokens) {
  return bspa::capi::guarded(__func__, [&] {
    bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(num_events, "num_events");
    require(num_tokens, "num_tokens");
    bspa::check(capacity >= 0, Errc::InvalidArgument, "capacity = ", capacity, " is negative");
    bspa::check(token_capacity >= 0, Errc::InvalidArgument, "token_capacity = ", token_capacity, " is negative");
    bspa::check(events != nullptr || capacity == 0, Errc::NullPointer, "events is NULL but capacity = ", capacity);
    bspa::check(tokens != nullptr || token_capacity == 0, Errc::NullPointer,
                "tokens is NULL but token_capacity = ", token_capacity);
    std::lock_guard<std::mutex> lock(p.mutex());
    bspa::cache::EventQueue &q = queue_of(p);
    const int64_t n = q.size();
    const int64_t nt = q.num_tokens();
    *num_events = n;
    *num_tokens = nt;
    if (events == nullptr && tokens == nullptr) return;  // the size query of two-call sizing
    bspa::check(capacity >= n, Errc::BufferTooSmall, "capacity = ", capacity, " is below the ", n,
                " queued events (*num_events holds the count needed; nothing was drained)");
    bspa::check(token_capacity >= nt, Errc::BufferTooSmall, "token_capacity = ", token_capacity, " is below the ", nt,
                " tokens of the queued stored pages (*num_tokens holds the count needed; nothing was drained)");
    const auto &records = q.records();
    for (int64_t i = 0; i < n; ++i) {
      const bspa::cache::EventRecord &r = records[static_cast<size_t>(i)];
      bspa_kv_event &e = events[i];
      e = bspa_kv_event{};
      e.type = static_cast<int32_t>(r.type);
      e.page = r.page;
      e.block_id = r.block_id;
      e.parent_block_id = r.parent_block_id;
      e.key_lo = r.key.lo;
      e.key_hi = r.key.hi;
      e.extra_key = r.extra_key;
      e.token_offset = r.token_offset;
      if (r.type == bspa::cache::EventType::Stored && r.salt != 0) {
        const std::string &salt = q.salt(r.salt);
        e.salt = salt.data();
        e.salt_len = salt.size();
      }
    }
    if (nt > 0) std::copy(q.tokens(), q.tokens() + nt, tokens);
    q.clear();
  });
}

BSPA_API bspa_status bspa_pool_events_drain_msgpack(bspa_pool *pool, double ts, int32_t dp_rank, void *buffer,
                                                    size_t capacity, size_t *size) {
  return bspa::capi::guarded(__func__, [&] {
    bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(size, "size");
    bspa::check(buffer != nullptr || capacity == 0, Errc::NullPointer, "buffer is NULL but capacity = ", capacity);
    bspa::check(std::isfinite(ts), Errc::InvalidArgument, "ts = ", ts, " is not finite");
    std::lock_guard<std::mutex> lock(p.mutex());
    bspa::cache::EventQueue &q = queue_of(p);
    const size_t needed = bspa::capi::encode_kv_event_batch(q, p.page_size(), p.dtype(), ts, dp_rank,
                                                            static_cast<unsigned char *>(buffer), capacity);
    *size = needed;
    if (buffer == nullptr) return;  // the size query
    bspa::check(capacity >= needed, Errc::BufferTooSmall, "capacity = ", capacity, " bytes is below the ", needed,
                " bytes of the batch (*size holds the bytes needed; nothing was drained)");
    q.clear();
  });
}

}  // extern "C"
