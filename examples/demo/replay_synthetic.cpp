#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "engine.hpp"
#include "handles.hpp"
#include "replay.hpp"
#include "status.hpp"

namespace demo {

bspa_pool *create_pool(const Options &o, Device device, bspa_dtype dtype, int32_t num_layers, int64_t num_pages,
                       int64_t events_capacity) {
  bspa_pool_options po;
  DEMO_OK(bspa_pool_options_init(&po));
  po.device_type = device.type;
  po.device_id = device.id;
  po.dtype = dtype;
  po.num_layers = num_layers;
  po.num_kv_heads = o.model.num_kv_heads;
  po.head_dim = o.model.head_dim;
  po.page_size = o.page_size;
  po.num_pages = num_pages;
  po.events_capacity = events_capacity;
  bspa_pool *pool = nullptr;
  DEMO_OK(bspa_pool_create(&pool, &po));
  return pool;
}

void replay_synthetic(const Options &o, Device device, bspa_dtype dtype, Report &report) {
  const Workload workload = make_workload(o.workload);
  const int64_t page = o.page_size;

  // Enough pages that nothing is ever evicted (every turn's prompt and generated tokens
  // in pages of its own), unless the caller asks for fewer.
  int64_t num_pages = o.pages > 0 ? o.pages : 0;
  if (num_pages == 0)
    for (const Turn &t : workload.turns) num_pages += (t.prompt_tokens + t.generate + page - 1) / page;
  PoolPtr pool(create_pool(o, device, dtype, o.model.num_layers, std::max<int64_t>(num_pages, 1)));

  const ToyModel model(o.model, o.workload.seed);
  // FP8: the scales once, from the first prompt, before anything is written (fp8.hpp).
  Fp8Scales fp8;
  if (dtype == BSPA_DTYPE_FP8_E4M3 && !workload.turns.empty()) {
    std::vector<int32_t> first = workload.system;
    first.insert(first.end(), workload.turns[0].user.begin(), workload.turns[0].user.end());
    fp8 = calibrate_fp8(model, first.data(), static_cast<int64_t>(first.size()));
    set_fp8_scales(pool.get(), fp8, o.model.num_layers);
  }
  const LayerLayouts layouts(o.model.num_layers, o.model.num_q_heads, o.strided);
  AttentionSetup setup;
  setup.device = device;
  setup.dtype = dtype == BSPA_DTYPE_FP8_E4M3 ? BSPA_DTYPE_BF16 : dtype;
  setup.kv_dtype = dtype;
  setup.fp8 = dtype == BSPA_DTYPE_FP8_E4M3 ? &fp8 : nullptr;
  setup.page_size = o.page_size;
  setup.scale = static_cast<float>(o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(o.model.head_dim)));
  setup.model = &model;
  setup.layouts = &layouts;

  report.num_pages = std::max<int64_t>(num_pages, 1);
  report.tenants = o.workload.tenants;
  report.tolerance = dtype == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;
  Engine engine(o, workload, pool.get(), setup, report);
  engine.run();
  DEMO_OK(bspa_pool_stats(pool.get(), &report.stats));
}

}  // namespace demo
