// libFuzzer harness of the public C ABI: the input bytes drive a sequence of pool,
// sequence, layout, batch and CPU prefill calls with small shapes, valid and invalid.
//
// After every call it checks what a runtime relies on:
//  - bspa_pool_check() passes on every live pool;
//  - a failed call set a fresh, non-empty bspa_last_error() naming its function, and
//    changed no pool statistics and no sequence's info;
//  - a prefix hit hands out only pages whose committed tokens (and salt, extra key)
//    equal the prompt's (a shadow map of what each page was committed for);
//  - bspa_prefill_paged over finite inputs writes finite values to every output row;
//  - a call whose output (out, lse, the paged workspace; for kv_write the pool) shares
//    memory with another argument or with itself (rows on top of each other) fails, as
//    does a pool past PTRDIFF_MAX bytes.
// Inputs reach: CSR arrays of arbitrary offsets, exactly as long as the header defines
// them; tensors with arbitrary strides, byte offsets (odd ones included) and spans past
// PTRDIFF_MAX; outputs aliasing inputs or each other; views of the pool's own storage as
// k_new, q and out; pool geometries near the size limits; batches that outlive their
// sequences; KV transfers between pools of one fingerprint (exports pinning pages,
// imports reserving, copied, committed or aborted, either kept open across other calls).
// Any violation aborts, which libFuzzer reports as a crash.
//
// Built with -fsanitize=fuzzer by scripts/fuzz.sh; tests/fuzz/replay_main.cpp replays the
// corpus without libFuzzer (CTest test fuzz_corpus_replay).
#include <bspa/bspa.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

[[noreturn]] void die(const char *what, const char *detail = "") {
  std::fprintf(stderr, "fuzz_capi: %s %s\n", what, detail);
  std::abort();
}

class Bytes {
 public:
  Bytes(const uint8_t *d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  int32_t pick(int32_t n) { return n <= 0 ? 0 : u8() % n; }
  template <class T, size_t N>
  T one_of(const T (&a)[N]) {
    return a[u8() % N];
  }

 private:
  const uint8_t *d_;
  size_t n_, i_ = 0;
};

// ---- what the harness knows about the live objects -------------------------------------

struct Shadow {  // what a published page's KV stands for
  int salt;
  uint64_t extra;
  std::vector<int32_t> prefix;  // every token up to the page's end
};

struct PoolState {
  bspa_pool *h = nullptr;
  bspa_pool_options options{};  // as created: a twin pool (same fingerprint) is made from them
  int32_t page_size = 0, num_pages = 0, num_layers = 0, hkv = 0, head_dim = 0;
  bspa_dtype dtype = 0;
  std::map<int32_t, Shadow> shadow;
};

struct SeqState {
  bspa_seq *h = nullptr;
  int pool = 0;
  int salt = 0;
  uint64_t extra = 0;
  std::vector<int32_t> tokens;  // tokens the sequence holds
  int64_t computed = 0;
};

struct BatchState {
  bspa_batch *h = nullptr;
  int pool = 0;
  std::vector<bspa_seq *> seqs;
  int64_t total_q = 0;      // rows of the launches' tensors
  bool reusable = false;    // bspa_batch_create_reusable (re-planned by op_batch_plan)
  int64_t fixed_rows = -1;  // fixed launch shapes: max_tokens
};

struct ImportState {  // a reservation kept open across other calls
  bspa_kv_import *h = nullptr;
  int pool = 0, salt = 0;
  uint64_t extra = 0;
  std::vector<int32_t> tokens;  // the prompt's full blocks
};

constexpr int kMaxPools = 2, kMaxSeqs = 8, kMaxLayouts = 3, kMaxBatches = 2, kMaxTransfers = 2;
const char *const kSalts[] = {nullptr, "tenant-a", "tenant-b"};

struct World {
  std::vector<PoolState> pools;
  std::vector<SeqState> seqs;
  std::vector<bspa_layout *> layouts;
  std::vector<BatchState> batches;
  std::vector<std::pair<bspa_kv_export *, int>> exports;  // (export, pool)
  std::vector<ImportState> imports;

  ~World() {
    for (auto &b : batches) bspa_batch_destroy(b.h);
    for (auto &e : exports) bspa_kv_export_destroy(e.first);
    for (auto &m : imports) bspa_kv_import_destroy(m.h);
    for (auto *l : layouts) bspa_layout_destroy(l);
    // Half the sequences go with their pool, half explicitly: both paths must be clean.
    for (size_t i = 0; i < seqs.size(); i += 2) bspa_seq_destroy(seqs[i].h);
    for (auto &p : pools) bspa_pool_destroy(p.h);
  }

  void check_pools() const {
    for (const auto &p : pools)
      if (bspa_pool_check(p.h) != BSPA_OK) die("bspa_pool_check failed:", bspa_last_error());
  }

  struct Snapshot {
    std::vector<struct bspa_pool_stats> stats;
    std::vector<struct bspa_seq_info> infos;
  };
  Snapshot snapshot() const {
    Snapshot s;
    for (const auto &p : pools) {
      struct bspa_pool_stats st;
      if (bspa_pool_stats(p.h, &st) != BSPA_OK) die("bspa_pool_stats failed on a live pool");
      s.stats.push_back(st);
    }
    for (const auto &q : seqs) {
      struct bspa_seq_info in;
      if (bspa_seq_info(q.h, &in) != BSPA_OK) die("bspa_seq_info failed on a live sequence");
      s.infos.push_back(in);
    }
    return s;
  }
  static bool same(const Snapshot &a, const Snapshot &b) {
    if (a.stats.size() != b.stats.size() || a.infos.size() != b.infos.size()) return false;
    for (size_t i = 0; i < a.stats.size(); ++i)
      if (std::memcmp(&a.stats[i], &b.stats[i], sizeof(struct bspa_pool_stats)) != 0) return false;
    for (size_t i = 0; i < a.infos.size(); ++i)
      if (std::memcmp(&a.infos[i], &b.infos[i], sizeof(struct bspa_seq_info)) != 0) return false;
    return true;
  }

  // Removes the records of a pool about to go away, each after `release` (which destroys
  // what the header says must go before the pool), and renumbers those of later pools.
  // pool_of(record) is the record's pool index, by reference.
  template <class Record, class PoolOf, class Release>
  static void forget_pool(std::vector<Record> &records, int pool, PoolOf pool_of, Release release) {
    for (size_t i = 0; i < records.size();) {
      int &p = pool_of(records[i]);
      if (p == pool) {
        release(records[i]);
        records.erase(records.begin() + static_cast<long>(i));
        continue;
      }
      if (p > pool) --p;
      ++i;
    }
  }

  // Destroys the exports and imports of a pool about to go away (the header's order).
  void drop_transfers_of(int pool) {
    forget_pool(
        exports, pool, [](auto &e) -> int & { return e.second; }, [](auto &e) { bspa_kv_export_destroy(e.first); });
    forget_pool(
        imports, pool, [](ImportState &m) -> int & { return m.pool; },
        [](ImportState &m) { bspa_kv_import_destroy(m.h); });
  }

  // Destroys every batch that holds a sequence (or is of a pool) about to go away.
  void drop_batches_using(const bspa_seq *seq, int pool) {
    for (size_t i = 0; i < batches.size();) {
      bool uses = batches[i].pool == pool;
      for (auto *s : batches[i].seqs) uses = uses || s == seq;
      if (uses) {
        bspa_batch_destroy(batches[i].h);
        batches.erase(batches.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }
};

// A failed call must leave a fresh message; this sentinel is what no other call says.
void set_sentinel() {
  if (bspa_pool_options_init(nullptr) != BSPA_ERR_NULL_POINTER) die("sentinel call did not fail");
}
const char kSentinel[] = "bspa_pool_options_init: options is NULL";

// FUZZ_CAPI_STATS=1 prints, at exit, how often each function succeeded and failed: the
// harness is only useful if the successful paths (launches included) are reached too.
struct CallStats {
  std::map<std::string, std::pair<long, long>> counts;
  bool on = std::getenv("FUZZ_CAPI_STATS") != nullptr;
  ~CallStats() {
    if (!on) return;
    for (const auto &c : counts)
      std::fprintf(stderr, "%-34s ok %8ld  failed %8ld\n", c.first.c_str(), c.second.first, c.second.second);
  }
};
CallStats g_stats;

// Wraps one API call: snapshot, sentinel, call, then the checks of the header comment.
template <class Call>
bspa_status run(World &w, const char *name, Call &&call) {
  const World::Snapshot before = w.snapshot();
  set_sentinel();
  const bspa_status s = call();
  if (g_stats.on) ++(s == BSPA_OK ? g_stats.counts[name].first : g_stats.counts[name].second);
  if (s != BSPA_OK) {
    const char *msg = bspa_last_error();
    if (msg == nullptr || msg[0] == '\0') die("empty bspa_last_error after", name);
    if (std::strcmp(msg, kSentinel) == 0 && std::strcmp(name, "bspa_pool_options_init") != 0)
      die("failed call left no message:", name);
    if (std::strncmp(msg, "bspa_", 5) != 0) die("message does not name the function:", msg);
    if (std::strcmp(bspa_status_string(s), "BSPA_UNKNOWN_STATUS") == 0) die("unknown status from", name);
    if (s == BSPA_ERR_INTERNAL) die("BSPA_ERR_INTERNAL from", msg);
    // Destructors never fail, so a failed call must not have changed any state.
    if (!World::same(before, w.snapshot())) die("a failed call changed state:", msg);
  }
  w.check_pools();
  return s;
}

// ---- prompts with shared prefixes ----------------------------------------------------------

// Token streams from 4 families that agree on long prefixes, so hits and evictions happen.
std::vector<int32_t> make_tokens(Bytes &in, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n > 0 ? n : 0));
  const int family = in.pick(4);
  const int64_t diverge = in.u8();
  for (int64_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = i < diverge ? static_cast<int32_t>((i * 7 + (i / 40) * family) % 13)
                                            : static_cast<int32_t>(100 + family * 10 + i % 5);
  return t;
}

int64_t fuzz_count(Bytes &in) {
  switch (in.pick(8)) {
    case 0: return -1 - in.u8();
    case 1: return 0;
    case 2: return in.pick(4);
    default: return in.u8() % 140;
  }
}

// ---- tensors --------------------------------------------------------------------------------

struct Tensor {
  DLTensor t{};
  int64_t shape[4]{}, strides[4]{};
  std::vector<uint8_t> buf;

  // t.shape and t.strides point into the object itself: a moved Tensor points into its
  // new home (the data moves with buf's heap block, which keeps its address).
  Tensor() = default;
  Tensor(Tensor &&o) noexcept { *this = std::move(o); }
  Tensor &operator=(Tensor &&o) noexcept {
    t = o.t;
    std::memcpy(shape, o.shape, sizeof shape);
    std::memcpy(strides, o.strides, sizeof strides);
    buf = std::move(o.buf);
    if (o.t.shape == o.shape) t.shape = shape;
    if (o.t.strides == o.strides) t.strides = strides;
    return *this;
  }
};

DLDataType dl_of(bspa_dtype d) {
  switch (d) {
    case BSPA_DTYPE_F32: return DLDataType{kDLFloat, 32, 1};
    case BSPA_DTYPE_F16: return DLDataType{kDLFloat, 16, 1};
    default: return DLDataType{kDLBfloat, 16, 1};
  }
}

// Small finite values in any of the three dtypes (bf16/f16 bit patterns of +-k/8).
void fill(Tensor &x, Bytes &in) {
  const int bits = x.t.dtype.bits;
  const size_t elem = static_cast<size_t>(bits / 8);
  const size_t n = x.buf.size() / (elem ? elem : 1);
  const uint8_t seed = in.u8();
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int>((i * 31 + seed) % 17) - 8) / 8.0f;
    if (bits == 32 && x.t.dtype.code == kDLFloat) {
      std::memcpy(&x.buf[i * 4], &v, 4);
    } else if (bits == 16 && x.t.dtype.code == kDLBfloat) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);  // exact: v has few mantissa bits
      std::memcpy(&x.buf[i * 2], &h, 2);
    } else if (bits == 16) {
      // fp16 of v: sign, exponent and 3 mantissa bits suffice for k/8 values.
      uint16_t h = 0;
      if (v != 0.0f) {
        int e;
        const float m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
        const uint16_t mant = static_cast<uint16_t>((m * 2.0f - 1.0f) * 1024.0f);
        h = static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | mant);
      }
      std::memcpy(&x.buf[i * 2], &h, 2);
    } else {
      x.buf[i * elem] = static_cast<uint8_t>(i % 3);  // int32 metadata is written by its maker
    }
  }
}

// A tensor of `shape` and dtype, maybe spoiled in one way chosen by the input.
// `spoil` false gives a valid tensor. The buffer always covers what the (possibly
// spoiled) shape and strides address, so only the library can read out of bounds;
// strides and offsets the buffer cannot cover (kinds 16, 18) are ones the library must
// refuse: their byte span passes PTRDIFF_MAX.
Tensor make(Bytes &in, std::initializer_list<int64_t> shape, DLDataType dtype, bool spoil, bool variants = true) {
  Tensor x;
  int nd = 0;
  for (int64_t d : shape) x.shape[nd++] = d;
  x.t.ndim = nd;
  x.t.dtype = dtype;
  x.t.device = DLDevice{kDLCPU, 0};
  x.t.shape = x.shape;
  x.t.strides = nullptr;
  int64_t pad = 0;
  uint64_t offset = 0;
  const int ebytes = std::max(1, (x.t.dtype.bits * x.t.dtype.lanes) / 8);
  // Valid variants: padded rows, an aligned offset, outer dimensions in swapped order.
  const int kind = spoil ? in.pick(19) : (variants && in.pick(4) == 0 ? 10 + in.pick(2) + 9 * in.pick(2) : 0);
  bool arbitrary = false;  // strides set below, the buffer sized to cover them
  switch (kind) {
    case 1:
      x.t.ndim = nd + (nd < 4 ? 1 : -1);
      if (x.t.ndim > nd) x.shape[nd] = 1;
      break;
    case 2:
      if (nd) x.shape[in.pick(nd)] += 1 + in.pick(2);
      break;
    case 3: x.t.dtype = in.pick(2) ? DLDataType{kDLInt, 32, 1} : DLDataType{kDLFloat, 64, 1}; break;
    case 4: x.t.dtype.lanes = 2; break;
    case 5: x.t.device = DLDevice{kDLCUDA, 0}; break;
    case 6: x.t.device = DLDevice{kDLCUDAHost, 0}; break;
    case 7:
      if (nd) x.shape[in.pick(nd)] = -1 - in.pick(3);
      break;
    case 8: pad = 1; break;   // last-dimension stride 2: not contiguous
    case 9: pad = -1; break;  // a negative stride
    case 10: pad = 3; break;  // padded rows (valid when only the last dim must be contiguous)
    case 11: offset = 8; break;
    case 12: x.t.shape = nullptr; break;
    case 13: x.shape[0] = 0; break;
    case 14:  // element counts past int64 (or a huge first dimension): must be rejected
      x.shape[0] = INT64_MAX / 2;
      if (nd > 1 && in.pick(2)) x.shape[1] = 4;
      break;
    case 15:  // arbitrary small strides, 0 (broadcast rows) included; the buffer covers them
      x.t.strides = x.strides;
      for (int d = 0; d < nd; ++d) x.strides[d] = in.one_of<int64_t>({0, 1, 1, 2, 3, 5, 8, 16, 64, 100});
      arbitrary = true;
      break;
    case 16: {  // one stride whose byte span passes PTRDIFF_MAX (2^62 elements of >= 2 bytes)
      x.t.strides = x.strides;
      for (int d = nd - 1, st = 1; d >= 0; --d) {
        x.strides[d] = st;
        st *= static_cast<int>(std::max<int64_t>(x.shape[d], 1));
      }
      if (nd) {
        const int d = in.pick(nd);
        // 2^62 - 4 with 4-byte elements is the review's case (the byte offset wrapped to -16);
        // any candidate whose one step stays below 2^63 bytes is raised to the first that does
        // not, so the span surely passes PTRDIFF_MAX whatever the dtype.
        int64_t c = in.one_of<int64_t>(
            {int64_t(1) << 62, (int64_t(1) << 62) - 4, INT64_MAX / 2, INT64_MAX, (int64_t(1) << 61) + 1});
        if (static_cast<unsigned __int128>(c) * static_cast<unsigned>(ebytes) <
            (static_cast<unsigned __int128>(1) << 63))
          c = static_cast<int64_t>(std::min<uint64_t>(
              ((uint64_t(1) << 63) + static_cast<uint64_t>(ebytes) - 1) / static_cast<uint64_t>(ebytes),
              INT64_MAX));  // 1-byte elements: INT64_MAX + the first element's byte pass it too
        x.strides[d] = c;
        if (x.shape[d] < 2) x.shape[d] = 2;  // the stride must be stepped over once
      }
      break;
    }
    case 17: offset = in.u8() % 19; break;  // any small offset, aligned to the element or not
    case 18:                                // an offset past PTRDIFF_MAX, with the span or alone
      offset = in.one_of<uint64_t>({uint64_t(1) << 63, UINT64_MAX - 7, UINT64_MAX, (uint64_t(1) << 63) + 2});
      break;
    case 19: {  // valid: the two outer dimensions' strides swapped (e.g. [T, H, D] stored as [H, T, D])
      if (nd < 3) break;
      x.t.strides = x.strides;
      x.strides[nd - 1] = 1;
      x.strides[nd - 2] = x.shape[nd - 1] * std::max<int64_t>(x.shape[0], 1);
      x.strides[0] = x.shape[nd - 1];
      for (int d = 1; d < nd - 2; ++d) x.strides[d] = x.strides[nd - 2] * x.shape[nd - 2];
      if (nd == 4) {
        x.strides[1] = x.shape[3];
        x.strides[2] = x.shape[3] * x.shape[1];
        x.strides[0] = x.strides[2] * x.shape[2];
      }
      arbitrary = true;
      break;
    }
    case 20: offset = static_cast<uint64_t>(ebytes) * (1 + in.pick(5)); break;  // valid: whole elements
    default: break;
  }
  if (pad != 0 && nd > 0) {
    x.t.strides = x.strides;
    int64_t s = (pad == 1) ? 2 : 1;
    for (int d = nd - 1; d >= 0; --d) {
      x.strides[d] = s;
      const int64_t dim = x.shape[d] > 0 ? x.shape[d] : 0;
      s *= dim + (d == nd - 1 && pad == 3 ? 3 : 0);
      if (d == nd - 1 && pad == 3) x.strides[d] = 1;
    }
    if (pad == -1) x.strides[0] = -x.strides[0];
  }
  // Elements addressed: 1 + sum |shape - 1| * |stride| (at least the compact count).
  // Dimensions clamped for sizing: a huge one is rejected before any element is read.
  auto clamp = [](int64_t dim) { return dim > 0 ? std::min<int64_t>(dim, 1 << 12) : 0; };
  int64_t numel = 1, extent = 1;
  for (int d = 0; d < nd; ++d) numel *= clamp(x.shape[d]);
  if (x.t.strides && kind != 16) {
    for (int d = 0; d < nd; ++d)
      if (x.shape[d] > 1) extent += (clamp(x.shape[d]) - 1) * std::llabs(x.strides[d]);
  }
  (void)arbitrary;
  // Room for the intended shape too: the caller fills metadata by it, spoiled or not.
  int64_t intended = 1;
  for (int64_t dim : shape) intended *= dim > 0 ? dim : 0;
  const int64_t elems = std::max({numel, extent, intended}) + 1;
  const uint64_t room = kind == 18 ? 0 : offset;  // a huge offset is never reached
  x.buf.assign(static_cast<size_t>(elems * ebytes + static_cast<int64_t>(room) + 16), 0);
  fill(x, in);
  x.t.byte_offset = offset;
  x.t.data = x.buf.data();
  if (spoil && kind == 0 && in.pick(2)) x.t.data = nullptr;  // NULL data
  return x;
}

// A view of `base`'s memory with its own shape (and strides), for aliasing cases.
Tensor alias_of(const Tensor &base, std::initializer_list<int64_t> shape, int64_t element_shift) {
  Tensor x;
  x.t = base.t;
  int nd = 0;
  for (int64_t d : shape) x.shape[nd++] = d;
  x.t.ndim = nd;
  x.t.shape = x.shape;
  x.t.strides = nullptr;
  x.t.byte_offset = base.t.byte_offset + static_cast<uint64_t>(element_shift) * (base.t.dtype.bits / 8);
  return x;  // x.buf stays empty: the memory is base's
}

bool all_finite(const Tensor &x) {
  const DLTensor &t = x.t;
  const size_t n = (x.buf.size() - t.byte_offset) / (t.dtype.bits / 8);
  const uint8_t *p = x.buf.data() + t.byte_offset;
  int64_t numel = 1;
  for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
  if (t.strides) return true;  // padded rows stay poisoned
  for (size_t i = 0; i < n && static_cast<int64_t>(i) < numel; ++i) {
    if (t.dtype.bits == 32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      if (!std::isfinite(f)) return false;
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      const bool bf = t.dtype.code == kDLBfloat;
      if (bf ? (h & 0x7f80) == 0x7f80 : (h & 0x7c00) == 0x7c00) return false;
    }
  }
  return true;
}

// Whether two indices of a (small) tensor reach the same element: the brute-force truth
// the library's stride rule must agree with for outputs.
bool has_repeated_element(const DLTensor &t) {
  std::vector<int64_t> offsets;
  int64_t idx[4] = {0, 0, 0, 0};
  int64_t numel = 1;
  for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
  for (int64_t n = 0; n < numel; ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * (t.strides ? t.strides[d] : 1);
    offsets.push_back(off);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

void poison(Tensor &x) {
  for (size_t i = x.t.byte_offset; i < x.buf.size(); ++i) x.buf[i] = 0xff;  // NaN in every float dtype
}

// ---- the operations -------------------------------------------------------------------------

int pick_pool(World &w, Bytes &in) { return w.pools.empty() ? -1 : in.pick(static_cast<int>(w.pools.size())); }
int pick_seq(World &w, Bytes &in) { return w.seqs.empty() ? -1 : in.pick(static_cast<int>(w.seqs.size())); }
bspa_layout *pick_layout(World &w, Bytes &in) {
  return w.layouts.empty() ? nullptr : w.layouts[static_cast<size_t>(in.pick(static_cast<int>(w.layouts.size())))];
}

// An FP8 pool's scales, from no input bytes (so the corpus keeps its meaning): a refused
// NaN and a refused wrong count first (must change nothing), then every layer but the
// last set, so launches meet both a scaled layer and one without scales (refused).
void set_fp8_scales(World &w, const PoolState &ps) {
  std::vector<float> k(static_cast<size_t>(ps.hkv), 1.0f / 64), v(static_cast<size_t>(ps.hkv), 0.5f);
  std::vector<float> bad = k;
  bad.back() = std::nanf("");
  run(w, "bspa_pool_set_kv_scales", [&] { return bspa_pool_set_kv_scales(ps.h, 0, bad.data(), v.data(), ps.hkv); });
  run(w, "bspa_pool_set_kv_scales", [&] { return bspa_pool_set_kv_scales(ps.h, 0, k.data(), v.data(), ps.hkv + 1); });
  for (int32_t layer = 0; layer + 1 < ps.num_layers; ++layer)
    if (run(w, "bspa_pool_set_kv_scales",
            [&] { return bspa_pool_set_kv_scales(ps.h, layer, k.data(), v.data(), ps.hkv); }) != BSPA_OK)
      die("bspa_pool_set_kv_scales refused valid scales:", bspa_last_error());
  std::vector<float> back(static_cast<size_t>(ps.hkv));
  if (ps.num_layers > 1 && (bspa_pool_get_kv_scales(ps.h, 0, back.data(), nullptr, ps.hkv) != BSPA_OK || back != k))
    die("bspa_pool_get_kv_scales does not return what was set");
}

void op_pool_create(World &w, Bytes &in) {
  if (static_cast<int>(w.pools.size()) >= kMaxPools) return;
  bspa_pool_options o;
  run(w, "bspa_pool_options_init", [&] { return bspa_pool_options_init(&o); });
  o.dtype = in.one_of({0, 1, 2, 2, 3, -1});
  o.num_layers = in.one_of({0, 1, 1, 2, -1});
  o.num_kv_heads = in.one_of({1, 1, 2, 0, -3});
  o.head_dim = in.one_of({1, 4, 8, 8, 16, 0});
  o.page_size = in.one_of({16, 16, 32, 0, 24, 512, -16});
  o.num_pages = in.one_of<int64_t>({1, 2, 3, 4, 6, 8, 12, 0, -1, int64_t(1) << 40});
  if (o.num_pages == 0) o.memory_bytes = in.one_of<uint64_t>({0, 1, 4096, 65536, UINT64_MAX});
  switch (in.pick(12)) {
    case 0: o.version = 0; break;
    case 1: o.version = BSPA_POOL_OPTIONS_VERSION + 1; break;
    case 2: o.device_type = kDLCUDA; break;
    case 3: o.device_type = 7; break;
    case 4: o.device_id = 1; break;
    case 5: o.hash_seed = in.u8(); break;
    case 6:
    case 7:
    case 8: o.events_capacity = in.one_of<int64_t>({1, 2, 5, 64, 4096, -1, int64_t(1) << 40}); break;
    default: break;
  }
  // Geometries near the overflow limits (the review's 2.7 GiB pool that stood for 2^128 +
  // 2.7 GiB bytes among them): a pool past PTRDIFF_MAX bytes must be refused; one that
  // fits but is too large to exercise here is not created.
  bool must_fail = false;
  if (in.pick(5) == 0) {
    o.version = BSPA_POOL_OPTIONS_VERSION;
    o.device_type = kDLCPU;
    o.device_id = 0;
    o.dtype = in.one_of({0, 1, 2});
    o.num_layers = in.one_of({1, 2, 0, 2059719833, INT32_MAX, 1 << 20});
    o.num_kv_heads = in.one_of({1, 2, 1993418163, INT32_MAX, 1 << 16});
    o.head_dim = in.one_of({1, 8, 1929630342, INT32_MAX, 1 << 20});
    o.page_size = in.one_of({16, 256});
    o.num_pages = in.one_of<int64_t>({1, 2, 20971467, INT32_MAX, 0});
    o.memory_bytes = in.one_of<uint64_t>({UINT64_MAX, uint64_t(1) << 62, uint64_t(1) << 40, 1 << 20, 4096});
    // The size in 128 bits, saturating: no wrap can hide an overflow here.
    using u128 = unsigned __int128;
    const u128 cap = u128(1) << 100;
    auto mul = [&](u128 a, u128 b) { return (b != 0 && a > cap / b) ? cap : a * b; };
    const u128 elem = o.dtype == BSPA_DTYPE_F32 ? 4 : 2;
    const u128 per_page =
        mul(mul(mul(mul(mul(u128(o.num_layers), 2), u128(o.num_kv_heads)), u128(o.page_size)), u128(o.head_dim)), elem);
    u128 pages = u128(o.num_pages);
    bool defined = true;
    if (o.num_pages == 0) {
      const u128 budget = std::min<u128>(o.memory_bytes, u128(PTRDIFF_MAX));
      if (o.num_layers == 0 || u128(o.memory_bytes) < per_page) {
        must_fail = true;  // no storage to derive pages from, or not one page in the budget
        defined = false;
      } else {
        pages = std::min<u128>(budget / per_page, u128(INT32_MAX));
      }
    }
    const u128 total = mul(per_page, pages);
    if (per_page > u128(PTRDIFF_MAX) || total > u128(PTRDIFF_MAX)) must_fail = true;
    if (!must_fail && defined && (total > (u128(64) << 20) || pages > 4096)) return;  // fits, but too big here
  }
  const int null_arg = in.pick(10);
  bspa_pool *p = reinterpret_cast<bspa_pool *>(&o);  // must be overwritten with NULL on failure
  const bspa_status s = run(w, "bspa_pool_create", [&] {
    return bspa_pool_create(null_arg == 0 ? nullptr : &p, null_arg == 1 ? nullptr : &o);
  });
  if (must_fail && s != BSPA_ERR_INVALID_ARGUMENT && s != BSPA_ERR_NULL_POINTER)
    die("bspa_pool_create accepted (or misreported) a pool past PTRDIFF_MAX bytes:", bspa_status_string(s));
  if (s != BSPA_OK) {
    if (null_arg != 0 && p != nullptr) die("bspa_pool_create failed but left *pool non-NULL");
    return;
  }
  if (p == nullptr) die("bspa_pool_create succeeded with NULL");
  PoolState ps;
  ps.h = p;
  ps.options = o;
  ps.page_size = o.page_size;
  ps.num_layers = o.num_layers;
  ps.hkv = o.num_kv_heads;
  ps.head_dim = o.head_dim;
  ps.dtype = o.dtype;
  struct bspa_pool_stats st;
  bspa_pool_stats(p, &st);
  ps.num_pages = static_cast<int32_t>(st.pages_total);
  // A memory_bytes pool too big to exercise, or rows too wide for the harness's tensors
  // (their buffers are sized with dimensions clamped to 4096): drop it.
  if (ps.num_pages > 4096 || ps.hkv > 64 || ps.head_dim > 256) {
    bspa_pool_destroy(p);
    return;
  }
  w.pools.push_back(ps);
  if (o.dtype == BSPA_DTYPE_FP8_E4M3) set_fp8_scales(w, ps);
}

void op_pool_destroy(World &w, Bytes &in) {
  const int i = pick_pool(w, in);
  if (i < 0) return;
  w.drop_batches_using(nullptr, i);
  w.drop_transfers_of(i);
  bspa_pool_destroy(w.pools[static_cast<size_t>(i)].h);
  w.pools.erase(w.pools.begin() + i);
  // The pool destroyed its sequences.
  World::forget_pool(
      w.seqs, i, [](SeqState &q) -> int & { return q.pool; }, [](SeqState &) {});
  for (auto &b : w.batches)
    if (b.pool > i) --b.pool;
  w.check_pools();
}

void op_pool_kv(World &w, Bytes &in) {
  const int i = pick_pool(w, in);
  const bool null_pool = i < 0 || in.pick(8) == 0;
  const int32_t layer = in.one_of({0, 1, -1, 2, 5});
  DLTensor k{}, v{};
  const int which = in.pick(4);
  const bspa_status s = run(w, "bspa_pool_kv", [&] {
    return bspa_pool_kv(null_pool ? nullptr : w.pools[static_cast<size_t>(i)].h, layer, which == 1 ? nullptr : &k,
                        which == 2 ? nullptr : &v);
  });
  if (s == BSPA_OK) {
    const PoolState &p = w.pools[static_cast<size_t>(i)];
    const DLTensor &t = which == 1 ? v : k;
    if (t.ndim != 4 || t.shape[0] != p.num_pages || t.shape[2] != p.page_size || t.data == nullptr)
      die("bspa_pool_kv returned a wrong view");
  }
}

void op_pool_stats(World &w, Bytes &in) {
  const int i = pick_pool(w, in);
  struct bspa_pool_stats st;
  const int null_arg = in.pick(4);
  const bspa_status s = run(w, "bspa_pool_stats", [&] {
    return bspa_pool_stats(null_arg == 0 || i < 0 ? nullptr : w.pools[static_cast<size_t>(i)].h,
                           null_arg == 1 ? nullptr : &st);
  });
  if (s == BSPA_OK && st.pages_free + st.pages_cached + st.pages_in_use != st.pages_total)
    die("bspa_pool_stats: free + cached + in use != total");
  if (null_arg == 0 && bspa_pool_check(nullptr) != BSPA_ERR_NULL_POINTER) die("bspa_pool_check(NULL)");
}

void op_seq_create(World &w, Bytes &in) {
  if (static_cast<int>(w.seqs.size()) >= kMaxSeqs) return;
  const int i = pick_pool(w, in);
  bspa_seq_options o;
  run(w, "bspa_seq_options_init", [&] { return bspa_seq_options_init(&o); });
  const int salt = in.pick(3);
  o.salt = kSalts[salt];
  o.salt_len = salt ? std::strlen(kSalts[salt]) : 0;
  o.extra_key = in.pick(4) == 0 ? 7 : 0;
  const int mode = in.pick(12);
  if (mode == 0) o.version = 0;
  if (mode == 1) o.version = 9;
  if (mode == 2) {
    o.salt = nullptr;
    o.salt_len = 3;
  }
  const bool no_options = mode == 3;
  bspa_seq *s = reinterpret_cast<bspa_seq *>(&o);
  const bspa_status st = run(w, "bspa_seq_create", [&] {
    return bspa_seq_create(mode == 4 ? nullptr : &s, (i < 0 || mode == 5) ? nullptr : w.pools[static_cast<size_t>(i)].h,
                           no_options ? nullptr : &o);
  });
  if (st != BSPA_OK) {
    if (mode != 4 && s != nullptr) die("bspa_seq_create failed but left *seq non-NULL");
    return;
  }
  SeqState q;
  q.h = s;
  q.pool = i;
  q.salt = no_options ? 0 : salt;
  q.extra = no_options ? 0 : o.extra_key;
  w.seqs.push_back(q);
}

void op_seq_destroy(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  if (i < 0) {
    bspa_seq_destroy(nullptr);
    return;
  }
  SeqState &q = w.seqs[static_cast<size_t>(i)];
  // Batches of the sequence may outlive it: they hold its pages, which must not be handed
  // to another sequence while the batch can still write them (pool_check counts the
  // batches' references; the launches through such a batch below run under ASan).
  if (in.pick(2)) w.drop_batches_using(q.h, -1);
  bspa_seq_destroy(q.h);
  w.seqs.erase(w.seqs.begin() + i);
  w.check_pools();
}

// Every matched page must have been committed for exactly this prefix, salt and extra key.
void verify_hit(World &w, SeqState &q, const std::vector<int32_t> &prompt, int64_t cached) {
  PoolState &p = w.pools[static_cast<size_t>(q.pool)];
  if (cached < 0 || cached % p.page_size != 0) die("bspa_seq_match: cached not page-aligned");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > 0 ? cached > (n - 1) / p.page_size * p.page_size : cached != 0) die("bspa_seq_match: cached too long");
  int64_t np = 0;
  if (bspa_seq_pages(q.h, nullptr, 0, &np) != BSPA_OK || np != cached / p.page_size) die("bspa_seq_pages count");
  std::vector<int32_t> pages(static_cast<size_t>(np) + 1);
  if (bspa_seq_pages(q.h, pages.data(), np, &np) != BSPA_OK) die("bspa_seq_pages");
  for (int64_t j = 0; j < np; ++j) {
    auto it = p.shadow.find(pages[static_cast<size_t>(j)]);
    if (it == p.shadow.end()) die("bspa_seq_match handed out a page never committed");
    const Shadow &sh = it->second;
    const size_t len = static_cast<size_t>((j + 1) * p.page_size);
    if (sh.salt != q.salt || sh.extra != q.extra || sh.prefix.size() != len ||
        !std::equal(sh.prefix.begin(), sh.prefix.end(), prompt.begin()))
      die("bspa_seq_match handed out a page of another prefix, salt or extra key");
  }
}

void op_seq_match(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  const int64_t n = fuzz_count(in);
  std::vector<int32_t> tokens = make_tokens(in, n);
  const int mode = in.pick(10);
  int64_t cached = -7;
  const bspa_status s = run(w, "bspa_seq_match", [&] {
    return bspa_seq_match((i < 0 || mode == 0) ? nullptr : w.seqs[static_cast<size_t>(i)].h,
                          mode == 1 ? nullptr : tokens.data(), n, mode == 2 ? nullptr : &cached);
  });
  if (s != BSPA_OK) return;
  SeqState &q = w.seqs[static_cast<size_t>(i)];
  verify_hit(w, q, tokens, cached);
  q.tokens.assign(tokens.begin(), tokens.begin() + cached);
  q.computed = cached;
}

void op_seq_append(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  const int64_t n = fuzz_count(in);
  std::vector<int32_t> tokens;
  // Usually the continuation of a family prompt, so commits publish shareable pages.
  if (i >= 0 && n > 0) {
    const SeqState &q = w.seqs[static_cast<size_t>(i)];
    std::vector<int32_t> all = make_tokens(in, static_cast<int64_t>(q.tokens.size()) + n);
    tokens.assign(all.end() - n, all.end());
  } else {
    tokens = make_tokens(in, n);
  }
  const int mode = in.pick(10);
  const bspa_status s = run(w, "bspa_seq_append", [&] {
    return bspa_seq_append((i < 0 || mode == 0) ? nullptr : w.seqs[static_cast<size_t>(i)].h,
                           mode == 1 ? nullptr : tokens.data(), n);
  });
  if (s == BSPA_OK) {
    SeqState &q = w.seqs[static_cast<size_t>(i)];
    q.tokens.insert(q.tokens.end(), tokens.begin(), tokens.end());
  }
}

void op_seq_commit(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  if (i < 0) {
    run(w, "bspa_seq_commit", [&] { return bspa_seq_commit(nullptr, 0); });
    return;
  }
  SeqState &q = w.seqs[static_cast<size_t>(i)];
  const int64_t held = static_cast<int64_t>(q.tokens.size());
  int64_t computed;
  switch (in.pick(6)) {
    case 0: computed = q.computed - 1 - in.pick(3); break;
    case 1: computed = held + 1 + in.pick(20); break;
    case 2: computed = held; break;
    case 3: computed = q.computed; break;
    default: computed = q.computed + in.pick(static_cast<int32_t>(held - q.computed) + 1); break;
  }
  const bspa_status s = run(w, "bspa_seq_commit", [&] { return bspa_seq_commit(q.h, computed); });
  if (s != BSPA_OK) return;
  q.computed = computed;
  PoolState &p = w.pools[static_cast<size_t>(q.pool)];
  int64_t np = 0;
  bspa_seq_pages(q.h, nullptr, 0, &np);
  std::vector<int32_t> pages(static_cast<size_t>(np) + 1);
  if (bspa_seq_pages(q.h, pages.data(), np, &np) != BSPA_OK) die("bspa_seq_pages after commit");
  for (int64_t j = 0; (j + 1) * p.page_size <= computed; ++j)
    p.shadow[pages[static_cast<size_t>(j)]] =
        Shadow{q.salt, q.extra, std::vector<int32_t>(q.tokens.begin(), q.tokens.begin() + (j + 1) * p.page_size)};
}

void op_seq_pages(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  const int64_t cap = in.one_of<int64_t>({0, 1, 2, 8, 64, -1});
  std::vector<int32_t> buf(static_cast<size_t>(cap > 0 ? cap : 1), -5);
  int64_t np = -9;
  const int mode = in.pick(8);
  const bspa_status s = run(w, "bspa_seq_pages", [&] {
    return bspa_seq_pages((i < 0 || mode == 0) ? nullptr : w.seqs[static_cast<size_t>(i)].h,
                          (mode == 1 || cap == 0) ? nullptr : buf.data(), cap, mode == 2 ? nullptr : &np);
  });
  if (i < 0) return;
  const SeqState &q = w.seqs[static_cast<size_t>(i)];
  const PoolState &p = w.pools[static_cast<size_t>(q.pool)];
  const int64_t want = (static_cast<int64_t>(q.tokens.size()) + p.page_size - 1) / p.page_size;
  if ((s == BSPA_OK || s == BSPA_ERR_BUFFER_TOO_SMALL) && mode > 2 && np != want) die("bspa_seq_pages count");
  if (s == BSPA_ERR_BUFFER_TOO_SMALL && buf[0] != -5) die("bspa_seq_pages wrote into a too-small buffer");
  if (s == BSPA_OK && cap > 0 && mode > 2)
    for (int64_t j = 0; j < np; ++j)
      if (buf[static_cast<size_t>(j)] < 0 || buf[static_cast<size_t>(j)] >= p.num_pages) die("bspa_seq_pages id");
}

void op_seq_info(World &w, Bytes &in) {
  const int i = pick_seq(w, in);
  struct bspa_seq_info info;
  const int mode = in.pick(6);
  const bspa_status s = run(w, "bspa_seq_info", [&] {
    return bspa_seq_info((i < 0 || mode == 0) ? nullptr : w.seqs[static_cast<size_t>(i)].h,
                         mode == 1 ? nullptr : &info);
  });
  if (s != BSPA_OK) return;
  const SeqState &q = w.seqs[static_cast<size_t>(i)];
  if (info.num_tokens != static_cast<int64_t>(q.tokens.size()) || info.num_computed != q.computed)
    die("bspa_seq_info disagrees with the calls made");
}

void op_layout(World &w, Bytes &in) {
  bspa_layout *l = reinterpret_cast<bspa_layout *>(&w);
  const int kind = in.pick(3);
  const bool null_out = in.pick(12) == 0;
  bspa_status s;
  if (kind == 0) {
    bspa_layout_strided_options o;
    run(w, "bspa_layout_strided_options_init", [&] { return bspa_layout_strided_options_init(&o); });
    o.block_size = in.one_of({16, 32, 64, 1, 0, -4});
    o.local_blocks = in.one_of({1, 2, 4, 16, 0});
    o.vert_stride = in.one_of({1, 2, 8, 0, -1});
    o.homo_head = in.one_of({0, 1, 2});
    o.num_heads_total = in.one_of({1, 2, 4, 8, 0});
    o.head_begin = in.one_of({0, 0, 1, 2, -1, INT32_MAX});
    o.num_heads = in.one_of({1, 2, 4, 0});
    if (in.pick(10) == 0) o.version = in.pick(2) ? 0 : 2;
    const bool null_opt = in.pick(12) == 0;
    s = run(w, "bspa_layout_create_strided",
            [&] { return bspa_layout_create_strided(null_out ? nullptr : &l, null_opt ? nullptr : &o); });
  } else if (kind == 1) {
    const int32_t heads = in.one_of({1, 2, 4, 0, -2});
    s = run(w, "bspa_layout_create_dense", [&] { return bspa_layout_create_dense(null_out ? nullptr : &l, heads); });
  } else {
    const int32_t heads = in.one_of({1, 2, 4, 0, -1});
    const int32_t bs = in.one_of({16, 32, 1, 0});
    const int32_t rows = in.one_of({1, 2, 3, 6, 0, -1});
    const int64_t crow_n = heads > 0 && rows >= 0 ? int64_t(heads) * (rows + 1) : 1;
    std::vector<int32_t> crow(static_cast<size_t>(crow_n), 0), col;
    if (in.pick(3) == 0) {
      // Raw: offsets stepping by anything (rows of any length, decreasing rows, huge and
      // negative offsets) and entries of any value.
      int32_t at = 0;
      for (size_t i = 0; i < crow.size(); ++i) {
        const int32_t step = in.one_of({0, 1, 1, 1, 2, 3, -1, -2, 64, INT32_MAX / 2});
        at = in.pick(16) == 0 ? in.one_of({INT32_MAX, INT32_MIN, 0, -1})
                              : static_cast<int32_t>(std::clamp<int64_t>(int64_t(at) + step, INT32_MIN, INT32_MAX));
        crow[i] = i == 0 && in.pick(4) != 0 ? 0 : at;
      }
      for (int i = 0, n = in.pick(40); i < n; ++i) col.push_back(in.one_of({0, 0, 1, 2, 3, 5, -1, INT32_MAX}));
    } else {
      // A valid layout (diagonal plus some earlier blocks), then maybe one spoiled entry.
      int32_t nnz = 0;
      for (int32_t h = 0; rows >= 0 && h < heads; ++h) {
        for (int32_t r = 0; r < rows; ++r) {
          crow[static_cast<size_t>(h * (rows + 1) + r)] = nnz;
          for (int32_t k = 0; k <= r; ++k)
            if (k == r || in.pick(2)) {
              col.push_back(k);
              ++nnz;
            }
        }
        crow[static_cast<size_t>(h * (rows + 1) + rows)] = nnz;
      }
      if (in.pick(3) == 0 && !crow.empty())
        crow[static_cast<size_t>(in.pick(static_cast<int32_t>(crow.size())))] = in.one_of({-1, 0, 1, 3, 64, INT32_MAX});
      if (in.pick(3) == 0 && !col.empty())
        col[static_cast<size_t>(in.pick(static_cast<int32_t>(col.size())))] = in.one_of({-1, 0, 5, 1});
    }
    // col exactly as long as the header defines it (crow's last value), on the heap, so
    // one entry read past it is an ASan report (the harness used to pad col to the largest
    // crow value and so hid the review's over-read). A last value beyond what any valid
    // layout of this size holds (each row at most row + 1 entries) gets only that many:
    // validation stops at the first bad entry, so it can never read further.
    const int64_t last = crow.back();
    const int64_t most = heads > 0 && rows > 0 ? int64_t(heads) * (rows + 1) * (rows + 2) / 2 + 2 : 2;
    const size_t col_n = static_cast<size_t>(std::clamp<int64_t>(last, 0, most));
    std::unique_ptr<int32_t[]> col_exact(new int32_t[col_n]);
    for (size_t i = 0; i < col_n; ++i) col_exact[i] = i < col.size() ? col[i] : 0;
    std::unique_ptr<int32_t[]> crow_exact(new int32_t[crow.size()]);
    std::copy(crow.begin(), crow.end(), crow_exact.get());
    const int null_arr = in.pick(12);
    s = run(w, "bspa_layout_create_csr", [&] {
      return bspa_layout_create_csr(null_out ? nullptr : &l, heads, bs, rows,
                                    null_arr == 0 ? nullptr : crow_exact.get(),
                                    null_arr == 1 ? nullptr : col_exact.get());
    });
  }
  if (s != BSPA_OK) {
    if (!null_out && l != nullptr) die("a layout constructor failed but left *layout non-NULL");
    return;
  }
  if (static_cast<int>(w.layouts.size()) >= kMaxLayouts) {
    bspa_layout_destroy(w.layouts.front());
    w.layouts.erase(w.layouts.begin());
  }
  w.layouts.push_back(l);
}

void op_layout_allowed(World &w, Bytes &in) {
  bspa_layout *l = pick_layout(w, in);
  const int32_t head = in.one_of({0, 1, 3, -1, 99});
  const int64_t qb = in.one_of<int64_t>({0, 1, 2, 5, 40, -1, INT64_MAX});
  const int64_t kb = in.one_of<int64_t>({0, 1, 2, 5, -3, INT64_MAX});
  int32_t allowed = -1;
  const int mode = in.pick(8);
  const bspa_status s = run(w, "bspa_layout_allowed", [&] {
    return bspa_layout_allowed(mode == 0 ? nullptr : l, head, qb, kb, mode == 1 ? nullptr : &allowed);
  });
  if (s == BSPA_OK && allowed != 0 && allowed != 1) die("bspa_layout_allowed: not 0 or 1");
  if (s == BSPA_OK && kb > qb && allowed) die("bspa_layout_allowed: a future block is allowed");
}

// A batch's rows: n sequences (mostly of pool pi, sometimes another pool's, a duplicate or
// NULL) and their query lengths (mostly within what each has left).
void pick_rows(World &w, Bytes &in, int pi, int32_t &n, std::vector<bspa_seq *> &seqs, std::vector<int32_t> &qlens) {
  n = in.one_of({1, 1, 2, 3, 0, -1});
  for (int32_t j = 0; j < n; ++j) {
    int s = -1;
    for (int tries = 0; tries < 4 && s < 0; ++tries) {
      const int c = pick_seq(w, in);
      if (c >= 0 && (w.seqs[static_cast<size_t>(c)].pool == pi || in.pick(8) == 0)) s = c;
    }
    if (s < 0 && in.pick(4) != 0) {
      n = j;
      break;
    }
    seqs.push_back(s < 0 ? nullptr : w.seqs[static_cast<size_t>(s)].h);
    int32_t ql = 0;
    if (s >= 0) {
      const SeqState &q = w.seqs[static_cast<size_t>(s)];
      const int32_t left = static_cast<int32_t>(static_cast<int64_t>(q.tokens.size()) - q.computed);
      ql = in.pick(6) == 0 ? in.one_of({-1, left + 1, 0}) : (left > 0 ? in.pick(left + 1) : 0);
    }
    qlens.push_back(ql);
  }
  if (n == 0 && in.pick(2)) n = in.one_of({0, -1});
}

void make_room_for_a_batch(World &w) {
  if (static_cast<int>(w.batches.size()) >= kMaxBatches) {
    bspa_batch_destroy(w.batches.front().h);
    w.batches.erase(w.batches.begin());
  }
}

void op_batch_create(World &w, Bytes &in) {
  const int pi = pick_pool(w, in);
  make_room_for_a_batch(w);
  int32_t n = 0;
  std::vector<bspa_seq *> seqs;
  std::vector<int32_t> qlens;
  pick_rows(w, in, pi, n, seqs, qlens);
  const int mode = in.pick(10);
  bspa_batch *b = reinterpret_cast<bspa_batch *>(&w);
  const bspa_status s = run(w, "bspa_batch_create", [&] {
    return bspa_batch_create(mode == 0 ? nullptr : &b,
                             (pi < 0 || mode == 1) ? nullptr : w.pools[static_cast<size_t>(pi)].h,
                             mode == 2 ? nullptr : seqs.data(), mode == 3 ? nullptr : qlens.data(), n, nullptr);
  });
  if (s != BSPA_OK) {
    if (mode != 0 && b != nullptr) die("bspa_batch_create failed but left *batch non-NULL");
    return;
  }
  BatchState bs;
  bs.h = b;
  bs.pool = pi;
  bs.seqs = seqs;
  for (int32_t ql : qlens) bs.total_q += ql;
  w.batches.push_back(bs);
}

// A reusable batch (limits near and past their bounds, fixed launch shapes or not), not
// planned yet: launches through it must fail until op_batch_plan plans it.
void op_batch_reusable(World &w, Bytes &in) {
  const int pi = pick_pool(w, in);
  make_room_for_a_batch(w);
  bspa_batch_options o;
  if (bspa_batch_options_init(&o) != BSPA_OK) die("bspa_batch_options_init failed");
  o.max_seqs = in.one_of({1, 2, 4, 8, 0, -1});
  o.max_tokens = in.one_of<int64_t>({16, 64, 300, 1, 0, -5, int64_t(1) << 40});
  o.max_query_len = in.one_of({0, 0, 8, 64, -1, 1 << 30});
  o.max_seq_tokens = in.one_of<int64_t>({64, 512, 4096, 1, 0, int64_t(1) << 40});
  o.fixed_launch_shape = in.one_of({0, 1, 1, 2});
  const int mode = in.pick(10);
  if (mode == 3) o.version = in.pick(2) ? 0 : BSPA_BATCH_OPTIONS_VERSION + 1;
  bspa_batch *b = reinterpret_cast<bspa_batch *>(&w);
  const bspa_status s = run(w, "bspa_batch_create_reusable", [&] {
    return bspa_batch_create_reusable(mode == 0 ? nullptr : &b,
                                      (pi < 0 || mode == 1) ? nullptr : w.pools[static_cast<size_t>(pi)].h,
                                      mode == 2 ? nullptr : &o);
  });
  if (s != BSPA_OK) {
    if (mode != 0 && b != nullptr) die("bspa_batch_create_reusable failed but left *batch non-NULL");
    return;
  }
  if (mode == 3) die("bspa_batch_create_reusable accepted options of an unknown version");
  BatchState bs;
  bs.h = b;
  bs.pool = pi;
  bs.reusable = true;
  bs.fixed_rows = o.fixed_launch_shape ? o.max_tokens : -1;
  w.batches.push_back(bs);
}

// Re-plans a reusable batch (a one-step batch must refuse). A failed plan keeps the
// previous one (run() checks that nothing else changed).
void op_batch_plan(World &w, Bytes &in) {
  if (w.batches.empty()) return;
  BatchState &b = w.batches[static_cast<size_t>(in.pick(static_cast<int32_t>(w.batches.size())))];
  int32_t n = 0;
  std::vector<bspa_seq *> seqs;
  std::vector<int32_t> qlens;
  pick_rows(w, in, b.pool, n, seqs, qlens);
  const int mode = in.pick(10);
  const bspa_status s = run(w, "bspa_batch_plan", [&] {
    return bspa_batch_plan(mode == 0 ? nullptr : b.h, mode == 1 ? nullptr : seqs.data(),
                           mode == 2 ? nullptr : qlens.data(), n, nullptr);
  });
  if (s != BSPA_OK) return;
  if (!b.reusable) die("bspa_batch_plan re-planned a one-step batch");
  b.seqs = seqs;
  b.total_q = 0;
  for (int32_t ql : qlens) b.total_q += ql;
  if (b.fixed_rows >= 0) b.total_q = b.fixed_rows;  // fixed launch shapes: tensors of max_tokens rows
}

void op_batch_destroy(World &w, Bytes &in) {
  if (w.batches.empty()) {
    bspa_batch_destroy(nullptr);
    return;
  }
  const size_t i = static_cast<size_t>(in.pick(static_cast<int32_t>(w.batches.size())));
  bspa_batch_destroy(w.batches[i].h);
  w.batches.erase(w.batches.begin() + static_cast<long>(i));
}

// kv_write or prefill on a batch, with a tensor maybe spoiled.
void op_launch(World &w, Bytes &in, bool prefill) {
  if (w.batches.empty() || w.pools.empty()) return;
  const BatchState &b = w.batches[static_cast<size_t>(in.pick(static_cast<int32_t>(w.batches.size())))];
  // Usually the batch's own pool; sometimes another one.
  const int pi = in.pick(6) == 0 ? pick_pool(w, in) : b.pool;
  const PoolState &p = w.pools[static_cast<size_t>(pi)];
  const int32_t layer = in.pick(8) == 0 ? in.one_of({-1, 1, 2, 9}) : 0;
  const int bad = in.pick(5);  // which tensor is spoiled (4: none)
  const DLDataType dt = dl_of(p.dtype);
  const int64_t hkv = p.hkv, d = p.head_dim, t = b.total_q;
  const int mode = in.pick(10);
  // Aliasing the pool's own storage: a view of one of its layers (bspa_pool_kv), shifted by
  // a few elements, as an input of kv_write (must be refused: it would copy rows over
  // themselves) or as q of a prefill (allowed: both only read it), or as out (refused).
  DLTensor pool_view{};
  const int alias = in.pick(6);  // 0: k_new/out in the pool's storage; 1: q there; 2: out on q; 3: lse on out
  const bool have_view =
      alias <= 1 && p.num_layers > 0 &&
      bspa_pool_kv(p.h, in.pick(p.num_layers), in.pick(2) ? &pool_view : nullptr, &pool_view) == BSPA_OK;
  const int64_t view_elems = int64_t(p.num_pages) * p.hkv * p.page_size * p.head_dim;
  const int64_t shift = in.pick(3);
  auto pool_alias = [&](std::initializer_list<int64_t> shape) {
    Tensor x;
    x.t = pool_view;
    int nd = 0;
    for (int64_t dim : shape) x.shape[nd++] = dim;
    x.t.ndim = nd;
    x.t.shape = x.shape;
    x.t.byte_offset = static_cast<uint64_t>(shift) * (pool_view.dtype.bits / 8);
    return x;
  };
  if (!prefill) {
    Tensor k = make(in, {t, hkv, d}, dt, bad == 0), v = make(in, {t, hkv, d}, dt, bad == 1);
    // The library must refuse before reading, so the view may run past the storage's end.
    const bool aliased = have_view && alias == 0 && t > 0;
    Tensor ka;
    if (aliased) ka = pool_alias({t, hkv, d});
    const DLTensor *kt = aliased && in.pick(2) ? &ka.t : &k.t, *vt = aliased && kt == &k.t ? &ka.t : &v.t;
    bspa_kv_write_args a;
    bspa_kv_write_args_init(&a);
    a.layer = layer;
    a.k_new = mode == 2 ? nullptr : kt;
    a.v_new = mode == 3 ? nullptr : vt;
    // Mode 9: an args struct never initialised or newer than the library (refused).
    if (mode == 9) a.version = layer & 1 ? 0 : BSPA_KV_WRITE_ARGS_VERSION + 1;
    const bspa_status s = run(w, "bspa_kv_write", [&] {
      return bspa_kv_write(mode == 0 ? nullptr : p.h, mode == 1 ? nullptr : b.h, mode == 4 ? nullptr : &a, nullptr);
    });
    if (mode == 9 && s != BSPA_ERR_VERSION) die("bspa_kv_write accepted an args struct of an unknown version");
    if (aliased && s == BSPA_OK) die("bspa_kv_write accepted k_new or v_new inside the pool's storage");
    return;
  }
  bspa_layout *l = pick_layout(w, in);
  int32_t hq = hkv;
  bspa_layout *own = nullptr;
  if (l == nullptr || in.pick(3) == 0) {
    hq = static_cast<int32_t>(hkv) * in.one_of({1, 2});
    bspa_layout_create_dense(&own, hq);
    l = own;
  } else {
    // The layout's head count: the first head that is out of range.
    int32_t allowed;
    hq = 1;
    while (hq < 64 && bspa_layout_allowed(l, hq, 0, 0, &allowed) == BSPA_OK) ++hq;
  }
  Tensor q = make(in, {t, hq, d}, dt, bad == 2);
  Tensor out = make(in, {t, hq, d}, dt, bad == 3);
  const bool with_lse = in.pick(2);
  Tensor lse = make(in, {hq, t}, DLDataType{kDLFloat, 32, 1}, bad == 4 && in.pick(2));
  const float scale = in.pick(12) == 0 ? NAN : (in.pick(12) == 0 ? INFINITY : 0.125f);
  // Outputs that share memory with an input or each other must be refused (when
  // non-empty); q inside the pool's storage is a plain read and fine, if it fits there.
  const int64_t qo_elems = t * hq * d;
  bool overlapping = false;
  Tensor qa, oa, la;
  const DLTensor *qt = &q.t;
  DLTensor *ot = &out.t, *lt = with_lse ? &lse.t : nullptr;
  if (have_view && alias == 0 && qo_elems > 0) {
    oa = pool_alias({t, hq, d});
    ot = &oa.t;
    overlapping = true;
  } else if (have_view && alias == 1 && qo_elems > 0 && qo_elems + shift <= view_elems) {
    qa = pool_alias({t, hq, d});
    qt = &qa.t;
  } else if (alias == 2 && qo_elems > 0 && q.t.strides == nullptr) {
    const int64_t out_shift = in.pick(2) ? 0 : std::max<int64_t>(1, d / 2);  // out on q, or half a row on
    oa = alias_of(q, {t, hq, d}, out_shift);
    oa.t.dtype = dt;
    ot = &oa.t;
    overlapping = out_shift < qo_elems;  // a q of one element (d = 1) ends where out begins: apart
  } else if (alias == 3 && lt && qo_elems > 0 && out.t.strides == nullptr && out.t.byte_offset % 4 == 0 &&
             out.buf.size() >= out.t.byte_offset + static_cast<size_t>(hq * t * 4)) {
    la = alias_of(out, {hq, t}, 0);  // lse inside out
    la.t.dtype = DLDataType{kDLFloat, 32, 1};
    la.t.byte_offset = out.t.byte_offset;
    lt = &la.t;
    overlapping = true;
  } else if (alias == 4 && bad != 3 && qo_elems > 0) {
    // Strides that put rows of out on top of each other (a broadcast stride of 0, heads
    // one element apart): refused whenever two indices reach one element.
    out.t.strides = out.strides;
    out.strides[2] = 1;
    out.strides[1] = in.one_of<int64_t>({0, 1, d});
    out.strides[0] = in.one_of<int64_t>({0, 1, d, hq * d});
    overlapping = has_repeated_element(out.t);
  }
  bspa_prefill_args a;
  bspa_prefill_args_init(&a);
  a.layer = layer;
  a.layout = mode == 2 ? nullptr : l;
  a.q = mode == 3 ? nullptr : qt;
  a.out = mode == 4 ? nullptr : ot;
  a.lse = lt;
  a.scale = scale;
  // Mode 9: an args struct never initialised or newer than the library (refused).
  if (mode == 9) a.version = layer & 1 ? 0 : BSPA_PREFILL_ARGS_VERSION + 1;
  const bspa_status s = run(w, "bspa_prefill", [&] {
    return bspa_prefill(mode == 0 ? nullptr : p.h, mode == 1 ? nullptr : b.h, &a, nullptr);
  });
  if (mode == 9 && s != BSPA_ERR_VERSION) die("bspa_prefill accepted an args struct of an unknown version");
  if (overlapping && s == BSPA_OK) die("bspa_prefill accepted an output that overlaps an input, lse or itself");
  bspa_layout_destroy(own);
}

void op_prefill_paged(World &w, Bytes &in) {
  const DLDataType dt = dl_of(in.one_of({0, 1, 2}));
  const int64_t hkv = in.one_of({1, 2}), d = in.one_of({4, 8}), ps = in.one_of({1, 4, 16});
  const int64_t num_pages = in.one_of({1, 2, 4, 8}), seqs = in.one_of({1, 2, 3, 0}), max_pages = in.one_of({1, 2, 4});
  const int32_t group = in.one_of({1, 2});
  const int64_t hq = hkv * group;
  const int bad = in.pick(20);  // < 8: spoil one tensor or metadata entry
  Tensor kp = make(in, {num_pages, hkv, ps, d}, dt, bad == 0);
  Tensor vp = make(in, {num_pages, hkv, ps, d}, dt, bad == 1);
  // Metadata is filled compact from the buffer's start, so valid tensors get no layout variants.
  Tensor bt = make(in, {seqs, max_pages}, DLDataType{kDLInt, 32, 1}, bad == 2, false);
  Tensor qs = make(in, {seqs + 1}, DLDataType{kDLInt, 32, 1}, bad == 3, false);
  Tensor cl = make(in, {seqs}, DLDataType{kDLInt, 32, 1}, bad == 4, false);
  // Metadata that fits: every sequence's tokens within its block-table row.
  const int64_t cap = ps * max_pages;
  int32_t *qsv = reinterpret_cast<int32_t *>(qs.buf.data());
  int32_t *clv = reinterpret_cast<int32_t *>(cl.buf.data());
  int32_t *btv = reinterpret_cast<int32_t *>(bt.buf.data());
  const int64_t bt_elems = static_cast<int64_t>(bt.buf.size() / 4);
  for (int64_t j = 0; j < bt_elems; ++j) btv[j] = static_cast<int32_t>(in.pick(static_cast<int32_t>(num_pages)));
  int32_t total = 0;
  int32_t max_q = 0;
  qsv[0] = 0;
  for (int64_t i = 0; i < seqs; ++i) {
    const int32_t len = in.pick(static_cast<int32_t>(cap) + 1);
    const int32_t ctx = len ? in.pick(len) : 0;
    clv[i] = ctx;
    total += len - ctx;
    max_q = std::max(max_q, len - ctx);
    qsv[i + 1] = total;
  }
  if (bad == 5) {
    const int32_t vals[] = {-1, 1000, static_cast<int32_t>(num_pages), INT32_MAX, INT32_MIN};
    int32_t *targets[] = {qsv, clv, btv};
    const int which = in.pick(3);
    const int64_t len = which == 0 ? seqs + 1 : which == 1 ? seqs : seqs * max_pages;
    if (len > 0) targets[which][in.pick(static_cast<int32_t>(len))] = in.one_of(vals);
  }
  const int32_t max_query_len = bad == 6 ? in.one_of({-1, 0}) : max_q + in.pick(2);
  Tensor q = make(in, {total, hq, d}, dt, bad == 7);
  Tensor out = make(in, {total, hq, d}, dt, false);
  Tensor lse = make(in, {hq, total}, DLDataType{kDLFloat, 32, 1}, false);
  poison(out);
  poison(lse);
  bspa_layout *l = nullptr;
  if (in.pick(3) == 0 && !w.layouts.empty()) {
    l = pick_layout(w, in);
  } else {
    bspa_layout_create_dense(&l, static_cast<int32_t>(hq));
  }
  bspa_paged_args a;
  run(w, "bspa_paged_args_init", [&] { return bspa_paged_args_init(&a); });
  a.q = &q.t;
  a.out = &out.t;
  const bool with_lse = in.pick(2);
  a.lse = with_lse ? &lse.t : nullptr;
  a.k_pages = &kp.t;
  a.v_pages = &vp.t;
  a.block_table = &bt.t;
  a.query_starts = &qs.t;
  a.context_lens = &cl.t;
  a.max_query_len = max_query_len;
  a.layout = l;
  a.scale = 0.25f;
  const int mode = in.pick(16);
  switch (mode) {
    case 0: a.version = 0; break;
    case 1: a.q = nullptr; break;
    case 2: a.layout = nullptr; break;
    case 3: a.block_table = nullptr; break;
    case 4: a.scale = NAN; break;
    default: break;
  }
  // Outputs (and the workspace) on top of what the launch reads, or of each other: refused
  // whenever both are non-empty (the CPU backend would read metadata it had overwritten).
  const int alias = in.pick(10);
  bool overlapping = false;
  Tensor oa, la, ws;
  const int64_t out_elems = int64_t(total) * hq * d;
  if (alias == 0 && out_elems > 0) {
    const Tensor *targets[] = {&kp, &vp, &q, &bt, &qs, &cl};
    const Tensor &target = *targets[in.pick(6)];
    if (target.t.shape != nullptr && target.t.ndim > 0 && target.t.shape[0] > 0) {
      oa = alias_of(target, {total, hq, d}, in.pick(2));
      oa.t.dtype = out.t.dtype;
      oa.t.byte_offset = target.t.byte_offset;  // aligned to the target's elements, not out's
      a.out = &oa.t;
      overlapping = true;
    }
  } else if (alias == 1 && with_lse && out_elems > 0 && total > 0) {
    la = alias_of(out, {hq, total}, 0);  // lse from out's first element on
    la.t.dtype = DLDataType{kDLFloat, 32, 1};
    la.t.byte_offset = out.t.byte_offset;
    if (out.buf.size() >= out.t.byte_offset + static_cast<size_t>(hq * total * 4)) {
      a.lse = &la.t;
      overlapping = true;
    }
  } else if (alias == 2 || alias == 3) {
    // The optional split workspace: 16-byte aligned uint8, own memory or on another argument.
    ws.buf.assign(256 + 16, 0);
    ws.shape[0] = 256;
    ws.t.data = ws.buf.data();
    ws.t.device = DLDevice{kDLCPU, 0};
    ws.t.ndim = 1;
    ws.t.dtype = DLDataType{kDLUInt, 8, 1};
    ws.t.shape = ws.shape;
    ws.t.byte_offset = (16 - reinterpret_cast<uintptr_t>(ws.buf.data()) % 16) % 16;
    if (alias == 3 && out_elems > 0 && out.t.strides == nullptr) {
      ws.t.data = out.t.data;
      ws.t.byte_offset =
          (16 - (reinterpret_cast<uintptr_t>(out.t.data) + out.t.byte_offset) % 16) % 16 + out.t.byte_offset;
      ws.shape[0] = 1;  // one byte inside out, if out reaches past that offset
      const uint64_t out_bytes = static_cast<uint64_t>(out_elems) * (out.t.dtype.bits / 8);
      overlapping = ws.t.byte_offset < out.t.byte_offset + out_bytes;
      if (!overlapping) ws.t = DLTensor{};
    }
    if (ws.t.data) a.workspace = &ws.t;
  }
  const bool null_args = mode == 5;
  const bspa_status s =
      run(w, "bspa_prefill_paged", [&] { return bspa_prefill_paged(null_args ? nullptr : &a, nullptr); });
  if (overlapping && s == BSPA_OK) die("bspa_prefill_paged accepted an output or workspace on another argument");
  const bool borrowed = l != nullptr && std::find(w.layouts.begin(), w.layouts.end(), l) != w.layouts.end();
  if (!borrowed) bspa_layout_destroy(l);
  // Every output row (and lse entry) must be written, and finite for finite inputs.
  if (s == BSPA_OK && bad >= 8 && !all_finite(out)) die("bspa_prefill_paged left a row unwritten or non-finite");
  if (s == BSPA_OK && bad >= 8 && with_lse && !all_finite(lse)) die("bspa_prefill_paged left an lse unwritten");
}

// A msgpack reader for the EventBatch check below: each call reads one value of the kinds
// the encoder writes and dies on anything else, a truncation or a count past the end.
struct Msgpack {
  const unsigned char *p, *end;
  unsigned char byte() {
    if (p >= end) die("msgpack batch: truncated");
    return *p++;
  }
  uint64_t be(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | byte();
    return v;
  }
  // Header of an array (0x90-0x9f, 0xdc, 0xdd), map (0x80-0x8f, 0xde, 0xdf) or string
  // (0xa0-0xbf, 0xd9-0xdb): its count; -1 if the next value is another kind (not consumed).
  int64_t header(char kind) {
    const unsigned char t = p < end ? *p : 0;
    int64_t n = -1;
    if (kind == 'a' && (t & 0xf0) == 0x90) n = t & 0x0f;
    if (kind == 'm' && (t & 0xf0) == 0x80) n = t & 0x0f;
    if (kind == 's' && (t & 0xe0) == 0xa0) n = t & 0x1f;
    if (n >= 0) return ++p, n;
    const int width = kind == 'a'   ? (t == 0xdc   ? 2
                                       : t == 0xdd ? 4
                                                   : 0)
                      : kind == 'm' ? (t == 0xde   ? 2
                                       : t == 0xdf ? 4
                                                   : 0)
                                    : (t == 0xd9   ? 1
                                       : t == 0xda ? 2
                                       : t == 0xdb ? 4
                                                   : 0);
    if (width == 0) return -1;
    ++p;
    n = static_cast<int64_t>(be(width));
    if (n > end - p) die("msgpack batch: a count past the end");
    return n;
  }
  bool nil() { return p < end && *p == 0xc0 ? (++p, true) : false; }
  uint64_t uint() {  // positive fixint, uint8-64 (the encoder writes ids and tokens so)
    const unsigned char t = byte();
    if (t < 0x80) return t;
    if (t >= 0xcc && t <= 0xcf) return be(1 << (t - 0xcc));
    die("msgpack batch: expected an unsigned integer");
  }
  std::string str() {
    const int64_t n = header('s');
    if (n < 0 || n > end - p) die("msgpack batch: expected a string");
    std::string r(reinterpret_cast<const char *>(p), static_cast<size_t>(n));
    p += n;
    return r;
  }
};

// A drained EventBatch is exactly [ts, [event map...], dp_rank] filling `size` bytes: each
// map's "type" first; stores carry block_size = the pool's page and page-size tokens per
// block hash, and the pool's dtype; removals their hashes; block ids never 0.
void check_event_batch(const unsigned char *b, size_t size, double ts, int32_t dp_rank, int32_t page) {
  Msgpack m{b, b + size};
  if (m.header('a') != 3 || m.byte() != 0xcb) die("msgpack batch: not [float64 ts, events, rank]");
  const uint64_t bits = m.be(8);
  double got;
  std::memcpy(&got, &bits, sizeof got);
  if (got != ts) die("msgpack batch: ts changed");
  const int64_t events = m.header('a');
  if (events < 0) die("msgpack batch: events is not an array");
  for (int64_t e = 0; e < events; ++e) {
    const int64_t keys = m.header('m');
    if (keys < 1 || m.str() != "type") die("msgpack batch: an event that is not a map led by its type");
    const std::string type = m.str();
    int64_t hashes = -1, tokens = -1;
    bool dtype = false;
    for (int64_t k = 1; k < keys; ++k) {
      const std::string key = m.str();
      if (key == "block_hashes" || key == "token_ids") {
        const int64_t n = m.header('a');
        if (n < 0) die("msgpack batch: block_hashes or token_ids is not an array");
        for (int64_t i = 0; i < n; ++i)
          if (m.uint() == 0 && key == "block_hashes") die("msgpack batch: block id 0");
        (key == "block_hashes" ? hashes : tokens) = n;
      } else if (key == "block_size") {
        if (m.uint() != static_cast<uint64_t>(page)) die("msgpack batch: block_size is not the page size");
      } else if (key == "parent_block_hash" || key == "lora_id") {
        if (!m.nil() && m.uint() == 0) die("msgpack batch: 0 where nil belongs");
      } else if (key == "medium" || key == "cache_salt") {
        m.str();
      } else if (key == "lora_name") {
        if (!m.nil()) die("msgpack batch: lora_name is not nil");
      } else if (key == "kv_cache_dtype") {
        const std::string d = m.str();
        if (d != "bfloat16" && d != "float16" && d != "float32" && d != "fp8_e4m3")
          die("msgpack batch: kv_cache_dtype is", d.c_str());
        dtype = true;
      } else {
        die("msgpack batch: unknown key", key.c_str());
      }
    }
    const bool ok = type == "BlockStored"        ? keys >= 9 && hashes > 0 && tokens == hashes * page && dtype
                    : type == "BlockRemoved"     ? keys == 3 && hashes > 0 && tokens < 0
                    : type == "AllBlocksCleared" ? keys == 1
                                                 : false;
    if (!ok) die("msgpack batch: a malformed event:", type.c_str());
  }
  if (dp_rank < 0 ? !m.nil() : m.uint() != static_cast<uint64_t>(dp_rank)) die("msgpack batch: dp_rank changed");
  if (m.p != m.end) die("msgpack batch: bytes after the batch");
}

// KV cache events: both drains with NULL, short, exact and roomy buffers. A failed drain
// must leave the queue as it was (the counts of a size query before and after agree); a
// drained batch is well formed.
void op_events(World &w, Bytes &in) {
  const int i = pick_pool(w, in);
  bspa_pool *pool = i < 0 || in.pick(8) == 0 ? nullptr : w.pools[static_cast<size_t>(i)].h;
  const int32_t page = i < 0 ? 16 : w.pools[static_cast<size_t>(i)].page_size;
  int64_t n0 = -1, nt0 = -1;
  const bool on = pool && bspa_pool_events_drain(pool, nullptr, 0, nullptr, 0, &n0, &nt0) == BSPA_OK;
  bspa_status s;
  if (in.pick(2)) {
    int64_t cap = on ? n0 : 4, tcap = on ? nt0 : 64;
    switch (in.pick(6)) {
      case 0: cap = cap > 0 ? cap - 1 : 0; break;
      case 1: tcap = tcap > 0 ? tcap - 1 : 0; break;
      case 2: cap = -1 - in.pick(2); break;
      case 3:
        cap += 8;
        tcap += 8 * page;
        break;
      default: break;
    }
    std::vector<bspa_kv_event> ev(static_cast<size_t>(std::max<int64_t>(cap, 0)) + 1);
    std::vector<int32_t> tok(static_cast<size_t>(std::max<int64_t>(tcap, 0)) + 1);
    const int null_arg = in.pick(8);
    int64_t n = -1, nt = -1;
    s = run(w, "bspa_pool_events_drain", [&] {
      return bspa_pool_events_drain(pool, null_arg == 0 ? nullptr : ev.data(), cap,
                                    null_arg == 1 ? nullptr : tok.data(), tcap, null_arg == 2 ? nullptr : &n,
                                    null_arg == 3 ? nullptr : &nt);
    });
    if (s == BSPA_OK && null_arg > 1) {
      for (int64_t k = 0; k < n; ++k) {
        const bspa_kv_event &e = ev[static_cast<size_t>(k)];
        const bool stored = e.type == BSPA_KV_EVENT_STORED;
        if (e.type < BSPA_KV_EVENT_STORED || e.type > BSPA_KV_EVENT_ALL_CLEARED)
          die("bspa_pool_events_drain: bad type");
        if ((e.type == BSPA_KV_EVENT_ALL_CLEARED) != (e.block_id == 0)) die("bspa_pool_events_drain: block id 0");
        if (stored && (e.token_offset < 0 || e.token_offset + page > nt || (e.salt == nullptr) != (e.salt_len == 0)))
          die("bspa_pool_events_drain: a stored event's tokens or salt out of place");
        if (!stored && e.token_offset != -1) die("bspa_pool_events_drain: tokens on a non-stored event");
      }
    }
  } else {
    size_t size = 0;
    size_t cap = in.one_of<size_t>({0, 1, 12, 64, 4096, size_t(1) << 20});
    const double ts = in.pick(8) == 0 ? NAN : 1.5;
    const int null_arg = in.pick(8);
    const int32_t rank = static_cast<int32_t>(in.pick(3)) - 1;
    std::vector<unsigned char> buf(cap + 16, 0xee);
    s = run(w, "bspa_pool_events_drain_msgpack", [&] {
      return bspa_pool_events_drain_msgpack(pool, ts, rank, null_arg == 0 ? nullptr : buf.data(), cap,
                                            null_arg == 1 ? nullptr : &size);
    });
    if (s == BSPA_OK && null_arg > 1 && (size > cap || size < 12 || buf[0] != 0x93)) die("a malformed msgpack batch");
    if (s == BSPA_OK && null_arg > 1 && cap > 0) check_event_batch(buf.data(), size, ts, rank, page);
    if (buf[cap] != 0xee) die("bspa_pool_events_drain_msgpack wrote past its capacity");
  }
  if (on && s != BSPA_OK) {
    int64_t n1 = -1, nt1 = -1;
    if (bspa_pool_events_drain(pool, nullptr, 0, nullptr, 0, &n1, &nt1) != BSPA_OK || n1 != n0 || nt1 != nt0)
      die("a failed drain changed the event queue");
  }
}

// ---- KV transfer ----------------------------------------------------------------------------

uint64_t fingerprint_of(const PoolState &p) {
  struct bspa_pool_memory m;
  m.version = BSPA_POOL_MEMORY_VERSION;
  if (bspa_pool_memory(p.h, &m) != BSPA_OK || m.fingerprint == 0) die("bspa_pool_memory failed on a live pool");
  return m.fingerprint;
}

// A second pool of src's options but its page count (so the same fingerprint): the other
// end of a transfer. Returns its index, or -1.
int make_twin(World &w, int src, Bytes &in) {
  if (static_cast<int>(w.pools.size()) > kMaxPools) return -1;  // one more than op_pool_create makes
  PoolState twin = w.pools[static_cast<size_t>(src)];
  twin.options.num_pages = in.one_of<int64_t>({1, 2, 4, 8});
  // Within op_pool_create's 64 MiB, which the source's geometry may fill with one page.
  struct bspa_pool_memory m;
  m.version = BSPA_POOL_MEMORY_VERSION;
  if (bspa_pool_memory(twin.h, &m) != BSPA_OK) die("bspa_pool_memory failed on a live pool");
  const uint64_t page_bytes = m.page_bytes * static_cast<uint64_t>(m.num_regions);
  if (page_bytes > 0)
    twin.options.num_pages = std::min<int64_t>(twin.options.num_pages, static_cast<int64_t>((64u << 20) / page_bytes));
  if (twin.options.num_pages < 1) return -1;
  twin.options.memory_bytes = 0;
  twin.shadow.clear();
  bspa_pool *h = nullptr;
  if (run(w, "bspa_pool_create", [&] { return bspa_pool_create(&h, &twin.options); }) != BSPA_OK)
    die("a twin of a live pool was refused:", bspa_last_error());
  twin.h = h;
  twin.num_pages = static_cast<int32_t>(twin.options.num_pages);
  w.pools.push_back(twin);
  if (twin.dtype == BSPA_DTYPE_FP8_E4M3) set_fp8_scales(w, w.pools.back());
  if (fingerprint_of(w.pools.back()) != fingerprint_of(w.pools[static_cast<size_t>(src)]))
    die("a pool of the same options has another fingerprint");
  return static_cast<int>(w.pools.size()) - 1;
}

// Commits (or aborts) an open import; a commit records what its reserved pages now stand for.
void finish_import(World &w, ImportState &m, Bytes &in) {
  struct bspa_kv_import_info info;
  info.version = BSPA_KV_IMPORT_INFO_VERSION;
  if (bspa_kv_import_info(m.h, &info) != BSPA_OK) die("bspa_kv_import_info on a live import");
  const int how = in.pick(4);
  if (how == 0) {
    if (run(w, "bspa_kv_import_abort", [&] { return bspa_kv_import_abort(m.h); }) != BSPA_OK)
      die("bspa_kv_import_abort of an open import failed:", bspa_last_error());
    if (run(w, "bspa_kv_import_abort", [&] { return bspa_kv_import_abort(m.h); }) != BSPA_OK)
      die("a second abort is not a no-op");
    return;
  }
  if (how == 1) return;  // destroyed open: bspa_kv_import_destroy aborts it
  std::vector<int32_t> pages(static_cast<size_t>(info.num_reserved) + 1);
  int64_t np = -1;
  if (bspa_kv_import_pages(m.h, pages.data(), nullptr, info.num_reserved, &np) != BSPA_OK || np != info.num_reserved)
    die("bspa_kv_import_pages of an open import");
  int64_t published = -1;
  if (run(w, "bspa_kv_import_commit", [&] { return bspa_kv_import_commit(m.h, in.pick(4) ? &published : nullptr); }) !=
      BSPA_OK)
    die("bspa_kv_import_commit of an open import failed:", bspa_last_error());
  PoolState &p = w.pools[static_cast<size_t>(m.pool)];
  // A page freed instead of published (another chain published its key meanwhile) is out of
  // the index, so recording it here is harmless; every published one is recorded.
  for (int64_t i = 0; i < np; ++i) {
    const size_t end = static_cast<size_t>((info.num_cached + i + 1) * p.page_size);
    p.shadow[pages[static_cast<size_t>(i)]] = Shadow{m.salt, m.extra, {m.tokens.begin(), m.tokens.begin() + end}};
  }
  if (run(w, "bspa_kv_import_commit", [&] { return bspa_kv_import_commit(m.h, nullptr); }) != BSPA_ERR_INVALID_STATE)
    die("a second commit was not refused");
  if (run(w, "bspa_kv_import_abort", [&] { return bspa_kv_import_abort(m.h); }) != BSPA_ERR_INVALID_STATE)
    die("an abort after commit was not refused");
  int64_t none = -1;
  if (run(w, "bspa_kv_import_pages", [&] { return bspa_kv_import_pages(m.h, nullptr, nullptr, 0, &none); }) !=
      BSPA_ERR_INVALID_STATE)
    die("bspa_kv_import_pages after commit was not refused");
}

// Exports a prompt's cached pages from one pool and imports them into another of the same
// fingerprint (a twin made here, the same pool, or any pool: a refused fingerprint), the
// bytes copied page by page as a transport would; bad arguments at every call.
void op_kv_transfer(World &w, Bytes &in) {
  // An import left open by an earlier call is finished first, half the time.
  if (!w.imports.empty() && in.pick(2)) {
    const size_t k = static_cast<size_t>(in.pick(static_cast<int>(w.imports.size())));
    finish_import(w, w.imports[k], in);
    bspa_kv_import_destroy(w.imports[k].h);
    w.imports.erase(w.imports.begin() + static_cast<long>(k));
    w.check_pools();
  }
  if (!w.exports.empty() && in.pick(2)) {
    bspa_kv_export_destroy(w.exports.back().first);
    w.exports.pop_back();
    w.check_pools();
  }
  int src = pick_pool(w, in);
  int64_t n = fuzz_count(in);
  std::vector<int32_t> tokens = make_tokens(in, n);
  int salt = in.pick(3);
  uint64_t extra = in.pick(4) == 0 ? 7 : 0;
  // Usually the computed prefix of a live sequence, as its salt and extra key have it: a
  // prompt with cached pages to export.
  const int from_seq = in.pick(4) ? pick_seq(w, in) : -1;
  if (from_seq >= 0) {
    const SeqState &q = w.seqs[static_cast<size_t>(from_seq)];
    src = q.pool;
    n = q.computed + in.pick(3);
    tokens.assign(q.tokens.begin(), q.tokens.begin() + std::min<int64_t>(n, static_cast<int64_t>(q.tokens.size())));
    n = static_cast<int64_t>(tokens.size());
    salt = q.salt;
    extra = q.extra;
  }
  bspa_seq_options so;
  bspa_seq_options_init(&so);
  so.salt = kSalts[salt];
  so.salt_len = salt ? std::strlen(kSalts[salt]) : 0;
  so.extra_key = extra;
  const int mode = in.pick(20);  // 0..6: one bad argument
  if (mode == 5) so.version = 0;
  if (mode == 6) so.salt = nullptr;  // with salt_len > 0 when salted
  bspa_kv_export *exp = reinterpret_cast<bspa_kv_export *>(&so);
  const bspa_status es = run(w, "bspa_kv_export_create", [&] {
    return bspa_kv_export_create(
        mode == 0 ? nullptr : &exp, (src < 0 || mode == 1) ? nullptr : w.pools[static_cast<size_t>(src)].h,
        mode == 2 ? nullptr : &so, mode == 3 ? nullptr : tokens.data(), mode == 4 ? -n - 1 : n);
  });
  if (es != BSPA_OK) {
    if (mode != 0 && exp != nullptr) die("bspa_kv_export_create failed but left *exp non-NULL");
    return;
  }
  const int eff_salt = mode == 2 ? 0 : salt;
  const uint64_t eff_extra = mode == 2 ? 0 : extra;
  PoolState &sp = w.pools[static_cast<size_t>(src)];
  int64_t np = -1;
  if (run(w, "bspa_kv_export_pages", [&] { return bspa_kv_export_pages(exp, nullptr, nullptr, 0, &np); }) != BSPA_OK)
    die("bspa_kv_export_pages count");
  if (np < 0 || np > (n > 0 ? n / sp.page_size : 0)) die("bspa_kv_export_pages: more pages than the prompt has");
  std::vector<int32_t> pages(static_cast<size_t>(np) + 1, -7);
  std::vector<uint64_t> keys(2 * static_cast<size_t>(np) + 2, 0);
  if (np > 0) {
    int64_t short_np = -1;
    const bspa_status ss = run(w, "bspa_kv_export_pages",
                               [&] { return bspa_kv_export_pages(exp, pages.data(), nullptr, np - 1, &short_np); });
    if (ss != BSPA_ERR_BUFFER_TOO_SMALL || short_np != np || pages[0] != -7)
      die("bspa_kv_export_pages with a short buffer");
  }
  if (run(w, "bspa_kv_export_pages", [&] { return bspa_kv_export_pages(exp, pages.data(), keys.data(), np, &np); }) !=
      BSPA_OK)
    die("bspa_kv_export_pages");
  // Every exported page was committed for exactly this prefix, salt and extra key.
  for (int64_t j = 0; j < np; ++j) {
    auto it = sp.shadow.find(pages[static_cast<size_t>(j)]);
    const size_t len = static_cast<size_t>((j + 1) * sp.page_size);
    if (it == sp.shadow.end() || it->second.salt != eff_salt || it->second.extra != eff_extra ||
        it->second.prefix.size() != len ||
        !std::equal(it->second.prefix.begin(), it->second.prefix.end(), tokens.begin()))
      die("bspa_kv_export_create pinned a page of another prefix, salt or extra key");
  }
  // The importing pool: a twin (the usual case), the same pool, or whichever (refused
  // unless the fingerprints agree).
  const int choice = in.pick(4);
  int dst = choice <= 1 ? make_twin(w, src, in) : choice == 2 ? src : pick_pool(w, in);
  if (dst < 0) dst = src;
  PoolState &dp = w.pools[static_cast<size_t>(dst)];
  PoolState &sp2 = w.pools[static_cast<size_t>(src)];  // the vector may have grown
  bspa_kv_import_options io;
  bspa_kv_import_options_init(&io);
  io.salt = so.salt;
  io.salt_len = so.salt_len;
  io.extra_key = so.extra_key;
  if (mode == 2) io.salt = nullptr, io.salt_len = 0, io.extra_key = 0;
  io.peer_fingerprint = fingerprint_of(sp2);
  const int bad = in.pick(10);
  if (bad == 0) io.peer_fingerprint ^= 1;
  if (bad == 1) io.peer_fingerprint = 0;
  if (bad != 2 && np > 0) {
    io.peer_keys = keys.data();
    io.num_peer_keys = np;
    if (bad == 3) keys[2 * static_cast<size_t>(in.pick(static_cast<int>(np)))] ^= 0x100;
    if (bad == 4) io.num_peer_keys = np + 1;
  }
  if (bad == 5) io.version = BSPA_KV_IMPORT_OPTIONS_VERSION + 1;
  const std::vector<int32_t> blocks(tokens.begin(), tokens.begin() + np * sp2.page_size);
  bspa_kv_import *imp = reinterpret_cast<bspa_kv_import *>(&io);
  const bspa_status is = run(w, "bspa_kv_import_create", [&] {
    return bspa_kv_import_create(&imp, dp.h, bad == 6 && np > 0 ? nullptr : blocks.data(),
                                 static_cast<int64_t>(blocks.size()), &io);
  });
  const bool must_refuse = bad <= 1 || bad == 5 || (np > 0 && (bad == 3 || bad == 4 || bad == 6)) ||
                           fingerprint_of(dp) != fingerprint_of(sp2);
  // The options' version first, then the tokens, then fingerprint, key count and keys.
  const bspa_status want = bad == 5             ? BSPA_ERR_VERSION
                           : bad == 6 && np > 0 ? BSPA_ERR_NULL_POINTER
                                                : BSPA_ERR_INVALID_ARGUMENT;
  // A valid import may only run out of pages.
  if (must_refuse ? is != want : is != BSPA_OK && is != BSPA_ERR_OUT_OF_PAGES)
    die("bspa_kv_import_create:",
        (std::string(bspa_status_string(is)) + " in case " + std::to_string(bad) +
         (must_refuse ? " (a refusal expected): " : " (a valid import): ") + bspa_last_error())
            .c_str());
  if (is != BSPA_OK) {
    if (imp != nullptr) die("bspa_kv_import_create failed but left *imp non-NULL");
  } else {
    struct bspa_kv_import_info info;
    info.version = BSPA_KV_IMPORT_INFO_VERSION;
    if (bspa_kv_import_info(imp, &info) != BSPA_OK || info.state != BSPA_KV_IMPORT_RESERVED || info.num_blocks != np ||
        info.num_cached + info.num_reserved != np)
      die("bspa_kv_import_info of a new reservation");
    std::vector<int32_t> dpages(static_cast<size_t>(info.num_reserved) + 1);
    std::vector<int64_t> dblocks(static_cast<size_t>(info.num_reserved) + 1);
    int64_t nr = -1;
    if (bspa_kv_import_pages(imp, dpages.data(), dblocks.data(), info.num_reserved, &nr) != BSPA_OK ||
        nr != info.num_reserved)
      die("bspa_kv_import_pages");
    // The transport: each reserved block's bytes, K and V of every layer, from the exporter's page.
    struct bspa_pool_memory sm, dm;
    sm.version = dm.version = BSPA_POOL_MEMORY_VERSION;
    bspa_pool_memory(sp2.h, &sm);
    bspa_pool_memory(dp.h, &dm);
    if (sm.page_bytes != dm.page_bytes) die("pools of one fingerprint with different page bytes");
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t b = dblocks[static_cast<size_t>(i)];
      if (b != info.num_cached + i) die("bspa_kv_import_pages: blocks out of order");
      if (g_stats.on) ++g_stats.counts["(pages a transfer reserved)"].first;
      for (int32_t layer = 0; layer < sp2.num_layers; ++layer)
        for (int32_t kv = BSPA_KV_K; kv <= BSPA_KV_V; ++kv) {
          uint64_t from = 0, to = 0;
          if (bspa_pool_page_address(sp2.h, layer, kv, pages[static_cast<size_t>(b)], &from) != BSPA_OK ||
              bspa_pool_page_address(dp.h, layer, kv, dpages[static_cast<size_t>(i)], &to) != BSPA_OK)
            die("bspa_pool_page_address of an exported or reserved page");
          std::memcpy(reinterpret_cast<void *>(to), reinterpret_cast<const void *>(from), sm.page_bytes);
        }
    }
    ImportState m{imp, dst, eff_salt, eff_extra, blocks};
    if (static_cast<int>(w.imports.size()) < kMaxTransfers && in.pick(3) == 0) {
      w.imports.push_back(std::move(m));  // left open: other calls run before its commit
    } else {
      finish_import(w, m, in);
      bspa_kv_import_destroy(imp);
      w.check_pools();
    }
  }
  if (static_cast<int>(w.exports.size()) < kMaxTransfers && in.pick(3) == 0) {
    w.exports.emplace_back(exp, src);  // pins kept across other calls
  } else {
    bspa_kv_export_destroy(exp);
    w.check_pools();
  }
}

void op_misc(World &w, Bytes &in) {
  int32_t count = -1;
  const int32_t types[] = {kDLCPU, kDLCUDA, kDLCUDAHost, 0, -1};
  const int32_t type = in.one_of(types);
  const bool null_count = in.pick(4) == 0;
  run(w, "bspa_device_count", [&] { return bspa_device_count(type, null_count ? nullptr : &count); });
  const char *s = bspa_status_string(static_cast<bspa_status>(in.u16()) - 1000);
  if (s == nullptr || bspa_version_string() == nullptr || bspa_build_info() == nullptr) die("a NULL string");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Bytes in(data, size);
  World w;
  for (int step = 0; step < 96 && !in.empty(); ++step) {
    switch (in.u8() % 21) {
      case 0: op_pool_create(w, in); break;
      case 1:
        if (in.pick(4) == 0) op_pool_destroy(w, in);
        break;
      case 2: op_pool_kv(w, in); break;
      case 3: op_pool_stats(w, in); break;
      case 4:
      case 5: op_seq_create(w, in); break;
      case 6: op_seq_destroy(w, in); break;
      case 7: op_seq_match(w, in); break;
      case 8:
      case 9: op_seq_append(w, in); break;
      case 10: op_seq_commit(w, in); break;
      case 11: op_seq_pages(w, in); break;
      case 12: op_seq_info(w, in); break;
      case 13: op_layout(w, in); break;
      case 14: op_layout_allowed(w, in); break;
      case 15:
        if (in.pick(3) == 0)
          op_batch_reusable(w, in);
        else
          op_batch_create(w, in);
        break;
      case 16:
        if (in.pick(2) == 0)
          op_batch_plan(w, in);
        else
          op_batch_destroy(w, in);
        break;
      case 17: op_launch(w, in, in.pick(2) == 0); break;
      case 18: op_prefill_paged(w, in); break;
      case 19: op_launch(w, in, true); break;  // the prefill's output and aliasing checks, twice as often
      default: {
        // One byte, as before the transfers came: odd, events; even, misc or (128 and up)
        // a transfer, so the corpus's inputs keep most of their meaning.
        const uint8_t b = in.u8();
        if (b % 2)
          op_events(w, in);
        else if (b >= 128)
          op_kv_transfer(w, in);
        else
          op_misc(w, in);
        break;
      }
    }
  }
  return 0;
}
