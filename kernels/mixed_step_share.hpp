// How a mixed launch shares the SMs between its two grids: a pool batch's step with both
// prefill work and decode rows launches the sm90a prefill grid and then the decode grid,
// which starts on whatever SMs the prefill leaves free (programmatic dependent launch,
// compute capability 9.0). The prefill is bound by its tensor cores, the decode rows by
// memory: a decode CTA streams keys at several times its SM's fair share of the bandwidth,
// so the decode rows need far fewer SMs than all of them to read at the machine's rate.
// Leaving them a few SMs from the start (the prefill grid capped) runs the two side by
// side; letting them wait for the prefill's end runs them one after the other on SMs that
// mostly wait for memory. Measured (bench/NOTES.md, "Session 31"): on both mixed steps of
// bench_decode the best cap left the decode grid about half its share of the step's time
// in SMs, never much more than a quarter of them. Nothing here knows of CUDA: the caller
// gives the device's rates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/batch_plan.hpp"
#include "kernels/block_rule.hpp"
#include "kernels/layout.hpp"

namespace bspa::kernels {

// A mixed step's work, estimated from its host plan for one launch's layout.
struct MixedStepWork {
  // Sum over the prefill work items' query rows of the keys each row sees, one query head
  // on average (a launch computes it for every query head).
  double prefill_row_keys = 0;
  // Sum over the decode sequences (1..plan.decode_max_query_len new tokens) of the keys one
  // KV head reads: the union over its group's query heads of the keys they see.
  double decode_keys = 0;
};

// A device's rates for the estimate: the prefill's dense matrix rate (flop/s) and the rate
// at which the decode kernel streams K/V (bytes/s). Only their ratio matters.
struct DeviceRates {
  double prefill_flops_per_s = 0;
  double decode_bytes_per_s = 0;
};

namespace mixed_share_detail {

// The keys a row at absolute position `pos` sees (keys 0..pos) when a fraction `older` of
// the blocks before its local window is visible: the local window in full, the rest at
// that fraction (a dense or CSR layout: everything).
struct KeyRule {
  bool strided = false;
  int64_t local_tokens = 0;  // local_blocks * block_size
  double older = 1.0;        // visible fraction of the blocks older than the window

  double keys(int64_t pos) const {
    const double n = static_cast<double>(pos + 1);
    if (!strided || pos + 1 <= local_tokens) return n;
    return static_cast<double>(local_tokens) + (n - static_cast<double>(local_tokens)) * older;
  }
};

// The fraction of residues (block index mod vert_stride) that the heads of a group of
// `count` consecutive heads see by their stride, averaged over the layout's groups (strides
// over 64 residues: count / vert_stride, at most 1).
inline double strided_residue_share(const Layout &l, int32_t count) {
  if (l.vert_stride > 64) return std::min(1.0, static_cast<double>(count) / l.vert_stride);
  const int32_t groups = std::max(l.num_heads / count, 1);
  double sum = 0;
  for (int32_t g = 0; g < groups; ++g) {
    uint64_t seen = 0;
    for (int32_t h = g * count; h < std::min((g + 1) * count, l.num_heads); ++h)
      seen |= uint64_t{1} << strided_head_residue(l, h);
    sum += static_cast<double>(__builtin_popcountll(seen)) / l.vert_stride;
  }
  return sum / groups;
}

inline KeyRule key_rule(const Layout &l, int32_t heads_together) {
  KeyRule r;
  if (l.kind != Layout::Kind::Strided || l.num_heads <= 0) return r;
  r.strided = true;
  r.local_tokens = static_cast<int64_t>(l.local_blocks) * l.block_size;
  r.older = strided_residue_share(l, std::max(heads_together, 1));
  return r;
}

}  // namespace mixed_share_detail

// Estimated, not counted: a row's keys from its block's position under the layout's rule
// (strided: the local blocks plus its share of the older ones; CSR layouts count as dense,
// an upper bound), an item's rows at its middle row. O(work items + sequences).
inline MixedStepWork estimate_mixed_step(const BatchPlan &plan, const Layout &layout, int32_t group) {
  MixedStepWork w;
  // A query head sees its own stride's blocks; a decode CTA reads those of its whole group.
  using mixed_share_detail::KeyRule;
  const KeyRule head = mixed_share_detail::key_rule(layout, 1), kv_group = mixed_share_detail::key_rule(layout, group);
  for (const WorkItem &item : plan.work) {
    const int32_t q = plan.query_starts[item.seq + 1] - plan.query_starts[item.seq];
    const int32_t r0 = std::max(item.q_begin, 0), r1 = std::min(item.q_end, q);
    if (r1 <= r0) continue;
    const int64_t mid = static_cast<int64_t>(plan.context_lens[item.seq]) + (r0 + r1 - 1) / 2;
    w.prefill_row_keys += static_cast<double>(r1 - r0) * head.keys(mid);
  }
  for (int32_t i = 0; i < plan.num_seqs; ++i) {
    const int32_t q = plan.query_starts[i + 1] - plan.query_starts[i];
    if (q < 1 || q > plan.decode_max_query_len) continue;
    w.decode_keys += kv_group.keys(static_cast<int64_t>(plan.context_lens[i]) + q - 1);
  }
  return w;
}

// The prefill grid's CTAs for a mixed launch on `sms` SMs: sms minus the SMs left to the
// decode grid from the start, round(sms * min(share / 2, 1 / 4)) where share is the decode's
// estimated part of the step's time (each part's time on the whole machine); 0 (one CTA an
// SM, no cap) when that leaves the decode no SM or either part has no work.
inline int32_t mixed_prefill_ctas(int32_t sms, const MixedStepWork &work, const DeviceRates &rates, int32_t num_q_heads,
                           int32_t num_kv_heads, int32_t head_dim, int32_t kv_elem_bytes) {
  if (sms <= 1 || work.prefill_row_keys <= 0 || work.decode_keys <= 0 || rates.prefill_flops_per_s <= 0 ||
      rates.decode_bytes_per_s <= 0)
    return 0;
  // Q K^T and P V: 4 * head_dim flop a (row, key) pair and query head; K and V: 2 * head_dim
  // elements a key and KV head.
  const double prefill_s = work.prefill_row_keys * num_q_heads * 4.0 * head_dim / rates.prefill_flops_per_s;
  const double decode_s = work.decode_keys * num_kv_heads * 2.0 * head_dim * kv_elem_bytes / rates.decode_bytes_per_s;
  const double share = decode_s / (prefill_s + decode_s);
  const auto decode_sms = static_cast<int32_t>(std::lround(sms * std::min(share / 2, 0.25)));
  return decode_sms >= 1 ? sms - decode_sms : 0;
}

}  // namespace bspa::kernels
