// The bspa_batch handle: the host plan of one step and, for a CUDA pool, its device copy.
#pragma once

#include <bspa/bspa.h>

#include <memory>

#include "kernels/backend.hpp"
#include "kernels/batch_plan.hpp"

struct bspa_batch {
  const bspa_pool *pool = nullptr;
  bspa::kernels::BatchPlan plan;
  std::unique_ptr<bspa::kernels::DeviceBatchMetadata> device;  // CUDA pools only
};
