// The bspa_batch handle: the host plan of one step and, for a CUDA pool, its device copy,
// plus a reference to every page it snapshotted (so they outlive a destroyed sequence).
#pragma once

#include <bspa/bspa.h>

#include <memory>

#include "cache/pool.hpp"
#include "kernels/backend.hpp"
#include "kernels/batch_plan.hpp"

struct bspa_batch {
  const bspa_pool *pool = nullptr;
  bspa::cache::Pool *owner = nullptr;      // the same pool, for releasing `pages`
  bspa::cache::PageHold *pages = nullptr;  // the snapshotted pages' references
  bspa::kernels::BatchPlan plan;
  std::unique_ptr<bspa::kernels::DeviceBatchMetadata> device;  // CUDA pools only

  bspa_batch() = default;
  bspa_batch(const bspa_batch &) = delete;
  bspa_batch &operator=(const bspa_batch &) = delete;
  // Also on a failed bspa_batch_create: the references go back with the batch.
  ~bspa_batch() {
    if (owner) owner->release_hold(pages);
  }
};
