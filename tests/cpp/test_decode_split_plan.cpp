// The decode kernel's grid (kernels/decode_split_plan.hpp) on 132 SMs (H100 and H200): the
// choices bench/NOTES.md ("CUDA decode") measured as the fastest, pinned, so that a change
// to the rule shows here before it shows on a GPU; and the kernel variant a launch takes
// (kernels/decode_variant.hpp). Internal; no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>

#include "kernels/decode_split_plan.hpp"
#include "kernels/decode_variant.hpp"

using bspa::kernels::decode::plan_splits;

namespace {

constexpr int32_t kH200Sms = 132;
constexpr int64_t kRoom = 1 << 20;  // workspace units: never the limit unless a test says so

// Phi-3-small: 8 KV heads; rows = 4 query heads a KV head x 1 token: two CTAs an SM for
// 16-bit pages, three for e4m3.
int32_t splits(int64_t seqs, int64_t keys, bool e4m3, bool dense, int64_t room = kRoom) {
  return plan_splits(seqs * 8, keys, kH200Sms, e4m3 ? 3 : 2, room, dense);
}

}  // namespace

Test(decode_split_plan, one_wave_of_equal_ctas) {
  cr_expect_eq(splits(8, 131072, false, true), 4, "8 x 128k: 4 splits fill the 264 slots (5 left a tail)");
  cr_expect_eq(splits(1, 32768, false, true), 16, "1 x 32k: one CTA an SM, 16 splits (32 were slower)");
  cr_expect_eq(splits(1, 32768, false, false), 16, "sparse batch 1 as dense");
  // Short contexts: splits of 8 key tiles (kMinSplitTiles; 16 ran 7-24% slower, session 30).
  cr_expect_eq(splits(1, 8192, true, true), 16, "1 x 8k: 16 splits of 8 tiles");
  cr_expect_eq(splits(2, 2048, false, true), 4, "2 x 2k: 4 splits of 8 tiles");
}

Test(decode_split_plan, items_that_fill_the_slots_do_not_split) {
  cr_expect_eq(splits(64, 8192, false, true), 1, "64 x 8k, 16-bit: 512 items on 264 slots");
  cr_expect_eq(splits(128, 4096, true, true), 1, "128 x 4k, e4m3: over two waves, splitting adds merges");
  cr_expect_eq(splits(256, 2048, true, true), 1, "256 x 2k, e4m3");
}

Test(decode_split_plan, between_one_and_two_waves_dense_splits_fill_the_second) {
  cr_expect_eq(splits(64, 8192, true, true), 3, "64 x 8k e4m3 dense: 1536 CTAs on 396 slots, 97%");
  cr_expect_eq(splits(64, 8192, true, false), 1, "the same sparse: its splits would be short");
  cr_expect_eq(splits(64, 8192, true, true, 64 * 8 * 2), 2, "a workspace of two units an item allows 2");
}

Test(decode_split_plan, limits) {
  cr_expect_eq(plan_splits(0, 8192, kH200Sms, 2, kRoom, true), 1, "no items");
  cr_expect_eq(plan_splits(8, 0, kH200Sms, 2, kRoom, true), 1, "no keys");
  cr_expect_eq(plan_splits(8, 8192, 0, 2, kRoom, true), 1, "no SMs");
  cr_expect_eq(splits(1, 2048, false, true), 4, "a split keeps at least 8 key tiles (512 keys)");
  cr_expect_eq(splits(1, 512, false, true), 1, "one split's worth of keys");
  cr_expect_eq(splits(1, 32768, false, true, 8 * 5), 5, "the workspace bounds the splits");
  cr_expect_eq(splits(1, 32768, false, true, 7), 1, "no room for a second unit of every item");
  cr_expect_leq(plan_splits(1, int64_t{1} << 40, 1000, 3, kRoom, true), 256, "at most 256 splits");
}

namespace {

using bspa::kernels::decode::DecodeShape;
using bspa::kernels::decode::plan_decode_shape;

// A launch of one new token a sequence (4 rows a KV group: the narrow tile), e4m3 pages:
// three quads a CTA at most, one-quad CTAs three an SM.
DecodeShape e4m3_shape(int64_t seqs, int64_t keys, bool dense, int32_t max_quads = 3) {
  return plan_decode_shape(seqs * 8, seqs * 8, keys, kH200Sms, 3, max_quads, kRoom, dense);
}

}  // namespace

Test(decode_shape, a_grid_of_one_cta_an_sm_takes_two_quads) {
  const DecodeShape b1 = e4m3_shape(1, 32768, true);
  cr_expect_eq(b1.splits, 16, "1 x 32k: 16 splits (plan_splits)");
  cr_expect_eq(b1.quads, 2, "128 CTAs on 132 SMs: two quads (three were no faster)");
  const DecodeShape bf16 = plan_decode_shape(8, 8, 32768, kH200Sms, 2, 2, kRoom, true);
  cr_expect(bf16.splits == 16 && bf16.quads == 2, "16-bit pages: 16 splits of two quads");
  cr_expect_eq(plan_decode_shape(8, 8, 32768, kH200Sms, 2, 1, kRoom, true).quads, 1, "one quad when asked");
  // Over device metadata the grid holds every sequence's CTAs: 1 decode row beside 99
  // prefill sequences is 8 items to compute in a grid of 800 x 16 CTAs, not alone on its SMs.
  const DecodeShape mixed = plan_decode_shape(8, 800, 32768, kH200Sms, 3, 3, kRoom, true);
  cr_expect(mixed.splits == 16 && mixed.quads == 1, "a grid of more CTAs than SMs keeps one quad");
}

Test(decode_shape, three_quads_where_one_quad_leaves_the_last_wave_thin) {
  const DecodeShape sparse = e4m3_shape(64, 8192, false);
  cr_expect(sparse.splits == 1 && sparse.quads == 3,
            "64 x 8k sparse: 512 CTAs on 396 one-quad slots use 65%, on 132 three-quad slots 97%");
  const DecodeShape dense = e4m3_shape(64, 8192, true);
  cr_expect(dense.splits == 3 && dense.quads == 1, "64 x 8k dense: 3 splits fill 97% of the one-quad slots already");
  const DecodeShape short_dense = e4m3_shape(64, 1024, true);
  cr_expect(short_dense.splits == 1 && short_dense.quads == 3, "64 x 1k dense: too short to split, 65% -> 97%");
  const DecodeShape s256 = e4m3_shape(256, 2048, false);
  cr_expect(s256.splits == 1 && s256.quads == 1, "256 x 2k sparse: 86% -> 97% was slower");
  const DecodeShape s128 = e4m3_shape(128, 4096, false);
  cr_expect(s128.splits == 1 && s128.quads == 1, "128 x 4k sparse: the same");
  const DecodeShape long8 = e4m3_shape(8, 131072, false);
  cr_expect(long8.splits == 6 && long8.quads == 1, "8 x 128k: 6 splits, one wave of 97% either way");
  const DecodeShape one_wave = e4m3_shape(17, 4096, true);
  cr_expect(one_wave.splits == 1 && one_wave.quads == 1,
            "17 x 4k dense: 136 one-quad CTAs, one wave (three quads would split them 2 x 3: not measured)");
  const DecodeShape sparse_one_wave = e4m3_shape(20, 4096, false);
  cr_expect(sparse_one_wave.splits == 1 && sparse_one_wave.quads == 1,
            "20 x 4k sparse: 160 CTAs in one one-quad wave (40% of the slots, three quads' 61%: not measured)");
  const DecodeShape two = e4m3_shape(64, 8192, false, 2);
  cr_expect(two.splits == 1 && two.quads == 1, "without a three-quad variant, plan_splits' grid");
}

Test(decode_shape, wave_use) {
  using bspa::kernels::decode::wave_use;
  cr_expect_float_eq(wave_use(512, 396), 512.0 / 792.0, 1e-12);
  cr_expect_float_eq(wave_use(396, 396), 1.0, 1e-12);
  cr_expect_float_eq(wave_use(0, 396), 0.0, 1e-12);
  cr_expect_float_eq(wave_use(5, 0), 0.0, 1e-12);
}

Test(decode_shape, forced_splits) {
  // BSPA_DECODE_SPLITS: the splits as asked; two quads where the grid is then alone on its
  // SMs, one where it is not (never three: their splits are plan_decode_shape's own).
  const DecodeShape b1 = plan_decode_shape(8, 8, 32768, kH200Sms, 3, 3, kRoom, true, 8);
  cr_expect(b1.splits == 8 && b1.quads == 2, "1 x 32k forced to 8 splits: 64 CTAs alone, two quads");
  const DecodeShape wide = plan_decode_shape(8, 8, 32768, kH200Sms, 3, 3, kRoom, true, 32);
  cr_expect(wide.splits == 32 && wide.quads == 1, "forced to 32 splits: 256 CTAs, one quad");
  const DecodeShape thin = plan_decode_shape(512, 512, 8192, kH200Sms, 3, 3, kRoom, false, 1);
  cr_expect(thin.splits == 1 && thin.quads == 1, "64 x 8k sparse forced to 1 split keeps one quad (unforced: three)");
  const DecodeShape one = plan_decode_shape(8, 8, 32768, kH200Sms, 2, 1, kRoom, true, 8);
  cr_expect(one.splits == 8 && one.quads == 1, "one quad when the kernel has no more");
}

namespace {

using bspa::kernels::decode::DecodeVariant;
using bspa::kernels::decode::decode_variant;

}  // namespace

// The instantiation a launch takes (kernels/decode_variant.hpp): the launch and its shared
// memory both dispatch on it, so the table here is every variant the kernels have.
Test(decode_variant, the_smallest_tile_that_holds_the_rows) {
  for (bool e4m3 : {false, true}) {
    cr_expect(decode_variant(e4m3, 1, 1) == (DecodeVariant{1, 1, true}), "1 row: the narrow tile");
    cr_expect(decode_variant(e4m3, 8, 1) == (DecodeVariant{1, 1, true}), "8 rows: the narrow tile");
    cr_expect(decode_variant(e4m3, 9, 1) == (DecodeVariant{1, 1, false}), "9 rows: one 16-row group");
    cr_expect(decode_variant(e4m3, 16, 1) == (DecodeVariant{1, 1, false}), "16 rows: one 16-row group");
    cr_expect(decode_variant(e4m3, 17, 1) == (DecodeVariant{2, 1, false}), "17 rows: two groups");
    cr_expect(decode_variant(e4m3, 32, 1) == (DecodeVariant{2, 1, false}), "32 rows: two groups");
    cr_expect(decode_variant(e4m3, 33, 1) == (DecodeVariant{4, 1, false}), "33 rows: four groups");
    cr_expect(decode_variant(e4m3, 64, 1) == (DecodeVariant{4, 1, false}), "64 rows: four groups");
  }
}

Test(decode_variant, quads_up_to_what_the_kernel_has) {
  cr_expect(decode_variant(true, 4, 3) == (DecodeVariant{1, 3, true}), "e4m3, 4 rows: three quads");
  cr_expect(decode_variant(false, 4, 3) == (DecodeVariant{1, 2, true}), "16-bit pages have two at most");
  cr_expect(decode_variant(true, 4, 2) == (DecodeVariant{1, 2, true}), "two when asked");
  cr_expect(decode_variant(true, 12, 3) == (DecodeVariant{1, 2, false}), "e4m3, 12 rows: the 16-row tile has two");
  cr_expect(decode_variant(false, 16, 2) == (DecodeVariant{1, 2, false}), "16 rows, two quads");
  cr_expect(decode_variant(true, 32, 2) == (DecodeVariant{2, 1, false}), "the 32-row tile has one");
  cr_expect(decode_variant(false, 64, 3) == (DecodeVariant{4, 1, false}), "the 64-row tile has one");
  cr_expect(decode_variant(true, 4, 0) == (DecodeVariant{1, 1, true}), "fewer than one: one");
  using bspa::kernels::decode::kernel_quads;
  cr_expect(kernel_quads(true, 8) == 3 && kernel_quads(false, 8) == 2 && kernel_quads(true, 16) == 2 &&
                kernel_quads(true, 17) == 1,
            "kernel_quads");
}
