// One prompt's attention, two ways: through the pool (prefix cache, only the uncached
// tokens computed) and from scratch over a private page buffer (no cache at all). The
// demo's verification compares the two; the second also measures the cost the cache saves.
#pragma once

#include <bspa/bspa.h>

#include <cstdint>
#include <vector>

#include "fp8.hpp"
#include "model.hpp"
#include "tensor.hpp"

namespace demo {

// Phi-3-small alternates block-sparse and dense layers; the demo does the same.
class LayerLayouts {
 public:
  struct Strided {
    int32_t block_size = 64, local_blocks = 16, vert_stride = 8;
  };
  LayerLayouts(int32_t num_layers, int32_t num_q_heads, const Strided &strided);
  ~LayerLayouts();
  LayerLayouts(const LayerLayouts &) = delete;
  LayerLayouts &operator=(const LayerLayouts &) = delete;
  const bspa_layout *at(int32_t layer) const { return layouts_[static_cast<size_t>(layer)]; }
  static bool sparse(int32_t layer) { return layer % 2 == 0; }

 private:
  std::vector<bspa_layout *> layouts_;
};

struct AttentionSetup {
  Device device;
  bspa_dtype dtype = BSPA_DTYPE_F32;     // of q, out and the K/V written
  bspa_dtype kv_dtype = BSPA_DTYPE_F32;  // of the pages: dtype, or BSPA_DTYPE_FP8_E4M3
  const Fp8Scales *fp8 = nullptr;        // the pool's scales when kv_dtype is FP8
  int32_t page_size = 64;
  float scale = 0.125f;
  const ToyModel *model = nullptr;
  const LayerLayouts *layouts = nullptr;
};

struct Timings {
  double project_s = 0;   // the toy model's projections (host)
  double kv_write_s = 0;  // bspa_kv_write, or filling the private pages
  double prefill_s = 0;   // bspa_prefill / bspa_prefill_paged
  Timings &operator+=(const Timings &o) {
    project_s += o.project_s;
    kv_write_s += o.kv_write_s;
    prefill_s += o.prefill_s;
    return *this;
  }
};

// Per layer, the output rows [rows, Hq, D] as floats.
using LayerOutputs = std::vector<std::vector<float>>;

// `seq` holds the whole prompt with its first `cached` tokens computed (matched);
// computes tokens [cached, n) for every layer through bspa_batch_create, bspa_kv_write
// and bspa_prefill. Does not commit.
LayerOutputs prefill_with_cache(const AttentionSetup &setup, bspa_pool *pool, bspa_seq *seq, const int32_t *prompt,
                                int64_t n, int64_t cached, Timings &timings);

// Full prefill of prompt[0..n) from nothing, through bspa_prefill_paged over a private,
// freshly written page buffer; returns the last `rows` output rows of every layer.
LayerOutputs prefill_from_scratch(const AttentionSetup &setup, const int32_t *prompt, int64_t n, int64_t rows,
                                  Timings &timings);

// ||a - b|| / ||b||; NaN when either holds a NaN (so poisoned rows fail).
double relative_l2(const std::vector<float> &a, const std::vector<float> &b);

}  // namespace demo
