// encode_kv_maps: the TMA descriptors of the K and V pages for the sm90a producer, made
// by the driver's cuTensorMapEncodeTiled (looked up at run time, so the library does not
// link libcuda), kept per thread for the launches that follow with the same pages. Host
// only; no stream work, so graph capture records nothing of it.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/env_switch.hpp"
#include "kernels/cuda/prefill_sm90.hpp"
#include "kernels/tma_box_dims.hpp"

namespace bspa::kernels::sm90 {
namespace {

// The driver's encoder, or nullptr. Only a success is kept: a lookup refused once (say,
// during a stream capture that forbids it) is tried again by the next launch.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> cached{nullptr};
  PFN_cuTensorMapEncodeTiled_v12000 fn = cached.load(std::memory_order_acquire);
  if (fn) return fn;
  void *f = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || f == nullptr) {
    if (e != cudaSuccess) (void)cudaGetLastError();  // this lookup's own error: the launch goes on without TMA
    return nullptr;
  }
  fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  cached.store(fn, std::memory_order_release);
  return fn;
}

// BSPA_CUDA_TMA=0 turns TMA off (every tile by cp.async gathers): to time or test them.
bool tma_allowed() {
  static const bool allowed = cuda::env_flag("BSPA_CUDA_TMA", true);  // read once per process
  return allowed;
}

// What the descriptors of one launch are made from: equal keys give equal descriptors.
struct MapKey {
  const void *k, *v;
  int64_t k_tok, k_head, k_page, v_tok, v_head, v_page, num_pages;
  int32_t page_shift, head_dim, num_kv_heads;
  KvElement element;
  bool operator==(const MapKey &o) const {
    return k == o.k && v == o.v && k_tok == o.k_tok && k_head == o.k_head && k_page == o.k_page && v_tok == o.v_tok &&
           v_head == o.v_head && v_page == o.v_page && num_pages == o.num_pages && page_shift == o.page_shift &&
           head_dim == o.head_dim && num_kv_heads == o.num_kv_heads && element == o.element;
  }
};

// The last few encodings of this thread. cuTensorMapEncodeTiled is a driver call of a few
// microseconds, twice per launch, for descriptors that only change when a launch's pages
// do (a pool's layer, a caller's page tensors); a descriptor holds nothing but the address
// and geometry of its key, so an entry never goes stale. Thread-local: no lock per launch.
class MapCache {
 public:
  const KvTensorMaps *find(const MapKey &key) const {
    for (const Entry &e : entries_)
      if (e.used && e.key == key) return &e.maps;
    return nullptr;
  }
  void insert(const MapKey &key, const KvTensorMaps &maps) {
    Entry &e = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    e.used = true;
    e.key = key;
    e.maps = maps;
  }

 private:
  static constexpr int kEntries = 8;  // e.g. the K/V of a few layers launched in turn
  struct Entry {
    bool used = false;
    MapKey key{};
    KvTensorMaps maps{};
  };
  std::array<Entry, kEntries> entries_{};
  int next_ = 0;
};

KvTensorMaps encode_uncached(const Params &p, KvElement element, int head_dim, int num_kv_heads);

}  // namespace

KvTensorMaps encode_kv_maps(const Params &p, KvElement element, int head_dim, int num_kv_heads) {
  MapKey key;
  key.k = p.k, key.v = p.v;
  key.k_tok = p.k_tok, key.k_head = p.k_head, key.k_page = p.k_page;
  key.v_tok = p.v_tok, key.v_head = p.v_head, key.v_page = p.v_page;
  key.num_pages = p.num_pages;
  key.page_shift = p.page_shift, key.head_dim = head_dim, key.num_kv_heads = num_kv_heads, key.element = element;
  thread_local MapCache cache;
  if (const KvTensorMaps *hit = cache.find(key)) return *hit;
  const KvTensorMaps m = encode_uncached(p, element, head_dim, num_kv_heads);
  // Only what the driver encoded: a refused lookup (say, during a capture that forbids it)
  // is tried again by the next launch.
  if (m.valid) cache.insert(key, m);
  return m;
}

namespace {

KvTensorMaps encode_uncached(const Params &p, KvElement element, int head_dim, int num_kv_heads) {
  KvTensorMaps m{};
  const int page_size = 1 << p.page_shift;
  // Boxes of min(64, page_size) tokens: pages of 8..32 tokens give a key tile in several
  // (the kernel places each at its page's row offset); under 8 rows a box would break the
  // swizzle's 8-row period, and the kernel gathers such pages with cp.async.
  if (page_size < kTmaMinPageTokens || p.num_pages <= 0 || !tma_allowed()) return m;
  const uint32_t box_tokens = static_cast<uint32_t>(std::min(page_size, kTmaBoxTokens));
  PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) return m;
  const bool e4m3 = element == KvElement::E4m3;
  const CUtensorMapDataType type = e4m3                         ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : element == KvElement::Bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int64_t elem_bytes = e4m3 ? 1 : 2;
  if (!e4m3 && page_size < kTmaBoxTokens) {
    // 16-bit pages under 64 tokens: (64 columns, 8 rows, halves, A, B), a page's whole
    // 8-row groups of both halves in one box. The strides are not increasing (the halves,
    // 128 bytes apart, lie outside the rows): TMA takes any strides and lands a box in
    // shared memory in dimension order, group by group, a group's halves 1024 bytes apart,
    // as the kernel's grouped ring (RingLayout) holds them.
    const int halves = head_dim / kTmaBoxColumns;
    struct Coeffs {
      int64_t h[2], p[2];
      int64_t group_boxes;
    };
    auto one = [&](CUtensorMap &map, Coeffs &c, const void *base, int64_t tok, int64_t head, int64_t page) {
      tma::OuterDim a, b;
      // Rows: 8 (the groups merged into an outer dimension), or where no two of (groups,
      // head, page) merge (say, token-major pages with K and V of a page in one block) the
      // page's tokens, boxed 8 at a time: a box per 8-row group, head and page as they are,
      // which the kernel's group-box variant issues (in the common page-box producer that
      // loop cost every launch 1-5%: bench/NOTES.md, "Pages under 64 tokens", session 20,
      // call E).
      int64_t rows = 8;
      c.group_boxes = 1;
      if (!tma::box_outer_dims(page_size, tok, head, page, num_kv_heads, p.num_pages, a, b)) {
        if (!tma::group_box_outer_dims(head, page, num_kv_heads, p.num_pages, a, b)) return false;
        rows = page_size;
        c.group_boxes = page_size / 8;
      }
      c.h[0] = a.h, c.h[1] = b.h, c.p[0] = a.p, c.p[1] = b.p;  // a box starts at its page's first group: g = 0
      // The halves' stride must be a multiple of 16 bytes even where there is one half.
      cuuint64_t dims[5] = {static_cast<cuuint64_t>(kTmaBoxColumns), static_cast<cuuint64_t>(rows),
                            static_cast<cuuint64_t>(halves), static_cast<cuuint64_t>(a.extent),
                            static_cast<cuuint64_t>(b.extent)};
      cuuint64_t strides[4] = {
          static_cast<cuuint64_t>(tok * elem_bytes), static_cast<cuuint64_t>(kTmaBoxColumns * elem_bytes),
          static_cast<cuuint64_t>(a.stride * elem_bytes), static_cast<cuuint64_t>(b.stride * elem_bytes)};
      cuuint32_t box[5] = {kTmaBoxColumns, 8, static_cast<cuuint32_t>(halves), a.box, b.box};
      cuuint32_t step[5] = {1, 1, 1, 1, 1};
      return encode(&map, type, 5, const_cast<void *>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    };
    Coeffs ck{}, cv{};
    const bool ok_k = one(m.k, ck, p.k, p.k_tok, p.k_head, p.k_page);
    const bool ok_v = one(m.v, cv, p.v, p.v_tok, p.v_head, p.v_page);
    // The kernel builds one coordinate list for both.
    m.valid = ok_k && ok_v && std::equal(ck.h, ck.h + 2, cv.h) && std::equal(ck.p, ck.p + 2, cv.p) &&
              ck.group_boxes == cv.group_boxes;
    m.group_boxes = static_cast<int32_t>(ck.group_boxes);
    m.c3_h = static_cast<int32_t>(ck.h[0]), m.c4_h = static_cast<int32_t>(ck.h[1]);
    m.c3_p = static_cast<int32_t>(ck.p[0]), m.c4_p = static_cast<int32_t>(ck.p[1]);
    return m;
  }
  // 16-bit pages of 64 tokens or more: 64-column (128-byte) boxes; e4m3: whole rows of D
  // bytes, swizzled by their own width (the staging layout the kernel widens from:
  // e4m3_stage_off).
  const uint32_t box_columns = e4m3 ? static_cast<uint32_t>(head_dim) : kTmaBoxColumns;
  const CUtensorMapSwizzle swizzle = e4m3 && head_dim == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  int order[3] = {1, 2, 3};  // dimension of token, head, page
  auto one = [&](CUtensorMap &map, const void *base, int64_t tok, int64_t head, int64_t page) {
    struct Dim {
      int64_t stride;  // elements
      uint64_t extent;
      uint32_t box;
      int which;  // 0 token, 1 head, 2 page
    };
    // A page id past num_pages reads zeros through TMA (such ids are the caller's error on
    // CUDA, as for the cp.async path, which reads whatever lies there).
    std::array<Dim, 3> d = {Dim{tok, static_cast<uint64_t>(page_size), box_tokens, 0},
                            Dim{head, static_cast<uint64_t>(num_kv_heads), 1, 1},
                            Dim{page, static_cast<uint64_t>(p.num_pages), 1, 2}};
    std::stable_sort(d.begin(), d.end(), [](const Dim &a, const Dim &b) { return a.stride < b.stride; });
    cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), d[0].extent, d[1].extent, d[2].extent};
    cuuint64_t strides[3] = {static_cast<cuuint64_t>(d[0].stride * elem_bytes),
                             static_cast<cuuint64_t>(d[1].stride * elem_bytes),
                             static_cast<cuuint64_t>(d[2].stride * elem_bytes)};
    cuuint32_t box[4] = {box_columns, d[0].box, d[1].box, d[2].box};
    cuuint32_t step[4] = {1, 1, 1, 1};
    for (int i = 0; i < 3; ++i) order[d[i].which] = 1 + i;
    return encode(&map, type, 4, const_cast<void *>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  const bool ok_k = one(m.k, p.k, p.k_tok, p.k_head, p.k_page);
  const int k_order[3] = {order[0], order[1], order[2]};
  const bool ok_v = one(m.v, p.v, p.v_tok, p.v_head, p.v_page);
  // The kernel builds one coordinate list for both: their dimensions must be in one order.
  m.valid = ok_k && ok_v && std::equal(k_order, k_order + 3, order);
  m.dim_tok = order[0], m.dim_head = order[1], m.dim_page = order[2];
  return m;
}

}  // namespace

}  // namespace bspa::kernels::sm90
