// One engine step's launches behind a small interface: plan the step's rows, launch the
// K/V writes and the attention of every layer, release the plan once the device is done.
// The engine loop (engine.cpp) only uploads inputs into StepBuffers and reads outputs
// back, so how the launches are issued (eager calls through a batch per step here; a
// reusable plan and replayed CUDA graphs later) changes in this file alone.
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
  // The views' first dimension for the next step (at most capacity()).
  void set_rows(int64_t rows);
  // Rows [0, rows()) of a layer: host floats in (p.q [rows, Hq, D], p.k and p.v
  // [rows, Hkv, D]); out poisoned, so rows a launch forgets fail the check.
  void upload(int32_t layer, const Projections &p);
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
  int64_t capacity_, rows_ = 0;
  std::vector<Tensor> tensors_;  // [layer][q, k, v, out], capacity rows each
  std::vector<View> views_;      // the same storage with rows() rows
};

// Host seconds of the bspa calls of one step, as the host sees them (on CUDA the calls
// only enqueue work; on the CPU backend the attention runs inside them).
struct StepCallTimes {
  double plan_s = 0, kv_write_s = 0, prefill_s = 0, release_s = 0;
  double total() const { return plan_s + kv_write_s + prefill_s + release_s; }
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
  // Releases the plan; call once the device has finished the step.
  virtual void release() = 0;
  // The calls since the last plan().
  const StepCallTimes &times() const { return times_; }

 protected:
  StepCallTimes times_;
};

// A batch per step (bspa_batch_create / bspa_batch_destroy), then per layer
// bspa_kv_write and bspa_prefill on the default stream.
std::unique_ptr<StepRunner> make_eager_runner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers);

}  // namespace demo
