// The query tiles of a prefill launch without a work list (device metadata through
// bspa_prefill_paged): which sequences have 128-row tiles for the prefill kernel, and how
// many, listed by each CTA of the persistent sm90a kernel in shared memory from
// query_starts when it starts. The walk then covers only those tiles instead of every
// sequence times the longest query's tiles: in a mixed step each decode sequence would be
// that many empty items per head, each an empty step of the producer and the consumers
// (bench/NOTES.md, "Mixed steps over device metadata").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/cuda/warp_scan.cuh"

namespace bspa::kernels::cuda {

// Sequences with tiles one table holds (four bytes each: the sm90a kernel has 872 bytes of
// shared memory to spare at head_dim 128). A launch with more walks its whole grid.
constexpr int kSeqTileTableCap = 128;

// The table: per sequence with tiles, in batch order, its index << 16 | the end of its
// tiles in the launch's order (the tiles before it plus its own). Both fit 16 bits when
// it is used: launches have at most 65535 sequences, and the kernel walks the whole grid
// when the listed tiles number more than 65535 (their ends would not fit).
struct SeqTileTable {
  int count;  // sequences with tiles (over kSeqTileTableCap: the table is incomplete)
  int tiles;  // their tiles
};

// Tile j (0 <= j < tiles) in the launch's order: its sequence, its index among the
// sequence's tiles and their count. Sequences in batch order, each one's tiles together.
__device__ __forceinline__ void find_listed_tile(const uint32_t *entries, int count, int j, int &seq, int &index,
                                                 int &seq_tiles) {
  int lo = 0, hi = count - 1;  // the first entry that ends after j
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (static_cast<int>(entries[mid] & 0xffffu) > j)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int begin = lo > 0 ? static_cast<int>(entries[lo - 1] & 0xffffu) : 0;
  seq = static_cast<int>(entries[lo] >> 16);
  index = j - begin;
  seq_tiles = static_cast<int>(entries[lo] & 0xffffu) - begin;
}

// Every thread of the CTA (kThreads of them) calls this; it returns the same table to all,
// after a barrier. A sequence has a tile per BM of its new tokens (at most grid_y, as in
// the launch grid; the tile-start shift never adds one: tile_alignment.hpp), none when
// the decode kernel computes it. scratch: 2 * kThreads / 32 ints of shared memory.
template <int BM, int kThreads>
__device__ __forceinline__ SeqTileTable build_seq_tile_table(const sm80::Params &p, int num_seqs, int grid_y,
                                                             uint32_t *entries, int *scratch) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int count = 0, tiles = 0;
  for (int base = 0; base < num_seqs; base += kThreads) {
    const int s = base + static_cast<int>(threadIdx.x);
    int n = 0;
    if (s < num_seqs) {
      const int q = p.query_starts[s + 1] - p.query_starts[s];
      if (q > p.decode_max_query_len) n = min((q + BM - 1) / BM, grid_y);
    }
    const unsigned has = __ballot_sync(0xffffffffu, n > 0);
    const int inclusive = warp_inclusive_sum(n, lane);  // tiles of this warp's sequences up to this one
    if (lane == 31) scratch[warp] = inclusive, scratch[kWarps + warp] = __popc(has);
    __syncthreads();
    int tiles_before = tiles, count_before = count;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int t = scratch[w], c = scratch[kWarps + w];
      if (w < warp) tiles_before += t, count_before += c;
      tiles += t, count += c;
    }
    if (n > 0) {
      const int at = count_before + __popc(has & ((1u << lane) - 1u));
      if (at < kSeqTileTableCap)
        entries[at] = static_cast<uint32_t>(s) << 16 | static_cast<uint32_t>(tiles_before + inclusive);
    }
    __syncthreads();  // the entries are written; scratch is rewritten by the next chunk
  }
  return SeqTileTable{count, tiles};
}

}  // namespace bspa::kernels::cuda
