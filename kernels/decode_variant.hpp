// Which instantiation of the decode kernel (kernels/cuda/decode.cuh) a launch takes, and
// what each one keeps resident: host arithmetic only, header-only so that the CPU build
// tests the mapping (tests/cpp/test_decode_split_plan.cpp). The CUDA launch and the
// shared-memory sizing both go through decode_variant, so the kernel launched is always
// the one that was sized.
#pragma once

#include <cstdint>

namespace bspa::kernels::decode {

// CTAs an SM the decode kernel keeps resident (its launch bounds; shared memory allows at
// least as many): three for e4m3 pages at up to 16 rows (half the bytes staged; at two,
// their registers had kept them to two CTAs an SM), else two.
constexpr int32_t ctas_per_sm(bool e4m3_pages, int32_t max_rows) { return e4m3_pages && max_rows <= 16 ? 3 : 2; }
constexpr int32_t kMostCtasPerSm = 3;  // the largest ctas_per_sm (sizes the workspace)

// The most quads of warps a CTA of the kernel has for a launch of `max_rows` rows: three
// for e4m3 pages at up to 8 rows (the narrow tile; their one-quad CTAs run three an SM, so
// three quads keep the same warps and registers an SM), two up to 16 rows, else one. (Three
// quads of 16-bit stages would not fit an SM's shared memory.)
constexpr int32_t kernel_quads(bool e4m3_pages, int32_t max_rows) {
  return max_rows <= 8 && e4m3_pages ? 3 : max_rows <= 16 ? 2 : 1;
}

// One instantiation's shape (decode.cuh's Config and decode_item):
struct DecodeVariant {
  int32_t row_groups = 1;  // 16-row groups of the tile (Config's WR): 1, 2 or 4
  int32_t quads = 1;       // quads of four warps a CTA (Config's kQuads): 1, 2 or 3
  bool narrow = false;     // the transposed tile of launches of at most 8 rows (kNarrow)

  constexpr bool operator==(const DecodeVariant &o) const {
    return row_groups == o.row_groups && quads == o.quads && narrow == o.narrow;
  }
};

// The instantiation of a launch of `max_rows` rows (the largest q x group) with `quads`
// quads a CTA (Split::quads): the tile is the smallest that holds the rows, up to 8 of them
// transposed; quads are honoured up to what the kernel has for those rows (kernel_quads:
// the 32- and 64-row tiles have one).
constexpr DecodeVariant decode_variant(bool e4m3_pages, int32_t max_rows, int32_t quads) {
  const int32_t most = kernel_quads(e4m3_pages, max_rows);
  const int32_t q = quads < 1 ? 1 : quads > most ? most : quads;
  if (max_rows <= 8) return {1, q, true};
  if (max_rows <= 16) return {1, q, false};
  return {max_rows <= 32 ? 2 : 4, 1, false};
}

}  // namespace bspa::kernels::decode
