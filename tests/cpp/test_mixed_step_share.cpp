// How a mixed launch shares the SMs (kernels/mixed_step_share.hpp): the estimate of a plan's
// two kinds of work (dense layouts only), and the prefill grid's cap
// on 132 SMs for bench_decode's two mixed steps, pinned where bench/NOTES.md ("Session 31")
// measured the best caps, so that a change to the rule shows here before it shows on a GPU.
// Internal; no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/mixed_step_share.hpp"

using namespace bspa::kernels;

namespace {

constexpr int32_t kSms = 132, kHq = 32, kHkv = 8, kD = 128;

// H100 SXM (1.98 GHz, 3.35 TB/s) and H200 (4.8 TB/s), rated as prefill_cuda rates them.
const DeviceRates kH100 = device_rates(kSms, 1.98e9, 3.35e12), kH200 = device_rates(kSms, 1.98e9, 4.8e12);

// A plan of (context, new tokens) sequences: one work item of up to 64 rows a tile of each
// sequence with more than `decode_bound` new tokens (plan_batch's items, without the shift
// that aligns a tile on a layout block).
BatchPlan plan(const std::vector<std::pair<int32_t, int32_t> > &seqs, int32_t decode_bound = 8) {
  BatchPlan p;
  p.num_seqs = static_cast<int32_t>(seqs.size());
  p.decode_max_query_len = decode_bound;
  p.query_starts.push_back(0);
  for (int32_t i = 0; i < p.num_seqs; ++i) {
    const auto [ctx, q] = seqs[static_cast<size_t>(i)];
    p.query_starts.push_back(p.query_starts.back() + q);
    p.context_lens.push_back(ctx);
    if (q > decode_bound)
      for (int32_t r = 0; r < q; r += 64) p.work.push_back({i, r, std::min(r + 64, q), ctx + std::min(r + 64, q)});
    else if (q >= 1)
      ++p.decode_seqs;
  }
  return p;
}

Layout dense() {
  Layout l;
  l.num_heads = kHq;
  return l;
}

// Phi-3-small: local 16 blocks of 64, vertical stride 8, heterogeneous heads.
Layout phi3() {
  Layout l;
  l.kind = Layout::Kind::Strided;
  l.num_heads = kHq;
  l.block_size = 64;
  l.local_blocks = 16;
  l.vert_stride = 8;
  l.head_step = 1;
  return l;
}

// bench_decode's mixed steps.
std::vector<std::pair<int32_t, int32_t> > chunk_and_63() {
  std::vector<std::pair<int32_t, int32_t> > s = {{30000, 2048}};
  s.insert(s.end(), 63, {8191, 1});
  return s;
}
std::vector<std::pair<int32_t, int32_t> > chunks_8x512_and_120() {
  std::vector<std::pair<int32_t, int32_t> > s;
  for (int32_t i = 0; i < 8; ++i) s.push_back({2048 * i, 512});
  for (int32_t i = 0; i < 120; ++i) s.push_back({1024 + (i * 131) % 7168, 1});
  return s;
}

int32_t cap(const std::vector<std::pair<int32_t, int32_t> > &seqs, const Layout &l, const DeviceRates &r) {
  return mixed_prefill_ctas(kSms, launch_mixed_work(estimate_mixed_step(plan(seqs)), l, DType::BF16), r, kHq, kHkv, kD);
}

}  // namespace

Test(mixed_step_share, dense_estimate_counts_every_key) {
  const MixedStepWork w =
      launch_mixed_work(estimate_mixed_step(plan({{100, 64}, {10, 1}, {20, 2}})), dense(), DType::BF16);
  // Rows 100..163 see 101..164 keys, 132.5 on average.
  cr_expect_float_eq(w.prefill_row_keys, 64.0 * 132.5, 1e-9);
  cr_expect_float_eq(w.decode_keys, 11.0 + 22.0, 1e-9, "decode rows read every key of their sequence");
}

Test(mixed_step_share, other_layouts_and_e4m3_pages_keep_one_cta_an_sm) {
  const MixedStepWork w = launch_mixed_work(estimate_mixed_step(plan(chunk_and_63())), phi3(), DType::BF16);
  cr_expect(w.prefill_row_keys == 0 && w.decode_keys == 0, "a cap lost 1-4%% on the H200's sparse steps");
  cr_expect_eq(cap(chunk_and_63(), phi3(), kH100), 0);
  const MixedStepWork e4m3 = launch_mixed_work(estimate_mixed_step(plan(chunk_and_63())), dense(), DType::FP8_E4M3);
  cr_expect(!e4m3.mixed(), "e4m3 pages: no mixed step over them was timed");
}

Test(mixed_step_share, caps_where_the_sweep_found_the_best) {
  // Session 31 (H100, two rounds): chunk + 63 dense best at 104-120, 8 x 512 + 120 dense at
  // 100-104 (caps 92-96 gained less; chunk + 63 dense lost at 92).
  cr_expect_eq(cap(chunk_and_63(), dense(), kH100), 112);
  cr_expect_eq(cap(chunks_8x512_and_120(), dense(), kH100), 101);
  // The H200 streams 43% faster: its decode rows are a smaller share of the step.
  cr_expect_eq(cap(chunk_and_63(), dense(), kH200), 117);
}

Test(mixed_step_share, no_cap_without_both_kinds_or_for_a_sliver_of_decode) {
  cr_expect_eq(cap({{30000, 2048}}, dense(), kH100), 0, "no decode rows");
  cr_expect_eq(cap({{8191, 1}, {8191, 1}}, dense(), kH100), 0, "no prefill work");
  cr_expect_eq(cap({{131072 - 4096, 4096}, {1000, 1}}, dense(), kH100), 0,
               "one short decode row beside a long prefill");
  cr_expect_eq(mixed_prefill_ctas(kSms, {1e6, 1e6}, {}, kHq, kHkv, kD), 0, "no rates (a device attribute read 0)");
}
