// The decode kernel's key split (decode.hpp): when it pays and how much workspace it takes.
// Host arithmetic only.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/decode.hpp"

namespace bspa::kernels::decode {
namespace {
// CTAs the kernel keeps resident per SM (its launch bounds) and waves worth aiming for:
// enough that the last wave's imbalance stays small.
constexpr int64_t kCtasPerSm = 2;
constexpr int64_t kTargetWaves = 2;
// A split's key range is at least this many 64-token tiles (1024 keys), so the fixed cost
// of a CTA (Q, listing, filling the pipeline, its share of the merge) stays small against
// its loads.
constexpr int64_t kMinSplitTiles = 16;
constexpr int32_t kWorkspaceRows = 32;
constexpr int64_t kMaxSplits = 256;
}  // namespace

size_t workspace_bytes(int32_t head_dim, int32_t sms) {
  // Room for the splits of the largest wave-filling plans: up to 4 waves of units.
  const int64_t units = 2 * kTargetWaves * kCtasPerSm * std::max(sms, 1);
  return static_cast<size_t>(units * unit_floats(kWorkspaceRows, head_dim)) * sizeof(float);
}

int32_t plan_splits(int64_t items, int64_t max_keys, int32_t sms, int64_t capacity_units) {
  if (items <= 0 || sms <= 0 || max_keys <= 0) return 1;
  const int64_t slots = kCtasPerSm * sms;  // CTAs resident at once: one wave
  if (items >= kTargetWaves * slots) return 1;
  const int64_t tiles = (max_keys + 63) / 64;
  const int64_t most = std::min({(tiles + kMinSplitTiles - 1) / kMinSplitTiles, capacity_units / items, kMaxSplits});
  // The launch takes about ceil(items * s / slots) waves of CTAs that each do 1/s of an
  // item: pick the s with the fewest item-times, so the last wave is as full as the others
  // (e.g. 64 items on 264 slots: 33 splits fill 8 waves; 9 would leave a third wave 18% full).
  // Gains under 1% go to the fewer splits (less to merge, fewer fixed costs).
  int64_t best = 1;
  double best_time = static_cast<double>((items + slots - 1) / slots);
  for (int64_t s = 2; s <= most; ++s) {
    const double time = static_cast<double>((items * s + slots - 1) / slots) / static_cast<double>(s);
    if (time < best_time * 0.99) best = s, best_time = time;
  }
  return static_cast<int32_t>(best);
}

}  // namespace bspa::kernels::decode
