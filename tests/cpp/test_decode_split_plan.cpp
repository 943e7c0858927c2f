// The decode kernel's key split (kernels/decode_split_plan.hpp) on the H200's 132 SMs: the
// choices bench/NOTES.md ("CUDA decode") measured as the fastest, pinned, so that a change
// to the rule shows here before it shows on a GPU. Internal; no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>

#include "kernels/decode_split_plan.hpp"

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
  cr_expect_eq(splits(1, 2048, false, true), 2, "a split keeps at least 16 key tiles (1024 keys)");
  cr_expect_eq(splits(1, 1024, false, true), 1, "one split's worth of keys");
  cr_expect_eq(splits(1, 32768, false, true, 8 * 5), 5, "the workspace bounds the splits");
  cr_expect_eq(splits(1, 32768, false, true, 7), 1, "no room for a second unit of every item");
  cr_expect_leq(plan_splits(1, int64_t{1} << 40, 1000, 3, kRoom, true), 256, "at most 256 splits");
}
