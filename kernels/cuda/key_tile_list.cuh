// The key tiles one CTA's query tile must visit, classified and compacted into a list in
// shared memory. Shared by the sm80 and sm90a prefill kernels, which differ in how they
// compute a tile, not in which tiles they compute; the decode kernel lists with its own
// classification (the union over a KV group's heads) through the same compaction.
//
// A query tile covers query blocks qb0..qb1 (at most three 64-token blocks of the layout:
// a 128-row tile that does not start on a block boundary touches three). A 64-token key
// tile is listed when any of those query blocks may see its block; it is "full" (no
// per-token mask) when all of them may and it lies entirely at or before the tile's first
// query position p0. Entry encoding: bits 0-27 the key tile index, bit 28 set when the
// tile needs the per-token mask, bits 29-31 which of qb0, qb0+1, qb0+2 may see it.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_layout.hpp"
#include "kernels/cuda/warp_scan.cuh"

namespace bspa::kernels::cuda {

constexpr int kKeyTileTokens = 64;
constexpr int kKeyTileMasked = 1 << 28;
constexpr int kKeyTileBlockShift = 29;
constexpr int kKeyTileIndexMask = kKeyTileMasked - 1;  // entry -> key tile index

// The barrier of all threads of the CTA.
struct CtaBarrier {
  __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// Classifies key tiles [c0, c1) — kThreads threads (threadIdx.x 0..kThreads-1), at most
// kPerThread tiles each, so c1 - c0 <= kThreads * kPerThread — with classify(kt) (a list entry, or -1
// for a tile nobody sees) and writes the visible ones, in order, to list. scan holds
// kThreads / 32 ints of scratch. Returns how many were listed; list is complete and
// visible to every calling thread on return. All kThreads threads must call it; `sync` is
// their barrier (the whole CTA's unless a warp-specialized kernel lists with some of its
// warps).
template <int kThreads, int kPerThread, class Classify, class Sync = CtaBarrier>
__device__ __forceinline__ int compact_key_tiles(Classify classify, int c0, int c1, int *list, int *scan,
                                                 Sync sync = Sync{}) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Each thread takes a run of `per` consecutive tiles, the fewest that cover the range, so
  // a short range is classified by many threads at once rather than by the first few, one
  // tile after another (a classification costs a few integer divisions per head; decode
  // lists a sequence's whole range before its first load, so this is latency it pays).
  const int per = max(1, (c1 - c0 + kThreads - 1) / kThreads);
  int entries[kPerThread];
  int count = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int kt = c0 + tid * per + i;
    entries[i] = -1;
    if (i < per && kt < c1) {
      const int entry = classify(kt);
      if (entry != -1) {
        entries[i] = entry;
        ++count;
      }
    }
  }
  // Block-wide exclusive scan of the counts: a warp scan, then the warps' totals.
  const int incl = warp_inclusive_sum(count, lane);
  if (lane == 31) scan[warp] = incl;
  sync();
  int base = 0, total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    const int s = scan[w];
    base += w < warp ? s : 0;
    total += s;
  }
  int pos = base + incl - count;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i)
    if (entries[i] != -1) list[pos++] = entries[i];
  sync();
  return total;
}

// How many of key tiles [c0, c1) classify(kt) lists (any length: kThreads threads stride
// the range). scan holds kThreads / 32 ints of scratch; the count is returned to every
// calling thread. All kThreads threads must call it (three barriers of `sync`: scan is free
// again on return).
template <int kThreads, class Classify, class Sync = CtaBarrier>
__device__ __forceinline__ int count_key_tiles(Classify classify, int c0, int c1, int *scan, Sync sync = Sync{}) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int count = 0;
  for (int kt = c0 + tid; kt < c1; kt += kThreads) count += classify(kt) != -1;
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) count += __shfl_xor_sync(0xffffffffu, count, off);
  sync();  // scan may still be read by an earlier compaction
  if (lane == 0) scan[warp] = count;
  sync();
  int total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += scan[w];
  sync();
  return total;
}

// The prefill kernels' classification: for query head h and a query tile covering query
// blocks qb0..qb1 whose first row is at position p0 (the entry encoding above).
template <int kThreads, int kPerThread, class Sync = CtaBarrier>
__device__ __forceinline__ int list_key_tiles(const DeviceLayout &layout, int h, int qb0, int qb1, int p0,
                                              int block_size, int c0, int c1, int *list, int *scan,
                                              Sync sync = Sync{}) {
  auto classify = [&](int kt) {
    const int k0 = kt * kKeyTileTokens;
    const int kb = k0 / block_size;
    unsigned bits = 0;
    bool all = true;
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const int qb = qb0 + j;
      if (qb <= qb1) {
        const bool a = layout.allowed(h, qb, kb);
        bits |= static_cast<unsigned>(a) << j;
        all = all && a;
      }
    }
    if (!bits) return -1;
    const bool full = all && k0 + kKeyTileTokens - 1 <= p0;
    return kt | (full ? 0 : kKeyTileMasked) | static_cast<int>(bits << kKeyTileBlockShift);
  };
  return compact_key_tiles<kThreads, kPerThread>(classify, c0, c1, list, scan, sync);
}

}  // namespace bspa::kernels::cuda
