// The bspa_batch handle: the host plan of one step and, for a CUDA pool, its device copy,
// plus a reference to every sequence it snapshotted (so their pages outlive a destroyed
// sequence: cache/page_hold.hpp, SequenceHold).
// A one-step batch (bspa_batch_create) is planned once, its device copy sized to that plan;
// a reusable one (bspa_batch_create_reusable) owns buffers sized from its limits and is
// re-planned step after step (bspa_batch_plan) into the same device addresses.
#pragma once

#include <bspa/bspa.h>

#include <memory>

#include "cache/pool.hpp"
#include "kernels/backend.hpp"
#include "kernels/batch_plan.hpp"

struct bspa_batch {
  const bspa_pool *pool = nullptr;
  bspa::cache::Pool *owner = nullptr;         // the same pool, for releasing `seqs`
  bspa::cache::SequenceHold *seqs = nullptr;  // the snapshotted sequences' references
  bspa::kernels::BatchPlan plan;
  std::unique_ptr<bspa::kernels::DeviceBatchMetadata> device;  // one-step batches of CUDA pools
  // Reusable batches only.
  bool reusable = false;
  bool planned = false;  // a reusable batch launches only after its first plan
  bspa::kernels::BatchLimits limits;
  std::unique_ptr<bspa::kernels::StepBuffers> step;  // CUDA pools

  bspa_batch() = default;
  bspa_batch(const bspa_batch &) = delete;
  bspa_batch &operator=(const bspa_batch &) = delete;
  // Also on a failed bspa_batch_create: the references go back with the batch.
  ~bspa_batch() {
    if (owner) owner->release_sequences(seqs);
  }
  // The device arrays the launches read (CUDA pools).
  const bspa::kernels::DeviceBatchMetadata &device_metadata() const { return step ? step->metadata() : *device; }
  // Rows of q, out, k_new and v_new (columns of lse) a launch takes: the step's new tokens,
  // or for fixed launch shapes the limit, so that a graph captured once stays in bounds.
  int64_t tensor_rows() const { return limits.fixed_launch_shape ? limits.max_tokens : plan.total_q; }
};
