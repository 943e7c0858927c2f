// The outer dimensions of the sm90a producer's TMA descriptors for 16-bit pages
// (cuda/kv_tensor_map.cpp). A descriptor has at most five dimensions; three are taken by a
// box's inner layout (64 columns, 8 token rows, the head dim's 64-column halves), which
// leaves two for the three that place a box: the page's 8-row groups, the KV head and the
// page. Two of those merge where their strides chain (a compact pool's [pages, Hkv,
// page_size, D], vLLM's token-major [pages, page_size, Hkv, D] and FlashInfer's head-major
// layouts all do), or one of extent 1 is left out; otherwise a box takes one 8-row group
// (group_box_outer_dims). Host arithmetic only, header-only so that the CPU build tests it
// (tests/cpp/test_tma_box_dims.cpp).
#pragma once

#include <array>
#include <cstdint>

namespace bspa::kernels::tma {

// One dimension: extent, stride (elements), box, and the multipliers that give its
// coordinate from a box's (8-row group within its page, KV head, page).
struct OuterDim {
  int64_t extent = 1, stride = 0;
  uint32_t box = 1;
  int64_t g = 0, h = 0, p = 0;
};

// Merges `inner` into `outer` where the strides chain (outer's stride is inner's extent
// times its stride): one dimension of extent inner x outer whose coordinate is
// outer's x inner.extent + inner's. A box may span only the inner part (the groups of a
// page, consecutive coordinates), so `outer` must box 1.
inline bool merge_outer(const OuterDim &inner, const OuterDim &outer, OuterDim &to) {
  if (outer.box != 1 || outer.stride != inner.extent * inner.stride) return false;
  to = OuterDim{inner.extent * outer.extent,
                inner.stride,
                inner.box,
                inner.g + outer.g * inner.extent,
                inner.h + outer.h * inner.extent,
                inner.p + outer.p * inner.extent};
  return true;
}

// TMA coordinates are 32-bit signed.
inline bool coordinates_fit(const OuterDim &a, const OuterDim &b) {
  return a.extent <= INT32_MAX && b.extent <= INT32_MAX;
}

// The two outer dimensions of a descriptor whose box is one page of `page_size` tokens (a
// multiple of 8), with the pages' token, head and page strides in elements. false: no pair
// merges and none has extent 1, or a coordinate would pass 32 bits.
inline bool box_outer_dims(int64_t page_size, int64_t tok, int64_t head, int64_t page, int64_t num_kv_heads,
                           int64_t num_pages, OuterDim &a, OuterDim &b) {
  const std::array<OuterDim, 3> d = {OuterDim{page_size / 8, 8 * tok, static_cast<uint32_t>(page_size / 8), 1, 0, 0},
                                     OuterDim{num_kv_heads, head, 1, 0, 1, 0}, OuterDim{num_pages, page, 1, 0, 0, 1}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      if (i != j && merge_outer(d[i], d[j], a)) {
        b = d[3 - i - j];
        return coordinates_fit(a, b);
      }
  for (int i = 0; i < 3; ++i)
    if (d[i].extent == 1 && d[i].box == 1) {
      a = d[(i + 1) % 3], b = d[(i + 2) % 3];
      return coordinates_fit(a, b);
    }
  return false;
}

// Pages whose groups, head and page merge in no pair (token-major pages with K and V of a
// page in one block: FlashInfer's [pages, 2, page_size, Hkv, D]): the descriptor's rows are
// the page's tokens, boxed 8 at a time, and a box is one 8-row group at token coordinate
// 8 g, with the KV head and the page as they are (a = head, b = page): page_size / 8 boxes a
// page. false: a coordinate would pass 32 bits.
inline bool group_box_outer_dims(int64_t head, int64_t page, int64_t num_kv_heads, int64_t num_pages, OuterDim &a,
                                 OuterDim &b) {
  a = OuterDim{num_kv_heads, head, 1, 0, 1, 0};
  b = OuterDim{num_pages, page, 1, 0, 0, 1};
  return coordinates_fit(a, b);
}

}  // namespace bspa::kernels::tma
