/* The CUDA prefill against the CPU backend (the oracle), through the public header:
 * the same pages, queries and metadata go through bspa_prefill_paged on host tensors
 * and on device tensors; outputs are poisoned (NaN) first; relative L2 <= 1e-2 and lse
 * must agree. Unaligned contexts, mixed batches with decode rows, GQA 1/4/8, head dims
 * 64/128, pages 16..128, dense/strided/CSR layouts, bf16 and f16, with and without the
 * split workspace (poisoned first: it needs no initialisation). Device memory is
 * moved with the driver API loaded at run time (libcuda.so.1), so this test needs no
 * CUDA toolkit to build and skips where there is no GPU. bench/bench_gpu_check.cpp
 * runs a larger sweep of the same kind where Criterion is missing. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#include "gpu_driver.h"

typedef struct gcase {
  bspa_dtype dt;
  int d, hq, hkv, ps, layout; /* layout: 0 dense, 1 strided, 2 CSR */
  int ns;
  int ctx[8], q[8];
  int workspace;  /* bspa_paged_args.workspace on the GPU: 0 none, 1 full size, 2 a quarter */
  int must_split; /* 1: the launch must have split (written its poisoned workspace) */
} gcase;

/* Whether the launch wrote any of the first `bytes` of its workspace, which was poisoned
 * with 0x7f: the kernels touch it only when they split (the counters of the Hopper
 * prefill's tail split come first; a decode split's partials do, where it runs alone). */
static int workspace_written(const void *dws, size_t bytes) {
  unsigned char *h = malloc(bytes);
  cr_assert(h != NULL);
  from_device(h, dws, bytes);
  int written = 0;
  for (size_t i = 0; i < bytes && !written; ++i) written = h[i] != 0x7f;
  free(h);
  return written;
}

static uint16_t half_of(bspa_dtype dt, float f) {
  return dt == BSPA_DTYPE_BF16 ? test_f32_to_bf16(f) : test_f32_to_f16(f);
}
static float float_of(bspa_dtype dt, uint16_t h) {
  return dt == BSPA_DTYPE_BF16 ? test_bf16_to_f32(h) : test_f16_to_f32(h);
}

static void run_case(const gcase *c, test_rng *rng) {
  int qs[9] = {0}, max_pages = 1, pages = 2, max_q = 0, max_tokens = 1;
  for (int i = 0; i < c->ns; ++i) {
    const int kv = c->ctx[i] + c->q[i], np = (kv + c->ps - 1) / c->ps;
    qs[i + 1] = qs[i] + c->q[i];
    if (np > max_pages) max_pages = np;
    if (c->q[i] > max_q) max_q = c->q[i];
    if (kv > max_tokens) max_tokens = kv;
    pages += np;
  }
  const int T = qs[c->ns];
  const size_t page_elems = (size_t)c->hkv * c->ps * c->d, kv_elems = page_elems * pages;
  const size_t q_elems = (size_t)T * c->hq * c->d;
  uint16_t *k = malloc(kv_elems * 2), *v = malloc(kv_elems * 2), *q = malloc(q_elems * 2);
  uint16_t *out = malloc(q_elems * 2), *gout = malloc(q_elems * 2);
  float *lse = malloc((size_t)c->hq * T * 4 + 4), *glse = malloc((size_t)c->hq * T * 4 + 4);
  int32_t *bt = malloc(sizeof(int32_t) * c->ns * max_pages);
  cr_assert(k && v && q && out && gout && lse && glse && bt);
  for (size_t i = 0; i < kv_elems; ++i) {
    k[i] = half_of(c->dt, (float)test_rng_normal(rng));
    v[i] = half_of(c->dt, (float)test_rng_normal(rng));
  }
  for (size_t i = 0; i < q_elems; ++i) q[i] = half_of(c->dt, (float)test_rng_normal(rng));
  int next = pages - 1; /* pages handed out from the end, so ids are not the identity */
  for (int i = 0; i < c->ns; ++i)
    for (int p = 0; p < max_pages; ++p) bt[i * max_pages + p] = p * c->ps < c->ctx[i] + c->q[i] ? next-- : 0;
  memset(out, 0xff, q_elems * 2);
  for (int i = 0; i < c->hq * T; ++i) lse[i] = NAN;

  bspa_layout *layout = NULL;
  int32_t *crow = NULL, *col = NULL;
  if (c->layout == 0) {
    EXPECT_OK(bspa_layout_create_dense(&layout, c->hq));
  } else if (c->layout == 1) {
    bspa_layout_strided_options o;
    EXPECT_OK(bspa_layout_strided_options_init(&o));
    o.local_blocks = 4, o.vert_stride = 4, o.num_heads = c->hq, o.num_heads_total = c->hq;
    EXPECT_OK(bspa_layout_create_strided(&layout, &o));
  } else {
    const int rows = max_tokens / 64 + 1;
    crow = malloc(sizeof(int32_t) * c->hq * (rows + 1));
    col = malloc(sizeof(int32_t) * c->hq * rows * (rows + 1) / 2 + 4);
    int nc = 0;
    for (int h = 0; h < c->hq; ++h) {
      crow[h * (rows + 1)] = nc;
      for (int qb = 0; qb < rows; ++qb) {
        for (int kb = 0; kb <= qb; ++kb)
          if (kb == qb || test_rng_uniform(rng) < 0.3) col[nc++] = kb;
        crow[h * (rows + 1) + qb + 1] = nc;
      }
    }
    EXPECT_OK(bspa_layout_create_csr(&layout, c->hq, 64, rows, crow, col));
  }

  const int64_t pshape[4] = {pages, c->hkv, c->ps, c->d}, qshape[3] = {T, c->hq, c->d}, lshape[2] = {c->hq, T};
  const int64_t bshape[2] = {c->ns, max_pages}, sshape[1] = {c->ns + 1}, cshape[1] = {c->ns};
  size_t ws_bytes = 0;
  if (c->workspace) EXPECT_OK(bspa_prefill_workspace_bytes(kDLCUDA, 0, c->d, &ws_bytes));
  if (c->workspace == 2) ws_bytes = ws_bytes / 4 / 16 * 16; /* room for fewer split units */
  for (int gpu = 0; gpu < 2; ++gpu) {
    void *dk = k, *dv = v, *dq = q, *dout = out, *dlse = lse, *dbt = bt, *dqs = qs, *dcl = (void *)c->ctx;
    void *dws = NULL;
    if (gpu) {
      dk = to_device(k, kv_elems * 2), dv = to_device(v, kv_elems * 2), dq = to_device(q, q_elems * 2);
      dout = to_device(NULL, q_elems * 2), dlse = to_device(NULL, (size_t)c->hq * T * 4);
      cr_assert_eq(cu.memset8((unsigned long long)(uintptr_t)dout, 0xff, q_elems * 2), 0);
      cr_assert_eq(cu.memset8((unsigned long long)(uintptr_t)dlse, 0xff, (size_t)c->hq * T * 4), 0);
      dbt = to_device(bt, sizeof(int32_t) * c->ns * max_pages), dqs = to_device(qs, sizeof(int32_t) * (c->ns + 1));
      dcl = to_device(c->ctx, sizeof(int32_t) * c->ns);
      if (ws_bytes) {
        dws = to_device(NULL, ws_bytes);
        cr_assert_eq(cu.memset8((unsigned long long)(uintptr_t)dws, 0x7f, ws_bytes), 0);
      }
    }
    test_tensor tk, tv, tq, to, tl, tb, ts, tc;
    test_tensor_init(&tk, dk, c->dt, 4, pshape);
    test_tensor_init(&tv, dv, c->dt, 4, pshape);
    test_tensor_init(&tq, dq, c->dt, 3, qshape);
    test_tensor_init(&to, dout, c->dt, 3, qshape);
    test_tensor_init(&tl, dlse, BSPA_DTYPE_F32, 2, lshape);
    test_tensor_init(&tb, dbt, BSPA_DTYPE_F32, 2, bshape);
    test_tensor_init(&ts, dqs, BSPA_DTYPE_F32, 1, sshape);
    test_tensor_init(&tc, dcl, BSPA_DTYPE_F32, 1, cshape);
    test_tensor *all[] = {&tk, &tv, &tq, &to, &tl, &tb, &ts, &tc};
    for (int i = 0; i < 8; ++i) all[i]->t.device.device_type = gpu ? kDLCUDA : kDLCPU;
    tb.t.dtype.code = ts.t.dtype.code = tc.t.dtype.code = kDLInt;
    bspa_paged_args a;
    EXPECT_OK(bspa_paged_args_init(&a));
    a.q = &tq.t, a.out = &to.t, a.lse = &tl.t, a.k_pages = &tk.t, a.v_pages = &tv.t;
    a.block_table = &tb.t, a.query_starts = &ts.t, a.context_lens = &tc.t;
    a.max_query_len = max_q, a.layout = layout, a.scale = 1.0f / sqrtf((float)c->d);
    int64_t wshape[1] = {(int64_t)ws_bytes};
    DLTensor tw = {dws, {kDLCUDA, 0}, 1, {kDLUInt, 8, 1}, wshape, NULL, 0};
    if (dws) a.workspace = &tw;
    EXPECT_OK(bspa_prefill_paged(&a, NULL));
    if (gpu) {
      cr_assert_eq(cu.sync(), 0);
      if (c->must_split)
        cr_assert(dws && workspace_written(dws, ws_bytes < 65536 ? ws_bytes : 65536),
                  "the launch did not split (its workspace is untouched)");
      cr_assert_eq(cu.dtoh(gout, (unsigned long long)(uintptr_t)dout, q_elems * 2), 0);
      cr_assert_eq(cu.dtoh(glse, (unsigned long long)(uintptr_t)dlse, (size_t)c->hq * T * 4), 0);
      void *ptrs[] = {dk, dv, dq, dout, dlse, dbt, dqs, dcl};
      for (int i = 0; i < 8; ++i) dfree(ptrs[i]);
      if (dws) dfree(dws);
    }
  }
  double num = 0, den = 0, lse_err = 0;
  for (size_t i = 0; i < q_elems; ++i) {
    const double a = float_of(c->dt, out[i]), b = float_of(c->dt, gout[i]);
    cr_assert(isfinite(b), "element %zu of the CUDA output is not finite (unwritten?)", i);
    num += (a - b) * (a - b), den += a * a;
  }
  for (int i = 0; i < c->hq * T; ++i) {
    cr_assert(isfinite(glse[i]), "lse %d is not finite", i);
    const double e = fabs((double)lse[i] - glse[i]) / (fabs(lse[i]) > 1 ? fabs(lse[i]) : 1);
    if (e > lse_err) lse_err = e;
  }
  const double rel = sqrt(num / den);
  cr_assert(rel <= 1e-2, "relative L2 error %.3e > 1e-2 (d %d, hq %d, hkv %d, ps %d, layout %d)", rel, c->d, c->hq,
            c->hkv, c->ps, c->layout);
  cr_assert(lse_err <= 2e-3, "lse error %.3e", lse_err);
  bspa_layout_destroy(layout);
  free(crow), free(col), free(k), free(v), free(q), free(out), free(gout), free(lse), free(glse), free(bt);
}

Test(gpu_prefill, unaligned_contexts_match_cpu) {
  need_gpu();
  test_rng rng = {test_seed()};
  static const int mods[] = {0, 1, 2, 16, 32, 36, 48, 63};
  for (int i = 0; i < 8; ++i) {
    gcase c = {i % 2 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16,
               i % 4 < 2 ? 128 : 64,
               8,
               i % 3 == 0   ? 8
               : i % 3 == 1 ? 2
                            : 1,
               16 << (i % 4),
               i % 3,
               1,
               {1024 + mods[i] - 64 * (i % 3)},
               {64 - mods[i] + (i % 2 ? 70 : 0)},
               i % 2,
               0};
    run_case(&c, &rng);
  }
}

Test(gpu_prefill, mixed_batch_with_decode_rows) {
  need_gpu();
  test_rng rng = {test_seed()};
  for (int layout = 0; layout < 3; ++layout) {
    gcase c = {layout == 1 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16,
               layout == 2 ? 64 : 128,
               8,
               2,
               32,
               layout,
               6,
               {0, 1000, 63, 2047, 500, 0},
               {300, 1, 200, 1, 129, 1},
               layout != 1,
               0};
    run_case(&c, &rng);
  }
}

/* Few query tiles over a long context: the last round splits, with units that list their
 * key tiles in two passes (over 512 tiles of 64), from a full and a quarter workspace. The
 * split is the Hopper prefill's (compute capability 9.0, unless BSPA_CUDA_PATH=sm80);
 * elsewhere only the result is checked. */
Test(gpu_prefill, split_tail_over_a_long_context) {
  need_gpu();
  test_rng rng = {test_seed()};
  const char *path = getenv("BSPA_CUDA_PATH"); /* sm80 forces the other family */
  const int hopper_prefill = cu.compute_capability == 90 && !(path && strcmp(path, "sm80") == 0);
  for (int ws = 1; ws <= 2; ++ws) {
    gcase c = {BSPA_DTYPE_BF16, 128, 4, 1, 64, 1, 1, {33000}, {300}, ws, hopper_prefill};
    run_case(&c, &rng);
  }
}

/* One decode row over a long context: its (sequence, KV head) items are far fewer than
 * the SMs, so the decode kernel splits the key range and merges the parts (any device). */
Test(gpu_prefill, decode_split_over_a_long_context) {
  need_gpu();
  test_rng rng = {test_seed()};
  for (int ws = 1; ws <= 2; ++ws) {
    gcase c = {BSPA_DTYPE_BF16, 128, 8, 2, 64, 1, 1, {32767 - 64 * ws}, {1}, ws, 1};
    run_case(&c, &rng);
  }
}

Test(gpu_prefill, unsupported_head_dim_is_refused) {
  need_gpu();
  /* head_dim 96: the kernel lacks it, so NOT_SUPPORTED (never a wrong answer). */
  const int64_t pshape[4] = {1, 1, 16, 96}, qshape[3] = {8, 1, 96}, bshape[2] = {1, 1}, sshape[1] = {2},
                cshape[1] = {1};
  void *dk = to_device(NULL, 16 * 96 * 2), *dq = to_device(NULL, 8 * 96 * 2), *dout = to_device(NULL, 8 * 96 * 2);
  int32_t bt[1] = {0}, qs[2] = {0, 8}, cl[1] = {0};
  void *dbt = to_device(bt, 4), *dqs = to_device(qs, 8), *dcl = to_device(cl, 4);
  test_tensor tk, tq, to, tb, ts, tc;
  test_tensor_init(&tk, dk, BSPA_DTYPE_BF16, 4, pshape);
  test_tensor_init(&tq, dq, BSPA_DTYPE_BF16, 3, qshape);
  test_tensor_init(&to, dout, BSPA_DTYPE_BF16, 3, qshape);
  test_tensor_init(&tb, dbt, BSPA_DTYPE_F32, 2, bshape);
  test_tensor_init(&ts, dqs, BSPA_DTYPE_F32, 1, sshape);
  test_tensor_init(&tc, dcl, BSPA_DTYPE_F32, 1, cshape);
  test_tensor *all[] = {&tk, &tq, &to, &tb, &ts, &tc};
  for (int i = 0; i < 6; ++i) all[i]->t.device.device_type = kDLCUDA;
  tb.t.dtype.code = ts.t.dtype.code = tc.t.dtype.code = kDLInt;
  bspa_layout *layout = NULL;
  EXPECT_OK(bspa_layout_create_dense(&layout, 1));
  bspa_paged_args a;
  EXPECT_OK(bspa_paged_args_init(&a));
  a.q = &tq.t, a.out = &to.t, a.k_pages = &tk.t, a.v_pages = &tk.t, a.block_table = &tb.t;
  a.query_starts = &ts.t, a.context_lens = &tc.t, a.max_query_len = 8, a.layout = layout, a.scale = 0.1f;
  EXPECT_STATUS(bspa_prefill_paged(&a, NULL), BSPA_ERR_NOT_SUPPORTED);
  cr_assert(strstr(bspa_last_error(), "head_dim") != NULL, "message: %s", bspa_last_error());
  bspa_layout_destroy(layout);
  void *ptrs[] = {dk, dq, dout, dbt, dqs, dcl};
  for (int i = 0; i < 6; ++i) dfree(ptrs[i]);
}
