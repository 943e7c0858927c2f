// Which sequences of a CUDA launch the decode kernel takes and which the prefill kernels:
// one rule, host-only and header-only so that the CPU build tests it (tests/cpp) although
// only prefill_cuda runs it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace bspa::kernels {

// The process's bound lowered by the caller's (0: none): what a plan leaves out of its work
// list and what a launch starts its routing from.
inline int32_t wanted_decode_bound(int32_t process_bound, int32_t caller_bound) {
  return caller_bound > 0 ? std::min(process_bound, caller_bound) : process_bound;
}

struct DecodeRouteInput {
  // The process's bound: cuda_decode_max_query_len() (BSPA_CUDA_DECODE, else
  // kCudaDecodeMaxQueryLen); 0 turns the decode kernel off.
  int32_t process_bound = 0;
  // The caller's bound (bspa_paged_args / bspa_batch_options max_decode_query_len, or a
  // plan's): 0 = none. It can only lower the process's.
  int32_t caller_bound = 0;
  int32_t group = 1;               // query heads per KV head: a decode row is `group` tile rows
  int32_t max_tile_rows = 64;      // the decode kernel's largest query tile (decode::kMaxRows)
  int32_t max_grid_seqs = 65535;   // sequences its grid can hold (gridDim.z)
  int32_t max_grid_heads = 65535;  // KV heads its grid can hold (gridDim.y)
  int32_t num_seqs = 0;
  int32_t num_kv_heads = 1;
  int32_t max_query_len = 0;  // the launch's bound of the query lengths
  int32_t decode_seqs = -1;   // sequences within the bound, -1 = unknown (metadata on the device)
};

struct DecodeRoute {
  // Sequences with 1..bound new tokens take the decode kernel, the others the prefill
  // kernels (which skip the decode kernel's); 0: the prefill kernels take every sequence.
  int32_t bound = 0;
  bool decode = false;   // the decode kernel is launched
  bool prefill = false;  // a prefill kernel is launched (some sequence may have more rows)
};

// tile_fits(rows): whether the decode kernel's shared memory for a tile of `rows` rows fits
// the device. Nothing is launched for a launch without rows (max_query_len 0). The decode
// kernel is launched when its rows may exist: every row is within the
// bound, or (with longer rows too) some sequence is known to be within it, or, over device
// metadata, there are several sequences (a single one over the bound is a prefill, which
// then pays no empty decode launch).
template <class TileFits>
DecodeRoute route_decode_rows(const DecodeRouteInput &in, TileFits &&tile_fits) {
  const int32_t wanted = wanted_decode_bound(in.process_bound, in.caller_bound);
  int32_t bound = in.group > 0 ? std::min(wanted, in.max_tile_rows / in.group) : 0;
  if (bound > 0 && (in.num_seqs > in.max_grid_seqs || in.num_kv_heads > in.max_grid_heads ||
                    !tile_fits(std::min(in.max_query_len, bound) * in.group)))
    bound = 0;
  const bool known = in.decode_seqs >= 0;
  DecodeRoute r;
  r.decode = bound > 0 && in.max_query_len >= 1 &&
             (in.max_query_len <= bound || (known ? in.decode_seqs > 0 : in.num_seqs > 1));
  r.bound = r.decode ? bound : 0;
  r.prefill = in.max_query_len > r.bound;
  return r;
}

// A fixed-shape batch's launch sizes both grids by its limits (PrefillProblem::live_work,
// live_decode_seqs give the step's own counts; -1 = unknown, as sized): which routed grid
// has none of the step's work, its CTAs would only exit. Outside stream capture the caller
// leaves such a grid out; while capturing it launches both, since a replay may have work.
// The prefill grid is idle only while it walks the plan's work list (without the list it
// covers every sequence).
struct IdleGrids {
  bool prefill = false;
  bool decode = false;
};

inline IdleGrids idle_grids(const DecodeRoute &route, bool walks_work_list, int32_t live_work,
                            int32_t live_decode_seqs) {
  IdleGrids g;
  g.prefill = route.prefill && walks_work_list && live_work == 0;
  g.decode = route.decode && live_decode_seqs == 0;
  return g;
}

}  // namespace bspa::kernels
