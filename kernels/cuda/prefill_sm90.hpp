// Host side of the sm90a (Hopper) prefill kernel. It takes the sm80 kernel's parameters
// (same problem mapping, filled once in prefill_cuda.cpp); one launch function per
// (element type, head dim), defined in prefill_sm90_<dtype>.cu. Query tiles are 128 rows.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/prefill_problem.hpp"

namespace bspa::kernels::sm90 {

using Params = sm80::Params;

constexpr int kTileRows = 128;

// The split of the last round (stream-K style). The persistent kernel runs `items`
// (query tile, head) items on `sms` SMs in rounds; when items % sms leaves the last round
// partly idle, its `tail` items are laid end to end, each `spans` long, and cut into
// `spans` equal spans of `tail`, one per CTA b < spans: span b covers [b * tail,
// (b + 1) * tail), at most two pieces (fragments) of consecutive items since tail < spans,
// each a share of its item's visible key tiles in proportion. Every fragment stores a
// partial result to a workspace (SplitWorkspace) and the last fragment of an item to
// finish merges. The tail then takes tail / spans of an item's time instead of a whole one.
// spans == 0: no split.
struct SplitPlan {
  int32_t first = INT32_MAX;  // items before `first` run whole, in full rounds
  int32_t tail = 0;           // items first.. are split
  int32_t spans = 0;          // CTAs the tail is spread over (tail < spans <= sms)
  __host__ __device__ bool active() const { return spans > 0; }
};

// Each fragment stores its 128 x D fp32 partial output and per-row statistics (both
// consumer warpgroups' 128 threads x (D / 8 + 1) float4).
constexpr size_t split_unit_bytes(int head_dim) { return size_t{2} * 128 * (head_dim / 8 + 1) * 16; }
// Counters first (two per split item, at most `sms` items), then the fragments: two per
// span (2 * sms).
size_t split_counter_bytes(int sms);
// Launches of this many rounds or more lose at most 1/8 to their last one: never split.
constexpr int64_t kSplitMaxRounds = 8;
size_t split_workspace_bytes(int head_dim, int sms);

// The split of the last round if it finishes sooner, counting items alike and each
// fragment's fixed cost (its Q load, pipeline start, partial store and merge), with at
// most five fragments per item and two per span fitting in `capacity_units`; or none.
// Heavy-first order puts the lightest items last, so items alike is a fair measure.
SplitPlan plan_split(int64_t items, int sms, int64_t capacity_units);

template <class T, int D>
void launch(const Params &p, dim3 grid, const SplitWorkspace &workspace, cudaStream_t stream);

}  // namespace bspa::kernels::sm90
