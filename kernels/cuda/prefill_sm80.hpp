// Host side of the sm80 prefill kernel: its parameters (by value, so a launch needs no
// device allocation) and one launch function per (element type, head dim, tile rows),
// defined in prefill_sm80_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/batch_plan.hpp"
#include "kernels/cuda/device_layout.hpp"

namespace bspa::kernels::sm80 {

struct Params {
  const void *q;
  int64_t q_tok, q_head;
  void *out;
  int64_t o_tok, o_head;
  float *lse;
  int64_t lse_head;
  const void *k, *v;
  int64_t k_page, k_head, k_tok, v_page, v_head, v_tok;
  int64_t num_pages;  // host side only (TMA descriptors): pages k and v cover
  const int32_t *query_starts, *context_lens, *block_table;
  int64_t bt_stride;
  const WorkItem *work;     // nullptr: grid (heads, tiles reversed, sequences)
  int32_t work_tile_rows;   // a multiple of BM when work is set
  int32_t group;            // Hq / Hkv
  int32_t page_shift;       // page_size = 1 << page_shift
  float scale_log2;         // scale * log2(e)
  cuda::DeviceLayout layout;
};

template <class T, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream);

}  // namespace bspa::kernels::sm80
