// KvExport, KvImport (cache/kv_transfer.hpp) and Pool::fingerprint.
#include "cache/kv_transfer.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "cache/pool.hpp"
#include "common/error.hpp"

namespace bspa::cache {

namespace {

// The page-key scheme of cache/key.hpp (XXH3-128 chained over parent key, tokens as int32,
// extra key; the first parent from the salt's digest under the same seed). Bumped whenever
// keys of the same tokens would change.
constexpr uint64_t kKeySchemeVersion = 1;

void check_tokens(const int32_t *tokens, int64_t n) {
  check(n >= 0, Errc::InvalidArgument, "n = ", n, " is negative");
  check(tokens != nullptr || n == 0, Errc::NullPointer, "tokens is NULL but n = ", n);
}

}  // namespace

uint64_t Pool::fingerprint() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fingerprint_locked();
}

// What makes a page of one pool a valid page of another: the bytes of a page (dtype,
// geometry, storage layout, for FP8 the scales that give them meaning) and its key (key
// scheme, key width, hash seed; the salt and extra key are the prompt's, passed to both
// sides). Not the device (CPU and CUDA pages hold the same bytes) nor the page count.
uint64_t Pool::fingerprint_locked() const {
  std::vector<uint64_t> words = {0x76'6b'2d'61'70'73'62ull,  // "bspa-kv"
                                 kKvLayoutVersion,
                                 kKeySchemeVersion,
                                 BSPA_KEY_BITS,
                                 static_cast<uint64_t>(config_.dtype),
                                 static_cast<uint64_t>(config_.num_layers),
                                 static_cast<uint64_t>(config_.num_kv_heads),
                                 static_cast<uint64_t>(config_.head_dim),
                                 static_cast<uint64_t>(config_.page_size),
                                 config_.hash_seed};
  if (config_.dtype == ElementType::FP8_E4M3) {
    // Per layer: whether its scales are set, then their bits (K heads, then V heads).
    const size_t per_layer = 2 * static_cast<size_t>(config_.num_kv_heads);
    for (int32_t l = 0; l < config_.num_layers; ++l) {
      const bool set = kv_scales_set_[static_cast<size_t>(l)] != 0;
      words.push_back(set ? 1 : 0);
      for (size_t i = 0; set && i < per_layer; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &kv_scales_[static_cast<size_t>(l) * per_layer + i], 4);
        words.push_back(bits);
      }
    }
  }
  std::vector<unsigned char> bytes(8 * words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    for (size_t b = 0; b < 8; ++b) bytes[8 * i + b] = static_cast<unsigned char>(words[i] >> (8 * b));  // LE everywhere
  }
  const uint64_t h = XXH3_64bits(bytes.data(), bytes.size());
  return h == 0 ? 1 : h;  // 0 means "not given" in the C ABI
}

void KvExport::walk(Pool &p, const Key &root_key, const Key &root_digest, uint64_t extra_key, const int32_t *tokens,
                    int64_t blocks, bool hash_all, std::vector<Key> &keys, std::vector<int32_t> &found) {
  const int64_t ps = p.config_.page_size;
  Key key = root_key;
  int32_t parent = -1;
  uint32_t parent_gen = 0;
  bool missed = false;
  for (int64_t i = 0; i < blocks; ++i) {
    const int32_t *page_tokens = tokens + i * ps;
    key = p.hasher_.page_key(key, page_tokens, extra_key);
    keys.push_back(key);
    if (missed) continue;
    const int32_t c = p.find_published(key, page_tokens, extra_key, parent, parent_gen, root_digest);
    if (c < 0) {
      missed = true;
      if (!hash_all) return;
      continue;
    }
    found.push_back(c);
    parent = c;
    parent_gen = p.pages_[static_cast<size_t>(c)].gen;
  }
}

KvExport *KvExport::create(Pool &p, const void *salt, size_t salt_len, uint64_t extra_key, const int32_t *tokens,
                           int64_t n) {
  check_tokens(tokens, n);
  check(salt != nullptr || salt_len == 0, Errc::InvalidArgument, "salt is NULL but salt_len = ", salt_len);
  const Key digest = salt_digest(salt, salt_len, p.config_.hash_seed);
  const int64_t blocks = n / p.config_.page_size;
  auto e = std::unique_ptr<KvExport>(new KvExport);
  e->pool_ = &p;
  std::lock_guard<std::mutex> lock(p.mutex_);
  const size_t cap = static_cast<size_t>(std::min<int64_t>(blocks, p.num_pages_));
  e->keys_.reserve(cap);
  e->pages_.reserve(cap);
  walk(p, truncate_key(digest), digest, extra_key, tokens, blocks, false, e->keys_, e->pages_);
  e->keys_.resize(e->pages_.size());  // the key of the first miss is not exported
  // Pins every found page (a cached one leaves the LRU list): the last step that can throw
  // comes before the first reference is taken.
  e->hold_ = p.hold_pages_locked(e->pages_);
  return e.release();
}

KvExport::~KvExport() { pool_->release_hold(hold_); }

KvImport *KvImport::create(Pool &p, const void *salt, size_t salt_len, uint64_t extra_key, const int32_t *tokens,
                           int64_t n, uint64_t peer_fingerprint, const Key *peer_keys, int64_t num_peer_keys) {
  check_tokens(tokens, n);
  check(salt != nullptr || salt_len == 0, Errc::InvalidArgument, "salt is NULL but salt_len = ", salt_len);
  const int64_t ps = p.config_.page_size;
  const int64_t blocks = n / ps;
  check(peer_keys != nullptr || num_peer_keys == 0, Errc::NullPointer,
        "peer_keys is NULL but num_peer_keys = ", num_peer_keys);
  check(peer_keys == nullptr || num_peer_keys == blocks, Errc::InvalidArgument, "num_peer_keys = ", num_peer_keys,
        " but the n = ", n, " tokens hold ", blocks, " full pages of ", ps, " tokens (one key per full page)");
  const Key digest = salt_digest(salt, salt_len, p.config_.hash_seed);
  auto imp = std::unique_ptr<KvImport>(new KvImport);
  imp->pool_ = &p;
  imp->root_digest_ = digest;
  imp->extra_key_ = extra_key;
  imp->blocks_ = blocks;

  std::lock_guard<std::mutex> lock(p.mutex_);
  const uint64_t mine = p.fingerprint_locked();
  check(peer_fingerprint == mine, Errc::InvalidArgument, "peer_fingerprint = 0x", std::hex, peer_fingerprint,
        " but this pool's fingerprint is 0x", mine, std::dec,
        ": the pools differ in dtype, geometry, page size, layout, hash seed or FP8 scales, so their pages "
        "are not interchangeable (compare their bspa_pool_info)");
  // Without peer keys nothing is compared, so a prompt longer than the pool is refused
  // before its tokens are hashed under the lock.
  auto check_pool_size = [&] {
    check(blocks <= p.num_pages_, Errc::OutOfPages, "importing n = ", n, " tokens needs ", blocks,
          " pages but the pool has only ", p.num_pages_);
  };
  if (!peer_keys) check_pool_size();
  std::vector<Key> keys;
  std::vector<int32_t> found;
  keys.reserve(static_cast<size_t>(blocks));  // as many as the caller's tokens hold
  found.reserve(static_cast<size_t>(std::min<int64_t>(blocks, p.num_pages_)));
  KvExport::walk(p, truncate_key(digest), digest, extra_key, tokens, blocks, true, keys, found);
  for (int64_t i = 0; peer_keys && i < blocks; ++i) {
    const Key &k = keys[static_cast<size_t>(i)];
    check(peer_keys[i] == k, Errc::InvalidArgument, "peer_keys[", i, "] = {0x", std::hex, peer_keys[i].lo, ", 0x",
          peer_keys[i].hi, "} but this pool keys block ", std::dec, i, " of these tokens as {0x", std::hex, k.lo,
          ", 0x", k.hi, std::dec, "}: the tokens, salt or extra key differ from the exporter's");
  }
  // With peer keys, after them (the header's order: a peer that disagrees is told so,
  // whatever the pool's size). The check below would refuse such a prompt too; this one
  // names the pool's size as the reason.
  if (peer_keys) check_pool_size();
  const int64_t cached = static_cast<int64_t>(found.size());
  const int64_t more = blocks - cached;
  // Pinning a cached page takes it off the LRU list, so it is not there to be evicted.
  int64_t pinned_from_lru = 0;
  for (int32_t c : found) pinned_from_lru += p.pages_[static_cast<size_t>(c)].ref == 0 ? 1 : 0;
  const int64_t available = p.available_pages() - pinned_from_lru;
  check(more <= available, Errc::OutOfPages, "importing ", blocks, " pages of which the pool has ", cached, " needs ",
        more, " more pages but only ", p.free_.size(), " free and ", p.lru_size_ - pinned_from_lru,
        " evictable cached pages are left of ", p.num_pages_);
  imp->salt_index_ = p.events_ ? p.events_->intern_salt(salt, salt_len) : 0;
  imp->hold_ = p.empty_hold_locked(static_cast<size_t>(blocks));  // the last step that can throw

  // Where the chain of the cached blocks ends, before the evictions below (which may
  // overflow the event queue and so unpublish it: commit then starts it again).
  imp->tip_ = cached > 0 ? ChainTip{keys[static_cast<size_t>(cached - 1)], found.back(),
                                    p.pages_[static_cast<size_t>(found.back())].gen, p.index_resets_}
                         : p.root_tip(digest);
  // Matched pages first, then new ones (as a sequence's match and append do).
  for (int32_t c : found) {
    p.pin(c);
    Pool::adopt_into_hold(imp->hold_, c);
  }
  for (int64_t i = cached; i < blocks; ++i) {
    const int32_t page = p.take_page();
    std::memcpy(p.page_tokens(page), tokens + i * ps, sizeof(int32_t) * static_cast<size_t>(ps));
    Pool::adopt_into_hold(imp->hold_, page);
  }
  imp->cached_ = cached;
  return imp.release();
}

int64_t KvImport::commit() {
  Pool &p = *pool_;
  std::lock_guard<std::mutex> lock(p.mutex_);
  check(state_ == ImportState::Reserved, Errc::InvalidState, "the import was already ",
        state_ == ImportState::Committed ? "committed" : "aborted");
  const std::vector<int32_t> &pages = hold_->pages();
  const int64_t published =
      p.publish_chain_locked(pages.data(), cached_, blocks_, root_digest_, extra_key_, salt_index_, tip_);
  // Published pages go to the LRU list as cached (tail first), pages that lost to an
  // identical one published meanwhile back to the free list.
  p.release_hold_locked(hold_);
  hold_ = nullptr;
  published_ = published;
  state_ = ImportState::Committed;
  return published;
}

void KvImport::abort_locked() noexcept {
  if (state_ != ImportState::Reserved) return;
  pool_->release_hold_locked(hold_);  // reserved pages are unpublished: back to the free list
  hold_ = nullptr;
  state_ = ImportState::Aborted;
}

void KvImport::abort() {
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  check(state_ != ImportState::Committed, Errc::InvalidState,
        "the import was already committed: its pages are published and stay so");
  abort_locked();
}

KvImport::~KvImport() {
  // No hold: a create that failed (it holds the pool's lock while it unwinds) or an import
  // already committed or aborted; nothing to release.
  if (!hold_) return;
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  abort_locked();
}

ImportInfo KvImport::info() const {
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  return ImportInfo{state_, blocks_, cached_, blocks_ - cached_, published_};
}

int64_t KvImport::copy_reserved(int32_t *pages, int64_t *blocks, int64_t capacity) const {
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  check(state_ == ImportState::Reserved, Errc::InvalidState, "the import was already ",
        state_ == ImportState::Committed ? "committed" : "aborted", ": it holds no reserved pages");
  const int64_t count = blocks_ - cached_;
  if (capacity < count) return count;
  const std::vector<int32_t> &held = hold_->pages();
  for (int64_t i = 0; i < count; ++i) {
    if (pages) pages[i] = held[static_cast<size_t>(cached_ + i)];
    if (blocks) blocks[i] = cached_ + i;
  }
  return count;
}

}  // namespace bspa::cache
