// The block rule of docs/design.md §2 (which key block a query block of a head may see),
// written once for the host (Layout::allowed, kernels/layout.hpp: the CPU backend and
// bspa_layout_allowed) and the device (DeviceLayout::allowed, kernels/cuda/device_layout.hpp:
// the CUDA kernels' tile lists and the decode kernel's masks), so the oracle and the
// kernels cannot disagree on a layout.
//
// The index type I is the caller's: int64_t on the host, where bspa_layout_allowed takes
// any block index up to INT64_MAX; int32_t in the kernels, whose block indices are small and
// for which the plain sum is the cheapest form (the 64-bit form costs a second modulo).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/host_device.hpp"

namespace bspa::kernels {

// A layout's kind. The values are stored in DeviceLayout::kind (an int32_t) and never
// leave the library (the public header has no such enumeration).
enum class LayoutKind : int32_t { Dense = 0, Strided = 1, Csr = 2 };

// Phi-3-small's local + vertical-stride rule for kb <= qb, over a layout L (below): the
// last local_blocks blocks, and every block with (kb + (head_begin + h) * head_step + 1) %
// vert_stride == 0.
template <class I, class L>
BSPA_HOST_DEVICE inline bool strided_block_allowed(const L &l, int32_t h, I qb, I kb) {
  static_assert(std::is_same<I, int32_t>::value || std::is_same<I, int64_t>::value, "block index type");
  if constexpr (sizeof(I) == sizeof(int64_t)) {
    // Reduced term by term: kb may be near INT64_MAX (bspa_layout_allowed), where the plain
    // sum kb + g * s + 1 would overflow.
    const int64_t gs = static_cast<int64_t>(l.head_begin + h) * l.head_step % l.vert_stride;
    return qb - kb < l.local_blocks || (kb % l.vert_stride + gs + 1) % l.vert_stride == 0;
  } else {
    return qb - kb < l.local_blocks || (kb + (l.head_begin + h) * l.head_step + 1) % l.vert_stride == 0;
  }
}

// The strided rule for the heads h0 .. h0 + G - 1 of a KV group at once (the decode kernel
// lists the key tiles any head of its group sees): the rule above, solved once per head
// for the residue kb % vert_stride its stride sees, as bit masks over the residues — the
// ones some head sees and the ones every head sees. Only for vert_stride <= 32 (fits()).
struct StridedGroupResidues {
  uint32_t any = 0, all = 0;
  bool valid = false;
  BSPA_HOST_DEVICE bool fits() const { return valid; }
};

// The residue kb % vert_stride whose blocks head h sees by its stride (the strided rule's
// second clause, solved for kb): (kb + c) % vert_stride == 0 with c = (head_begin + h) *
// head_step + 1 (int32, as the kernels' form of the rule; never negative and at most
// 2^30 + 1, by make_strided_layout's bounds) <=> kb % vert_stride == (vert_stride -
// c % vert_stride) % vert_stride.
template <class L>
BSPA_HOST_DEVICE inline int32_t strided_head_residue(const L &l, int32_t h) {
  const int32_t c = ((l.head_begin + h) * l.head_step + 1) % l.vert_stride;
  return c == 0 ? 0 : l.vert_stride - c;
}

template <class L>
BSPA_HOST_DEVICE inline StridedGroupResidues strided_group_residues(const L &l, int32_t h0, int32_t G) {
  StridedGroupResidues r;
  if (l.vert_stride < 1 || l.vert_stride > 32 || G < 1) return r;
  r.all = ~0u;
  for (int32_t g = 0; g < G; ++g) {
    const uint32_t bit = 1u << strided_head_residue(l, h0 + g);
    r.any |= bit;
    r.all &= bit;
  }
  r.valid = true;
  return r;
}

// Whether some head (any) and every head (all) of the group of `r` may see key block kb
// from query block qb under the strided rule: block_allowed of each head, folded. kb_bit is
// strided_residue_bit(l, kb), computed once for the query blocks a caller tries.
template <class L>
BSPA_HOST_DEVICE inline uint32_t strided_residue_bit(const L &l, int32_t kb) {
  return 1u << (kb % l.vert_stride);
}
template <class L>
BSPA_HOST_DEVICE inline void strided_group_allowed(const L &l, const StridedGroupResidues &r, int32_t qb, int32_t kb,
                                                   uint32_t kb_bit, bool &any, bool &all) {
  if (kb > qb) {
    any = all = false;
  } else if (qb - kb < l.local_blocks) {
    any = all = true;
  } else {
    any = (r.any & kb_bit) != 0;
    all = (r.all & kb_bit) != 0;
  }
}

// Bit counts of a residue mask, on either side.
BSPA_HOST_DEVICE inline int32_t residue_count(uint32_t mask) {
#ifdef __CUDA_ARCH__
  return __popc(mask);
#else
  return __builtin_popcount(mask);
#endif
}
BSPA_HOST_DEVICE inline int32_t lowest_residue(uint32_t mask) {  // mask != 0
#ifdef __CUDA_ARCH__
  return __ffs(mask) - 1;
#else
  return __builtin_ctz(mask);
#endif
}

// The key blocks a strided group lists for decode rows in query blocks qb_lo .. qb_hi
// (qb_hi <= qb_lo + 1), ascending, in closed form, so that a key split finds its share
// without listing the range before it. Every block from `window` = max(0, qb_lo -
// local_blocks + 1) to qb_hi is listed (window .. qb_lo lie in qb_lo's local window, qb_hi
// in its own: local_blocks >= 1), and before them the `residue_blocks` blocks whose residue
// some head sees (StridedGroupResidues::any: per_period of every vert_stride blocks).
struct StridedGroupListing {
  uint32_t any = 0;
  int32_t vert_stride = 1, per_period = 1;
  int32_t residue_blocks = 0;  // listed blocks below the window
  int32_t window = 0;          // the local window's first block
  // The j-th listed block below the window (0 <= j < residue_blocks): in period
  // j / per_period, at its (j % per_period)-th residue.
  BSPA_HOST_DEVICE int32_t residue_block(int32_t j) const {
    const int32_t period = j / per_period;
    uint32_t mask = any;
    for (int32_t c = j - period * per_period; c > 0; --c) mask &= mask - 1u;  // drop the lowest residues
    return period * vert_stride + lowest_residue(mask);
  }
};

// Needs r.fits() (and so a residue some head sees: r.any != 0).
template <class L>
BSPA_HOST_DEVICE inline StridedGroupListing strided_group_listing(const L &l, const StridedGroupResidues &r,
                                                                  int32_t qb_lo) {
  StridedGroupListing s;
  s.any = r.any;
  s.vert_stride = l.vert_stride;
  s.per_period = residue_count(r.any);
  s.window = qb_lo - l.local_blocks + 1 > 0 ? qb_lo - l.local_blocks + 1 : 0;
  const int32_t periods = s.window / l.vert_stride, rest = s.window - periods * l.vert_stride;
  s.residue_blocks = periods * s.per_period + residue_count(r.any & ((1u << rest) - 1u));  // rest < vert_stride <= 32
  return s;
}

// A CSR row: whether kb is among its entries col[lo, hi), which the factory checked are
// strictly ascending (make_csr_layout), so a binary search finds it.
template <class I>
BSPA_HOST_DEVICE inline bool csr_row_contains(const int32_t *col, int32_t lo, int32_t hi, I kb) {
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    const int32_t c = col[mid];
    if (c == kb) return true;
    if (c < kb)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

// The CSR arrays as pointers: the device layout holds them so, the host layout as vectors.
BSPA_HOST_DEVICE inline const int32_t *csr_data(const int32_t *p) { return p; }
template <class V>
inline auto csr_data(const V &v) -> decltype(v.data()) {
  return v.data();
}

// The whole rule, for 0 <= h < num_heads and qb, kb >= 0, over a layout L with the fields of
// Layout (kind, local_blocks, vert_stride, head_begin, head_step, num_block_rows, crow, col):
// Layout itself on the host, DeviceLayout in the kernels. head_begin + h is the global head
// (tensor parallelism: this rank's first head). crow is [num_heads][num_block_rows + 1]
// absolute offsets into col; a CSR query block at or past num_block_rows sees nothing. The
// fields are read where the rule needs them (the CSR pointers on the CSR path only): the
// kernels' PTX is byte for byte what it was when device_layout.hpp wrote the rule out itself.
#ifdef __CUDACC__
#pragma nv_exec_check_disable  // Layout's instantiation (host only) reads its vectors' data()
#endif
template <class I, class L>
BSPA_HOST_DEVICE inline bool block_allowed(const L &l, int32_t h, I qb, I kb) {
  if (kb > qb) return false;
  if (l.kind == static_cast<decltype(l.kind)>(LayoutKind::Dense)) return true;
  if (l.kind == static_cast<decltype(l.kind)>(LayoutKind::Strided)) return strided_block_allowed(l, h, qb, kb);
  if (qb >= l.num_block_rows) return false;
  const int32_t *row = csr_data(l.crow) + static_cast<int64_t>(h) * (l.num_block_rows + 1) + qb;
  return csr_row_contains(csr_data(l.col), row[0], row[1], kb);
}

}  // namespace bspa::kernels
