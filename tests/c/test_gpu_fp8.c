/* FP8 (e4m3) KV on a CUDA pool against the CPU backend (the oracle), through the public
 * header: bspa_kv_write must store the same bytes as the CPU (every bf16 and f16 input,
 * aligned and unaligned sources), and bspa_prefill over a CUDA fp8 pool (prefill and
 * decode rows, unaligned contexts, dense and strided layouts, bf16 and f16) and
 * bspa_prefill_paged over its pages with device scale tensors must match the CPU fp8 pool
 * within rel L2 1e-2. Device memory goes through the driver API loaded at run time (as
 * test_gpu_prefill.c does), so this needs no CUDA toolkit and skips without a GPU. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#include "gpu_driver.h"

static bspa_pool *make_pool(int cuda, int hkv, int d, int ps, int64_t pages) {
  return test_pool_create(cuda ? kDLCUDA : kDLCPU, BSPA_DTYPE_FP8_E4M3, 2, hkv, d, ps, pages);
}

static uint16_t half_of(bspa_dtype dt, float f) {
  return dt == BSPA_DTYPE_BF16 ? test_f32_to_bf16(f) : test_f32_to_f16(f);
}
static double float_of(bspa_dtype dt, uint16_t h) {
  return dt == BSPA_DTYPE_BF16 ? test_bf16_to_f32(h) : test_f16_to_f32(h);
}

/* Layer 1 of both pools (layer 0 is left without scales on purpose): the K and V bytes of
 * the first n tokens of a sequence of each (the rest of the storage is uninitialised). */
static void compare_tokens(bspa_pool *cpu, bspa_pool *gpu, bspa_seq *sc, bspa_seq *sg, int64_t n, int hkv, int ps,
                           int d, const char *what) {
  DLTensor kc, vc, kg, vg;
  EXPECT_OK(bspa_pool_kv(cpu, 1, &kc, &vc));
  EXPECT_OK(bspa_pool_kv(gpu, 1, &kg, &vg));
  cr_assert_eq(kg.device.device_type, kDLCUDA);
  const size_t layer_bytes = (size_t)kc.shape[0] * hkv * ps * d;
  uint8_t *hk = malloc(layer_bytes), *hv = malloc(layer_bytes);
  from_device(hk, kg.data, layer_bytes);
  from_device(hv, vg.data, layer_bytes);
  int32_t pc[512], pg[512];
  int64_t npc, npg;
  EXPECT_OK(bspa_seq_pages(sc, pc, 512, &npc));
  EXPECT_OK(bspa_seq_pages(sg, pg, 512, &npg));
  size_t bad = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < hkv; ++h) {
      const size_t oc = (((size_t)pc[t / ps] * hkv + h) * ps + t % ps) * d;
      const size_t og = (((size_t)pg[t / ps] * hkv + h) * ps + t % ps) * d;
      bad += memcmp((uint8_t *)kc.data + oc, hk + og, (size_t)d) != 0;
      bad += memcmp((uint8_t *)vc.data + oc, hv + og, (size_t)d) != 0;
    }
  cr_expect_eq(bad, 0, "%s: %zu K/V rows of the CUDA kv write differ from the CPU's", what, bad);
  free(hk);
  free(hv);
}

/* Every 16-bit pattern through both kv writes; the source rows either compact (16-byte
 * vectors) or with an odd token stride (the narrow path). */
Test(gpu_fp8, kv_write_stores_the_cpu_bytes) {
  need_gpu();
  enum { HKV = 2, D = 128, PS = 16, T = 256 }; /* 256 x 2 x 128 = 65536 values */
  for (int dti = 0; dti < 2; ++dti)
    for (int odd = 0; odd < 2; ++odd) {
      const bspa_dtype dt = dti ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
      const int64_t row = odd ? HKV * D + 1 : HKV * D; /* token stride in elements */
      bspa_pool *pools[2] = {make_pool(0, HKV, D, PS, T / PS + 2), make_pool(1, HKV, D, PS, T / PS + 2)};
      uint16_t *src = calloc((size_t)(T * row), 2);
      for (int64_t t = 0; t < T; ++t)
        for (int j = 0; j < HKV * D; ++j) src[t * row + j] = (uint16_t)(t * HKV * D + j);
      void *dsrc = to_device(src, (size_t)(T * row) * 2);
      const float ks[HKV] = {1.0f, 0.037f}, vs[HKV] = {3.0f, 1.0f / 448.0f};
      bspa_seq *seqs[2];
      for (int g = 0; g < 2; ++g) {
        EXPECT_OK(bspa_pool_set_kv_scales(pools[g], 1, ks, vs, HKV));
        bspa_seq *s = NULL;
        EXPECT_OK(bspa_seq_create(&s, pools[g], NULL));
        seqs[g] = s;
        int32_t tok[T];
        for (int i = 0; i < T; ++i) tok[i] = i;
        EXPECT_OK(bspa_seq_append(s, tok, T));
        int32_t q = T;
        bspa_batch *b = NULL;
        EXPECT_OK(bspa_batch_create(&b, pools[g], &s, &q, 1, NULL));
        int64_t shape[3] = {T, HKV, D}, strides[3] = {row, D, 1};
        DLTensor t = {g ? dsrc : src,
                      {g ? kDLCUDA : kDLCPU, 0},
                      3,
                      {dt == BSPA_DTYPE_BF16 ? kDLBfloat : kDLFloat, 16, 1},
                      shape,
                      strides,
                      0};
        EXPECT_STATUS(test_kv_write(pools[g], b, 0, &t, &t), BSPA_ERR_INVALID_STATE); /* no scales on layer 0 */
        EXPECT_OK(test_kv_write(pools[g], b, 1, &t, &t));
        bspa_batch_destroy(b);
      }
      compare_tokens(pools[0], pools[1], seqs[0], seqs[1], T, HKV, PS, D, odd ? "odd stride" : "compact");
      float back_k[HKV], back_v[HKV];
      EXPECT_OK(bspa_pool_get_kv_scales(pools[1], 1, back_k, back_v, HKV));
      cr_expect(back_k[1] == ks[1] && back_v[1] == vs[1]);
      dfree(dsrc);
      free(src);
      bspa_pool_destroy(pools[0]);
      bspa_pool_destroy(pools[1]);
    }
}

typedef struct fcase {
  bspa_dtype dt;
  int d, hq, hkv, ps, sparse;
} fcase;

/* Three steps (chunked prefill at unaligned positions, a mixed step, decode rows) of two
 * sequences on a CPU and a CUDA fp8 pool fed the same data; each step's output of the CUDA
 * pool, and of bspa_prefill_paged over its pages with device scales, against the CPU's. */
static void pool_case(const fcase *c, test_rng *rng) {
  enum { NS = 2, STEPS = 3 };
  const int32_t qlens[STEPS][NS] = {{700, 1061}, {333, 1}, {1, 4}};
  int64_t ctx[NS] = {0, 0};
  const int64_t pages = 256;
  bspa_pool *pools[2] = {make_pool(0, c->hkv, c->d, c->ps, pages), make_pool(1, c->hkv, c->d, c->ps, pages)};
  bspa_seq *seqs[2][NS];
  float ks[8], vs[8];
  for (int h = 0; h < c->hkv; ++h) {
    ks[h] = (float)(4.5 / 448.0 * (1 + 0.1 * h)); /* about the N(0,1) amax of a few thousand draws */
    vs[h] = (float)(4.5 / 448.0 * (1 - 0.05 * h));
  }
  bspa_layout *layout = NULL;
  if (c->sparse) {
    bspa_layout_strided_options o;
    EXPECT_OK(bspa_layout_strided_options_init(&o));
    o.local_blocks = 4, o.vert_stride = 4, o.num_heads = c->hq, o.num_heads_total = c->hq;
    EXPECT_OK(bspa_layout_create_strided(&layout, &o));
  } else {
    EXPECT_OK(bspa_layout_create_dense(&layout, c->hq));
  }
  int32_t tok[2048];
  for (int i = 0; i < 2048; ++i) tok[i] = (int32_t)(test_rng_next(rng) % 100000);
  for (int g = 0; g < 2; ++g) {
    EXPECT_OK(bspa_pool_set_kv_scales(pools[g], 1, ks, vs, c->hkv));
    for (int i = 0; i < NS; ++i) {
      EXPECT_OK(bspa_seq_create(&seqs[g][i], pools[g], NULL));
      EXPECT_OK(bspa_seq_append(seqs[g][i], tok + 100 * i, 1100));
    }
  }
  for (int st = 0; st < STEPS; ++st) {
    const int32_t *ql = qlens[st];
    const int T = ql[0] + ql[1];
    const size_t kv_elems = (size_t)T * c->hkv * c->d, q_elems = (size_t)T * c->hq * c->d;
    uint16_t *kn = malloc(kv_elems * 2), *vn = malloc(kv_elems * 2), *q = malloc(q_elems * 2);
    uint16_t *out[2] = {malloc(q_elems * 2), malloc(q_elems * 2)}, *pout = malloc(q_elems * 2);
    for (size_t i = 0; i < kv_elems; ++i) {
      kn[i] = half_of(c->dt, (float)test_rng_normal(rng));
      vn[i] = half_of(c->dt, (float)test_rng_normal(rng));
    }
    for (size_t i = 0; i < q_elems; ++i) q[i] = half_of(c->dt, (float)test_rng_normal(rng));
    memset(out[0], 0xff, q_elems * 2);
    void *dk = to_device(kn, kv_elems * 2), *dv = to_device(vn, kv_elems * 2), *dq = to_device(q, q_elems * 2);
    void *dout = to_device(out[0], q_elems * 2), *dpout = to_device(out[0], q_elems * 2); /* poisoned */
    const float scale = 1.0f / sqrtf((float)c->d);
    int32_t bt[NS][256], qs[NS + 1] = {0, ql[0], T}, cl[NS] = {(int32_t)ctx[0], (int32_t)ctx[1]};
    for (int g = 0; g < 2; ++g) {
      const DLDevice dev = {g ? kDLCUDA : kDLCPU, 0};
      int64_t skv[3] = {T, c->hkv, c->d}, sq[3] = {T, c->hq, c->d};
      const DLDataType ht = {c->dt == BSPA_DTYPE_BF16 ? kDLBfloat : kDLFloat, 16, 1};
      DLTensor tk = {g ? dk : kn, dev, 3, ht, skv, NULL, 0}, tv = {g ? dv : vn, dev, 3, ht, skv, NULL, 0};
      DLTensor tq = {g ? dq : q, dev, 3, ht, sq, NULL, 0}, to = {g ? dout : out[0], dev, 3, ht, sq, NULL, 0};
      bspa_batch *b = NULL;
      EXPECT_OK(bspa_batch_create(&b, pools[g], seqs[g], ql, NS, NULL));
      EXPECT_OK(test_kv_write(pools[g], b, 1, &tk, &tv));
      EXPECT_OK(test_prefill(pools[g], b, 1, layout, &tq, &to, scale, NULL));
      bspa_batch_destroy(b);
      if (g) {
        from_device(out[1], dout, q_elems * 2);
        /* The same attention through bspa_prefill_paged on the CUDA pool's own pages. */
        for (int i = 0; i < NS; ++i) {
          int64_t np;
          EXPECT_OK(bspa_seq_pages(seqs[g][i], bt[i], 256, &np));
        }
        void *dbt = to_device(bt, sizeof bt), *dqs = to_device(qs, sizeof qs), *dcl = to_device(cl, sizeof cl);
        void *dks = to_device(ks, sizeof(float) * c->hkv), *dvs = to_device(vs, sizeof(float) * c->hkv);
        DLTensor kview, vview;
        EXPECT_OK(bspa_pool_kv(pools[g], 1, &kview, &vview));
        int64_t sbt[2] = {NS, 256}, sqs[1] = {NS + 1}, scl[1] = {NS}, ssc[1] = {c->hkv};
        const DLDataType i32 = {kDLInt, 32, 1}, f32 = {kDLFloat, 32, 1};
        DLTensor tbt = {dbt, dev, 2, i32, sbt, NULL, 0}, tqs = {dqs, dev, 1, i32, sqs, NULL, 0};
        DLTensor tcl = {dcl, dev, 1, i32, scl, NULL, 0}, tks = {dks, dev, 1, f32, ssc, NULL, 0};
        DLTensor tvs = {dvs, dev, 1, f32, ssc, NULL, 0}, tpo = {dpout, dev, 3, ht, sq, NULL, 0};
        bspa_paged_args a;
        EXPECT_OK(bspa_paged_args_init(&a));
        a.q = &tq, a.out = &tpo, a.k_pages = &kview, a.v_pages = &vview, a.block_table = &tbt;
        a.query_starts = &tqs, a.context_lens = &tcl, a.max_query_len = ql[0] > ql[1] ? ql[0] : ql[1];
        a.layout = layout, a.scale = scale, a.k_scale = &tks, a.v_scale = &tvs;
        EXPECT_OK(bspa_prefill_paged(&a, NULL));
        from_device(pout, dpout, q_elems * 2);
        void *ptrs[] = {dbt, dqs, dcl, dks, dvs};
        for (int i = 0; i < 5; ++i) dfree(ptrs[i]);
      }
    }
    for (int which = 0; which < 2; ++which) {
      const uint16_t *got = which ? pout : out[1];
      double num = 0, den = 0;
      for (size_t i = 0; i < q_elems; ++i) {
        const double a = float_of(c->dt, out[0][i]), b = float_of(c->dt, got[i]);
        cr_assert(isfinite(b), "step %d: element %zu of the CUDA %s output is not finite", st, i,
                  which ? "paged" : "pool");
        num += (a - b) * (a - b), den += a * a;
      }
      const double rel = sqrt(num / den);
      cr_expect(rel <= 1e-2, "step %d, %s: rel L2 %.3e vs the CPU fp8 pool (d %d, hq %d, hkv %d, ps %d, sparse %d)", st,
                which ? "paged" : "pool", rel, c->d, c->hq, c->hkv, c->ps, c->sparse);
      printf("gpu fp8 %s d %d hkv %d ps %d %s step %d %s: rel L2 %.3e vs CPU\n",
             c->dt == BSPA_DTYPE_BF16 ? "bf16" : "f16", c->d, c->hkv, c->ps, c->sparse ? "sparse" : "dense", st,
             which ? "paged" : "pool", rel);
    }
    for (int i = 0; i < NS; ++i)
      compare_tokens(pools[0], pools[1], seqs[0][i], seqs[1][i], ctx[i] + ql[i], c->hkv, c->ps, c->d, "pool step");
    for (int g = 0; g < 2; ++g)
      for (int i = 0; i < NS; ++i) EXPECT_OK(bspa_seq_commit(seqs[g][i], ctx[i] + ql[i]));
    for (int i = 0; i < NS; ++i) ctx[i] += ql[i];
    void *ptrs[] = {dk, dv, dq, dout, dpout};
    for (int i = 0; i < 5; ++i) dfree(ptrs[i]);
    free(kn), free(vn), free(q), free(out[0]), free(out[1]), free(pout);
  }
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pools[0]);
  bspa_pool_destroy(pools[1]);
}

Test(gpu_fp8, pool_and_paged_prefill_match_cpu) {
  need_gpu();
  test_rng rng = {test_seed()};
  static const fcase cases[] = {
      {BSPA_DTYPE_BF16, 128, 32, 8, 64, 1}, {BSPA_DTYPE_BF16, 128, 32, 8, 64, 0}, {BSPA_DTYPE_F16, 64, 8, 2, 16, 1},
      {BSPA_DTYPE_F16, 128, 8, 1, 32, 0},   {BSPA_DTYPE_BF16, 64, 4, 4, 128, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) pool_case(&cases[i], &rng);
}
