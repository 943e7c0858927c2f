#include "cache/pool.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "cache/sequence.hpp"
#include "common/checked_size.hpp"
#include "common/device.hpp"
#include "common/error.hpp"

namespace bspa::cache {

namespace {

// Bytes of the KV storage of `pages` pages over all layers, K and V, factor by factor
// against kMaxBytes (a 128-bit product wrapped at 2^128 and let a 2.7 GiB pool stand for
// an impossible one, which a one-token write then overran).
uint64_t kv_bytes(const PoolConfig &c, uint64_t pages, const char *what) {
  return checked_product(Errc::InvalidArgument, what,
                         {{"num_pages", pages},
                          {"num_layers", static_cast<uint64_t>(c.num_layers)},
                          {"K and V", 2},
                          {"num_kv_heads", static_cast<uint64_t>(c.num_kv_heads)},
                          {"page_size", static_cast<uint64_t>(c.page_size)},
                          {"head_dim", static_cast<uint64_t>(c.head_dim)},
                          {"element bytes", element_bytes(c.dtype)}});
}

// Validates every field and resolves num_pages from memory_bytes when it is 0.
PoolConfig validated(PoolConfig c) {
  bspa::check(c.num_layers >= 0, Errc::InvalidArgument, "num_layers = ", c.num_layers, " is negative");
  bspa::check(c.num_kv_heads >= 1, Errc::InvalidArgument, "num_kv_heads = ", c.num_kv_heads, " is not >= 1");
  bspa::check(c.head_dim >= 1, Errc::InvalidArgument, "head_dim = ", c.head_dim, " is not >= 1");
  bspa::check(c.page_size >= 16 && c.page_size <= 256 && (c.page_size & (c.page_size - 1)) == 0, Errc::InvalidArgument,
              "page_size = ", c.page_size, " is not a power of two in [16, 256]");
  constexpr int64_t max_pages = std::numeric_limits<int32_t>::max();
  bspa::check(c.events_capacity >= 0 && c.events_capacity <= max_pages, Errc::InvalidArgument,
              "events_capacity = ", c.events_capacity, " is not in [0, ", max_pages, "] (0 = no events)");
  bspa::check(c.num_pages >= 0 && c.num_pages <= max_pages, Errc::InvalidArgument, "num_pages = ", c.num_pages,
              " is not in [0, ", max_pages, "] (0 derives it from memory_bytes)");
  if (c.device == DeviceKind::Cpu) {
    check(c.device_id == 0, Errc::InvalidArgument, "device_id = ", c.device_id, " must be 0 for a CPU pool");
  } else {
    check(cuda_compiled_in(), Errc::NotSupported, "device_type = kDLCUDA but this build of bspa has no CUDA backend");
    const int32_t n = cuda_device_count();
    check(c.device_id >= 0 && c.device_id < n, Errc::NoDevice, "device_type = kDLCUDA with device_id = ", c.device_id,
          ", but this machine has ", n, " CUDA device(s)");
  }
  if (c.num_pages == 0) {
    check(c.num_layers > 0, Errc::InvalidArgument,
          "num_pages = 0 with num_layers = 0: a pool without storage needs an explicit num_pages");
    const uint64_t per_page = kv_bytes(c, 1, "the KV bytes of one page");
    check(c.memory_bytes >= per_page, Errc::InvalidArgument, "memory_bytes = ", c.memory_bytes,
          " is too small for one page (", per_page, " bytes over all layers, K and V)");
    const uint64_t pages = std::min<uint64_t>(c.memory_bytes, kMaxBytes) / per_page;
    c.num_pages = pages > static_cast<uint64_t>(max_pages) ? max_pages : static_cast<int64_t>(pages);
  }
  kv_bytes(c, static_cast<uint64_t>(c.num_pages), "the pool's KV storage");
  // The token array every page keeps for verifying hits.
  checked_product(Errc::InvalidArgument, "the token bytes of the pool",
                  {{"num_pages", static_cast<uint64_t>(c.num_pages)},
                   {"page_size", static_cast<uint64_t>(c.page_size)},
                   {"token bytes", sizeof(int32_t)}});
  return c;
}

// validated() bounded this product (and the one over all layers) by kMaxBytes.
size_t layer_bytes_of(const PoolConfig &c) {
  return static_cast<size_t>(c.num_pages) * static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.page_size) *
         static_cast<size_t>(c.head_dim) * element_bytes(c.dtype);
}

// [num_layers][K, V][num_kv_heads] scales of an FP8 pool (bounded by the KV bytes above).
size_t kv_scales_count(const PoolConfig &c) {
  return static_cast<size_t>(c.num_layers) * 2 * static_cast<size_t>(c.num_kv_heads);
}

}  // namespace

Pool::Pool(const PoolConfig &config)
    : config_(validated(config)),
      num_pages_(static_cast<int32_t>(config_.num_pages)),
      layer_bytes_(config_.num_layers > 0 ? layer_bytes_of(config_) : 0),
      storage_(config_.device, config_.device_id, layer_bytes_ * 2 * static_cast<size_t>(config_.num_layers)),
      kv_scales_(config_.dtype == ElementType::FP8_E4M3 ? kv_scales_count(config_) : 0, 0.0f),
      kv_scales_set_(config_.dtype == ElementType::FP8_E4M3 ? static_cast<size_t>(config_.num_layers) : 0, 0),
      kv_scales_device_(config_.device, config_.device_id,
                        config_.device == DeviceKind::Cuda ? kv_scales_.size() * sizeof(float) : 0),
      // Not value-initialised: the OS backs only the pages that are ever written.
      tokens_(new int32_t[static_cast<size_t>(num_pages_) * config_.page_size]),
      pages_(static_cast<size_t>(num_pages_)),
      index_(num_pages_),
      hasher_(config_.page_size, config_.hash_seed) {
  free_.resize(static_cast<size_t>(num_pages_));
  // A stack: page 0 is handed out first.
  for (int32_t i = 0; i < num_pages_; ++i) free_[static_cast<size_t>(i)] = num_pages_ - 1 - i;
  counters_.pages_total = num_pages_;
  if (config_.events_capacity > 0) events_ = std::make_unique<EventQueue>(config_.events_capacity, config_.page_size);
  layer_shape_[0] = num_pages_;
  layer_shape_[1] = config_.num_kv_heads;
  layer_shape_[2] = config_.page_size;
  layer_shape_[3] = config_.head_dim;
}

Pool::~Pool() {
  for (Sequence *s : sequences_) delete s;
  for (Sequence *s : retired_) delete s;
}

void *Pool::k_data(int32_t layer) const {
  bspa::check(config_.num_layers > 0, Errc::InvalidState, "the pool has num_layers = 0 and keeps no KV storage");
  bspa::check(layer >= 0 && layer < config_.num_layers, Errc::OutOfRange, "layer = ", layer, " is not in [0, ",
              config_.num_layers, ")");
  return static_cast<char *>(storage_.data()) + layer_bytes_ * (2 * static_cast<size_t>(layer));
}

void *Pool::v_data(int32_t layer) const { return static_cast<char *>(k_data(layer)) + layer_bytes_; }

Sequence *Pool::create_sequence(const void *salt, size_t salt_len, uint64_t extra_key) {
  bspa::check(salt != nullptr || salt_len == 0, Errc::InvalidArgument, "salt is NULL but salt_len = ", salt_len);
  const Key digest = salt_digest(salt, salt_len, config_.hash_seed);
  std::lock_guard<std::mutex> lock(mutex_);
  sequences_.reserve(sequences_.size() + 1);
  const uint32_t salt_index = events_ ? events_->intern_salt(salt, salt_len) : 0;
  auto *s = new Sequence(this, digest, extra_key, salt_index);
  s->registry_slot_ = sequences_.size();
  sequences_.push_back(s);
  return s;
}

void Pool::destroy_sequence(Sequence *seq) noexcept {
  if (!seq) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = seq->registry_slot_;
  sequences_[slot] = sequences_.back();
  sequences_[slot]->registry_slot_ = slot;
  sequences_.pop_back();
  if (seq->batch_refs_ > 0) {  // a batch still reads its pages: retire it with them
    seq->retired_ = true;
    seq->registry_slot_ = retired_.size();
    retired_.push_back(seq);  // reserved by hold_sequences_locked: never allocates
    return;
  }
  for (auto it = seq->pages_.rbegin(); it != seq->pages_.rend(); ++it) release(*it);
  delete seq;
}

SequenceHold *Pool::hold_sequences_locked(std::vector<Sequence *> seqs) {
  auto hold = std::unique_ptr<SequenceHold>(new SequenceHold);
  hold->seqs_ = std::move(seqs);
  // Room to retire every live sequence, so destroy_sequence (noexcept) cannot fail: any
  // sequence retired later is live now (or held by a later hold, which reserves again).
  // Room for this hold's sequences alone fell short when several holds were alive.
  retired_.reserve(retired_.size() + sequences_.size());
  for (Sequence *s : hold->seqs_) ++s->batch_refs_;
  return hold.release();
}

void Pool::release_sequences(SequenceHold *hold) noexcept {
  if (!hold) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (Sequence *s : hold->seqs_) {
    if (--s->batch_refs_ > 0 || !s->retired_) continue;
    for (auto it = s->pages_.rbegin(); it != s->pages_.rend(); ++it) release(*it);
    const size_t slot = s->registry_slot_;
    retired_[slot] = retired_.back();
    retired_[slot]->registry_slot_ = slot;
    retired_.pop_back();
    delete s;
  }
  delete hold;
}

PoolStats Pool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats s = counters_;
  s.pages_total = num_pages_;
  s.pages_free = static_cast<int64_t>(free_.size());
  s.pages_cached = lru_size_;
  s.pages_in_use = in_use_;
  s.num_sequences = static_cast<int64_t>(sequences_.size());
  return s;
}

int32_t Pool::take_page() {
  int32_t p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {
    p = lru_head_;
    lru_unlink(p);
    const bool erased = index_.erase(pages_[static_cast<size_t>(p)].key, p);
    (void)erased;  // the invariant check catches an index out of step
    ++counters_.evictions;
    if (events_) record_removed(p);
  }
  Page &pg = pages_[static_cast<size_t>(p)];
  const uint32_t gen = pg.gen + 1;
  pg = Page{};
  pg.gen = gen;
  pg.ref = 1;
  ++in_use_;
  return p;
}

void Pool::pin(int32_t page) {
  Page &pg = pages_[static_cast<size_t>(page)];
  if (pg.ref == 0) {
    lru_unlink(page);  // only published pages are pinned by a match
    ++in_use_;
  }
  ++pg.ref;
}

void Pool::release(int32_t page) {
  Page &pg = pages_[static_cast<size_t>(page)];
  if (--pg.ref > 0) return;
  --in_use_;
  if (pg.published) {
    lru_push_back(page);
  } else {
    free_.push_back(page);  // capacity num_pages is reserved at creation: never allocates
  }
}

void Pool::lru_push_back(int32_t page) {
  Page &pg = pages_[static_cast<size_t>(page)];
  pg.lru_prev = lru_tail_;
  pg.lru_next = -1;
  if (lru_tail_ >= 0) {
    pages_[static_cast<size_t>(lru_tail_)].lru_next = page;
  } else {
    lru_head_ = page;
  }
  lru_tail_ = page;
  ++lru_size_;
}

void Pool::lru_unlink(int32_t page) {
  Page &pg = pages_[static_cast<size_t>(page)];
  if (pg.lru_prev >= 0) {
    pages_[static_cast<size_t>(pg.lru_prev)].lru_next = pg.lru_next;
  } else {
    lru_head_ = pg.lru_next;
  }
  if (pg.lru_next >= 0) {
    pages_[static_cast<size_t>(pg.lru_next)].lru_prev = pg.lru_prev;
  } else {
    lru_tail_ = pg.lru_prev;
  }
  pg.lru_prev = pg.lru_next = -1;
  --lru_size_;
}

int32_t Pool::find_published(const Key &key, const int32_t *tokens, uint64_t extra_key, int32_t parent_page,
                             uint32_t parent_gen, const Key &root_digest) const {
  const size_t token_bytes = sizeof(int32_t) * static_cast<size_t>(config_.page_size);
  return index_.find(key, [&](int32_t c) {
    const Page &pg = pages_[static_cast<size_t>(c)];
    if (pg.key != key || pg.extra_key != extra_key || pg.parent_page != parent_page) return false;
    if (parent_page < 0) {
      if (pg.parent_key != root_digest) return false;
    } else if (pg.parent_gen != parent_gen) {
      return false;
    }
    return std::memcmp(page_tokens(c), tokens, token_bytes) == 0;
  });
}

int64_t Pool::publish_chain_locked(const int32_t *pages, int64_t from, int64_t to, const Key &root_digest,
                                   uint64_t extra_key, uint32_t salt_index, ChainTip &tip) {
  int64_t ours = 0;
  // The chain starts again from pages[0] and the root; pages from `from` on go in (and are
  // counted) again.
  auto restart = [&] {
    tip = root_tip(root_digest);
    ours = 0;
    return int64_t{0};
  };
  // Lost before this call: even with no new page, the chain goes in again.
  bool restarted = tip.lost(index_resets_);
  for (int64_t i = restarted ? restart() : from; i < to; ++i) {
    const Published r = publish_locked(pages[i], root_digest, extra_key, salt_index, tip);
    if (r == Published::ChainLost) {
      if (restarted) return ours;  // overflowed again: the rest waits for a later call
      restarted = true;
      i = restart() - 1;
      continue;
    }
    ours += r == Published::Ours && i >= from;
  }
  return ours;
}

Pool::Published Pool::publish_locked(int32_t page, const Key &root_digest, uint64_t extra_key, uint32_t salt_index,
                                     ChainTip &tip) {
  const int32_t *toks = page_tokens(page);
  const Key k = hasher_.page_key(tip.key, toks, extra_key);
  const int32_t existing = find_published(k, toks, extra_key, tip.page, tip.gen, root_digest);
  if (existing >= 0) {
    // An identical page is already the index entry: it stands for ours in the chain, so
    // later pages stay reachable from it; ours is freed unpublished. (It went in under our
    // tip after the last reset, so the chain up to it is in the index now.)
    tip.set(k, existing, pages_[static_cast<size_t>(existing)].gen, index_resets_);
    return Published::Existing;
  }
  if (events_) make_event_room();  // may empty the index
  if (tip.lost(index_resets_)) return Published::ChainLost;
  Page &pg = pages_[static_cast<size_t>(page)];
  pg.key = k;
  pg.parent_key = tip.page < 0 ? root_digest : tip.key;
  pg.parent_page = tip.page;
  pg.parent_gen = tip.gen;
  pg.extra_key = extra_key;
  pg.published = true;
  index_.insert(k, page);
  ++counters_.published_pages;
  if (events_) {
    const uint64_t parent_id = tip.page < 0 ? 0 : block_id(tip.page, tip.gen);
    events_->push_stored(page, block_id(page, pg.gen), parent_id, k, extra_key, salt_index, toks);
  }
  tip.set(k, page, pg.gen, index_resets_);
  return Published::Ours;
}

void Pool::make_event_room() {
  if (events_->full()) overflow_events();
}

void Pool::record_removed(int32_t page) {
  if (events_->full()) {
    overflow_events();  // its "all cleared" covers this page too
    return;
  }
  events_->push_removed(page, block_id(page, pages_[static_cast<size_t>(page)].gen));
}

void Pool::overflow_events() {
  events_->reset_to_cleared();
  // free_ has capacity num_pages (sized at creation), so these pushes never allocate.
  for (int32_t p = lru_head_; p >= 0;) {
    Page &pg = pages_[static_cast<size_t>(p)];
    const int32_t next = pg.lru_next;
    pg.lru_prev = pg.lru_next = -1;
    pg.published = false;
    free_.push_back(p);
    p = next;
  }
  lru_head_ = lru_tail_ = -1;
  lru_size_ = 0;
  for (Page &pg : pages_) pg.published = false;
  index_.clear();
  ++index_resets_;
}

}  // namespace bspa::cache
