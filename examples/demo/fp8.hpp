// FP8 (e4m3) pools in the demo. The scales are calibrated once per pool, before its first
// write, from one prompt: per (layer, KV head), amax of K (and of V) over the prompt's
// tokens / 448 (e4m3's largest value), times kFp8Headroom so later prompts rarely
// saturate. They stay fixed for the pool's life: cached pages are read with the scales
// they were written with, so changing them would change every later hit.
#pragma once

#include <bspa/bspa.h>

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace demo {

constexpr float kFp8Headroom = 1.25f;

struct Fp8Scales {
  int32_t num_kv_heads = 0;
  std::vector<float> k, v;  // [num_layers][num_kv_heads]
  const float *k_of(int32_t layer) const { return k.data() + static_cast<size_t>(layer) * num_kv_heads; }
  const float *v_of(int32_t layer) const { return v.data() + static_cast<size_t>(layer) * num_kv_heads; }
};

Fp8Scales calibrate_fp8(const ToyModel &model, const int32_t *prompt, int64_t n);
// bspa_pool_set_kv_scales for every layer.
void set_fp8_scales(bspa_pool *pool, const Fp8Scales &scales, int32_t num_layers);
// x into e4m3 the way bspa_kv_write does (bspa.h): round to nearest even, saturate to
// +-448, NaN stays NaN. The demo's recompute writes its private pages with it.
uint8_t encode_e4m3(float x);

}  // namespace demo
