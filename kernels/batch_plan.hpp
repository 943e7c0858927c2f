// The host plan of one engine step, built from plain arrays (no pools, no sequences):
// row offsets, context lengths, a padded block table and a work list of query tiles
// ordered heavy first. Every backend launches from it; CUDA gets device copies
// (backend.hpp: upload_batch_cuda).
#pragma once

#include <cstdint>
#include <vector>

namespace bspa::kernels {

// One query tile of one sequence: rows [q_begin, q_end) of the sequence's new tokens.
// The head is not part of the item: a batch is planned before the layout (and so the
// query head count) is known; backends run every item for every query head.
struct WorkItem {
  int32_t seq = 0;
  int32_t q_begin = 0;  // relative to the sequence's first new token
  int32_t q_end = 0;
  int32_t key_end = 0;  // context_len + q_end: keys the tile's last row sees (cost proxy)
};

// Limits a reusable batch is sized for (bspa_batch_options): its device buffers hold a plan
// of at most max_seqs sequences, max_tokens new tokens, max_query_len new tokens in one
// sequence and max_seq_tokens tokens (computed + new) in one, so max_pages_per_seq pages
// a sequence, and re-planning never reallocates.
struct BatchLimits {
  int32_t max_seqs = 0;
  int32_t max_query_len = 0;
  int64_t max_tokens = 0;
  int64_t max_seq_tokens = 0;
  int64_t max_pages_per_seq = 0;  // ceil(max_seq_tokens / page_size), at most the pool's pages
  // Launches sized from these limits rather than from the step (what a CUDA graph captured
  // once must replay for every later plan): sequences padded to max_seqs (no new tokens),
  // the work list padded to max_work_items(limits) empty items.
  bool fixed_launch_shape = false;
  // The caller's bound on decode rows (bspa_batch_options.max_decode_query_len; 0 = none):
  // plan_batch leaves out of the work list only sequences of up to min(this, the backend's)
  // new tokens, which the decode path computes.
  int32_t decode_query_bound = 0;
};

// Work items a plan within `limits` can have (the fixed-shape work list's length, the size
// of a reusable batch's device work list): a sequence of q rows makes at most
// floor(q / tile_rows) + 2 items (its first tile may start up to tile_rows - 1 rows before
// its first token to align on a layout block).
int64_t max_work_items(const BatchLimits &limits, int32_t tile_rows);

// What sizes a launch's grids; the plan's own values unless it is planned for fixed shapes.
struct LaunchShape {
  int32_t num_seqs = 0;         // sequences the grids cover (padded ones have no new tokens)
  int32_t total_q = 0;          // token rows kv_write's grid covers
  int32_t max_query_len = 0;    // picks the prefill tile and routing
  int32_t num_work = 0;         // work items the prefill grid covers
  int32_t decode_seqs = 0;      // decode sequences the key split is sized for
  int64_t decode_max_keys = 0;  // their longest context + new tokens
  int32_t decode_max_q = 0;     // their largest new-token count
};

struct BatchPlanInput {
  int32_t num_seqs = 0;
  const int32_t *query_lens = nullptr;    // [num_seqs]
  const int32_t *context_lens = nullptr;  // [num_seqs], tokens before the new ones
  // Page ids of sequence i: pages[page_offsets[i] .. page_offsets[i + 1]).
  const int32_t *pages = nullptr;
  const int64_t *page_offsets = nullptr;  // [num_seqs + 1]
  int32_t page_size = 0;
  int32_t tile_rows = 64;  // query rows per work item
  // Sequences with 1..decode_max_query_len new tokens get no work items: a backend's decode
  // path computes them (0 = none; CUDA plans: cuda_decode_max_query_len()).
  int32_t decode_max_query_len = 0;
  // Optional: the limits the plan must fit (Error(OutOfRange) naming the limit when it does
  // not); with them the block table's stride is limits->max_pages_per_seq.
  const BatchLimits *limits = nullptr;
  // Optional, with limits: the block table's rows go here (row i at i * max_pages_per_seq,
  // only the pages the sequence's tokens use; the rest of a row is left as it was, the
  // kernels never read it) instead of into BatchPlan::block_table, which stays empty. A
  // reusable CUDA batch passes its pinned staging buffer, so a step's table is written once.
  int32_t *block_table_out = nullptr;
};

// A step's two kinds of work, counted for the CUDA mixed launch's share of the SMs
// (kernels/mixed_step_share.hpp: estimate_mixed_step, launch_mixed_work).
struct MixedStepWork {
  // Sum over the prefill work items' query rows of the keys each row sees under a dense
  // layout (one query head; a launch computes it for every one).
  double prefill_row_keys = 0;
  // Sum over the decode sequences (1..decode_max_query_len new tokens) of their keys (what
  // one KV head reads).
  double decode_keys = 0;
  // Whether the step has both kinds (a mixed step; the share is sized from nothing else).
  bool mixed() const { return prefill_row_keys > 0 && decode_keys > 0; }
};

struct BatchPlan {
  int32_t num_seqs = 0;
  int32_t page_size = 0;
  int32_t tile_rows = 0;
  int32_t total_q = 0;
  int32_t max_query_len = 0;
  int64_t block_table_stride = 0;     // >= 1 so the table is never empty
  std::vector<int32_t> query_starts;  // [num_seqs + 1]
  std::vector<int32_t> context_lens;  // [num_seqs]
  std::vector<int32_t> block_table;   // [num_seqs][block_table_stride], padded with -1 (empty
                                      // when planned into BatchPlanInput::block_table_out)
  std::vector<WorkItem> work;         // heaviest (largest key_end) first
  int32_t decode_max_query_len = 0;   // as planned (BatchPlanInput)
  int32_t decode_seqs = 0;            // sequences left to the decode path
  int64_t decode_max_keys = 0;        // their largest context + new tokens
  int32_t decode_max_q = 0;           // their largest new-token count
  LaunchShape shape;                  // what the launches size their grids by
  MixedStepWork mixed_work;           // estimate_mixed_step's, planned once for every layer's launch
};

// Throws Error(OutOfRange) when a sequence's context + query tokens need more pages
// than it holds, Error(InvalidArgument) for negative lengths or a total past INT32_MAX.
BatchPlan plan_batch(const BatchPlanInput &in);

// The work list alone, for callers that have only row offsets and context lengths
// (bspa_prefill_paged on the CPU).
// Sequences with 1..decode_max_query_len rows get no items.
std::vector<WorkItem> plan_work(int32_t num_seqs, const int32_t *query_starts, const int32_t *context_lens,
                                int32_t tile_rows, int32_t decode_max_query_len = 0);

}  // namespace bspa::kernels
