// The CUDA launch's routing of sequences between the decode and prefill kernels
// (kernels/decode_routing.hpp), on the host: the process's and the caller's bounds, the
// tile's limit for large GQA groups, the shared-memory and grid limits, pool batches (the
// decode sequences known) and device metadata (unknown). Every row must go to exactly one
// kernel: a sequence of q new tokens is the decode kernel's iff 1 <= q <= bound, so a launch
// runs the prefill kernels whenever max_query_len exceeds the bound. Internal; no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>

#include "kernels/decode_routing.hpp"

using bspa::kernels::DecodeRoute;
using bspa::kernels::DecodeRouteInput;
using bspa::kernels::idle_grids;
using bspa::kernels::IdleGrids;
using bspa::kernels::route_decode_rows;

namespace {

// Phi-3-small's group (32 query heads over 8 KV heads), the default process bound.
DecodeRouteInput phi3(int32_t num_seqs, int32_t max_query_len, int32_t decode_seqs = -1) {
  DecodeRouteInput in;
  in.process_bound = 8;
  in.group = 4;
  in.max_tile_rows = 64;
  in.num_seqs = num_seqs;
  in.max_query_len = max_query_len;
  in.decode_seqs = decode_seqs;
  return in;
}

DecodeRoute route(const DecodeRouteInput &in) {
  return route_decode_rows(in, [](int32_t) { return true; });
}

void expect_route(const DecodeRoute &r, int32_t bound, bool decode, bool prefill, const char *what) {
  cr_expect_eq(r.bound, bound, "%s: bound %d, want %d", what, r.bound, bound);
  cr_expect_eq(r.decode, decode, "%s: decode %d, want %d", what, r.decode, decode);
  cr_expect_eq(r.prefill, prefill, "%s: prefill %d, want %d", what, r.prefill, prefill);
}

}  // namespace

Test(decode_routing, device_metadata) {
  expect_route(route(phi3(64, 1)), 8, true, false, "64 decode rows");
  expect_route(route(phi3(64, 8)), 8, true, false, "speculative rows up to 8");
  expect_route(route(phi3(64, 2048)), 8, true, true, "a chunk among decode rows: both kernels");
  expect_route(route(phi3(1, 2048)), 0, false, true, "one long sequence: the prefill alone");
  expect_route(route(phi3(1, 5)), 8, true, false, "one short sequence: the decode kernel alone");
  expect_route(route(phi3(1, 8)), 8, true, false, "one sequence of exactly the bound: the decode kernel");
  expect_route(route(phi3(1, 9)), 0, false, true, "one sequence just past the bound: the prefill");
  expect_route(route(phi3(3, 0)), 0, false, false, "no rows at all: nothing launched");
}

Test(decode_routing, pool_batches_know_their_decode_sequences) {
  expect_route(route(phi3(8, 300, 0)), 0, false, true, "no decode sequence: no decode launch");
  expect_route(route(phi3(8, 300, 5)), 8, true, true, "five decode sequences and chunks");
  expect_route(route(phi3(8, 1, 8)), 8, true, false, "decode only");
}

Test(decode_routing, the_callers_bound_only_lowers_the_processs) {
  DecodeRouteInput in = phi3(64, 2048);
  in.caller_bound = 1;
  expect_route(route(in), 1, true, true, "bound 1 beside a chunk");
  in.max_query_len = 3;  // rows of 2..3 tokens now go to the prefill kernel
  expect_route(route(in), 1, true, true, "bound 1, rows up to 3");
  in.num_seqs = 1;
  expect_route(route(in), 0, false, true, "bound 1, one sequence of 3 rows: the prefill alone");
  in.max_query_len = 1;
  expect_route(route(in), 1, true, false, "bound 1, batch-1 decode: the decode kernel");
  in = phi3(64, 2048);
  in.caller_bound = 100;
  expect_route(route(in), 8, true, true, "a bound over the process's leaves it");
  in.caller_bound = 8;
  expect_route(route(in), 8, true, true, "the process's own bound");
  in.process_bound = 2;  // BSPA_CUDA_DECODE=2
  in.caller_bound = 4;
  expect_route(route(in), 2, true, true, "the smaller of the two");
  in.process_bound = 0;  // BSPA_CUDA_DECODE=0
  in.caller_bound = 1;
  in.max_query_len = 1;
  expect_route(route(in), 0, false, true, "no decode kernel: the caller cannot turn it on");
}

Test(decode_routing, large_groups_fit_fewer_tokens_in_the_tile) {
  DecodeRouteInput in = phi3(64, 8);
  in.group = 16;  // 64 / 16 = 4 tokens
  expect_route(route(in), 4, true, true, "group 16");
  in.group = 64;
  in.max_query_len = 1;
  expect_route(route(in), 1, true, false, "group 64, one token");
  in.group = 128;  // a single token is two tiles
  expect_route(route(in), 0, false, true, "group 128: no decode kernel");
}

Test(decode_routing, device_limits) {
  DecodeRouteInput in = phi3(64, 2048);
  int32_t asked = -1;
  DecodeRoute r = route_decode_rows(in, [&](int32_t rows) {
    asked = rows;
    return false;  // the decode kernel's shared memory does not fit this GPU
  });
  expect_route(r, 0, false, true, "shared memory too small");
  cr_expect_eq(asked, 8 * 4, "the tile asked for is min(max_query_len, bound) x group rows, not %d", asked);
  in.max_query_len = 2;
  route_decode_rows(in, [&](int32_t rows) {
    asked = rows;
    return true;
  });
  cr_expect_eq(asked, 2 * 4, "rows %d", asked);
  expect_route(route(phi3(65535, 1)), 8, true, false, "a full decode grid");
  expect_route(route(phi3(65536, 1)), 0, false, true, "one sequence more than the decode grid holds");
  in = phi3(2, 1);
  in.num_kv_heads = 65535;
  expect_route(route(in), 8, true, false, "a decode grid of 65535 KV heads");
  in.num_kv_heads = 65536;  // pages of so many KV heads are accepted; their grid is the prefill's
  expect_route(route(in), 0, false, true, "one KV head more than the decode grid holds");
}

// Exhaustively: whatever the inputs, a sequence of q rows (0 < q <= max_query_len) is
// computed by exactly one kernel that runs.
Test(decode_routing, every_row_goes_to_one_kernel_that_runs) {
  for (int32_t process = 0; process <= 8; ++process)
    for (int32_t caller = 0; caller <= 10; ++caller)
      for (int32_t group : {1, 4, 8, 16, 64, 128})
        for (int32_t seqs : {1, 2, 64})
          for (int32_t max_q : {0, 1, 2, 5, 8, 9, 300})
            for (int32_t known : {-1, 0, 1}) {
              DecodeRouteInput in = phi3(seqs, max_q, known);
              in.process_bound = process, in.caller_bound = caller, in.group = group;
              const DecodeRoute r = route(in);
              cr_assert(
                  r.bound >= 0 && r.bound <= process && (caller == 0 || r.bound <= caller) && r.bound * group <= 64,
                  "bound %d over a limit (process %d, caller %d, group %d)", r.bound, process, caller, group);
              cr_assert_eq(r.decode, r.bound > 0, "decode %d with bound %d", r.decode, r.bound);
              for (int32_t q = 1; q <= max_q; ++q) {
                const bool to_decode = q <= r.bound;
                cr_assert(to_decode ? r.decode : r.prefill,
                          "a sequence of %d rows is left out (bound %d, decode %d, prefill %d; process %d, caller %d, "
                          "group %d, seqs %d, max_q %d, known %d)",
                          q, r.bound, r.decode, r.prefill, process, caller, group, seqs, max_q, known);
              }
            }
}

// A fixed-shape batch's eager step leaves out a grid with none of the step's work, and only
// then: unknown counts (-1), a dropped work list, or a grid the routing did not launch
// never count as idle.
Test(decode_routing, idle_grids_of_fixed_shape_steps) {
  DecodeRoute both;
  both.bound = 8, both.decode = true, both.prefill = true;
  IdleGrids g = idle_grids(both, true, 0, 64);
  cr_expect(g.prefill && !g.decode, "a decode-only step: the prefill grid is idle");
  g = idle_grids(both, true, 3, 0);
  cr_expect(!g.prefill && g.decode, "a step without decode rows: the decode grid is idle");
  g = idle_grids(both, true, 0, 0);
  cr_expect(g.prefill && g.decode, "a step of no rows: both are idle");
  g = idle_grids(both, true, -1, -1);
  cr_expect(!g.prefill && !g.decode, "unknown counts (not a fixed-shape batch): nothing is idle");
  g = idle_grids(both, false, 0, 64);
  cr_expect(!g.prefill, "without its work list the prefill grid covers every sequence: not idle");
  DecodeRoute prefill_only;
  prefill_only.prefill = true;
  g = idle_grids(prefill_only, true, 0, 0);
  cr_expect(g.prefill && !g.decode, "a grid the routing does not launch is never reported idle");
  DecodeRoute decode_only;
  decode_only.bound = 1, decode_only.decode = true;
  g = idle_grids(decode_only, true, 0, 5);
  cr_expect(!g.prefill && !g.decode, "decode rows only, routed so: nothing idle");
}
