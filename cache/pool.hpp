// The paged KV pool and its prefix cache (C++ core; capi/src/pool.cpp and seq.cpp are
// the C shims). Stable API for capi/ (batches read a sequence's pages through it):
//
//   Pool(const PoolConfig &)           validates the config (Error names the field), allocates
//   pool.device() / device_id() / dtype() / num_layers() / num_kv_heads() / head_dim() /
//     page_size() / num_pages()        geometry
//   pool.k_data(layer), v_data(layer)  base pointers of a layer's K and V, each
//                                      [num_pages, num_kv_heads, page_size, head_dim] row-major
//   pool.set_kv_scales / get_kv_scales / launch_kv_scales
//                                      FP8 pools: fp32 scales per (layer, KV head), K and V
//   pool.create_sequence(...)          the pool owns its sequences; destroy_sequence(seq)
//   pool.stats(), pool.check()         counters; invariant check (Error(Internal) names it)
//   pool.mutex()                       guards everything in the pool and its sequences
//   pool.hold_sequences_locked(seqs) / release_sequences(hold)
//                                      a batch's references to its sequences (page_hold.hpp)
//   pool.hold_pages_locked(pages) / release_hold(hold)
//                                      extra page references (cache/page_hold.hpp)
//   Sequence (cache/sequence.hpp)      match / append / commit / info / copy_pages, and
//                                      lock-free views for callers holding pool.mutex()
//   pool.fingerprint()                 what must match for pages to move between pools
//   KvExport / KvImport                pages pinned for a transfer out, reserved for one in
//     (cache/kv_transfer.hpp)          (page holds too, so check() counts them)
//
// Page states: free (unreferenced, never published: used first), cached (unreferenced,
// published: in an LRU list, evictable, reusable by a match), in use (ref > 0: held by
// sequences and by page holds).
// Published pages sit in the prefix index; a page leaves it only when evicted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cache/chain_tip.hpp"
#include "cache/event_queue.hpp"
#include "cache/key.hpp"
#include "cache/kv_storage.hpp"
#include "cache/page_hold.hpp"
#include "cache/prefix_index.hpp"

namespace bspa::cache {

// FP8_E4M3: one byte per element, dequantized with the pool's per-(layer, KV head) scales.
// Equal to bspa_dtype (capi/src/enum_mirrors.cpp checks it).
enum class ElementType : int32_t { F32 = 0, F16 = 1, BF16 = 2, FP8_E4M3 = 3 };
inline size_t element_bytes(ElementType t) { return t == ElementType::F32 ? 4 : t == ElementType::FP8_E4M3 ? 1 : 2; }

struct PoolConfig {
  DeviceKind device = DeviceKind::Cpu;
  int32_t device_id = 0;
  ElementType dtype = ElementType::BF16;
  int32_t num_layers = 1;  // 0 = bookkeeping and prefix lookup only
  int32_t num_kv_heads = 1;
  int32_t head_dim = 128;
  int32_t page_size = 64;  // power of two in [16, 256]
  int64_t num_pages = 0;   // in [1, INT32_MAX], or 0 to derive from memory_bytes
  uint64_t memory_bytes = 0;
  uint64_t hash_seed = 0;
  int64_t events_capacity = 0;  // KV cache event records kept until drained; 0 = no events
};

struct PoolStats {
  int64_t pages_total = 0;
  int64_t pages_free = 0;
  int64_t pages_cached = 0;
  int64_t pages_in_use = 0;
  int64_t num_sequences = 0;
  uint64_t match_calls = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t matched_tokens = 0;
  uint64_t queried_tokens = 0;
  uint64_t hashed_tokens = 0;
  uint64_t published_pages = 0;
  uint64_t evictions = 0;
};

class Sequence;

class Pool {
 public:
  explicit Pool(const PoolConfig &config);
  Pool(const Pool &) = delete;
  Pool &operator=(const Pool &) = delete;
  // Destroys every sequence still alive.
  ~Pool();

  DeviceKind device() const { return config_.device; }
  int32_t device_id() const { return config_.device_id; }
  ElementType dtype() const { return config_.dtype; }
  int32_t num_layers() const { return config_.num_layers; }
  int32_t num_kv_heads() const { return config_.num_kv_heads; }
  int32_t head_dim() const { return config_.head_dim; }
  int32_t page_size() const { return config_.page_size; }
  int32_t num_pages() const { return num_pages_; }
  uint64_t hash_seed() const { return config_.hash_seed; }
  // Bytes of one layer's K (or V): num_pages * num_kv_heads * page_size * head_dim * element.
  size_t layer_bytes() const { return layer_bytes_; }
  // {num_pages, num_kv_heads, page_size, head_dim}: lives as long as the pool.
  const int64_t *layer_shape() const { return layer_shape_; }

  // The whole KV allocation (every layer's K and V): callers keep their inputs off it.
  const void *storage_data() const { return storage_.data(); }
  size_t storage_bytes() const { return storage_.bytes(); }
  // Throws Error(InvalidState) for a pool without storage, Error(OutOfRange) for the layer.
  void *k_data(int32_t layer) const;
  void *v_data(int32_t layer) const;

  // FP8_E4M3 pools: dequantization scales (value = scale * e4m3) of one layer, [n] each for
  // K and V with n == num_kv_heads. set validates everything first (Error InvalidState for
  // a pool of another dtype, OutOfRange for the layer, InvalidArgument for n or a scale that
  // is not finite and positive, naming layer, head and value), then stores a host copy and,
  // for a CUDA pool, uploads the device copy (a synchronous copy; Error(Cuda) leaves the
  // layer's previous scales in place). get copies them out (either pointer may be null);
  // Error(InvalidState) for a layer whose scales were never set.
  void set_kv_scales(int32_t layer, const float *k, const float *v, int32_t n);
  void get_kv_scales(int32_t layer, float *k, float *v, int32_t n) const;
  // Layers whose scales are set (0 for other dtypes).
  int32_t kv_scales_layers() const;
  // The scales a launch on `layer` reads, in the launch's memory: for a CPU pool a copy into
  // k_host / v_host ([num_kv_heads] each, taken under the lock, so a concurrent set cannot
  // tear it), for a CUDA pool the device copy of the layer ([num_kv_heads] floats for K,
  // then as many for V). Error(InvalidState) when the layer's scales were never set: a
  // launch never runs with a made-up scale.
  struct LaunchScales {
    const float *k = nullptr, *v = nullptr;
  };
  LaunchScales launch_kv_scales(int32_t layer, float *k_host, float *v_host) const;

  // salt is copied (only its digest is kept); salt_len 0 means no salt.
  Sequence *create_sequence(const void *salt, size_t salt_len, uint64_t extra_key);
  // Releases the sequence's pages last first (chain tails are then evicted before heads).
  void destroy_sequence(Sequence *seq) noexcept;

  // Live sequences; call with mutex() held (bspa_batch_create bounds its count by it).
  size_t num_sequences_locked() const { return sequences_.size(); }

  // A reference to each of `seqs` (live sequences of this pool, distinct, the caller holding
  // mutex()), kept until release_sequences(hold) (which takes the lock itself and accepts
  // nullptr): a sequence destroyed meanwhile is retired with its pages still referenced,
  // and freed by the release. O(sequences). Throws only std::bad_alloc, before any change.
  SequenceHold *hold_sequences_locked(std::vector<Sequence *> seqs);
  void release_sequences(SequenceHold *hold) noexcept;

  // One more reference to each of `pages` (ids of pages in use by sequences the caller
  // holds mutex() for), kept until release_hold(hold), which takes the lock itself and
  // accepts nullptr. Throws only std::bad_alloc, before any reference is taken.
  PageHold *hold_pages_locked(std::vector<int32_t> pages);
  void release_hold(PageHold *hold) noexcept;

  // 64 bits of XXH3 over everything two pools must share for a page of one to be a valid
  // page of the other (cache/kv_transfer.cpp says what; the device and page count are not
  // part of it). Never 0. Takes the lock (an FP8 pool's scales are part of it).
  uint64_t fingerprint() const;
  uint64_t fingerprint_locked() const;

  PoolStats stats() const;
  // Throws Error(Internal, "...") naming the first broken invariant.
  void check() const;

  std::mutex &mutex() const { return mutex_; }

  // The event queue, or nullptr when the pool was made with events_capacity 0. Hold
  // mutex() while using it.
  EventQueue *events() { return events_.get(); }
  const EventQueue *events() const { return events_.get(); }

 private:
  friend class Sequence;
  friend class KvExport;
  friend class KvImport;

  struct Page {
    Key key;         // valid while published
    Key parent_key;  // the parent's key; for a chain's first page, the salt digest
    uint64_t extra_key = 0;
    int32_t parent_page = -1;  // the parent page when published (-1: first page)
    uint32_t parent_gen = 0;   // its generation then: a re-used parent never verifies
    uint32_t gen = 0;          // bumped every time the page is handed out
    int32_t ref = 0;
    int32_t lru_prev = -1;
    int32_t lru_next = -1;
    bool published = false;
  };

  // All below: call with mutex_ held.
  int32_t *page_tokens(int32_t page) { return tokens_.get() + static_cast<size_t>(page) * config_.page_size; }
  const int32_t *page_tokens(int32_t page) const {
    return tokens_.get() + static_cast<size_t>(page) * config_.page_size;
  }
  void prefetch_page(int32_t page) const {
    __builtin_prefetch(&pages_[static_cast<size_t>(page)]);
    const char *t = reinterpret_cast<const char *>(page_tokens(page));
    for (int32_t b = 0; b < config_.page_size * 4; b += 64) __builtin_prefetch(t + b);
  }
  int64_t available_pages() const { return static_cast<int64_t>(free_.size()) + lru_size_; }
  // Where a chain that starts at the root of `root_digest` begins, as of now.
  ChainTip root_tip(const Key &root_digest) const { return ChainTip{truncate_key(root_digest), -1, 0, index_resets_}; }
  int32_t take_page();         // precondition: available_pages() > 0
  void pin(int32_t page);      // ref++ (leaving the LRU list if cached)
  void release(int32_t page);  // ref--; at 0 to the LRU tail or the free list
  // An empty registered hold with room for `capacity` pages (throws only std::bad_alloc;
  // release_hold_locked undoes it), then pages the caller already took a reference for
  // (take_page, pin) handed to it one by one, at most `capacity` (never allocates).
  PageHold *empty_hold_locked(size_t capacity);
  static void adopt_into_hold(PageHold *hold, int32_t page) noexcept;
  void release_hold_locked(PageHold *hold) noexcept;
  // Publishes pages[from, to) as the next links of the chain that pages[0, from) form
  // (Sequence::commit, KvImport::commit; `tip`: where it ends, advanced past the pages). An
  // identical page already published stands for one of ours (ours stays unpublished and is
  // freed when released). If an event-queue overflow emptied the index since the tip was
  // set, or empties it on the way, the chain's earlier pages left the index with it: pages
  // published under them could never be matched, and a router told "all cleared" would get
  // stored pages with unknown parents. The chain is then published again from pages[0] and
  // the root (the caller holds every page, their tokens intact); a second overflow in one
  // call (a queue shorter than the chain) leaves the rest unpublished, and a later call
  // starts again. Returns how many of pages[from, to) entered the index themselves.
  // Allocates nothing (the event queue is reserved).
  int64_t publish_chain_locked(const int32_t *pages, int64_t from, int64_t to, const Key &root_digest,
                               uint64_t extra_key, uint32_t salt_index, ChainTip &tip);
  enum class Published { Ours, Existing, ChainLost };
  // One page of publish_chain_locked: ChainLost (nothing published) when the chain's pages
  // left the index since `tip` was set.
  Published publish_locked(int32_t page, const Key &root_digest, uint64_t extra_key, uint32_t salt_index,
                           ChainTip &tip);
  void lru_push_back(int32_t page);
  void lru_unlink(int32_t page);
  // The published page equal to (key, tokens, extra key, parent), or -1.
  // parent_page -1 is a chain's first page, verified by the salt digest instead.
  int32_t find_published(const Key &key, const int32_t *tokens, uint64_t extra_key, int32_t parent_page,
                         uint32_t parent_gen, const Key &root_digest) const;
  // Events (events_ != nullptr). Before publishing: makes room, overflowing if full.
  void make_event_room();
  // A published page leaves the index (eviction): records it, overflowing if full.
  void record_removed(int32_t page);
  // The queue is full: drop its contents, record "all cleared", and empty the prefix index
  // (cached pages become free, pages in use stay with their sequences unpublished), so the
  // router's view rebuilt from later events equals what the pool can match.
  void overflow_events();

  PoolConfig config_;
  int32_t num_pages_ = 0;
  size_t layer_bytes_ = 0;
  int64_t layer_shape_[4] = {0, 0, 0, 0};
  KvStorage storage_;
  // FP8 pools: [num_layers][K, V][num_kv_heads] scales (host copy), which layers have them,
  // and for CUDA pools the device copy of the same array (allocated with the pool).
  std::vector<float> kv_scales_;
  std::vector<uint8_t> kv_scales_set_;
  KvStorage kv_scales_device_;
  std::unique_ptr<int32_t[]> tokens_;  // [num_pages][page_size]: a hit is verified against them
  std::vector<Page> pages_;
  std::vector<int32_t> free_;  // a stack of never-published free pages
  int32_t lru_head_ = -1;      // least recently used: evicted first
  int32_t lru_tail_ = -1;
  int64_t lru_size_ = 0;
  int64_t in_use_ = 0;
  PrefixIndex index_;
  PageHasher hasher_;
  std::vector<Sequence *> sequences_;  // each knows its slot here
  std::vector<Sequence *> retired_;    // destroyed but held by batches; each knows its slot
  std::vector<PageHold *> holds_;      // likewise (owned by their batches)
  PoolStats counters_;
  std::unique_ptr<EventQueue> events_;
  uint64_t index_resets_ = 0;  // times overflow_events emptied the index
  mutable std::mutex mutex_;
};

}  // namespace bspa::cache
