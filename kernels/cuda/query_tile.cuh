// Which query rows one CTA of a prefill launch computes, shared by the sm80 and sm90a
// kernels. In the launch's (logical) grid, x is the query head; y a tile (of the batch's
// work list, split into BM-row tiles, later rows first; or, without a work list, the
// (grid y - 1 - y)-th tile of sequence z), so the heavy tiles, late in long sequences, start first.
#pragma once

#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/tile_alignment.hpp"

namespace bspa::kernels::cuda {

struct QueryTile {
  int seq;       // sequence index
  int qs;        // the sequence's first row in q / out
  int q_len;     // its new tokens
  int ctx;       // its cached tokens
  int t0, t1;    // this tile's rows [t0, t1) among the new tokens
  int p0, p1;    // absolute positions of the first and last row
  int qb0, qb1;  // layout blocks of p0 and p1
};

// False when the tile has no rows (past a sequence's end or a work item's last tile, or
// a sequence the decode kernel computes).
// (y, z) is the tile's place in the launch's logical grid: blockIdx.y/z for one CTA per
// tile; a persistent kernel's CTAs walk the logical grid themselves.
template <int BM>
__device__ __forceinline__ bool locate_query_tile(const sm80::Params &p, int y, int z, int grid_y, QueryTile &t) {
  int begin, end, k;  // the rows of the sequence or work item; k: the tile's index among them
  if (p.work) {
    const int sub = p.work_tile_rows / BM;
    const WorkItem w = p.work[y / sub];
    t.seq = w.seq;
    begin = w.q_begin, end = w.q_end, k = sub - 1 - y % sub;  // later rows first
  } else {
    t.seq = z;
    begin = 0, end = INT_MAX, k = grid_y - 1 - y;  // late (heavy) tiles first
  }
  t.qs = p.query_starts[t.seq];
  t.q_len = p.query_starts[t.seq + 1] - t.qs;
  if (t.q_len <= p.decode_max_query_len) return false;  // the decode kernel's rows (or none)
  end = min(end, t.q_len);
  if (begin >= end) return false;
  t.ctx = p.context_lens[t.seq];
  // Tiles start on a layout block where that costs no tile (the batch planner has already
  // aligned its work items the same way, so within an item the shift only trims the first).
  const int shift = aligned_tile_shift(t.ctx + begin, end - begin, BM, min(BM, p.layout.block_size));
  t.t0 = begin + k * BM - shift;
  if (t.t0 >= end) return false;
  t.t0 = max(t.t0, begin);
  t.t1 = min(end, begin + (k + 1) * BM - shift);
  t.p0 = t.ctx + t.t0;
  t.p1 = t.ctx + t.t1 - 1;
  t.qb0 = t.p0 / p.layout.block_size;
  t.qb1 = t.p1 / p.layout.block_size;
  return true;
}

template <int BM>
__device__ __forceinline__ bool locate_query_tile(const sm80::Params &p, QueryTile &t) {
  return locate_query_tile<BM>(p, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z),
                               static_cast<int>(gridDim.y), t);
}

}  // namespace bspa::kernels::cuda
