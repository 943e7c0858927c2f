// The two replays: the synthetic multi-tenant workload (every turn's attention computed
// and verified) and a Mooncake trace (bookkeeping for every request, attention for a sample).
#pragma once

#include "cli.hpp"
#include "report.hpp"
#include "tensor.hpp"

namespace demo {

void replay_synthetic(const Options &options, Device device, bspa_dtype dtype, Report &report);
void replay_trace(const Options &options, Device device, bspa_dtype dtype, Report &report);

// Creates a pool of the demo's model shape on `device` (num_layers 0: no KV storage).
bspa_pool *create_pool(const Options &options, Device device, bspa_dtype dtype, int32_t num_layers, int64_t num_pages,
                       int64_t events_capacity = 0);

}  // namespace demo
