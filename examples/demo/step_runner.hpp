// One engine step's launches behind a small interface: plan the step's rows, launch the
// K/V writes and the attention of every layer, release the plan once the device is done.
// The engine loop (engine.cpp) only uploads inputs into StepBuffers and reads outputs
// back, so how the launches are issued changes in this file alone (--launch, --graphs):
//
// - batch: a one-step batch per step (bspa_batch_create / bspa_batch_destroy), eager
//   launches on the default stream.
// - plan: one reusable batch (bspa_batch_create_reusable, limits from the demo's options:
//   --max-seqs sequences, --step-tokens tokens, the workload's longest sequence) re-planned
//   every step with bspa_batch_plan; eager launches sized by each step.
// - fixed: reusable batches with fixed_launch_shape = 1, one per bucket of step sizes
//   (max_tokens 1, 2, 4, ... up to --step-tokens; max_seqs min(--max-seqs, max_tokens)),
//   and the same sizes up to min(--max-seqs, --step-tokens) for steps of decode rows only
//   (max_query_len 1: on CUDA their launches hold no prefill grid, bspa.h under
//   fixed_launch_shape). A
//   step is planned into the smallest bucket that holds it (of decode rows only for a step
//   of one-token rows, where one does); the tensors then have exactly the
//   bucket's max_tokens rows (the StepBuffers' views at the same addresses, the step's rows
//   first; the rows past them are don't-care inputs the launches neither read nor write).
//   Eager launches on the runner's stream.
// - --graphs (CUDA): fixed, and the first step of each bucket, after its eager launch (which
//   uploads the CSR layouts outside any capture and is that step's result), captures the
//   bucket's kv_write + prefill of every layer on the runner's stream into a CUDA graph;
//   later steps of the bucket plan (outside capture) and cudaGraphLaunch it. Between replays
//   only the plan changes: which sequences, how many (up to the bucket's max_seqs), their
//   context lengths and page tables, their query lengths (up to the bucket's max_tokens in
//   all) and so which rows are decode rows and which prefill chunks. The graph fixes the
//   batch, the pool, the layouts, the layers, the scale and the tensors' addresses and
//   shapes (the bucket's rows). A step no bucket holds, or one bspa_batch_plan refuses (past
//   a limit), is launched eagerly through a one-step batch instead (counted).
#pragma once

#include <bspa/bspa.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention.hpp"
#include "tensor.hpp"

namespace demo {

// Per layer q, k, v and out on the device, sized once for the largest step (the token
// budget) and reused, so every step's tensors sit at the same addresses; a step uses
// their first rows.
class StepBuffers {
 public:
  StepBuffers(Device device, bspa_dtype dtype, const ModelShape &shape, int64_t capacity_rows);
  int64_t capacity() const { return capacity_; }
  int64_t rows() const { return rows_; }
  // The next step's rows (at most capacity()); the views get as many rows.
  void set_rows(int64_t rows);
  // The views' first dimension, rows() .. capacity(): a fixed-shape batch's launches take
  // tensors of exactly its max_tokens rows, of which the step's are the first rows().
  void set_view_rows(int64_t rows);
  int64_t view_rows() const { return view_rows_; }
  // Rows [0, rows()) of a layer: host floats in (p.q [rows, Hq, D], p.k and p.v
  // [rows, Hkv, D]); out poisoned, so rows a launch forgets fail the check.
  void upload(int32_t layer, const Projections &p);
  // Rows [0, rows()) of a layer's out poisoned again (NaN).
  void poison_out(int32_t layer);
  std::vector<float> download_out(int32_t layer) const;

  const DLTensor *q(int32_t layer) const { return &views_[index(layer, 0)].dl; }
  const DLTensor *k(int32_t layer) const { return &views_[index(layer, 1)].dl; }
  const DLTensor *v(int32_t layer) const { return &views_[index(layer, 2)].dl; }
  DLTensor *out(int32_t layer) { return &views_[index(layer, 3)].dl; }

 private:
  struct View {
    std::array<int64_t, 3> shape{};
    DLTensor dl{};
  };
  static size_t index(int32_t layer, int kind) { return static_cast<size_t>(layer) * 4 + static_cast<size_t>(kind); }
  int64_t capacity_, rows_ = 0, view_rows_ = 0;
  std::vector<Tensor> tensors_;  // [layer][q, k, v, out], capacity rows each
  std::vector<View> views_;      // the same storage with view_rows() rows
};

// Host seconds of the bspa calls of one step, as the host sees them (on CUDA the calls
// only enqueue work; on the CPU backend the attention runs inside them).
// With --graphs, replay_s is cudaGraphLaunch of a step's graph (every layer's kv_write and
// prefill); a capture step's capture_s (stream capture and instantiation) is one-time work,
// kept apart from the step's host time.
struct StepCallTimes {
  double plan_s = 0, kv_write_s = 0, prefill_s = 0, replay_s = 0, release_s = 0;
  double capture_s = 0;
  double total() const { return plan_s + kv_write_s + prefill_s + replay_s + release_s; }
};

// What the runner did over the run (the summary's launch lines).
struct RunnerStats {
  int64_t buckets = 0;                   // fixed: reusable batches, one per bucket of step sizes
  int64_t graph_captures = 0;            // --graphs: graphs captured (at most one per bucket)
  int64_t graph_replays = 0;             // steps launched by cudaGraphLaunch
  int64_t eager_fallbacks = 0;           // fixed: steps no bucket held, launched through a one-step batch
  std::vector<int64_t> bucket_steps;     // fixed: steps planned into each bucket
  std::vector<int64_t> bucket_rows;      // fixed: each bucket's max_tokens
  std::vector<bool> bucket_decode_only;  // fixed: each bucket holds decode rows only (max_query_len 1)
};

enum class LaunchMode { Batch, Plan, Fixed };

struct RunnerOptions {
  LaunchMode mode = LaunchMode::Plan;
  bool graphs = false;         // Fixed on CUDA only
  int32_t max_seqs = 1;        // sequences a step holds at most
  int64_t max_tokens = 1;      // rows a step holds at most (the buffers' capacity)
  int64_t max_seq_tokens = 1;  // tokens one sequence holds at most when planned
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Plans the step: seqs[i] computes its next query_lens[i] tokens (already appended);
  // their rows are the buffers' rows in this order.
  virtual void plan(bspa_seq *const *seqs, const int32_t *query_lens, int32_t n) = 0;
  // Writes K/V and runs the attention of every layer for the planned step, reading and
  // writing the StepBuffers; does not wait for the device.
  virtual void launch() = 0;
  // Releases the plan; call once the device has finished the step. A one-step batch is
  // destroyed; reusable batches are kept (their plan too, until drop_sequences()).
  virtual void release() = 0;
  // Releases the page references every plan still holds (a reusable batch keeps its last
  // plan's sequences until it is planned again), so sequences destroyed next free or cache
  // their pages at once, as with one-step batches: call before destroying a sequence of a
  // step, once the device has finished it.
  virtual void drop_sequences() {}
  // Whether the last launch() replayed a CUDA graph.
  virtual bool replayed() const { return false; }
  // Launches the planned step again, eagerly (not timed): after a replay, what the graph's
  // outputs must equal bitwise.
  virtual void launch_eager() = 0;
  // The calls since the last plan().
  const StepCallTimes &times() const { return times_; }
  const RunnerStats &stats() const { return stats_; }

 protected:
  StepCallTimes times_;
  RunnerStats stats_;
};

// The runner of options.mode (see the top of this file). Refuses graphs without CUDA.
std::unique_ptr<StepRunner> make_runner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers,
                                        const RunnerOptions &options);

}  // namespace demo
