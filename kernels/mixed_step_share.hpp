// How a mixed launch shares the SMs between its two grids: a pool batch's step with both
// prefill work and decode rows launches the sm90a prefill grid and then the decode grid,
// which starts on whatever SMs the prefill leaves free (programmatic dependent launch,
// compute capability 9.0). The prefill is bound by its tensor cores, the decode rows by
// memory: a decode CTA streams keys at several times its SM's fair share of the bandwidth,
// so the decode rows need far fewer SMs than all of them to read at the machine's rate.
// Leaving them a few SMs from the start (the prefill grid capped) runs the two side by
// side; letting them wait for the prefill's end runs them one after the other on SMs that
// mostly wait for memory. Measured (bench/NOTES.md, "Session 31", both mixed steps of
// bench_decode, 16-bit pages): on an H100 the best caps of the dense steps left the decode
// grid about half its share of the step's time in SMs and at most a quarter of them (whole
// step -4…-5% and -10…-13% at the rule's caps); on an H200, whose figures vary more, the
// rule's caps ran them -1% and -13% (likely an outlier), -4% and +0%. Under Phi-3-small's
// strided layout the rule gained 1-3% on the H100 but lost 1-4% on the H200, so sparse
// steps keep one CTA an SM, as do e4m3 pages (their prefill's rate differs and no mixed
// step over them was timed). Nothing here knows of CUDA: the caller gives the device's
// clocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/batch_plan.hpp"
#include "kernels/dtype.hpp"
#include "kernels/layout.hpp"

namespace bspa::kernels {

// A plan's mixed work (its work list and decode sequences; plan_batch stores it in
// BatchPlan::mixed_work), each item's rows counted at its mean row under a dense layout.
// O(work items + sequences).
inline MixedStepWork estimate_mixed_step(const BatchPlan &plan) {
  MixedStepWork w;
  if (plan.work.empty() || plan.decode_seqs == 0) return w;  // one kind only: nothing to share
  for (const WorkItem &item : plan.work) {
    const int32_t q = plan.query_starts[item.seq + 1] - plan.query_starts[item.seq];
    const int32_t r0 = std::max(item.q_begin, 0), r1 = std::min(item.q_end, q);
    if (r1 <= r0) continue;
    // Row r sees the context and new tokens 0..r: context + r + 1 keys; rows r0..r1-1 see
    // context + (r0 + r1 + 1) / 2 on average.
    const double mean_keys = plan.context_lens[item.seq] + 0.5 * (static_cast<double>(r0) + r1 + 1);
    w.prefill_row_keys += static_cast<double>(r1 - r0) * mean_keys;
  }
  for (int32_t i = 0; i < plan.num_seqs; ++i) {
    const int32_t q = plan.query_starts[i + 1] - plan.query_starts[i];
    if (q >= 1 && q <= plan.decode_max_query_len) w.decode_keys += static_cast<double>(plan.context_lens[i]) + q;
  }
  return w;
}

// The work a launch sizes its share from: the plan's under a dense layout over 16-bit pages,
// none otherwise (one CTA an SM: see above).
inline MixedStepWork launch_mixed_work(const MixedStepWork &planned, const Layout &layout, DType kv_dtype) {
  return layout.kind == Layout::Kind::Dense && kv_dtype != DType::FP8_E4M3 ? planned : MixedStepWork{};
}

// A device's rates for the estimate: the prefill's dense matrix rate (flop/s) and the rate
// at which the decode kernel streams K/V (bytes/s). Only their ratio matters.
struct DeviceRates {
  double prefill_flops_per_s = 0;
  double decode_bytes_per_s = 0;
};

// The rates of a device of `sms` SMs at `sm_clock_hz` whose memory peaks at
// `memory_peak_bytes_per_s`: the sm90a prefill's dense rate measured at 2450 flop a clock an
// SM (630-656 useful TFLOP/s on 132 SMs at 1.98 GHz, H100 and H200), and the decode
// kernel's streaming rate, 92% of the memory's peak (H100 3.06 of 3.35 TB/s; torch's SDPA
// decode 4.45 of 4.8 on an H200).
inline DeviceRates device_rates(int32_t sms, double sm_clock_hz, double memory_peak_bytes_per_s) {
  constexpr double kPrefillFlopsPerSmClock = 2450, kDecodeStreamShare = 0.92;
  return {kPrefillFlopsPerSmClock * sms * sm_clock_hz, kDecodeStreamShare * memory_peak_bytes_per_s};
}

// The prefill grid's CTAs for a mixed launch on `sms` SMs over 16-bit pages: sms minus the
// SMs left to the decode grid from the start, round(sms * min(share / 2, 1 / 4)) where
// share is the decode's estimated part of the step's time (each part's time on the whole
// machine); 0 (one CTA an SM, no cap) when that leaves the decode no SM or either part has
// no work.
inline int32_t mixed_prefill_ctas(int32_t sms, const MixedStepWork &work, const DeviceRates &rates, int32_t num_q_heads,
                                  int32_t num_kv_heads, int32_t head_dim) {
  if (sms <= 1 || !work.mixed() || rates.prefill_flops_per_s <= 0 || rates.decode_bytes_per_s <= 0) return 0;
  // Q K^T and P V: 4 * head_dim flop a (row, key) pair and query head; K and V: 2 * head_dim
  // two-byte elements a key and KV head.
  const double prefill_s = work.prefill_row_keys * num_q_heads * 4.0 * head_dim / rates.prefill_flops_per_s;
  const double decode_s = work.decode_keys * num_kv_heads * 4.0 * head_dim / rates.decode_bytes_per_s;
  const double share = decode_s / (prefill_s + decode_s);
  const auto decode_sms = static_cast<int32_t>(std::lround(sms * std::min(share / 2, 0.25)));
  return decode_sms >= 1 ? sms - decode_sms : 0;
}

}  // namespace bspa::kernels
