/* Reusable batches (bspa_batch_create_reusable / bspa_batch_plan) on a CPU pool: a decode
 * loop whose every step, planned into one reusable batch (with and without fixed launch
 * shapes), computes bitwise what a one-step batch of the same step computes, rows past the
 * step untouched; refusals past each limit keep the previous plan; option errors; the
 * previous plan's page references released on re-planning. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

enum { HQ = 8, HKV = 2, D = 64, PS = 16, MAXSEQ = 6, MAXTOK = 96, MAXLEN = 400 };

static test_rng g_rng;
static void setup(void) {
  const uint64_t seed = test_seed();
  g_rng.state = seed;
  cr_log_info("seed %llu (set BSPA_TEST_SEED to reproduce)", (unsigned long long)seed);
}
TestSuite(reusable_batch, .init = setup);

static bspa_pool *make_pool(void) {
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.dtype = BSPA_DTYPE_F32;
  o.num_layers = 1;
  o.num_kv_heads = HKV;
  o.head_dim = D;
  o.page_size = PS;
  o.num_pages = 256;
  bspa_pool *p = NULL;
  EXPECT_OK(bspa_pool_create(&p, &o));
  return p;
}

/* decode_bound: max_decode_query_len (a CUDA routing hint; the CPU computes the same). */
static bspa_batch *make_reusable_bounded(bspa_pool *pool, int fixed, int32_t decode_bound) {
  bspa_batch_options o;
  EXPECT_OK(bspa_batch_options_init(&o));
  o.max_seqs = MAXSEQ;
  o.max_tokens = MAXTOK;
  o.max_query_len = 64;
  o.max_seq_tokens = MAXLEN;
  o.fixed_launch_shape = fixed;
  o.max_decode_query_len = decode_bound;
  bspa_batch *b = NULL;
  EXPECT_OK(bspa_batch_create_reusable(&b, pool, &o));
  return b;
}

static bspa_batch *make_reusable(bspa_pool *pool, int fixed) { return make_reusable_bounded(pool, fixed, 0); }

static void fill_normal(float *x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = (float)test_rng_normal(&g_rng);
}

static bspa_status kv_write(bspa_pool *pool, const bspa_batch *b, const DLTensor *k, const DLTensor *v) {
  bspa_kv_write_args a;
  bspa_kv_write_args_init(&a);
  a.k_new = k, a.v_new = v;
  return bspa_kv_write(pool, b, &a, NULL);
}

static bspa_status prefill(bspa_pool *pool, const bspa_batch *b, const bspa_layout *layout, const DLTensor *q,
                           DLTensor *out, DLTensor *lse) {
  bspa_prefill_args a;
  bspa_prefill_args_init(&a);
  a.layout = layout, a.q = q, a.out = out, a.lse = lse, a.scale = 0.125f;
  return bspa_prefill(pool, b, &a, NULL);
}

/* kv_write then prefill of one step through `batch`, tensors of `rows` rows. */
static void launch(bspa_pool *pool, const bspa_batch *batch, const bspa_layout *layout, int64_t rows, float *q,
                   float *k, float *v, float *out, float *lse) {
  test_tensor tq, tk, tv, to, tl;
  const int64_t qshape[3] = {rows, HQ, D}, kshape[3] = {rows, HKV, D}, lshape[2] = {HQ, rows};
  test_tensor_init(&tq, q, BSPA_DTYPE_F32, 3, qshape);
  test_tensor_init(&tk, k, BSPA_DTYPE_F32, 3, kshape);
  test_tensor_init(&tv, v, BSPA_DTYPE_F32, 3, kshape);
  test_tensor_init(&to, out, BSPA_DTYPE_F32, 3, qshape);
  test_tensor_init(&tl, lse, BSPA_DTYPE_F32, 2, lshape);
  EXPECT_OK(kv_write(pool, batch, &tk.t, &tv.t));
  EXPECT_OK(prefill(pool, batch, layout, &tq.t, &to.t, &tl.t));
}

/* One step: the one-step batch's output against the reusable batch's, bitwise; for fixed
 * shapes the tensors have MAXTOK rows and the rows past the step keep their poison. */
static void check_step(bspa_pool *pool, bspa_batch *reusable, int fixed, const bspa_layout *layout, bspa_seq **seqs,
                       const int32_t *qlens, int n) {
  int64_t t = 0;
  for (int i = 0; i < n; ++i) t += qlens[i];
  const int64_t rows = fixed ? MAXTOK : t;
  float *q = calloc((size_t)(rows * HQ * D), sizeof(float)), *k = calloc((size_t)(rows * HKV * D), sizeof(float));
  float *v = calloc((size_t)(rows * HKV * D), sizeof(float));
  fill_normal(q, (size_t)(t * HQ * D));
  fill_normal(k, (size_t)(t * HKV * D));
  fill_normal(v, (size_t)(t * HKV * D));
  float *out_a = malloc(sizeof(float) * (size_t)(t * HQ * D)), *lse_a = malloc(sizeof(float) * (size_t)(HQ * t));
  float *out_b = malloc(sizeof(float) * (size_t)(rows * HQ * D)), *lse_b = malloc(sizeof(float) * (size_t)(HQ * rows));
  for (int64_t i = 0; i < rows * HQ * D; ++i) out_b[i] = 1234.5f;
  for (int64_t i = 0; i < HQ * rows; ++i) lse_b[i] = -77.f;

  bspa_batch *one = NULL;
  EXPECT_OK(bspa_batch_create(&one, pool, seqs, qlens, n, NULL));
  launch(pool, one, layout, t, q, k, v, out_a, lse_a);
  bspa_batch_destroy(one);
  EXPECT_OK(bspa_batch_plan(reusable, seqs, qlens, n, NULL));
  launch(pool, reusable, layout, rows, q, k, v, out_b, lse_b);
  cr_assert_eq(memcmp(out_a, out_b, sizeof(float) * (size_t)(t * HQ * D)), 0, "outputs differ (%d sequences)", n);
  for (int h = 0; h < HQ; ++h)
    cr_assert_eq(memcmp(lse_a + h * t, lse_b + h * rows, sizeof(float) * (size_t)t), 0, "lse differs, head %d", h);
  for (int64_t i = t * HQ * D; i < rows * HQ * D; ++i) cr_assert_eq(out_b[i], 1234.5f, "out row past the step written");
  for (int h = 0; h < HQ; ++h)
    for (int64_t j = t; j < rows; ++j) cr_assert_eq(lse_b[h * rows + j], -77.f, "lse column past the step written");
  for (int i = 0; i < n; ++i) {
    struct bspa_seq_info info;
    EXPECT_OK(bspa_seq_info(seqs[i], &info));
    EXPECT_OK(bspa_seq_commit(seqs[i], info.num_computed + qlens[i]));
  }
  EXPECT_OK(bspa_pool_check(pool));
  free(q), free(k), free(v), free(out_a), free(lse_a), free(out_b), free(lse_b);
}

static void append_random(bspa_seq *s, int64_t n) {
  int32_t tok[128];
  cr_assert(n <= 128);
  for (int64_t i = 0; i < n; ++i) tok[i] = (int32_t)(test_rng_next(&g_rng) % 50000);
  EXPECT_OK(bspa_seq_append(s, tok, n));
}

static bspa_seq *new_seq(bspa_pool *pool) {
  bspa_seq *s = NULL;
  EXPECT_OK(bspa_seq_create(&s, pool, NULL));
  return s;
}

/* Steps of a decode loop: chunked prefill and decode rows mixed, sequences growing across
 * page boundaries, one finishing and one joining. */
static void decode_loop(int fixed, int32_t decode_bound) {
  bspa_pool *pool = make_pool();
  bspa_layout *layout = NULL;
  bspa_layout_strided_options lo;
  EXPECT_OK(bspa_layout_strided_options_init(&lo));
  lo.num_heads = HQ;
  lo.num_heads_total = HQ;
  lo.block_size = 16;
  lo.local_blocks = 2;
  lo.vert_stride = 3;
  EXPECT_OK(bspa_layout_create_strided(&layout, &lo));
  bspa_batch *b = make_reusable_bounded(pool, fixed, decode_bound);
  bspa_seq *seqs[MAXSEQ];
  int32_t qlens[MAXSEQ];
  const int32_t first[4] = {37, 5, 31, 1};
  for (int i = 0; i < 4; ++i) {
    seqs[i] = new_seq(pool);
    append_random(seqs[i], first[i]);
    qlens[i] = first[i];
  }
  int n = 4;
  check_step(pool, b, fixed, layout, seqs, qlens, n);
  for (int stepi = 2; stepi <= 20; ++stepi) {
    if (stepi == 8) { /* sequence 1 finishes; a new one joins with a prompt chunk */
      bspa_seq_destroy(seqs[1]);
      seqs[1] = new_seq(pool);
      append_random(seqs[1], 23);
    }
    if (stepi == 12 && n < MAXSEQ) { /* one more joins */
      seqs[n] = new_seq(pool);
      append_random(seqs[n], 9);
      ++n;
    }
    for (int i = 0; i < n; ++i) {
      struct bspa_seq_info info;
      EXPECT_OK(bspa_seq_info(seqs[i], &info));
      const int64_t pending = info.num_tokens - info.num_computed;
      if (pending == 0) append_random(seqs[i], stepi % 5 == 0 ? 3 : 1); /* decode, or a speculative few */
      EXPECT_OK(bspa_seq_info(seqs[i], &info));
      qlens[i] = (int32_t)(info.num_tokens - info.num_computed);
    }
    check_step(pool, b, fixed, layout, seqs, qlens, n);
  }
  bspa_batch_destroy(b);
  for (int i = 0; i < n; ++i) bspa_seq_destroy(seqs[i]);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
}

Test(reusable_batch, decode_loop_equals_one_step_batches) { decode_loop(0, 0); }
Test(reusable_batch, decode_loop_fixed_shape_equals_one_step_batches) { decode_loop(1, 0); }
/* A bound on decode rows routes CUDA's launches; plans and results stay those of one-step batches. */
Test(reusable_batch, decode_loop_with_a_decode_bound_equals_one_step_batches) {
  decode_loop(0, 1);
  decode_loop(1, 2);
}

Test(reusable_batch, refusals_keep_the_previous_plan) {
  bspa_pool *pool = make_pool();
  bspa_layout *layout = NULL;
  EXPECT_OK(bspa_layout_create_dense(&layout, HQ));
  bspa_batch *b = make_reusable(pool, 1);
  float q[MAXTOK * HQ * D], k[MAXTOK * HKV * D], v[MAXTOK * HKV * D], out[MAXTOK * HQ * D], lse[HQ * MAXTOK];
  memset(q, 0, sizeof q), memset(k, 0, sizeof k), memset(v, 0, sizeof v);
  fill_normal(q, 8 * HQ * D), fill_normal(k, 8 * HKV * D), fill_normal(v, 8 * HKV * D);
  /* Not planned yet. */
  test_tensor tq, to, tk, tv;
  const int64_t qs[3] = {MAXTOK, HQ, D}, ks[3] = {MAXTOK, HKV, D};
  test_tensor_init(&tq, q, BSPA_DTYPE_F32, 3, qs);
  test_tensor_init(&to, out, BSPA_DTYPE_F32, 3, qs);
  test_tensor_init(&tk, k, BSPA_DTYPE_F32, 3, ks);
  test_tensor_init(&tv, v, BSPA_DTYPE_F32, 3, ks);
  EXPECT_STATUS(prefill(pool, b, layout, &tq.t, &to.t, NULL), BSPA_ERR_INVALID_STATE);
  EXPECT_STATUS(kv_write(pool, b, &tk.t, &tv.t), BSPA_ERR_INVALID_STATE);

  bspa_seq *s[MAXSEQ + 1];
  for (int i = 0; i <= MAXSEQ; ++i) {
    s[i] = new_seq(pool);
    append_random(s[i], 1);
  }
  append_random(s[0], 7); /* s[0]: 8 tokens */
  int32_t ql[MAXSEQ + 1] = {8, 0, 0, 0, 0, 0, 0};
  EXPECT_OK(bspa_batch_plan(b, s, ql, 1, NULL));
  launch(pool, b, layout, MAXTOK, q, k, v, out, lse);
  float first[8 * HQ * D];
  memcpy(first, out, sizeof first);
  bspa_seq *wide = new_seq(pool), *big = new_seq(pool);
  append_random(wide, 100);                            /* 100 new tokens: past max_query_len (64) and max_tokens (96) */
  for (int r = 0; r < 4; ++r) append_random(big, 100); /* 400 computed tokens: 25 pages = max_seq_tokens */
  EXPECT_OK(bspa_seq_commit(big, 400));
  append_random(big, 1);
  struct bspa_pool_stats before, after;
  EXPECT_OK(bspa_pool_stats(pool, &before));

  for (int i = 0; i <= MAXSEQ; ++i) ql[i] = 1;
  ql[0] = 8;
  EXPECT_STATUS(bspa_batch_plan(b, s, ql, MAXSEQ + 1, NULL), BSPA_ERR_OUT_OF_RANGE); /* max_seqs */
  cr_assert(strstr(bspa_last_error(), "max_seqs") != NULL, "%s", bspa_last_error());
  int32_t ql_big = 100;
  EXPECT_STATUS(bspa_batch_plan(b, &wide, &ql_big, 1, NULL), BSPA_ERR_OUT_OF_RANGE); /* max_query_len */
  cr_assert(strstr(bspa_last_error(), "max_query_len") != NULL, "%s", bspa_last_error());
  { /* two sequences of 50 new tokens: each within max_query_len (64), together past max_tokens (96) */
    bspa_seq *two[2] = {new_seq(pool), new_seq(pool)};
    append_random(two[0], 50);
    append_random(two[1], 50);
    int32_t ql50[2] = {50, 50};
    EXPECT_STATUS(bspa_batch_plan(b, two, ql50, 2, NULL), BSPA_ERR_OUT_OF_RANGE);
    cr_assert(strstr(bspa_last_error(), "max_tokens = 96") != NULL, "%s", bspa_last_error());
    bspa_seq_destroy(two[0]);
    bspa_seq_destroy(two[1]);
  }
  ql_big = 1;
  EXPECT_STATUS(bspa_batch_plan(b, &big, &ql_big, 1, NULL), BSPA_ERR_OUT_OF_RANGE); /* max_seq_tokens */
  cr_assert(strstr(bspa_last_error(), "max_seq_tokens = 400") != NULL, "%s", bspa_last_error());
  bspa_seq *twice[2] = {s[0], s[0]};
  int32_t ql2[2] = {8, 8};
  EXPECT_STATUS(bspa_batch_plan(b, twice, ql2, 2, NULL), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_OK(bspa_pool_stats(pool, &after));
  cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "a refused plan changed the pool's stats");
  EXPECT_OK(bspa_pool_check(pool));

  /* The previous plan still launches and computes the same. */
  for (size_t i = 0; i < sizeof out / sizeof out[0]; ++i) out[i] = NAN;
  launch(pool, b, layout, MAXTOK, q, k, v, out, lse);
  cr_assert_eq(memcmp(first, out, sizeof first), 0);

  /* A one-step batch cannot be re-planned; a fixed-shape batch wants max_tokens rows. */
  bspa_batch *one = NULL;
  EXPECT_OK(bspa_batch_create(&one, pool, s, ql, 1, NULL));
  EXPECT_STATUS(bspa_batch_plan(one, s, ql, 1, NULL), BSPA_ERR_INVALID_ARGUMENT);
  bspa_batch_destroy(one);
  const int64_t q8[3] = {8, HQ, D};
  test_tensor tq8, to8;
  test_tensor_init(&tq8, q, BSPA_DTYPE_F32, 3, q8);
  test_tensor_init(&to8, out, BSPA_DTYPE_F32, 3, q8);
  EXPECT_STATUS(prefill(pool, b, layout, &tq8.t, &to8.t, NULL), BSPA_ERR_SHAPE_MISMATCH);
  cr_assert(strstr(bspa_last_error(), "fixed launch shape") != NULL, "the message says why: %s", bspa_last_error());

  bspa_batch_destroy(b);
  bspa_seq_destroy(big);
  bspa_seq_destroy(wide);
  for (int i = 0; i <= MAXSEQ; ++i) bspa_seq_destroy(s[i]);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
}

Test(reusable_batch, replanning_releases_the_previous_pages) {
  bspa_pool *pool = make_pool();
  bspa_batch *b = make_reusable(pool, 0);
  bspa_seq *s = new_seq(pool);
  append_random(s, 40); /* 3 pages */
  int32_t ql = 40;
  EXPECT_OK(bspa_batch_plan(b, &s, &ql, 1, NULL));
  bspa_seq_destroy(s); /* the batch still holds its 3 pages */
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert_eq(st.pages_in_use, 3);
  bspa_seq *t = new_seq(pool);
  append_random(t, 1);
  ql = 1;
  EXPECT_OK(bspa_batch_plan(b, &t, &ql, 1, NULL));
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert_eq(st.pages_in_use, 1, "the previous plan's pages are still held: %lld", (long long)st.pages_in_use);
  bspa_batch_destroy(b);
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert_eq(st.pages_in_use, 1);
  bspa_seq_destroy(t);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* max_seq_tokens counts tokens, not whole pages: a sequence one token past it is refused
 * even where its pages would fit. */
Test(reusable_batch, max_seq_tokens_is_a_token_limit) {
  bspa_pool *pool = make_pool();
  bspa_batch_options o;
  EXPECT_OK(bspa_batch_options_init(&o));
  o.max_seqs = 2, o.max_tokens = 64, o.max_seq_tokens = PS + 4;
  bspa_batch *b = NULL;
  EXPECT_OK(bspa_batch_create_reusable(&b, pool, &o));
  bspa_seq *s = new_seq(pool);
  append_random(s, PS + 4);
  int32_t q = PS + 4;
  EXPECT_OK(bspa_batch_plan(b, &s, &q, 1, NULL));
  append_random(s, 1);
  q = PS + 5; /* 21 tokens: still two pages, one token past the limit */
  EXPECT_STATUS(bspa_batch_plan(b, &s, &q, 1, NULL), BSPA_ERR_OUT_OF_RANGE);
  cr_assert(strstr(bspa_last_error(), "21 tokens") != NULL && strstr(bspa_last_error(), "max_seq_tokens = 20") != NULL,
            "%s", bspa_last_error());
  EXPECT_OK(bspa_pool_check(pool));
  bspa_batch_destroy(b);
  bspa_seq_destroy(s);
  bspa_pool_destroy(pool);
}

Test(reusable_batch, option_errors) {
  bspa_pool *pool = make_pool();
  bspa_batch *b = (bspa_batch *)0x1;
  bspa_batch_options o;
  EXPECT_STATUS(bspa_batch_options_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_OK(bspa_batch_options_init(&o));
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT); /* limits not set */
  cr_assert_null(b);
  cr_assert(strstr(bspa_last_error(), "max_seqs") != NULL, "%s", bspa_last_error());
  o.max_seqs = 4, o.max_tokens = 64, o.max_seq_tokens = 1000;
  o.max_query_len = 65;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(bspa_last_error(), "max_query_len = 65") != NULL, "%s", bspa_last_error());
  o.max_query_len = 0;
  o.fixed_launch_shape = 2;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT);
  o.fixed_launch_shape = 0;
  o.max_decode_query_len = -1;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(bspa_last_error(), "max_decode_query_len = -1") != NULL, "%s", bspa_last_error());
  o.version = 1; /* a version 1 caller's struct ends before max_decode_query_len: never read */
  EXPECT_OK(bspa_batch_create_reusable(&b, pool, &o));
  bspa_batch_destroy(b);
  o.version = BSPA_BATCH_OPTIONS_VERSION;
  o.max_decode_query_len = 0;
  o.max_seq_tokens = 0;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT);
  o.max_seq_tokens = 1000;
  o.max_seqs = INT32_MAX; /* its work list would not fit an int32 count */
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(bspa_last_error(), "max_seqs = 2147483647") != NULL, "%s", bspa_last_error());
  o.max_seqs = 4;
  o.version = 0;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_VERSION);
  o.version = BSPA_BATCH_OPTIONS_VERSION + 1;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, &o), BSPA_ERR_VERSION);
  o.version = BSPA_BATCH_OPTIONS_VERSION;
  EXPECT_STATUS(bspa_batch_create_reusable(&b, NULL, &o), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_batch_create_reusable(&b, pool, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_batch_plan(NULL, NULL, NULL, 1, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_OK(bspa_batch_create_reusable(&b, pool, &o));
  EXPECT_STATUS(bspa_batch_plan(b, NULL, NULL, 1, NULL), BSPA_ERR_NULL_POINTER);
  uint64_t allocs = 0, frees = 0;
  EXPECT_OK(bspa_device_allocation_counts(&allocs, &frees));
  cr_assert_eq(allocs, frees, "a CPU pool made device allocations");
  EXPECT_STATUS(bspa_device_allocation_counts(NULL, &frees), BSPA_ERR_NULL_POINTER);
  bspa_batch_destroy(b);
  bspa_pool_destroy(pool);
}
