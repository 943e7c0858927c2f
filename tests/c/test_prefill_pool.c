/* The real engine flow through the public API on a CPU pool — seq_match/append,
 * batch_create, kv_write, prefill, seq_commit — against the reference, chunked prefill
 * with decode rows and a prefix-cache hit; and the launch errors, each leaving the pool's
 * invariants intact and the output untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "support.h"

enum { HQ = 8, HKV = 2, D = 64, PS = 32, LAYERS = 2, MAXTOK = 1400 };

static uint64_t g_seed;
static test_rng g_rng;

static void setup(void) {
  g_seed = test_seed();
  g_rng.state = g_seed;
  cr_log_info("seed %llu (set BSPA_TEST_SEED to reproduce)", (unsigned long long)g_seed);
}
TestSuite(prefill_pool, .init = setup);

/* One conversation's data: K/V/q of every token (rounded to the dtype) and its token ids. */
typedef struct conv {
  int64_t n;
  int32_t tokens[MAXTOK];
  double *k, *v, *q;
} conv;

static void conv_init(conv *c, int64_t n, bspa_dtype t, const conv *share, int64_t shared) {
  c->n = n;
  c->k = malloc(sizeof(double) * (size_t)(n * HKV * D));
  c->v = malloc(sizeof(double) * (size_t)(n * HKV * D));
  c->q = malloc(sizeof(double) * (size_t)(n * HQ * D));
  char tmp[4];
#define RND(x)                                     \
  do {                                             \
    ref_store(t, tmp, 0, test_rng_normal(&g_rng)); \
    (x) = ref_load(t, tmp, 0);                     \
  } while (0)
  for (int64_t i = 0; i < n * HKV * D; ++i) {
    RND(c->k[i]);
    RND(c->v[i]);
  }
  for (int64_t i = 0; i < n * HQ * D; ++i) RND(c->q[i]);
  for (int64_t i = 0; i < n; ++i) c->tokens[i] = (int32_t)(test_rng_next(&g_rng) % 100000);
  if (share) { /* a shared prefix: same tokens, hence the same K/V */
    memcpy(c->tokens, share->tokens, sizeof(int32_t) * (size_t)shared);
    memcpy(c->k, share->k, sizeof(double) * (size_t)(shared * HKV * D));
    memcpy(c->v, share->v, sizeof(double) * (size_t)(shared * HKV * D));
  }
}

static void conv_free(conv *c) {
  free(c->k);
  free(c->v);
  free(c->q);
}

static bspa_pool *make_pool(bspa_dtype t, int64_t pages) {
  return test_pool_create(kDLCPU, t, LAYERS, HKV, D, PS, pages);
}

static bspa_layout *phi3_layout(void) {
  bspa_layout_strided_options o;
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.local_blocks = 4; /* sparse from 256 tokens on, so short tests see stripes */
  o.num_heads_total = 32;
  o.head_begin = 16;
  o.num_heads = HQ;
  bspa_layout *l = NULL;
  EXPECT_OK(bspa_layout_create_strided(&l, &o));
  return l;
}

static const ref_layout g_ref = {REF_STRIDED, 64, 4, 8, 0, 32, 16, 0, NULL, NULL};

/* One step: sequences s[i] compute qlen[i] tokens after their computed ones; writes K/V
 * on `layer`, runs the prefill and checks each sequence's rows against the reference. */
static void step(bspa_pool *pool, bspa_layout *layout, bspa_dtype t, bspa_seq **s, conv **c, const int32_t *qlen, int n,
                 int layer) {
  int64_t ctx[8], total = 0;
  for (int i = 0; i < n; ++i) {
    struct bspa_seq_info info;
    EXPECT_OK(bspa_seq_info(s[i], &info));
    ctx[i] = info.num_computed;
    total += qlen[i];
  }
  bspa_batch *b = NULL;
  EXPECT_OK(bspa_batch_create(&b, pool, s, qlen, n, NULL));
  const size_t eb = ref_dtype_bytes(t);
  void *kn = malloc((size_t)(total * HKV * D) * eb), *vn = malloc((size_t)(total * HKV * D) * eb);
  void *q = malloc((size_t)(total * HQ * D) * eb), *out = malloc((size_t)(total * HQ * D) * eb);
  float *lse = malloc(sizeof(float) * (size_t)(HQ * total));
  int64_t row = 0;
  for (int i = 0; i < n; ++i) {
    for (int64_t r = 0; r < qlen[i]; ++r) {
      for (int j = 0; j < HKV * D; ++j) {
        ref_store(t, kn, (size_t)((row + r) * HKV * D + j), c[i]->k[(ctx[i] + r) * HKV * D + j]);
        ref_store(t, vn, (size_t)((row + r) * HKV * D + j), c[i]->v[(ctx[i] + r) * HKV * D + j]);
      }
      for (int j = 0; j < HQ * D; ++j)
        ref_store(t, q, (size_t)((row + r) * HQ * D + j), c[i]->q[(ctx[i] + r) * HQ * D + j]);
    }
    row += qlen[i];
  }
  for (size_t j = 0; j < (size_t)(total * HQ * D); ++j) ref_store(t, out, j, NAN);
  for (size_t j = 0; j < (size_t)(HQ * total); ++j) lse[j] = NAN;
  test_tensor tk, tv, tq, to, tl;
  int64_t skv[3] = {total, HKV, D}, sq[3] = {total, HQ, D}, sl[2] = {HQ, total};
  test_tensor_init(&tk, kn, t, 3, skv);
  test_tensor_init(&tv, vn, t, 3, skv);
  test_tensor_init(&tq, q, t, 3, sq);
  test_tensor_init(&to, out, t, 3, sq);
  test_tensor_init(&tl, lse, BSPA_DTYPE_F32, 2, sl);
  EXPECT_OK(test_kv_write(pool, b, layer, &tk.t, &tv.t));
  EXPECT_OK(test_prefill(pool, b, layer, layout, &tq.t, &to.t, 1.0f / 128, &tl.t));
  ref_error err = {0, 0, 0}, lerr = {0, 0, 0};
  row = 0;
  for (int i = 0; i < n; ++i) {
    if (qlen[i] > 0) {
      const int64_t nn = ctx[i] + qlen[i];
      double *ro = malloc(sizeof(double) * (size_t)(qlen[i] * HQ * D)),
             *rl = malloc(sizeof(double) * (size_t)(qlen[i] * HQ));
      ref_attention(&g_ref, HQ, HKV, D, nn, ctx[i], c[i]->q + ctx[i] * HQ * D, c[i]->k, c[i]->v, 1.0 / 128, ro, rl);
      for (int64_t j = 0; j < qlen[i] * HQ * D; ++j)
        ref_error_add(&err, ref_load(t, out, (size_t)(row * HQ * D + j)), ro[j]);
      for (int h = 0; h < HQ; ++h)
        for (int64_t r = 0; r < qlen[i]; ++r) ref_error_add(&lerr, lse[h * total + row + r], rl[h * qlen[i] + r]);
      free(ro);
      free(rl);
    }
    row += qlen[i];
    EXPECT_OK(bspa_seq_commit(s[i], ctx[i] + qlen[i]));
  }
  const double rel = ref_error_rel(&err), tol = t == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;
  cr_log_info("step of %d sequences, %lld rows, layer %d: rel L2 %.3g, max abs %.3g, lse max abs %.3g", n,
              (long long)total, layer, rel, err.max_abs, lerr.max_abs);
  cr_expect(rel <= tol, "relative L2 error %.3g > %.0e (max abs %.3g), seed %llu", rel, tol, err.max_abs,
            (unsigned long long)g_seed);
  cr_expect(lerr.max_abs <= 1e-3, "lse max abs error %.3g", lerr.max_abs);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_batch_destroy(b);
  free(kn);
  free(vn);
  free(q);
  free(out);
  free(lse);
}

static void engine_flow(bspa_dtype t) {
  bspa_pool *pool = make_pool(t, 256);
  bspa_layout *layout = phi3_layout();
  conv a, b, c2;
  conv_init(&a, 1100, t, NULL, 0);
  conv_init(&b, 700, t, NULL, 0);
  bspa_seq *sa = NULL, *sb = NULL, *sc = NULL;
  EXPECT_OK(bspa_seq_create(&sa, pool, NULL));
  EXPECT_OK(bspa_seq_create(&sb, pool, NULL));
  /* Chunked prefill of a (unaligned chunks: 300, 437, ...) alongside b. */
  EXPECT_OK(bspa_seq_append(sa, a.tokens, 1099));
  EXPECT_OK(bspa_seq_append(sb, b.tokens, 699));
  bspa_seq *both[2] = {sa, sb};
  conv *cs[2] = {&a, &b};
  int32_t q1[2] = {300, 699};
  step(pool, layout, t, both, cs, q1, 2, 1);
  int32_t q2[2] = {437, 0};
  step(pool, layout, t, both, cs, q2, 2, 1);
  int32_t q3[2] = {362, 0};
  step(pool, layout, t, both, cs, q3, 2, 1);
  /* Decode rows for both. */
  EXPECT_OK(bspa_seq_append(sa, a.tokens + 1099, 1));
  EXPECT_OK(bspa_seq_append(sb, b.tokens + 699, 1));
  int32_t q4[2] = {1, 1};
  step(pool, layout, t, both, cs, q4, 2, 1);
  /* A prefix hit: c shares a's first 1000 tokens; the match pins whole pages (992 tokens). */
  conv_init(&c2, 1040, t, &a, 1000);
  EXPECT_OK(bspa_seq_create(&sc, pool, NULL));
  int64_t cached = 0;
  EXPECT_OK(bspa_seq_match(sc, c2.tokens, c2.n, &cached));
  cr_expect_eq(cached, 992, "cached %lld tokens, expected 992", (long long)cached);
  EXPECT_OK(bspa_seq_append(sc, c2.tokens + cached, c2.n - cached));
  bspa_seq *one[1] = {sc};
  conv *c1[1] = {&c2};
  int32_t q5[1] = {(int32_t)(c2.n - cached)};
  step(pool, layout, t, one, c1, q5, 1, 1);
  bspa_seq_destroy(sa);
  bspa_seq_destroy(sb);
  bspa_seq_destroy(sc);
  EXPECT_OK(bspa_pool_check(pool));
  conv_free(&a);
  conv_free(&b);
  conv_free(&c2);
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
}

Test(prefill_pool, engine_flow_f32) { engine_flow(BSPA_DTYPE_F32); }
Test(prefill_pool, engine_flow_bf16) { engine_flow(BSPA_DTYPE_BF16); }
Test(prefill_pool, engine_flow_f16) { engine_flow(BSPA_DTYPE_F16); }

/* Errors: status, message naming the problem, output untouched, pool invariants intact. */
Test(prefill_pool, errors) {
  const bspa_dtype t = BSPA_DTYPE_BF16;
  bspa_pool *pool = make_pool(t, 8), *other = make_pool(t, 8);
  bspa_layout *layout = phi3_layout(), *wrong_heads = NULL, *csr = NULL;
  EXPECT_OK(bspa_layout_create_dense(&wrong_heads, HQ / 2));
  int32_t crow[HQ * 2], col[HQ];
  for (int h = 0; h < HQ; ++h) {
    crow[2 * h] = h;
    crow[2 * h + 1] = h + 1;
    col[h] = 0;
  }
  EXPECT_OK(bspa_layout_create_csr(&csr, HQ, 64, 1, crow, col)); /* covers 64 tokens */
  bspa_seq *s = NULL, *s2 = NULL;
  EXPECT_OK(bspa_seq_create(&s, pool, NULL));
  EXPECT_OK(bspa_seq_create(&s2, other, NULL));
  int32_t tokens[100];
  for (int i = 0; i < 100; ++i) tokens[i] = i;
  EXPECT_OK(bspa_seq_append(s, tokens, 100));
  int32_t ql = 100, too_many = 101;
  bspa_batch *b = NULL;
  EXPECT_STATUS(bspa_batch_create(&b, pool, &s, &too_many, 1, NULL), BSPA_ERR_OUT_OF_RANGE);
  cr_expect(b == NULL);
  cr_expect(strstr(bspa_last_error(), "query_lens[0]") != NULL, "%s", bspa_last_error());
  EXPECT_STATUS(bspa_batch_create(&b, pool, &s2, &ql, 1, NULL), BSPA_ERR_INVALID_ARGUMENT);
  bspa_seq *twice[2] = {s, s};
  int32_t ql2[2] = {1, 1};
  EXPECT_STATUS(bspa_batch_create(&b, pool, twice, ql2, 2, NULL), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_batch_create(&b, pool, &s, &ql, 0, NULL), BSPA_ERR_INVALID_ARGUMENT);
  int32_t neg = -1;
  EXPECT_STATUS(bspa_batch_create(&b, pool, &s, &neg, 1, NULL), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_batch_create(&b, pool, &s, NULL, 1, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_OK(bspa_batch_create(&b, pool, &s, &ql, 1, NULL));

  uint16_t kv[100 * HKV * D], q[100 * HQ * D], out[100 * HQ * D], q_half[100 * HQ * D];
  float lse[HQ * 100];
  memset(kv, 0, sizeof kv);
  memset(q, 0, sizeof q);
  memset(q_half, 0, sizeof q_half);
  for (size_t i = 0; i < sizeof out / 2; ++i) out[i] = 0x7fc0; /* NaN */
  test_tensor tk, tq, to, tqh, tl, tbad;
  int64_t skv[3] = {100, HKV, D}, sq[3] = {100, HQ, D}, sl[2] = {HQ, 100};
  test_tensor_init(&tk, kv, t, 3, skv);
  test_tensor_init(&tq, q, t, 3, sq);
  test_tensor_init(&to, out, t, 3, sq);
  test_tensor_init(&tqh, q_half, BSPA_DTYPE_F16, 3, sq);
  test_tensor_init(&tl, lse, BSPA_DTYPE_F32, 2, sl);

  /* kv_write */
  int64_t sbad[3] = {100, HKV, D / 2};
  test_tensor_init(&tbad, kv, t, 3, sbad);
  EXPECT_STATUS(test_kv_write(pool, b, 0, &tbad.t, &tk.t), BSPA_ERR_SHAPE_MISMATCH);
  cr_expect(strstr(bspa_last_error(), "k_new") != NULL, "%s", bspa_last_error());
  EXPECT_STATUS(test_kv_write(pool, b, LAYERS, &tk.t, &tk.t), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(test_kv_write(other, b, 0, &tk.t, &tk.t), BSPA_ERR_INVALID_ARGUMENT);
  test_tensor tkf;
  test_tensor_init(&tkf, kv, BSPA_DTYPE_F16, 3, skv);
  EXPECT_STATUS(test_kv_write(pool, b, 0, &tk.t, &tkf.t), BSPA_ERR_DTYPE_MISMATCH);
  tk.t.device.device_type = kDLCUDA;
  EXPECT_STATUS(test_kv_write(pool, b, 0, &tk.t, &tk.t), BSPA_ERR_DEVICE_MISMATCH);
  tk.t.device.device_type = kDLCPU;
  int64_t bad_strides[3] = {HKV * D * 2, D * 2, 2}; /* last dimension not contiguous */
  tbad = tk;
  tbad.t.shape = tbad.shape;
  tbad.t.strides = bad_strides;
  EXPECT_STATUS(test_kv_write(pool, b, 0, &tbad.t, &tk.t), BSPA_ERR_SHAPE_MISMATCH);
  EXPECT_OK(test_kv_write(pool, b, 0, &tk.t, &tk.t));

  /* prefill */
  EXPECT_STATUS(test_prefill(pool, b, 0, wrong_heads, &tq.t, &to.t, 1.0f, NULL), BSPA_ERR_SHAPE_MISMATCH);
  cr_expect(strstr(bspa_last_error(), "layout") != NULL, "%s", bspa_last_error());
  EXPECT_STATUS(test_prefill(pool, b, 0, layout, &tqh.t, &to.t, 1.0f, NULL), BSPA_ERR_DTYPE_MISMATCH);
  EXPECT_STATUS(test_prefill(pool, b, 0, csr, &tq.t, &to.t, 1.0f, NULL), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(test_prefill(pool, b, 0, layout, &tq.t, &to.t, NAN, NULL), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(test_prefill(pool, b, -1, layout, &tq.t, &to.t, 1.0f, NULL), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(test_prefill(pool, b, 0, NULL, &tq.t, &to.t, 1.0f, NULL), BSPA_ERR_NULL_POINTER);
  int64_t s7[3] = {100, 7, D}; /* 7 query heads: neither the layout's count nor a multiple of Hkv */
  bspa_layout *seven = NULL;
  EXPECT_OK(bspa_layout_create_dense(&seven, 7));
  test_tensor tq7, to7;
  test_tensor_init(&tq7, q, t, 3, s7);
  test_tensor_init(&to7, out, t, 3, s7);
  EXPECT_STATUS(test_prefill(pool, b, 0, seven, &tq7.t, &to7.t, 1.0f, NULL), BSPA_ERR_SHAPE_MISMATCH);
  cr_expect(strstr(bspa_last_error(), "GQA") != NULL, "%s", bspa_last_error());
  int64_t sq99[3] = {99, HQ, D};
  test_tensor tq99;
  test_tensor_init(&tq99, q, t, 3, sq99);
  EXPECT_STATUS(test_prefill(pool, b, 0, layout, &tq99.t, &to.t, 1.0f, NULL), BSPA_ERR_SHAPE_MISMATCH);
  to.t.device.device_type = kDLCUDA;
  EXPECT_STATUS(test_prefill(pool, b, 0, layout, &tq.t, &to.t, 1.0f, NULL), BSPA_ERR_DEVICE_MISMATCH);
  to.t.device.device_type = kDLCPU;
  test_tensor tl16;
  test_tensor_init(&tl16, lse, BSPA_DTYPE_BF16, 2, sl);
  EXPECT_STATUS(test_prefill(pool, b, 0, layout, &tq.t, &to.t, 1.0f, &tl16.t), BSPA_ERR_DTYPE_MISMATCH);
  for (size_t i = 0; i < sizeof out / 2; ++i) cr_assert_eq(out[i], 0x7fc0, "a failed call wrote out[%zu]", i);
  EXPECT_OK(bspa_pool_check(pool));
  EXPECT_OK(bspa_pool_check(other));
  EXPECT_OK(test_prefill(pool, b, 0, layout, &tq.t, &to.t, 1.0f, &tl.t));

  bspa_batch_destroy(b);
  bspa_layout_destroy(layout);
  bspa_layout_destroy(wrong_heads);
  bspa_layout_destroy(seven);
  bspa_layout_destroy(csr);
  bspa_pool_destroy(pool);
  bspa_pool_destroy(other);
}
