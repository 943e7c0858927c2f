// One paged block-sparse prefill launch described with plain arrays: what every
// backend (CPU, CUDA sm80, CUDA sm90a) computes. Nothing here knows of pools,
// sequences or the C ABI; capi/ fills it from a batch or from bspa_paged_args.
//
// Semantics (docs/design.md §2): sequence i has context_lens[i] tokens before its
// q_i = query_starts[i+1] - query_starts[i] new ones; all ctx + q_i tokens' K/V are in
// its pages. New token t (row query_starts[i] + t) sits at absolute position
// p = ctx + t and sees key j iff j <= p and layout.allowed(h, p / B, j / B).
#pragma once

#include <cstddef>
#include <cstdint>

#include "batch_plan.hpp"
#include "dtype.hpp"
#include "layout.hpp"

namespace bspa::kernels {

// Strides are in elements; the last (head_dim) dimension is always contiguous.
struct PagedKV {
  const void *k = nullptr;
  const void *v = nullptr;
  int64_t k_page_stride = 0, k_head_stride = 0, k_token_stride = 0;
  int64_t v_page_stride = 0, v_head_stride = 0, v_token_stride = 0;
  int64_t num_pages = 0;  // pages both pointers cover (bounds the Hopper kernel's TMA descriptors)
  // FP8_E4M3: the pages hold e4m3 with fp32 dequantization scales per KV head (value =
  // scale[h] * e4m3; same memory space as the metadata, already offset to the launch's
  // layer). Any other value: the pages are of the problem's dtype and the scales are unused.
  DType kv_dtype = DType::BF16;
  const float *k_scale = nullptr;
  const float *v_scale = nullptr;
};

// Device scratch a CUDA launch may use to split work across SMs: the sm90a prefill's last
// round (kernels/cuda/prefill_sm90.hpp) and the decode kernel's key ranges
// (kernels/cuda/decode.hpp); empty = no split. Used by one launch at a time.
struct SplitWorkspace {
  void *data = nullptr;
  size_t bytes = 0;
  // 0: a caller's workspace, with no defined contents (each launch that splits a decode
  // clears its counters first). > 0: one the library made and owns (a batch's:
  // allocate_split_workspace_cuda in backend.hpp), whose decode counters for this many
  // (sequence, KV head) items sit at a fixed place, were zeroed when it was made and are
  // left zero by every launch (the decode kernel's last CTA of an item clears its
  // counter), so its launches clear nothing.
  int64_t kept_clear_counters = 0;
};

struct PrefillProblem {
  // CUDA: the device that owns the data when the caller knows it (a pool's), else -1 (found
  // from q's address).
  int32_t device = -1;
  DType dtype = DType::BF16;
  int32_t num_q_heads = 0;   // Hq, equal to layout->num_heads
  int32_t num_kv_heads = 0;  // Hkv, divides Hq
  int32_t head_dim = 0;
  int32_t page_size = 0;

  // Sequence metadata. Host pointers for the CPU backend; device pointers for CUDA.
  int32_t num_seqs = 0;
  const int32_t *query_starts = nullptr;  // [num_seqs + 1]
  const int32_t *context_lens = nullptr;  // [num_seqs]
  const int32_t *block_table = nullptr;   // [num_seqs][block_table_stride]
  int64_t block_table_stride = 0;
  int32_t total_q = 0;        // query_starts[num_seqs]
  int32_t max_query_len = 0;  // an upper bound of every q_i

  // Optional work list (same memory space as the metadata above): query tiles of
  // work_tile_rows rows, heaviest first. nullptr (bspa_prefill_paged) = the backend
  // covers every (sequence, tile of max_query_len) itself.
  const WorkItem *work = nullptr;
  int32_t num_work = 0;
  int32_t work_tile_rows = 0;
  // CUDA, a fixed-shape batch's work list (its num_work entries are the limits' worst case,
  // the step's own first, then empty padding): device memory holding how many entries are
  // the step's, written with the plan, so a graph captured once reads each replay's count.
  // nullptr: every entry may have rows.
  const int32_t *live_work_entries = nullptr;

  // q, out: [total_q, Hq, head_dim]; lse: [Hq, total_q] fp32, nullable.
  const void *q = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  void *out = nullptr;
  int64_t out_token_stride = 0, out_head_stride = 0;
  float *lse = nullptr;
  int64_t lse_head_stride = 0;

  PagedKV kv;
  const Layout *layout = nullptr;  // host object; backends derive device forms from it
  float scale = 1.0f;

  SplitWorkspace split;  // CUDA only, optional

  // CUDA decode rows (backend.hpp: cuda_decode_max_query_len): how many sequences have
  // 1..that many new tokens (-1 = unknown: the metadata is on the device) and an upper
  // bound of their context + new tokens (sizes the decode kernel's key split).
  int32_t decode_seqs = -1;
  int64_t decode_max_keys = 0;
  int32_t decode_max_q = 0;  // their largest new-token count (0 = unknown)
  // The bound on decode rows: the caller's (bspa_paged_args.max_decode_query_len), or a
  // pool batch's plan's, whose work list leaves out the sequences of 1..this many new tokens.
  // On CUDA only sequences of 1..min(this, cuda_decode_max_query_len()) new tokens take the
  // decode kernel, and its tile is sized for them. 0 = no bound (a plan's 0: the decode
  // kernel is off, which routes the same). A hint: any value is correct.
  int32_t decode_query_bound = 0;
  // A fixed-shape batch's launch, whose grids are sized by its limits so that a graph
  // captured once replays for any later plan: how many of the num_work items have rows and
  // how many of the decode_seqs sequences are decode rows in this step (-1 = as sized, the
  // default). Outside stream capture a grid none of whose CTAs has work is not launched (it
  // would only exit; the outputs are the same bits); while capturing every grid is.
  int32_t live_work = -1;
  int32_t live_decode_seqs = -1;
  // CUDA, a pool batch's launch with both prefill work and decode rows under a dense
  // layout over 16-bit pages: the plan's estimated work (launch_mixed_work,
  // kernels/mixed_step_share.hpp), from which the sm90a prefill grid's share of the SMs is
  // sized. Zero (other layouts or pages, one kind of work only, metadata on the device, or a
  // fixed-shape batch, whose captured grids must not change with the step): one CTA an SM.
  MixedStepWork mixed_work;
};

// Writes new tokens' K/V ([total_q, Hkv, head_dim], token/head strides in elements)
// into the pages the block table names, at positions ctx .. ctx + q_i of each sequence.
struct KvWriteProblem {
  int32_t device = -1;                                 // CUDA: as PrefillProblem::device (from k_pages when -1)
  DType dtype = DType::BF16;                           // of k_new / v_new
  DType kv_dtype = DType::BF16;                        // FP8_E4M3: the pages are e4m3, quantized on write (round to
                                                       // nearest even of value / scale[h], saturated to +-448); any
                                                       // other value: the pages are of dtype
  const float *k_scale = nullptr, *v_scale = nullptr;  // [Hkv] for FP8_E4M3, same memory as pages
  int32_t num_kv_heads = 0, head_dim = 0, page_size = 0;
  int32_t num_seqs = 0;
  const int32_t *query_starts = nullptr, *context_lens = nullptr, *block_table = nullptr;
  int64_t block_table_stride = 0;
  int32_t total_q = 0;
  const void *k_new = nullptr, *v_new = nullptr;
  int64_t k_new_token_stride = 0, k_new_head_stride = 0;
  int64_t v_new_token_stride = 0, v_new_head_stride = 0;
  void *k_pages = nullptr, *v_pages = nullptr;  // compact [pages, Hkv, page_size, D]
};

}  // namespace bspa::kernels
