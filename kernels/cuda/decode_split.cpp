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
// A split's key range is at least this many 64-token tiles, so the fixed cost of a CTA
// (Q, listing, the merge) stays small against its loads.
constexpr int64_t kMinSplitTiles = 4;
constexpr int32_t kWorkspaceRows = 32;
}  // namespace

size_t workspace_bytes(int32_t head_dim, int32_t sms) {
  const int64_t units = kTargetWaves * kCtasPerSm * std::max(sms, 1);
  return static_cast<size_t>(units * unit_floats(kWorkspaceRows, head_dim)) * sizeof(float);
}

int32_t plan_splits(int64_t items, int64_t max_keys, int32_t sms, int64_t capacity_units) {
  if (items <= 0 || sms <= 0 || max_keys <= 0) return 1;
  const int64_t target = kTargetWaves * kCtasPerSm * sms;
  if (items >= target) return 1;
  const int64_t tiles = (max_keys + 63) / 64;
  int64_t splits = (target + items - 1) / items;
  splits = std::min(splits, (tiles + kMinSplitTiles - 1) / kMinSplitTiles);
  splits = std::min(splits, capacity_units / items);
  return static_cast<int32_t>(std::max<int64_t>(splits, 1));
}

}  // namespace bspa::kernels::decode
