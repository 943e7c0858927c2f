// Host side of the sm90a (Hopper) prefill kernel. It takes the sm80 kernel's parameters
// (same problem mapping, filled once in prefill_cuda.cpp); one launch function per
// (element type, head dim), defined in prefill_sm90_<dtype>.cu. Query tiles are 128 rows.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/prefill_problem.hpp"

namespace bspa::kernels::sm90 {

using Params = sm80::Params;

constexpr int kTileRows = 128;

// The split of the last round. The persistent kernel runs `items` (query tile, head)
// items on `sms` SMs in rounds; when items % sms leaves the last round partly idle, its
// items can each be split into `ways` key ranges (units), run side by side and merged by
// the last unit to finish through a workspace (SplitWorkspace). ways == 1: no split.
struct SplitPlan {
  int32_t ways = 1;
  int32_t first = INT32_MAX;  // items before `first` run whole; items first.. are split
  int32_t tail = 1;           // items - first (1 when ways == 1, so nothing divides by 0)
  // Units the launch walks: whole items, then `ways` per split item.
  __host__ __device__ int64_t units(int64_t items) const { return ways > 1 ? first + int64_t{tail} * ways : items; }
};

// Each split unit stores its 128 x D fp32 partial output and per-row statistics (both
// consumer warpgroups' 128 threads x (D / 8 + 1) float4).
constexpr size_t split_unit_bytes(int head_dim) { return size_t{2} * 128 * (head_dim / 8 + 1) * 16; }
// Counters first (two per split item, at most `sms` items), then the units: at most two
// rounds of them (2 * sms), so the split never adds more than two partial rounds.
size_t split_counter_bytes(int sms);
// Launches of this many rounds or more lose at most 1/8 to their last one: never split.
constexpr int64_t kSplitMaxRounds = 8;
size_t split_workspace_bytes(int head_dim, int sms);

// The split that finishes the launch soonest if items cost alike (ways 2..kMaxSplitWays,
// the tail's units fitting in `capacity_units`), or none. Heavy-first order puts the
// lightest items last, so a split is never worse than the unsplit tail by this measure.
// Host and device: a kernel that lists its own items (TileListing) plans its split itself.
constexpr int kMaxSplitWays = 4;
__host__ __device__ inline SplitPlan plan_split(int64_t items, int sms, int64_t capacity_units) {
  const SplitPlan none;
  if (sms <= 0 || items <= 0 || items >= kSplitMaxRounds * sms) return none;
  const int64_t tail = items % sms;
  if (tail == 0) return none;
  // Time of the tail in item-rounds: ceil(tail * ways / sms) rounds of 1/ways of an item.
  int best = 1;
  double best_time = 1.0;
  for (int ways = 2; ways <= kMaxSplitWays; ++ways) {
    const int64_t units = tail * ways;
    if (units > capacity_units || units > 2 * static_cast<int64_t>(sms)) break;
    const double time = static_cast<double>((units + sms - 1) / sms) / ways;
    if (time < best_time) best = ways, best_time = time;
  }
  if (best == 1) return none;
  SplitPlan plan;
  plan.ways = best;
  plan.first = static_cast<int32_t>(items - tail);
  plan.tail = static_cast<int32_t>(tail);
  return plan;
}

// Tile listing: a launch without a work list over several sequences (device metadata)
// lists the query tiles that have rows in the kernel (seq_tile_table.cuh) and walks only
// those, planning their split with plan_split over the launch's CTAs (one per SM). Where
// the table cannot hold the batch (over 128 sequences with tiles, or 65535 tiles) it
// walks the whole grid with the host's split.
struct TileListing {
  int32_t split_capacity = 0;  // workspace units the kernel's split may use (the counters cleared)
};
// BSPA_CUDA_LIST_TILES=0 (read once) keeps every launch on the whole grid: for A/B timing.
bool tile_listing_allowed();

// A TMA box: one key tile's 64 tokens by one 64-column (128-byte) half of the head dim
// (16-bit pages of 64 tokens or more), or one page's tokens where pages are shorter
// (kTmaMinPageTokens and up; 16-bit: both halves).
constexpr int kTmaBoxTokens = 64;
constexpr int kTmaBoxColumns = 64;
constexpr int kTmaMinPageTokens = 8;

// TMA descriptors of the paged K and V for the producer. 16-bit pages of 64 tokens or
// more, and e4m3 pages: four dimensions (the head dim, then token-in-page, KV head and page
// in the order of their strides), a 64-token tile as two 64-column boxes (16-bit) or one
// box of whole rows (e4m3: D bytes, swizzled by D bytes) per tile or page. 16-bit pages of
// 8..32 tokens: five, (64 columns, 8 token rows, the head dim's halves, then two made of
// {the page's 8-row groups, KV head, page}: kernels/tma_box_dims.hpp), one box per page of
// its 8-row groups of both halves, at coordinates (0, 0, 0, head x c3_h + page x c3_p,
// head x c4_h + page x c4_p); where no two of those merge (token-major pages with K and V
// of a page in one block, say), (64 columns, the page's tokens, halves, KV head, page) and
// a box per 8-row group at token coordinate 8 g (group_boxes = page_size / 8: the kernel's
// group-box variant). valid = 0 (and cp.async gathers instead) where pages are shorter than
// kTmaMinPageTokens, K and V need different coordinates, the driver cannot describe them
// (or has no encoder), or BSPA_CUDA_TMA=0.
struct KvTensorMaps {
  CUtensorMap k, v;
  int32_t valid = 0;
  int32_t dim_tok = 1, dim_head = 2, dim_page = 3;  // four dimensions: where each lives among 1..3
  int32_t c3_h = 0, c3_p = 0, c4_h = 0, c4_p = 0;   // five: coordinates 3 and 4 of a page's box
  int32_t group_boxes = 1;                          // five: boxes a page (1: one of its whole groups)
};
enum class KvElement : int32_t { Bf16, F16, E4m3 };
KvTensorMaps encode_kv_maps(const Params &p, KvElement element, int head_dim, int num_kv_heads);

// What bounds a launch's walk over its logical grid, besides the grid.
struct WalkBounds {
  int64_t total_rows = 0;  // the launch's query rows (q's first dimension), a host-side bound on its items
  // Device memory, or nullptr (every entry): how many of p.work's entries have rows this
  // step, the rest being a fixed-shape batch's padding (PrefillProblem::live_work_entries).
  // The walk ends at the live entries' items instead of stepping through the padding's.
  const int32_t *live_entries = nullptr;
  // At most this many CTAs (0: one an SM), leaving SMs to a grid launched after it that
  // overlaps it (the decode grid of a mixed step, decode::Overlap::previous).
  int32_t max_ctas = 0;
};

// T: q/out element type; KV: the pages' (T, or uint8_t for e4m3 with p.k_scale / p.v_scale).
template <class T, class KV, int D>
void launch(const Params &p, dim3 grid, const WalkBounds &walk, const SplitWorkspace &workspace, cudaStream_t stream);

}  // namespace bspa::kernels::sm90
