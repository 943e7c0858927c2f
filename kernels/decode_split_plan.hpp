// The decode kernel's grid: how many CTAs share one (sequence, KV head) item's keys
// (plan_splits) and how many quads of warps a CTA has (plan_decode_shape). Host arithmetic
// only, header-only so that the CPU build tests the measured choices
// (tests/cpp/test_decode_split_plan.cpp); the CUDA launch and batch upload call it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace bspa::kernels::decode {

// The tuning constants of plan_splits and plan_decode_shape.
namespace split_plan {
// A split's key range is at least this many 64-token tiles (512 keys), so the fixed cost
// of a CTA (Q, listing, filling the pipeline, its share of the merge) stays small against
// its loads. 8, not 16 (bench/NOTES.md, "Session 30", H100): batch 1 and 2 at 1k-8k
// contexts run 7-24% faster dense and up to 19% sparse (more CTAs stream the keys; the fixed
// part is most of these launches), every larger case the same within 0.3%.
inline constexpr int64_t kMinSplitTiles = 8;
// Splits this long keep two CTAs per SM busy long enough to pay for the second one's
// fixed cost; shorter ones run one CTA per SM.
inline constexpr int64_t kLongSplitTiles = 64;
// Splits that only even out the last of several waves (plan_splits): at most this many, and
// only for a gain of more than this fraction of the slots' use.
inline constexpr int64_t kMaxWaveSplits = 4;
inline constexpr int64_t kMinWaveSplitTiles = 32;
inline constexpr double kMinWaveGain = 0.05;
inline constexpr int64_t kMaxSplits = 256;
// A three-quad grid (plan_decode_shape) must use its waves' slots by this much more than
// the one-quad grid: one CTA an SM starts and ends each item with nothing beside it.
inline constexpr double kMinThreeQuadWaveGain = 0.2;
}  // namespace split_plan

// The share of `slots` CTA slots a grid of `ctas` equal CTAs keeps busy over its waves.
inline double wave_use(int64_t ctas, int64_t slots) {
  return slots > 0 && ctas > 0 ? double(ctas) / double((ctas + slots - 1) / slots * slots) : 0.0;
}

// Measured on the H200 (bench/NOTES.md, "CUDA decode"): the kernel is memory bound, so a
// launch runs best as ONE wave of equal CTAs spread evenly over the SMs. A partial second
// wave is a tail (8 x 128k with 5 splits: 320 CTAs on 264 slots, 1.30 ms against 0.97 ms
// with 4), and more waves than needed pay each CTA's fixed cost again (33 splits: 1.00 ms).
// So: as many splits as fill the CTA slots without passing them, or, when that leaves each
// split short, one CTA per SM (1 x 32k: 16 splits, 45 us; 32 splits, 50 us).
//
// Items that fill between one and two waves split only to fill their second: at three CTAs
// an SM (e4m3 pages) 64 x 8k = 512 items on 396 slots are 1.3 waves, 65% of the slots busy
// on average, and the SMs of the thin second wave run one CTA each, which cannot pull an
// SM's share of the bandwidth; in 3 splits they are 1536 CTAs, 97% (0.315 -> 0.281 ms). A
// split must gain more than kMinWaveGain of the slots' use and keep kMinWaveSplitTiles a
// split. Over more waves the CTAs no longer run in step and splitting only adds merges
// (measured: 128 x 4k in 3 splits and 256 x 2k in 2, both e4m3, 9-14% slower). Sparse
// layouts list about half the tiles, so their splits are short: 64 x 8k strided e4m3 ran 7%
// slower in 3 splits; the caller turns this off for them (even_out_waves).
//
// Splits for `items` (sequence, KV head) items whose longest key range is `max_keys` tokens,
// on `sms` SMs of `ctas_per_sm` CTAs each, with room for `capacity_units` units: one wave of
// CTAs spread evenly over the SMs, each split at least kMinSplitTiles key tiles; 1 (no
// split) when the items alone fill half the CTA slots or there is no room, unless
// even_out_waves and they fill one to two waves, which splits fill more evenly.
inline int32_t plan_splits(int64_t items, int64_t max_keys, int32_t sms, int32_t ctas_per_sm, int64_t capacity_units,
                           bool even_out_waves) {
  using namespace split_plan;
  if (items <= 0 || sms <= 0 || max_keys <= 0) return 1;
  const int64_t slots = int64_t{std::max(ctas_per_sm, 1)} * sms;
  const int64_t tiles = (max_keys + 63) / 64;
  if (items * 2 > slots) {
    if (!even_out_waves || items >= 2 * slots) return 1;
    int64_t best = 1;
    double best_use = wave_use(items, slots);
    for (int64_t s = 2; s <= kMaxWaveSplits && tiles / s >= kMinWaveSplitTiles && items * s <= capacity_units; ++s)
      if (wave_use(items * s, slots) > best_use + kMinWaveGain) best = s, best_use = wave_use(items * s, slots);
    return static_cast<int32_t>(best);
  }
  int64_t splits = slots / items;
  if (tiles / splits < kLongSplitTiles) splits = std::max<int64_t>(1, sms / items);
  splits = std::min({splits, (tiles + kMinSplitTiles - 1) / kMinSplitTiles, capacity_units / items, kMaxSplits});
  return static_cast<int32_t>(std::max<int64_t>(splits, 1));
}

// A decode launch's grid: key splits an item and quads of four warps a CTA.
struct DecodeShape {
  int32_t splits = 1;
  int32_t quads = 1;
};

// The grid of a launch of `items` (sequence, KV head) items that need computing among
// `grid_items` >= items the grid holds (over device metadata every sequence's CTAs are
// launched, those of sequences that are not decode rows exiting at once), whose one-quad
// CTAs run `ctas_per_sm` an SM and whose kernel has variants of up to `max_quads` quads a
// CTA (decode::kernel_quads in kernels/decode_variant.hpp, lowered where the device's
// shared memory lacks room). Quads share a CTA's item: its key tiles alternate between them
// and their states merge in shared memory, so a CTA of q quads is one CTA an SM doing the
// work of q. Measured on an H100 (bench/NOTES.md, "CUDA decode", session 21):
//  - A grid of at most one CTA an SM (few items: batch 1) takes two quads: alone on its SM,
//    one quad issues a tile's dependent instructions too slowly to pull its share of the
//    bandwidth (session 12). Three were no faster there (1 x 32k e4m3: dense +2..+4%).
//  - Three quads (e4m3 pages, the narrow tile) are as many warps an SM as three one-quad
//    CTAs, in a third of the slots. Where the one-quad grid runs more than one wave and its
//    last wave leaves most slots idle (64 x 8k sparse: 512 items on 396 slots, 65% busy
//    over the launch), the three-quad grid (512 on 132, 97%) ran 8-12% faster; where it
//    only raised 86% to 97% (256 x 2k, 128 x 4k), it ran 1-8% slower, its items starting
//    and ending alone on their SMs. So it is taken when its waves' use is higher by more
//    than kMinThreeQuadWaveGain, with its splits planned for one CTA an SM. (A one-quad
//    grid of a single wave keeps its shape: not measured.)
// forced_splits > 0 (the BSPA_DECODE_SPLITS diagnostic; the caller checked the workspace's
// room): that many splits, two quads where the grid is then alone on its SMs, else one.
inline DecodeShape plan_decode_shape(int64_t items, int64_t grid_items, int64_t max_keys, int32_t sms,
                                     int32_t ctas_per_sm, int32_t max_quads, int64_t capacity_units,
                                     bool even_out_waves, int32_t forced_splits = 0) {
  using namespace split_plan;
  DecodeShape shape;
  shape.splits = forced_splits > 0 ? forced_splits
                                   : plan_splits(items, max_keys, sms, ctas_per_sm, capacity_units, even_out_waves);
  if (max_quads <= 1 || items <= 0 || sms <= 0) return shape;
  if (std::max(grid_items, items) * shape.splits <= sms) {  // every CTA of the grid alone on its SM
    shape.quads = 2;
    return shape;
  }
  if (forced_splits > 0) return shape;
  const int64_t slots = int64_t{std::max(ctas_per_sm, 1)} * sms;
  if (max_quads < 3 || items * shape.splits <= slots) return shape;
  // (Splits for one CTA an SM are more than one only for fewer than 2 x sms items, which
  // with more than `slots` CTAs means plan_splits split them too: a pool batch that sized
  // its workspace by plan_splits has room for them.)
  const int32_t wide_splits = plan_splits(items, max_keys, sms, 1, capacity_units, even_out_waves);
  if (wave_use(items * wide_splits, sms) > wave_use(items * shape.splits, slots) + kMinThreeQuadWaveGain) {
    shape.splits = wide_splits;
    shape.quads = 3;
  }
  return shape;
}

}  // namespace bspa::kernels::decode
