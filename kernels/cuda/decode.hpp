// Host side of the decode kernel (decode.cuh): the split of a launch's key ranges across
// SMs and one launch function per (element type, head dim), defined in decode_<dtype>.cu.
//
// Rows of sequences with few new tokens (1..kCudaDecodeMaxQueryLen: decode, speculative
// verification) take this kernel instead of the prefill tiling: one CTA per (sequence, KV
// head, key split) computes the q x (Hq / Hkv) query rows of the KV group in one tile, so
// each K/V page is read once per KV head rather than once per query head.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cuda/attention_params.hpp"
#include "kernels/decode_split_plan.hpp"
#include "kernels/decode_variant.hpp"

namespace bspa::kernels::decode {

constexpr int32_t kMaxQueryLen = kCudaDecodeMaxQueryLen;
// A CTA's rows: q x group of one KV group, at most 8 x 8.
constexpr int32_t kMaxRows = 64;

// Every (sequence, KV head) item of a launch runs as `splits` CTAs; CTA s takes the s-th
// share of the item's key tiles. With splits > 1 each stores its unnormalised output and
// row statistics (a "unit") to `partials` and counts itself in the item's counter; the
// item's last CTA merges the units (no second kernel: its launch and its wait for the
// grid cost more than the merge).
struct Split {
  int32_t splits = 1;
  int32_t rows = 0;             // rows a unit stores: the launch's largest q x group
  float *partials = nullptr;    // [sequence][KV head][split] units of unit_floats(rows, D)
  int32_t *counters = nullptr;  // [sequence][KV head], zero when the grid starts (splits > 1)
  // The counters are cleared by the grid just before this one on the stream, which the
  // decode grid overlaps (clear_counters, Overlap::previous): each CTA waits for that grid
  // before it counts itself.
  bool count_after_previous = false;
  // Quads of four warps a CTA, each with its own ring, taking alternate key tiles of the
  // CTA's item (decode.cuh, Config::kQuads): 1, 2 for a grid alone on its SMs, 3 (e4m3
  // pages, at most kernel_quads) where one-quad CTAs would leave the last wave mostly idle
  // (plan_decode_shape). Host only: it picks the variant.
  int32_t quads = 1;
  // The item's splits are one thread-block cluster (compute capability 9.0, two quads, at
  // most 16 splits, every cluster of the grid resident at once: cluster_merge_fits): each
  // CTA keeps its unit in shared memory and the cluster merges them through distributed
  // shared memory, with no units, counters, fences or atomics in global memory (partials
  // and counters unused): 1 x 8k in 8 splits -6..-8%, 8 x 8k -1..-4% on an H100
  // (bench/NOTES.md, "Session 29"). Since splits keep 8 key tiles (session 30) 1 x 8k runs
  // 16 splits through L2 instead, faster still; batch 1 at 8k-32k needs 8 clusters of 16
  // and 132 SMs hold 7, so it is shorter contexts and small batches that take clusters.
  bool cluster = false;
};

// A unit: rows x D output floats, then rows x (max, sum), padded to a multiple of 4 floats
// (the merge reads four columns of a row at once, 16-byte aligned).
constexpr int64_t unit_floats(int32_t rows, int32_t head_dim) {
  return (int64_t{rows} * (head_dim + 2) + 3) & ~int64_t{3};
}
// Workspace bytes that let a launch on `sms` SMs split as plan_splits would (at 32 rows a
// unit and kMostCtasPerSm; wider launches split less): the counters of as many items, then
// the units.
size_t workspace_bytes(int32_t head_dim, int32_t sms);
// Bytes of the counters of `items` items at the start of the decode workspace (a multiple
// of 256, so the units that follow stay aligned).
size_t counter_bytes(int64_t items);

// plan_splits and plan_decode_shape (kernels/decode_split_plan.hpp): the key split of a
// launch's items and the quads of its CTAs; decode_variant, ctas_per_sm and kernel_quads
// (kernels/decode_variant.hpp): the instantiation a launch takes and what it keeps resident.

// What a decode launch overlaps through programmatic dependent launch (compute capability
// 9.0+; false elsewhere).
struct Overlap {
  // The decode grid launches while the grid before it on the stream, one the same call
  // launched and that lets it start from its first instruction, still runs: the prefill
  // (the decode CTAs take the SMs its last CTAs leave idle) or the counter clear
  // (clear_counters). The two must touch disjoint memory (other rows of out and lse, their
  // own parts of the split workspace) but for the counters (Split::count_after_previous);
  // the grid's last CTA waits for that grid before it exits, so what follows on the stream
  // still follows both.
  bool previous = false;
};

// Zeroes counters[0, n) on the stream with one CTA that lets the next grid start at once
// (griddepcontrol.launch_dependents): the decode grid launched after it with
// Overlap::previous and Split::count_after_previous. Throws Error(Cuda).
void clear_counters(int32_t *counters, int64_t n, cudaStream_t stream);

// Dynamic shared memory of the instantiation that a launch of `max_rows` rows with `quads`
// quads of warps (Split::quads) takes, decode_variant's (the same for both 16-bit element
// types; e4m3 pages stage bytes and widen them, so theirs differs); 0 for a head_dim the
// kernel lacks.
size_t shared_bytes(int32_t head_dim, int32_t max_rows, bool e4m3_pages, int32_t quads = 1);

// Whether a launch whose grid holds `clusters` (sequence, KV head) items of `splits` CTAs of
// `quads` quads (max_rows as launch's) can run with Split::cluster on the current device
// (cached per device after a first occupancy query). Same T, KV and D as launch's.
template <class T, class KV, int D>
bool cluster_merge_fits(int32_t max_rows, int32_t quads, int32_t splits, int64_t clusters);

// Launches the decode kernel over grid (splits, num_kv_heads, num_seqs); with splits > 1
// split.counters are zero on the stream when the grid counts (cleared before it, by the
// grid it overlaps, or kept zero by a library-owned workspace). max_rows: the largest
// q x group of the launch (<= kMaxRows); CTAs of sequences outside
// 1..p.decode_max_query_len new tokens exit at once.

// T: q/out element type (__nv_bfloat16 or __half); KV: the pages' (T, or uint8_t for e4m3
// with p.k_scale / p.v_scale per KV head).
template <class T, class KV, int D>
void launch(const cuda::AttentionParams &p, int32_t num_seqs, int32_t num_kv_heads, int32_t max_rows,
            const Split &split, const Overlap &overlap, cudaStream_t stream);

}  // namespace bspa::kernels::decode
