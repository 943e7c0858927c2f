// The parameters every CUDA attention kernel of a launch reads (sm80 and sm90a prefill,
// decode), filled once per launch in prefill_cuda.cpp and passed by value, so a launch
// needs no device allocation. Strides are in elements.
#pragma once

#include <cstdint>

#include "kernels/batch_plan.hpp"
#include "kernels/cuda/device_layout.hpp"

namespace bspa::kernels::cuda {

struct AttentionParams {
  const void *q;
  int64_t q_tok, q_head;
  void *out;
  int64_t o_tok, o_head;
  float *lse;
  int64_t lse_head;
  const void *k, *v;  // 16-bit pages of q's type, or e4m3 (then k_scale / v_scale are set)
  int64_t k_page, k_head, k_tok, v_page, v_head, v_tok;
  const float *k_scale, *v_scale;  // e4m3 pages: [Hkv] dequantization scales (device), else null
  int64_t num_pages;               // host side only (TMA descriptors): pages k and v cover
  const int32_t *query_starts, *context_lens, *block_table;
  int64_t bt_stride;
  const WorkItem *work;    // nullptr: grid (heads, tiles reversed, sequences)
  int32_t work_tile_rows;  // a multiple of BM when work is set
  int32_t group;           // Hq / Hkv
  int32_t page_shift;      // page_size = 1 << page_shift
  // Sequences with at most this many new tokens belong to the decode kernel (decode.hpp)
  // and the prefill kernels skip them; 0 = the prefill kernels compute every sequence.
  int32_t decode_max_query_len;
  float scale_log2;  // scale * log2(e)
  DeviceLayout layout;
};

}  // namespace bspa::kernels::cuda
