// Which query rows one CTA of a prefill launch computes, shared by the sm80 and sm90a
// kernels. blockIdx.x is the query head; blockIdx.y a tile (of the batch's work list,
// split into BM-row tiles, later rows first; or, without a work list, the (gridDim.y - 1 -
// y)-th tile of sequence blockIdx.z), so the heavy tiles, late in long sequences, start first.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/prefill_sm80.hpp"

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

// False when the CTA has no rows (past a sequence's end or a work item's last tile).
template <int BM>
__device__ __forceinline__ bool locate_query_tile(const sm80::Params &p, QueryTile &t) {
  if (p.work) {
    const int sub = p.work_tile_rows / BM;
    const WorkItem w = p.work[blockIdx.y / sub];
    t.seq = w.seq;
    t.t0 = w.q_begin + (sub - 1 - static_cast<int>(blockIdx.y % sub)) * BM;  // later rows first
    if (t.t0 >= w.q_end) return false;
  } else {
    t.seq = blockIdx.z;
    t.t0 = (gridDim.y - 1 - blockIdx.y) * BM;  // late (heavy) tiles first
  }
  t.qs = p.query_starts[t.seq];
  t.q_len = p.query_starts[t.seq + 1] - t.qs;
  if (t.t0 >= t.q_len) return false;
  t.t1 = min(t.q_len, t.t0 + BM);
  t.ctx = p.context_lens[t.seq];
  t.p0 = t.ctx + t.t0;
  t.p1 = t.ctx + t.t1 - 1;
  t.qb0 = t.p0 / p.layout.block_size;
  t.qb1 = t.p1 / p.layout.block_size;
  return true;
}

}  // namespace bspa::kernels::cuda
