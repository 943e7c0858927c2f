#include "kernels/batch_plan.hpp"

#include <algorithm>
#include <limits>

#include "common/checked_size.hpp"
#include "common/error.hpp"
#include "kernels/decode_routing.hpp"
#include "kernels/mixed_step_share.hpp"
#include "kernels/tile_alignment.hpp"

namespace bspa::kernels {

std::vector<WorkItem> plan_work(int32_t num_seqs, const int32_t *query_starts, const int32_t *context_lens,
                                int32_t tile_rows, int32_t decode_max_query_len) {
  std::vector<WorkItem> work;
  // Rows are counted in int32, as the kernels count them: the last tile's end (and the
  // shift's arithmetic) must stay below INT32_MAX.
  const int32_t max_rows = std::numeric_limits<int32_t>::max() - 2 * tile_rows;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t q = query_starts[s + 1] - query_starts[s];
    if (q <= decode_max_query_len) continue;
    check(q <= max_rows, Errc::OutOfRange, "sequence ", s, " has ", q, " new tokens, more than the ", max_rows,
          " one step can hold");
    const int32_t shift = aligned_tile_shift(context_lens[s], q, tile_rows, std::min(tile_rows, kAlignRows));
    for (int32_t b = -shift; b < q; b += tile_rows) {
      const int32_t e = std::min(q, b + tile_rows);
      work.push_back(WorkItem{s, std::max(b, 0), e, context_lens[s] + e});
    }
  }
  // Late tiles see the most keys: starting them first keeps the tail of the step short.
  std::stable_sort(work.begin(), work.end(),
                   [](const WorkItem &a, const WorkItem &b) { return a.key_end > b.key_end; });
  return work;
}

int64_t max_work_items(const BatchLimits &limits, int32_t tile_rows) {
  // A sequence of q rows whose first tile starts up to tile_rows - 1 rows early spans at most
  // floor(q / tile_rows) + 2 tiles; summed over sequences that is within the bound below.
  return limits.max_tokens / tile_rows + 2 * int64_t{limits.max_seqs};
}

namespace {

// The plan against its batch's limits, every value named (planning, not a launch, fails).
void check_limits(const BatchPlanInput &in, const BatchLimits &l) {
  check(in.num_seqs <= l.max_seqs, Errc::OutOfRange, "n = ", in.num_seqs,
        " sequences exceed the batch's max_seqs = ", l.max_seqs);
  int64_t total = 0;
  for (int32_t i = 0; i < in.num_seqs; ++i) {
    const int32_t q = in.query_lens[i];
    check(q <= l.max_query_len, Errc::OutOfRange, "query_lens[", i, "] = ", q,
          " exceeds the batch's max_query_len = ", l.max_query_len);
    total += q;
    // Within max_seq_tokens a sequence fits max_pages_per_seq pages (and no sequence holds
    // more pages than the pool has).
    const int64_t tokens = static_cast<int64_t>(in.context_lens[i]) + q;
    check(tokens <= l.max_seq_tokens, Errc::OutOfRange, "sequence ", i, " has ", tokens,
          " tokens (computed + new), more than the batch's max_seq_tokens = ", l.max_seq_tokens);
  }
  check(total <= l.max_tokens, Errc::OutOfRange, "the step's ", total,
        " new tokens exceed the batch's max_tokens = ", l.max_tokens);
}

// The shapes of fixed-shape launches: the limits' worst case, the same for every plan.
LaunchShape fixed_shape(const BatchLimits &l, const BatchPlan &p) {
  LaunchShape s;
  s.num_seqs = l.max_seqs;
  s.total_q = static_cast<int32_t>(l.max_tokens);
  s.max_query_len = l.max_query_len;
  s.num_work = static_cast<int32_t>(max_work_items(l, p.tile_rows));
  if (p.decode_max_query_len > 0) {
    s.decode_seqs = l.max_seqs;
    s.decode_max_keys = l.max_pages_per_seq * p.page_size;
    s.decode_max_q = std::min(l.max_query_len, p.decode_max_query_len);
  }
  return s;
}

}  // namespace

BatchPlan plan_batch(const BatchPlanInput &in) {
  check(in.num_seqs >= 1, Errc::InvalidArgument, "n = ", in.num_seqs, " must be at least 1");
  check(in.page_size >= 1, Errc::InvalidArgument, "page_size = ", in.page_size, " must be positive");
  check(in.tile_rows >= 1, Errc::InvalidArgument, "tile_rows = ", in.tile_rows, " must be positive");
  BatchPlan p;
  p.num_seqs = in.num_seqs;
  if (in.limits) check_limits(in, *in.limits);
  p.page_size = in.page_size;
  p.tile_rows = in.tile_rows;
  p.query_starts.assign(in.num_seqs + 1, 0);
  p.context_lens.assign(in.context_lens, in.context_lens + in.num_seqs);
  int64_t total = 0, max_pages = 1;
  for (int32_t i = 0; i < in.num_seqs; ++i) {
    const int32_t q = in.query_lens[i], ctx = in.context_lens[i];
    check(q >= 0, Errc::InvalidArgument, "query_lens[", i, "] = ", q, " is negative");
    check(ctx >= 0, Errc::InvalidArgument, "context of sequence ", i, " = ", ctx, " is negative");
    const int64_t held = in.page_offsets[i + 1] - in.page_offsets[i];
    const int64_t tokens = static_cast<int64_t>(ctx) + q;
    check(tokens <= held * in.page_size, Errc::OutOfRange, "sequence ", i, ": computed ", ctx, " + query_lens[", i,
          "] ", q, " = ", tokens, " tokens, but its ", held, " page(s) hold only ", held * in.page_size);
    total += q;
    check(total <= std::numeric_limits<int32_t>::max(), Errc::InvalidArgument, "the batch's query tokens exceed ",
          std::numeric_limits<int32_t>::max());
    p.query_starts[i + 1] = static_cast<int32_t>(total);
    p.max_query_len = std::max(p.max_query_len, q);
    max_pages = std::max(max_pages, (tokens + in.page_size - 1) / in.page_size);
  }
  p.total_q = static_cast<int32_t>(total);
  // A reusable batch's table keeps one stride (its device copy's rows stay put).
  if (in.limits) max_pages = std::max<int64_t>(in.limits->max_pages_per_seq, 1);
  p.block_table_stride = max_pages;
  int32_t *table = in.block_table_out;
  if (!table) {
    p.block_table.assign(
        static_cast<size_t>(checked_product(Errc::OutOfMemory, "the batch's block table",
                                            {{"sequences", static_cast<uint64_t>(in.num_seqs)},
                                             {"pages of the longest", static_cast<uint64_t>(max_pages)},
                                             {"int32 bytes", sizeof(int32_t)}}) /
                            sizeof(int32_t)),
        -1);
    table = p.block_table.data();
  }
  for (int32_t i = 0; i < in.num_seqs; ++i) {
    const int64_t tokens = static_cast<int64_t>(in.context_lens[i]) + in.query_lens[i];
    const int64_t used = (tokens + in.page_size - 1) / in.page_size;
    std::copy(in.pages + in.page_offsets[i], in.pages + in.page_offsets[i] + used, table + i * max_pages);
  }
  // The backend's bound, lowered by a reusable batch's (its options' max_decode_query_len).
  p.decode_max_query_len =
      std::max(wanted_decode_bound(in.decode_max_query_len, in.limits ? in.limits->decode_query_bound : 0), 0);
  for (int32_t i = 0; i < in.num_seqs; ++i) {
    const int32_t q = in.query_lens[i];
    if (q >= 1 && q <= p.decode_max_query_len) {
      ++p.decode_seqs;
      p.decode_max_keys = std::max(p.decode_max_keys, static_cast<int64_t>(in.context_lens[i]) + q);
      p.decode_max_q = std::max(p.decode_max_q, q);
    }
  }
  p.work = plan_work(p.num_seqs, p.query_starts.data(), p.context_lens.data(), p.tile_rows, p.decode_max_query_len);
  p.mixed_work = estimate_mixed_step(p);
  if (in.limits && in.limits->fixed_launch_shape) {
    p.shape = fixed_shape(*in.limits, p);
  } else {
    p.shape.num_seqs = p.num_seqs;
    p.shape.total_q = p.total_q;
    p.shape.max_query_len = p.max_query_len;
    p.shape.num_work = static_cast<int32_t>(p.work.size());
    p.shape.decode_seqs = p.decode_seqs;
    p.shape.decode_max_keys = p.decode_max_keys;
    p.shape.decode_max_q = p.decode_max_q;
  }
  return p;
}

}  // namespace bspa::kernels
