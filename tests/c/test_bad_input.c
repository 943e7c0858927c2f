/* Every public function x every class of bad argument (NULL, negative, out of range, wrong
 * dtype / shape / device, exhausted pool, wrong parent) -> the status its header comment
 * documents, a fresh message that names the argument, and no change of state: pool
 * statistics, sequence info, KV storage and the caller's output buffers are compared
 * before and after every case, and bspa_pool_check passes on every pool afterwards.
 *
 * Use after the parent was destroyed is not tested: the header makes such handles invalid
 * (bspa_pool_destroy invalidates its sequences; batches must go before their sequences),
 * so there is nothing the library could check. The closest checkable misuse, a handle of
 * another pool, is covered. Each function's number of cases is printed (291 in all). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "support.h"

/* Under AddressSanitizer the petabyte pool below must fail as an allocation returning NULL
 * (BSPA_ERR_OUT_OF_MEMORY), not abort the test; ASAN_OPTIONS still overrides this. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

enum { T = 4, HKV = 2, HQ = 4, D = 8, PS = 16, PAGES = 4, BIG = 4096 };

typedef struct env {
  bspa_pool *P, *Q, *E, *Z; /* main pool; another pool; an exhausted pool; no KV storage */
  bspa_seq *S, *S2, *SQ, *SE, *SZ;
  bspa_layout *dense4, *dense3, *csr_short;
  bspa_batch *B, *BQ; /* S computing T tokens; a batch of pool Q */
  float kn[BIG], vn[BIG], q[BIG], out[BIG], lse[BIG], kp[BIG], vp[BIG];
  int32_t bt[16], qs[16], cl[16];
  test_tensor tk, tv, tq, tout, tlse, tkp, tvp, tbt, tqs, tcl;
  bspa_paged_args pa;
} env;

typedef struct snapshot {
  struct bspa_pool_stats stats[4];
  struct bspa_seq_info info[5];
  float kv[2][2 * PAGES * HKV * PS * D]; /* K and V of P's layers 0 and 1 */
  float out[BIG], lse[BIG];
  int32_t bt[16], qs[16], cl[16];
} snapshot;

static int g_cases;
static snapshot g_before, g_after; /* static: too large for Criterion's stack */

static void take(env *e, snapshot *s) {
  bspa_pool *pools[4] = {e->P, e->Q, e->E, e->Z};
  bspa_seq *seqs[5] = {e->S, e->S2, e->SQ, e->SE, e->SZ};
  memset(s, 0, sizeof *s);
  for (int i = 0; i < 4; ++i) cr_assert_eq(bspa_pool_stats(pools[i], &s->stats[i]), BSPA_OK);
  for (int i = 0; i < 5; ++i) cr_assert_eq(bspa_seq_info(seqs[i], &s->info[i]), BSPA_OK);
  for (int layer = 0; layer < 2; ++layer) {
    DLTensor k, v;
    cr_assert_eq(bspa_pool_kv(e->P, layer, &k, &v), BSPA_OK);
    const size_t bytes = sizeof(float) * PAGES * HKV * PS * D;
    memcpy(s->kv[layer], k.data, bytes);
    memcpy(s->kv[layer] + PAGES * HKV * PS * D, v.data, bytes);
  }
  memcpy(s->out, e->out, sizeof s->out);
  memcpy(s->lse, e->lse, sizeof s->lse);
  memcpy(s->bt, e->bt, sizeof s->bt);
  memcpy(s->qs, e->qs, sizeof s->qs);
  memcpy(s->cl, e->cl, sizeof s->cl);
}

static void expect_unchanged(env *e, const char *what, int line) {
  take(e, &g_after);
  cr_expect(memcmp(g_before.stats, g_after.stats, sizeof g_after.stats) == 0, "line %d: %s changed pool statistics",
            line, what);
  cr_expect(memcmp(g_before.info, g_after.info, sizeof g_after.info) == 0, "line %d: %s changed a sequence", line,
            what);
  cr_expect(memcmp(g_before.kv, g_after.kv, sizeof g_after.kv) == 0, "line %d: %s changed KV storage", line, what);
  cr_expect(memcmp(g_before.out, g_after.out, sizeof g_after.out) == 0 &&
                memcmp(g_before.lse, g_after.lse, sizeof g_after.lse) == 0,
            "line %d: %s wrote into out or lse", line, what);
  bspa_pool *pools[4] = {e->P, e->Q, e->E, e->Z};
  for (int i = 0; i < 4; ++i)
    cr_expect_eq(bspa_pool_check(pools[i]), BSPA_OK, "line %d: after %s: %s", line, what, bspa_last_error());
}

/* The sentinel message: a failed call must replace it with its own. */
static const char kSentinel[] = "bspa_seq_options_init: options is NULL";

static void verify(env *e, const char *call, int line, bspa_status got, bspa_status want, const char *needle) {
  const char *msg = bspa_last_error();
  cr_expect_eq(got, want, "line %d: %s returned %s, expected %s (%s)", line, call, bspa_status_string(got),
               bspa_status_string(want), msg);
  cr_expect(msg[0] != '\0', "line %d: %s set no message", line, call);
  if (strncmp(call, "bspa_seq_options_init", 21) != 0)
    cr_expect(strcmp(msg, kSentinel) != 0, "line %d: %s left the previous message", line, call);
  cr_expect(strstr(msg, needle) != NULL, "line %d: %s: message \"%s\" does not name \"%s\"", line, call, msg, needle);
  expect_unchanged(e, call, line);
  ++g_cases;
}

#define BAD(e, want, needle, call)                        \
  do {                                                    \
    take((e), &g_before);                                 \
    bspa_seq_options_init(NULL);                          \
    const bspa_status got_ = (call);                      \
    verify((e), #call, __LINE__, got_, (want), (needle)); \
  } while (0)

/* Constructors also promise *out = NULL on failure. */
#define BAD_OUT(e, type, want, needle, call)                                                      \
  do {                                                                                            \
    type *out_ = (type *)(uintptr_t)0x10;                                                         \
    BAD(e, want, needle, call);                                                                   \
    cr_expect_null(out_, "line %d: %s failed but left *out = %p", __LINE__, #call, (void *)out_); \
  } while (0)

/* Destructors accept NULL and change nothing. */
#define NOOP(e, call)                       \
  do {                                      \
    take((e), &g_before);                   \
    call;                                   \
    expect_unchanged((e), #call, __LINE__); \
    ++g_cases;                              \
  } while (0)

/* ---- the environment: one valid object of every kind -------------------------------- */

static bspa_pool *make_pool(int32_t layers, int32_t hkv, int32_t d, int64_t pages) {
  return test_pool_create(kDLCPU, BSPA_DTYPE_F32, layers, hkv, d, PS, pages);
}

static bspa_seq *make_seq(bspa_pool *pool, int64_t tokens, int64_t computed) {
  bspa_seq *s = NULL;
  int32_t t[64];
  for (int i = 0; i < 64; ++i) t[i] = 1000 + i;
  EXPECT_OK(bspa_seq_create(&s, pool, NULL));
  EXPECT_OK(bspa_seq_append(s, t, tokens));
  EXPECT_OK(bspa_seq_commit(s, computed));
  return s;
}

static void tensor(test_tensor *tt, void *data, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t shape[4] = {d0, d1, d2, d3};
  test_tensor_init(tt, data, BSPA_DTYPE_F32, ndim, shape);
}

static void int_tensor(test_tensor *tt, int32_t *data, int ndim, int64_t d0, int64_t d1) {
  const int64_t shape[2] = {d0, d1};
  test_tensor_init(tt, data, BSPA_DTYPE_F32, ndim, shape);
  tt->t.dtype.code = kDLInt;
}

/* Resets every tensor and the paged arguments to valid values. */
static void reset_tensors(env *e) {
  tensor(&e->tk, e->kn, 3, T, HKV, D, 0);
  tensor(&e->tv, e->vn, 3, T, HKV, D, 0);
  tensor(&e->tq, e->q, 3, T, HQ, D, 0);
  tensor(&e->tout, e->out, 3, T, HQ, D, 0);
  tensor(&e->tlse, e->lse, 2, HQ, T, 0, 0);
  tensor(&e->tkp, e->kp, 4, PAGES, HKV, PS, D);
  tensor(&e->tvp, e->vp, 4, PAGES, HKV, PS, D);
  /* One sequence of 16 cached + T new tokens in pages 2 and 0. */
  e->bt[0] = 2;
  e->bt[1] = 0;
  e->qs[0] = 0;
  e->qs[1] = T;
  e->cl[0] = PS;
  int_tensor(&e->tbt, e->bt, 2, 1, 2);
  int_tensor(&e->tqs, e->qs, 1, 2, 0);
  int_tensor(&e->tcl, e->cl, 1, 1, 0);
  EXPECT_OK(bspa_paged_args_init(&e->pa));
  e->pa.q = &e->tq.t;
  e->pa.out = &e->tout.t;
  e->pa.lse = &e->tlse.t;
  e->pa.k_pages = &e->tkp.t;
  e->pa.v_pages = &e->tvp.t;
  e->pa.block_table = &e->tbt.t;
  e->pa.query_starts = &e->tqs.t;
  e->pa.context_lens = &e->tcl.t;
  e->pa.max_query_len = T;
  e->pa.layout = e->dense4;
  e->pa.scale = 0.125f;
}

static void setup(env *e) {
  memset(e, 0, sizeof *e);
  e->P = make_pool(2, HKV, D, PAGES);
  e->Q = make_pool(2, HKV, D, PAGES);
  e->E = make_pool(1, 1, 4, 1);
  e->Z = make_pool(0, 1, 4, 2);
  e->S = make_seq(e->P, PS + T, PS); /* 2 pages, the first published */
  e->S2 = make_seq(e->P, 0, 0);
  e->SQ = make_seq(e->Q, T, 0);
  e->SE = make_seq(e->E, PS, 0); /* holds E's only page */
  e->SZ = make_seq(e->Z, T, 0);
  EXPECT_OK(bspa_layout_create_dense(&e->dense4, HQ));
  EXPECT_OK(bspa_layout_create_dense(&e->dense3, 3));
  const int32_t crow[HQ * 2] = {0, 1, 1, 2, 2, 3, 3, 4}, col[HQ] = {0, 0, 0, 0};
  EXPECT_OK(bspa_layout_create_csr(&e->csr_short, HQ, PS, 1, crow, col)); /* covers 16 tokens */
  const int32_t ql = T;
  EXPECT_OK(bspa_batch_create(&e->B, e->P, &e->S, &ql, 1, NULL));
  EXPECT_OK(bspa_batch_create(&e->BQ, e->Q, &e->SQ, &ql, 1, NULL));
  for (int i = 0; i < BIG; ++i) {
    e->kn[i] = e->vn[i] = e->q[i] = e->kp[i] = e->vp[i] = (float)((i % 13) - 6) / 8.0f;
    e->out[i] = e->lse[i] = NAN;
  }
  reset_tensors(e);
  /* The valid calls succeed, so each case below fails because of its one bad argument. */
  EXPECT_OK(test_kv_write(e->P, e->B, 0, &e->tk.t, &e->tv.t));
  EXPECT_OK(test_kv_write(e->P, e->B, 1, &e->tk.t, &e->tv.t));
  EXPECT_OK(test_prefill(e->P, e->B, 0, e->dense4, &e->tq.t, &e->tout.t, 0.125f, &e->tlse.t));
  EXPECT_OK(bspa_prefill_paged(&e->pa, NULL));
  cr_assert(isfinite(e->out[0]) && isfinite(e->lse[HQ * T - 1]), "the valid prefill wrote no output");
  for (int i = 0; i < BIG; ++i) e->out[i] = e->lse[i] = NAN; /* failed calls must leave this poison */
}

static void teardown(env *e) {
  bspa_batch_destroy(e->B);
  bspa_batch_destroy(e->BQ);
  bspa_layout_destroy(e->dense4);
  bspa_layout_destroy(e->dense3);
  bspa_layout_destroy(e->csr_short);
  bspa_seq_destroy(e->S);
  bspa_seq_destroy(e->S2);
  bspa_seq_destroy(e->SQ);
  bspa_pool_destroy(e->P); /* SE, SZ go with their pools */
  bspa_pool_destroy(e->Q);
  bspa_pool_destroy(e->E);
  bspa_pool_destroy(e->Z);
}

/* ---- the cases ------------------------------------------------------------------------ */

static void library_cases(env *e) {
  int32_t count;
  BAD(e, BSPA_ERR_NULL_POINTER, "count", bspa_device_count(kDLCPU, NULL));
  BAD(e, BSPA_ERR_NOT_SUPPORTED, "device_type", bspa_device_count(kDLOpenCL, &count));
  BAD(e, BSPA_ERR_NOT_SUPPORTED, "device_type", bspa_device_count(-1, &count));
}

static void pool_create_cases(env *e) {
  bspa_pool_options o;
  BAD(e, BSPA_ERR_NULL_POINTER, "options", bspa_pool_options_init(NULL));
  EXPECT_OK(bspa_pool_options_init(&o));
  o.num_pages = 2;
  BAD(e, BSPA_ERR_NULL_POINTER, "pool", bspa_pool_create(NULL, &o));
  BAD_OUT(e, bspa_pool, BSPA_ERR_NULL_POINTER, "options", bspa_pool_create(&out_, NULL));

#define POOL_FIELD(field, value, want, needle)                         \
  do {                                                                 \
    bspa_pool_options o2 = o;                                          \
    o2.field = value;                                                  \
    BAD_OUT(e, bspa_pool, want, needle, bspa_pool_create(&out_, &o2)); \
  } while (0)
  POOL_FIELD(version, 0, BSPA_ERR_VERSION, "version");
  POOL_FIELD(version, BSPA_POOL_OPTIONS_VERSION + 1, BSPA_ERR_VERSION, "version");
  POOL_FIELD(device_type, kDLOpenCL, BSPA_ERR_INVALID_ARGUMENT, "device_type");
  POOL_FIELD(device_type, -1, BSPA_ERR_INVALID_ARGUMENT, "device_type");
  POOL_FIELD(device_id, 1, BSPA_ERR_INVALID_ARGUMENT, "device_id");
  POOL_FIELD(device_id, -1, BSPA_ERR_INVALID_ARGUMENT, "device_id");
  POOL_FIELD(dtype, 4, BSPA_ERR_INVALID_ARGUMENT, "dtype"); /* 3 is BSPA_DTYPE_FP8_E4M3 */
  POOL_FIELD(dtype, -1, BSPA_ERR_INVALID_ARGUMENT, "dtype");
  POOL_FIELD(num_layers, -1, BSPA_ERR_INVALID_ARGUMENT, "num_layers");
  POOL_FIELD(num_layers, INT32_MIN, BSPA_ERR_INVALID_ARGUMENT, "num_layers");
  POOL_FIELD(num_kv_heads, 0, BSPA_ERR_INVALID_ARGUMENT, "num_kv_heads");
  POOL_FIELD(num_kv_heads, -2, BSPA_ERR_INVALID_ARGUMENT, "num_kv_heads");
  POOL_FIELD(head_dim, 0, BSPA_ERR_INVALID_ARGUMENT, "head_dim");
  POOL_FIELD(head_dim, -128, BSPA_ERR_INVALID_ARGUMENT, "head_dim");
  POOL_FIELD(page_size, 0, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  POOL_FIELD(page_size, 8, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  POOL_FIELD(page_size, 48, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  POOL_FIELD(page_size, 512, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  POOL_FIELD(page_size, -64, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  POOL_FIELD(num_pages, -1, BSPA_ERR_INVALID_ARGUMENT, "num_pages");
  POOL_FIELD(num_pages, (int64_t)INT32_MAX + 1, BSPA_ERR_INVALID_ARGUMENT, "num_pages");
  POOL_FIELD(num_pages, INT64_MIN, BSPA_ERR_INVALID_ARGUMENT, "num_pages");
  /* num_pages 0 derives the count from memory_bytes, which must hold one page. */
  POOL_FIELD(num_pages, 0, BSPA_ERR_INVALID_ARGUMENT, "memory_bytes");
  {
    bspa_pool_options o2 = o;
    o2.num_pages = 0;
    o2.memory_bytes = 2 * 64 * 128 * 2 - 1; /* one byte short of a page (K and V, bf16) */
    BAD_OUT(e, bspa_pool, BSPA_ERR_INVALID_ARGUMENT, "memory_bytes", bspa_pool_create(&out_, &o2));
    o2.num_layers = 0;
    o2.memory_bytes = 1u << 20;
    BAD_OUT(e, bspa_pool, BSPA_ERR_INVALID_ARGUMENT, "num_pages", bspa_pool_create(&out_, &o2));
  }
  {
    /* More storage than any address space: refused before allocating. */
    bspa_pool_options o2 = o;
    o2.num_pages = INT32_MAX;
    o2.num_layers = INT32_MAX;
    o2.head_dim = INT32_MAX;
    BAD_OUT(e, bspa_pool, BSPA_ERR_INVALID_ARGUMENT, "num_pages", bspa_pool_create(&out_, &o2));
    /* Addressable but far beyond any machine's memory (4 PiB): the allocation fails. */
    o2.num_layers = 1;
    o2.num_kv_heads = 1;
    o2.dtype = BSPA_DTYPE_F32;
    o2.page_size = 256;
    o2.head_dim = 1024;
    BAD_OUT(e, bspa_pool, BSPA_ERR_OUT_OF_MEMORY, "allocation", bspa_pool_create(&out_, &o2));
  }
  {
    int32_t gpus = 0;
    EXPECT_OK(bspa_device_count(kDLCUDA, &gpus));
    if (gpus == 0) {
      const int cuda_built = strstr(bspa_build_info(), "cuda_archs: none") == NULL;
      bspa_pool_options o2 = o;
      o2.device_type = kDLCUDA;
      BAD_OUT(e, bspa_pool, cuda_built ? BSPA_ERR_NO_DEVICE : BSPA_ERR_NOT_SUPPORTED, cuda_built ? "device_id" : "CUDA",
              bspa_pool_create(&out_, &o2));
    }
  }
#undef POOL_FIELD
}

static void pool_kv_cases(env *e) {
  DLTensor k, v;
  memset(&k, 0x5a, sizeof k);
  memset(&v, 0x5a, sizeof v);
  BAD(e, BSPA_ERR_NULL_POINTER, "pool", bspa_pool_kv(NULL, 0, &k, &v));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "layer", bspa_pool_kv(e->P, -1, &k, &v));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "layer", bspa_pool_kv(e->P, 2, &k, &v));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "layer", bspa_pool_kv(e->P, INT32_MIN, &k, NULL));
  BAD(e, BSPA_ERR_INVALID_STATE, "num_layers", bspa_pool_kv(e->Z, 0, &k, &v));
  cr_expect(k.ndim == 0x5a5a5a5a && v.ndim == 0x5a5a5a5a, "a failed bspa_pool_kv wrote a view");
}

static void pool_stats_cases(env *e) {
  struct bspa_pool_stats st;
  BAD(e, BSPA_ERR_NULL_POINTER, "pool", bspa_pool_stats(NULL, &st));
  BAD(e, BSPA_ERR_NULL_POINTER, "stats", bspa_pool_stats(e->P, NULL));
  BAD(e, BSPA_ERR_NULL_POINTER, "pool", bspa_pool_check(NULL));
  NOOP(e, bspa_pool_destroy(NULL));
}

static void seq_create_cases(env *e) {
  bspa_seq_options so;
  BAD(e, BSPA_ERR_NULL_POINTER, "options", bspa_seq_options_init(NULL));
  EXPECT_OK(bspa_seq_options_init(&so));
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_create(NULL, e->P, &so));
  BAD_OUT(e, bspa_seq, BSPA_ERR_NULL_POINTER, "pool", bspa_seq_create(&out_, NULL, &so));
  so.version = 0;
  BAD_OUT(e, bspa_seq, BSPA_ERR_VERSION, "version", bspa_seq_create(&out_, e->P, &so));
  so.version = BSPA_SEQ_OPTIONS_VERSION + 1;
  BAD_OUT(e, bspa_seq, BSPA_ERR_VERSION, "version", bspa_seq_create(&out_, e->P, &so));
  so.version = BSPA_SEQ_OPTIONS_VERSION;
  so.salt = NULL;
  so.salt_len = 8;
  BAD_OUT(e, bspa_seq, BSPA_ERR_INVALID_ARGUMENT, "salt", bspa_seq_create(&out_, e->P, &so));
}

static void seq_match_cases(env *e) {
  int32_t tokens[128];
  for (int i = 0; i < 128; ++i) tokens[i] = 1000 + i;
  int64_t cached = -5;
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_match(NULL, tokens, 20, &cached));
  BAD(e, BSPA_ERR_NULL_POINTER, "cached", bspa_seq_match(e->S2, tokens, 20, NULL));
  BAD(e, BSPA_ERR_NULL_POINTER, "tokens", bspa_seq_match(e->S2, NULL, 20, &cached));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "n", bspa_seq_match(e->S2, tokens, -1, &cached));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "n", bspa_seq_match(e->S2, tokens, INT64_MIN, &cached));
  BAD(e, BSPA_ERR_INVALID_STATE, "sequence", bspa_seq_match(e->S, tokens, 20, &cached));
  cr_expect_eq(cached, -5, "a failed bspa_seq_match wrote *cached");
}

static void seq_append_cases(env *e) {
  int32_t tokens[128];
  for (int i = 0; i < 128; ++i) tokens[i] = 1000 + i;
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_append(NULL, tokens, 1));
  BAD(e, BSPA_ERR_NULL_POINTER, "tokens", bspa_seq_append(e->S2, NULL, 1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "n", bspa_seq_append(e->S2, tokens, -1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "n", bspa_seq_append(e->S2, tokens, INT64_MAX));
  BAD(e, BSPA_ERR_OUT_OF_PAGES, "pages", bspa_seq_append(e->SE, tokens, 1));          /* exhausted pool */
  BAD(e, BSPA_ERR_OUT_OF_PAGES, "pages", bspa_seq_append(e->S2, tokens, 3 * PS + 1)); /* 4 pages, 2 left */
  BAD(e, BSPA_ERR_OUT_OF_PAGES, "pages", bspa_seq_append(e->S, tokens, 3 * PS));      /* 20 -> 68 tokens: 5 pages */
}

static void seq_commit_cases(env *e) {
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_commit(NULL, 0));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "computed", bspa_seq_commit(e->S, PS - 1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "computed", bspa_seq_commit(e->S, -1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "computed", bspa_seq_commit(e->S, PS + T + 1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "computed", bspa_seq_commit(e->S2, 1));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "computed", bspa_seq_commit(e->S, INT64_MAX));
}

static void seq_pages_cases(env *e) {
  int32_t pages[4] = {-7, -7, -7, -7};
  int64_t n = -3;
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_pages(NULL, pages, 4, &n));
  BAD(e, BSPA_ERR_NULL_POINTER, "num_pages", bspa_seq_pages(e->S, pages, 4, NULL));
  BAD(e, BSPA_ERR_INVALID_ARGUMENT, "capacity", bspa_seq_pages(e->S, pages, -1, &n));
  BAD(e, BSPA_ERR_NULL_POINTER, "pages", bspa_seq_pages(e->S, NULL, 4, &n));
  BAD(e, BSPA_ERR_BUFFER_TOO_SMALL, "capacity", bspa_seq_pages(e->S, pages, 1, &n));
  cr_expect(n == 2 && pages[0] == -7, "BUFFER_TOO_SMALL must report the count (%lld) and leave pages alone",
            (long long)n);
}

static void seq_info_cases(env *e) {
  struct bspa_seq_info info;
  BAD(e, BSPA_ERR_NULL_POINTER, "seq", bspa_seq_info(NULL, &info));
  BAD(e, BSPA_ERR_NULL_POINTER, "info", bspa_seq_info(e->S, NULL));
  NOOP(e, bspa_seq_destroy(NULL));
}

static void layout_strided_cases(env *e) {
  bspa_layout_strided_options lo;
  BAD(e, BSPA_ERR_NULL_POINTER, "options", bspa_layout_strided_options_init(NULL));
  EXPECT_OK(bspa_layout_strided_options_init(&lo));
  BAD(e, BSPA_ERR_NULL_POINTER, "layout", bspa_layout_create_strided(NULL, &lo));
  BAD_OUT(e, bspa_layout, BSPA_ERR_NULL_POINTER, "options", bspa_layout_create_strided(&out_, NULL));
#define STRIDED(field, value, want, needle)                                        \
  do {                                                                             \
    bspa_layout_strided_options o2 = lo;                                           \
    o2.field = value;                                                              \
    BAD_OUT(e, bspa_layout, want, needle, bspa_layout_create_strided(&out_, &o2)); \
  } while (0)
  STRIDED(version, 0, BSPA_ERR_VERSION, "version");
  STRIDED(version, BSPA_LAYOUT_STRIDED_OPTIONS_VERSION + 1, BSPA_ERR_VERSION, "version");
  STRIDED(block_size, 0, BSPA_ERR_INVALID_ARGUMENT, "block_size");
  STRIDED(block_size, -64, BSPA_ERR_INVALID_ARGUMENT, "block_size");
  STRIDED(local_blocks, 0, BSPA_ERR_INVALID_ARGUMENT, "local_blocks");
  STRIDED(local_blocks, -1, BSPA_ERR_INVALID_ARGUMENT, "local_blocks");
  STRIDED(vert_stride, 0, BSPA_ERR_INVALID_ARGUMENT, "vert_stride");
  STRIDED(vert_stride, INT32_MIN, BSPA_ERR_INVALID_ARGUMENT, "vert_stride");
  STRIDED(vert_stride, (1 << 30) + 1, BSPA_ERR_INVALID_ARGUMENT, "vert_stride"); /* the kernels' int32 rule */
  STRIDED(homo_head, 2, BSPA_ERR_INVALID_ARGUMENT, "homo_head");
  STRIDED(homo_head, -1, BSPA_ERR_INVALID_ARGUMENT, "homo_head");
  STRIDED(num_heads_total, 0, BSPA_ERR_INVALID_ARGUMENT, "num_heads_total");
  STRIDED(num_heads_total, INT32_MAX, BSPA_ERR_INVALID_ARGUMENT, "num_heads_total");
  STRIDED(num_heads, 0, BSPA_ERR_INVALID_ARGUMENT, "num_heads");
  STRIDED(num_heads, -32, BSPA_ERR_INVALID_ARGUMENT, "num_heads");
  STRIDED(head_begin, -1, BSPA_ERR_INVALID_ARGUMENT, "head_begin");
  STRIDED(head_begin, 1, BSPA_ERR_INVALID_ARGUMENT, "num_heads_total"); /* 1 + 32 > 32 */
  STRIDED(head_begin, INT32_MAX, BSPA_ERR_INVALID_ARGUMENT, "num_heads_total");
#undef STRIDED
}

static void layout_dense_cases(env *e) {
  BAD(e, BSPA_ERR_NULL_POINTER, "layout", bspa_layout_create_dense(NULL, 4));
  BAD_OUT(e, bspa_layout, BSPA_ERR_INVALID_ARGUMENT, "num_heads", bspa_layout_create_dense(&out_, 0));
  BAD_OUT(e, bspa_layout, BSPA_ERR_INVALID_ARGUMENT, "num_heads", bspa_layout_create_dense(&out_, -4));
}

static void layout_csr_cases(env *e) {
  /* CSR over 2 heads, 2 rows: head h row r holds {0..r}. */
  const int32_t crow[6] = {0, 1, 3, 3, 4, 6}, col[6] = {0, 0, 1, 0, 0, 1};
  int32_t c2[6], k2[6];
#define CSR(want, needle, heads, bs, rows, cr, co) \
  BAD_OUT(e, bspa_layout, want, needle, bspa_layout_create_csr(&out_, heads, bs, rows, cr, co))
  CSR(BSPA_ERR_NULL_POINTER, "crow", 2, 16, 2, NULL, col);
  CSR(BSPA_ERR_NULL_POINTER, "col", 2, 16, 2, crow, NULL);
  BAD(e, BSPA_ERR_NULL_POINTER, "layout", bspa_layout_create_csr(NULL, 2, 16, 2, crow, col));
  CSR(BSPA_ERR_INVALID_ARGUMENT, "num_heads", 0, 16, 2, crow, col);
  CSR(BSPA_ERR_INVALID_ARGUMENT, "num_heads", -2, 16, 2, crow, col);
  CSR(BSPA_ERR_INVALID_ARGUMENT, "block_size", 2, 0, 2, crow, col);
  CSR(BSPA_ERR_INVALID_ARGUMENT, "num_block_rows", 2, 16, 0, crow, col);
  CSR(BSPA_ERR_INVALID_ARGUMENT, "num_block_rows", 2, 16, -1, crow, col);
#define SPOIL(arr, src, i, value) (memcpy(arr, src, sizeof arr), arr[i] = (value), arr)
  CSR(BSPA_ERR_INVALID_ARGUMENT, "crow[0][0]", 2, 16, 2, SPOIL(c2, crow, 0, 1), col);
  CSR(BSPA_ERR_INVALID_ARGUMENT, "crow[1][0]", 2, 16, 2, SPOIL(c2, crow, 3, 2), col); /* heads not chained */
  CSR(BSPA_ERR_INVALID_ARGUMENT, "crow[0][2]", 2, 16, 2, SPOIL(c2, crow, 2, 0), col); /* decreasing */
  CSR(BSPA_ERR_INVALID_ARGUMENT, "col[0]", 2, 16, 2, crow, SPOIL(k2, col, 0, -1));    /* negative block */
  CSR(BSPA_ERR_INVALID_ARGUMENT, "col[0]", 2, 16, 2, crow, SPOIL(k2, col, 0, 1));     /* not causal */
  CSR(BSPA_ERR_INVALID_ARGUMENT, "col[2]", 2, 16, 2, crow, SPOIL(k2, col, 2, 0));     /* not ascending */
  CSR(BSPA_ERR_INVALID_ARGUMENT, "diagonal", 2, 16, 2, SPOIL(c2, crow, 1, 0), col);   /* row 0 empty */
  {
    const int32_t crow_nodiag[3] = {0, 1, 2}, col_nodiag[2] = {0, 0}; /* row 1 = {0}: no diagonal */
    CSR(BSPA_ERR_INVALID_ARGUMENT, "diagonal", 1, 16, 2, crow_nodiag, col_nodiag);
  }
#undef CSR
#undef SPOIL
}

static void layout_allowed_cases(env *e) {
  int32_t allowed = -3;
  BAD(e, BSPA_ERR_NULL_POINTER, "layout", bspa_layout_allowed(NULL, 0, 0, 0, &allowed));
  BAD(e, BSPA_ERR_NULL_POINTER, "allowed", bspa_layout_allowed(e->dense4, 0, 0, 0, NULL));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "head", bspa_layout_allowed(e->dense4, -1, 0, 0, &allowed));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "head", bspa_layout_allowed(e->dense4, HQ, 0, 0, &allowed));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "q_block", bspa_layout_allowed(e->dense4, 0, -1, 0, &allowed));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "k_block", bspa_layout_allowed(e->dense4, 0, 3, -1, &allowed));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "q_block", bspa_layout_allowed(e->csr_short, 0, 1, 0, &allowed));
  BAD(e, BSPA_ERR_OUT_OF_RANGE, "q_block", bspa_layout_allowed(e->csr_short, 0, INT64_MAX, 0, &allowed));
  cr_expect_eq(allowed, -3, "a failed bspa_layout_allowed wrote *allowed");
  NOOP(e, bspa_layout_destroy(NULL));
}

static void batch_cases(env *e) {
  const int32_t ql = T, ql2[2] = {T, 0}, neg = -1, past = T + 1, zero = 0;
  bspa_seq *two[2] = {e->S, e->S};
  bspa_seq *other[2] = {e->S, e->SQ};
  bspa_seq *null_seq[1] = {NULL};
#define BATCH(want, needle, pool, seqs, qls, n) \
  BAD_OUT(e, bspa_batch, want, needle, bspa_batch_create(&out_, pool, seqs, qls, n, NULL))
  BAD(e, BSPA_ERR_NULL_POINTER, "batch", bspa_batch_create(NULL, e->P, &e->S, &ql, 1, NULL));
  BATCH(BSPA_ERR_NULL_POINTER, "pool", NULL, &e->S, &ql, 1);
  BATCH(BSPA_ERR_NULL_POINTER, "seqs", e->P, NULL, &ql, 1);
  BATCH(BSPA_ERR_NULL_POINTER, "query_lens", e->P, &e->S, NULL, 1);
  BATCH(BSPA_ERR_NULL_POINTER, "seqs[0]", e->P, null_seq, &ql, 1);
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "n", e->P, &e->S, &ql, 0);
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "n", e->P, &e->S, &ql, -1);
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "n", e->P, &e->S, &ql, INT32_MIN);
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "query_lens[0]", e->P, &e->S, &neg, 1);
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "seqs[1]", e->P, two, ql2, 2);   /* the same sequence twice */
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "seqs[1]", e->P, other, ql2, 2); /* a sequence of another pool */
  BATCH(BSPA_ERR_INVALID_ARGUMENT, "seqs[0]", e->Q, &e->S, &ql, 1);
  BATCH(BSPA_ERR_OUT_OF_RANGE, "query_lens[0]", e->P, &e->S, &past, 1);
  BATCH(BSPA_ERR_OUT_OF_RANGE, "query_lens[0]", e->P, &e->S2, &ql, 1); /* an empty sequence */
  BATCH(BSPA_ERR_INVALID_STATE, "num_layers", e->Z, &e->SZ, &zero, 1);
#undef BATCH
  NOOP(e, bspa_batch_destroy(NULL));
}

static void kv_write_cases(env *e) {
#define KVW(want, needle, pool, batch, layer) \
  BAD(e, want, needle, test_kv_write(pool, batch, layer, &e->tk.t, &e->tv.t))
  KVW(BSPA_ERR_NULL_POINTER, "pool", NULL, e->B, 0);
  KVW(BSPA_ERR_NULL_POINTER, "batch", e->P, NULL, 0);
  KVW(BSPA_ERR_OUT_OF_RANGE, "layer", e->P, e->B, -1);
  KVW(BSPA_ERR_OUT_OF_RANGE, "layer", e->P, e->B, 2);
  KVW(BSPA_ERR_INVALID_ARGUMENT, "batch", e->P, e->BQ, 0); /* a batch of another pool */
  KVW(BSPA_ERR_INVALID_ARGUMENT, "batch", e->Q, e->B, 0);
  BAD(e, BSPA_ERR_NULL_POINTER, "k_new", test_kv_write(e->P, e->B, 0, NULL, &e->tv.t));
  BAD(e, BSPA_ERR_NULL_POINTER, "v_new", test_kv_write(e->P, e->B, 0, &e->tk.t, NULL));
  /* The args struct itself: NULL, never initialised, newer than this library. */
  bspa_kv_write_args ka;
  EXPECT_OK(bspa_kv_write_args_init(&ka));
  ka.k_new = &e->tk.t;
  ka.v_new = &e->tv.t;
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_kv_write(e->P, e->B, NULL, NULL));
  ka.version = 0;
  BAD(e, BSPA_ERR_VERSION, "args->version = 0", bspa_kv_write(e->P, e->B, &ka, NULL));
  ka.version = BSPA_KV_WRITE_ARGS_VERSION + 1;
  BAD(e, BSPA_ERR_VERSION, "newer", bspa_kv_write(e->P, e->B, &ka, NULL));
  ka.version = UINT32_MAX;
  BAD(e, BSPA_ERR_VERSION, "newer", bspa_kv_write(e->P, e->B, &ka, NULL));
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_kv_write_args_init(NULL));
  /* One spoiled property of k_new or v_new per case. */
  test_tensor *targets[2] = {&e->tk, &e->tv};
  const char *names[2] = {"k_new", "v_new"};
  for (int w = 0; w < 2; ++w) {
    test_tensor *x = targets[w];
    const char *nm = names[w];
    x->shape[0] = T + 1;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->shape[1] = HKV + 1;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->shape[2] = D / 2;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.ndim = 2;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.shape = NULL;
    KVW(BSPA_ERR_NULL_POINTER, nm, e->P, e->B, 0);
    reset_tensors(e);
    const int64_t strides[3] = {HKV * D * 2, D * 2, 2}; /* last dimension not contiguous */
    x->t.strides = (int64_t *)strides;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    const int64_t negative[3] = {-HKV * D, D, 1};
    x->t.strides = (int64_t *)negative;
    KVW(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.dtype.bits = 16; /* float16 into a float32 pool */
    KVW(BSPA_ERR_DTYPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.dtype.code = kDLInt;
    KVW(BSPA_ERR_DTYPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.dtype.lanes = 4;
    KVW(BSPA_ERR_DTYPE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.device.device_type = kDLCUDA;
    KVW(BSPA_ERR_DEVICE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.device.device_type = kDLCUDAHost;
    KVW(BSPA_ERR_DEVICE_MISMATCH, nm, e->P, e->B, 0);
    reset_tensors(e);
    x->t.data = NULL;
    KVW(BSPA_ERR_NULL_POINTER, nm, e->P, e->B, 0);
    reset_tensors(e);
  }
#undef KVW
}

static void prefill_cases(env *e) {
#define PF(want, needle, pool, batch, layer, layout, scale, lse) \
  BAD(e, want, needle, test_prefill(pool, batch, layer, layout, &e->tq.t, &e->tout.t, scale, lse))
  DLTensor *lse = &e->tlse.t;
  PF(BSPA_ERR_NULL_POINTER, "pool", NULL, e->B, 0, e->dense4, 0.125f, lse);
  PF(BSPA_ERR_NULL_POINTER, "batch", e->P, NULL, 0, e->dense4, 0.125f, lse);
  PF(BSPA_ERR_NULL_POINTER, "layout", e->P, e->B, 0, NULL, 0.125f, lse);
  BAD(e, BSPA_ERR_NULL_POINTER, "q", test_prefill(e->P, e->B, 0, e->dense4, NULL, &e->tout.t, 0.125f, lse));
  BAD(e, BSPA_ERR_NULL_POINTER, "out", test_prefill(e->P, e->B, 0, e->dense4, &e->tq.t, NULL, 0.125f, lse));
  /* The args struct itself: NULL, never initialised, newer than this library. */
  bspa_prefill_args pa;
  EXPECT_OK(bspa_prefill_args_init(&pa));
  pa.layout = e->dense4;
  pa.q = &e->tq.t;
  pa.out = &e->tout.t;
  pa.lse = lse;
  pa.scale = 0.125f;
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_prefill(e->P, e->B, NULL, NULL));
  pa.version = 0;
  BAD(e, BSPA_ERR_VERSION, "args->version = 0", bspa_prefill(e->P, e->B, &pa, NULL));
  pa.version = BSPA_PREFILL_ARGS_VERSION + 1;
  BAD(e, BSPA_ERR_VERSION, "newer", bspa_prefill(e->P, e->B, &pa, NULL));
  pa.version = UINT32_MAX;
  BAD(e, BSPA_ERR_VERSION, "newer", bspa_prefill(e->P, e->B, &pa, NULL));
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_prefill_args_init(NULL));
  PF(BSPA_ERR_OUT_OF_RANGE, "layer", e->P, e->B, -1, e->dense4, 0.125f, lse);
  PF(BSPA_ERR_OUT_OF_RANGE, "layer", e->P, e->B, 2, e->dense4, 0.125f, lse);
  PF(BSPA_ERR_INVALID_ARGUMENT, "batch", e->P, e->BQ, 0, e->dense4, 0.125f, lse);
  PF(BSPA_ERR_INVALID_ARGUMENT, "scale", e->P, e->B, 0, e->dense4, NAN, lse);
  PF(BSPA_ERR_INVALID_ARGUMENT, "scale", e->P, e->B, 0, e->dense4, INFINITY, lse);
  PF(BSPA_ERR_INVALID_ARGUMENT, "scale", e->P, e->B, 0, e->dense4, -INFINITY, lse);
  PF(BSPA_ERR_OUT_OF_RANGE, "CSR", e->P, e->B, 0, e->csr_short, 0.125f, lse);   /* 20 tokens, layout 16 */
  PF(BSPA_ERR_SHAPE_MISMATCH, "layout", e->P, e->B, 0, e->dense3, 0.125f, lse); /* q has 4 heads */
  {
    /* 3 query heads over 2 kv heads: consistent with the layout, not with GQA. */
    e->tq.shape[1] = e->tout.shape[1] = 3;
    e->tlse.shape[0] = 3;
    PF(BSPA_ERR_SHAPE_MISMATCH, "kv heads", e->P, e->B, 0, e->dense3, 0.125f, lse);
    reset_tensors(e);
  }
  test_tensor *targets[3] = {&e->tq, &e->tout, &e->tlse};
  const char *names[3] = {"q", "out", "lse"};
  for (int w = 0; w < 3; ++w) {
    test_tensor *x = targets[w];
    const char *nm = names[w];
    const int last = x->t.ndim - 1;
    x->shape[0] += 1;
    PF(BSPA_ERR_SHAPE_MISMATCH, w == 2 ? "lse" : nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->shape[last] += 1;
    PF(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->t.ndim = 4;
    x->shape[3] = 1;
    PF(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->shape[1] = -HQ;
    PF(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    int64_t strides[3] = {0, 0, 2};
    strides[last - 1 >= 0 ? last - 1 : 0] = 2 * x->shape[last];
    if (last == 2) strides[0] = 2 * HQ * D;
    x->t.strides = strides;
    PF(BSPA_ERR_SHAPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->t.dtype.bits = 16;
    PF(BSPA_ERR_DTYPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->t.dtype.code = kDLBfloat;
    PF(BSPA_ERR_DTYPE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->t.device.device_type = kDLCUDA;
    PF(BSPA_ERR_DEVICE_MISMATCH, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
    x->t.data = NULL;
    PF(BSPA_ERR_NULL_POINTER, nm, e->P, e->B, 0, e->dense4, 0.125f, lse);
    reset_tensors(e);
  }
#undef PF
}

static void paged_cases(env *e) {
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_paged_args_init(NULL));
  BAD(e, BSPA_ERR_NULL_POINTER, "args", bspa_prefill_paged(NULL, NULL));
#define PAGED(want, needle, change)                         \
  do {                                                      \
    reset_tensors(e);                                       \
    change;                                                 \
    BAD(e, want, needle, bspa_prefill_paged(&e->pa, NULL)); \
  } while (0)
  PAGED(BSPA_ERR_VERSION, "version", e->pa.version = 0);
  PAGED(BSPA_ERR_VERSION, "version", e->pa.version = BSPA_PAGED_ARGS_VERSION + 1);
  PAGED(BSPA_ERR_NULL_POINTER, "q", e->pa.q = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "out", e->pa.out = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "k_pages", e->pa.k_pages = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "v_pages", e->pa.v_pages = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "block_table", e->pa.block_table = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "query_starts", e->pa.query_starts = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "context_lens", e->pa.context_lens = NULL);
  PAGED(BSPA_ERR_NULL_POINTER, "layout", e->pa.layout = NULL);
  PAGED(BSPA_ERR_INVALID_ARGUMENT, "scale", e->pa.scale = NAN);
  PAGED(BSPA_ERR_INVALID_ARGUMENT, "max_query_len", e->pa.max_query_len = -1);
  PAGED(BSPA_ERR_INVALID_ARGUMENT, "args->max_decode_query_len = -1", e->pa.max_decode_query_len = -1);
  /* k_pages / v_pages */
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages", e->tkp.t.ndim = 3);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages", e->tkp.shape[2] = 0);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages", e->tkp.shape[1] = -1);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "v_pages", e->tvp.shape[2] = PS / 2);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "v_pages", e->tvp.t.ndim = 5);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "k_pages", e->tkp.t.dtype.code = kDLInt);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "k_pages", e->tkp.t.dtype.bits = 64);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "v_pages", e->tvp.t.dtype.bits = 16);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "v_pages", e->tvp.t.device.device_type = kDLCUDA);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "k_pages", e->tkp.t.device.device_type = kDLOpenCL);
  PAGED(BSPA_ERR_NULL_POINTER, "k_pages", e->tkp.t.data = NULL);
  /* Shapes and strides whose element count or last offset overflows int64 (UBSan found
   * the signed overflow in the element count). */
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages", e->tkp.shape[0] = e->tkp.shape[1] = INT64_C(1) << 40);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages", e->tkp.shape[0] = INT64_MAX; e->tkp.shape[1] = 3);
  {
    int64_t huge[4] = {INT64_MAX / 2, PS * D, D, 1};
    PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages.strides[0]", e->tkp.t.strides = huge);
  }
  { /* An empty tensor's strides are checked too (they were not, and a huge one overflowed
     * the distinctness check of an empty out). */
    int64_t negative[4] = {-1, PS * D, D, 1};
    PAGED(BSPA_ERR_SHAPE_MISMATCH, "k_pages.strides[0]", e->tkp.shape[0] = 0; e->tkp.t.strides = negative);
  }
  /* q / out / lse against the pages */
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "q", e->tq.shape[2] = D / 2);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "layout", e->pa.layout = e->dense3);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "out", e->tout.shape[0] = T - 1);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "lse", e->tlse.shape[1] = T + 1);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "q", e->tq.t.dtype.bits = 16);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "lse", e->tlse.t.dtype.code = kDLBfloat; e->tlse.t.dtype.bits = 16);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "q", e->tq.t.device.device_type = kDLCUDA);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "lse", e->tlse.t.device.device_type = kDLCUDA);
  /* metadata tensors */
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "block_table", e->tbt.t.dtype.code = kDLFloat);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "query_starts", e->tqs.t.dtype.bits = 64);
  PAGED(BSPA_ERR_DTYPE_MISMATCH, "context_lens", e->tcl.t.dtype.code = kDLUInt);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "block_table", e->tbt.t.ndim = 1);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "query_starts", e->tqs.shape[0] = 1);
  PAGED(BSPA_ERR_SHAPE_MISMATCH, "context_lens", e->tcl.shape[0] = 2);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "block_table", e->tbt.t.device.device_type = kDLCUDA);
  PAGED(BSPA_ERR_DEVICE_MISMATCH, "context_lens", e->tcl.t.device.device_type = kDLCUDA);
  PAGED(BSPA_ERR_NULL_POINTER, "query_starts", e->tqs.t.data = NULL);
  /* metadata values (checked on CPU) */
  PAGED(BSPA_ERR_OUT_OF_RANGE, "query_starts[0]", e->qs[0] = 1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "query_starts[1]", e->qs[1] = T - 1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "query_starts[1]", e->qs[1] = -1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "max_query_len", e->pa.max_query_len = T - 1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "context_lens[0]", e->cl[0] = -1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "block_table", e->cl[0] = 2 * PS - T + 1); /* needs a third page */
  PAGED(BSPA_ERR_OUT_OF_RANGE, "block_table", e->cl[0] = INT32_MAX);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "block_table[0][0]", e->bt[0] = -1);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "block_table[0][1]", e->bt[1] = PAGES);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "block_table[0][1]", e->bt[1] = INT32_MIN);
  PAGED(BSPA_ERR_OUT_OF_RANGE, "CSR", e->pa.layout = e->csr_short);
  /* the optional split workspace (version 2) */
  {
    static _Alignas(16) uint8_t ws[64];
    int64_t ws_shape[2] = {64, 1};
    const DLTensor w0 = {ws, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, ws_shape, NULL, 0};
    DLTensor w = w0;
#define WS(want, change) PAGED(want, "workspace", e->pa.workspace = &w; w = w0; ws_shape[0] = 64; change)
    WS(BSPA_ERR_DTYPE_MISMATCH, w.dtype.code = kDLFloat);
    WS(BSPA_ERR_DTYPE_MISMATCH, w.dtype.bits = 16);
    WS(BSPA_ERR_SHAPE_MISMATCH, w.ndim = 2);
    WS(BSPA_ERR_SHAPE_MISMATCH, ws_shape[0] = -1);
    WS(BSPA_ERR_DEVICE_MISMATCH, w.device.device_type = kDLCUDA);
    WS(BSPA_ERR_INVALID_ARGUMENT, w.byte_offset = 4; ws_shape[0] = 60);
    WS(BSPA_ERR_NULL_POINTER, w.data = NULL);
#undef WS
    w = w0;
    ws_shape[0] = 64;
    reset_tensors(e);
    e->pa.workspace = &w; /* a valid one: the CPU backend needs none and ignores it */
    EXPECT_OK(bspa_prefill_paged(&e->pa, NULL));
    reset_tensors(e);
    e->pa.version = 1; /* a version 1 caller's struct ends before workspace: never read */
    e->pa.workspace = (DLTensor *)(uintptr_t)0x8;
    EXPECT_OK(bspa_prefill_paged(&e->pa, NULL));
    reset_tensors(e);
    e->pa.version = 3; /* a version 3 caller's struct ends before max_decode_query_len */
    e->pa.max_decode_query_len = -1;
    EXPECT_OK(bspa_prefill_paged(&e->pa, NULL));
  }
  {
    size_t bytes = 1;
    BAD(e, BSPA_ERR_NULL_POINTER, "bytes", bspa_prefill_workspace_bytes(kDLCPU, 0, D, NULL));
    BAD(e, BSPA_ERR_INVALID_ARGUMENT, "head_dim", bspa_prefill_workspace_bytes(kDLCPU, 0, 0, &bytes));
    cr_expect_eq(bytes, 0, "a failed bspa_prefill_workspace_bytes leaves bytes = 0");
    BAD(e, BSPA_ERR_NOT_SUPPORTED, "device_type", bspa_prefill_workspace_bytes(kDLOpenCL, 0, D, &bytes));
    BAD(e, BSPA_ERR_NO_DEVICE, "device_id", bspa_prefill_workspace_bytes(kDLCUDA, 4096, D, &bytes));
    bytes = 1;
    EXPECT_OK(bspa_prefill_workspace_bytes(kDLCPU, 0, D, &bytes));
    cr_expect_eq(bytes, 0, "the CPU backend needs no workspace");
  }
#undef PAGED
  reset_tensors(e);
}

/* One Test per public function (a constructor with its options' init; a destroy with the
 * last queries of its type), each over a fresh environment, so one failing case hides no
 * other function's. Each has a floor on its case count: the table cannot shrink unnoticed. */
static void run_cases(void (*cases)(env *), const char *family, int at_least) {
  static env e;
  g_cases = 0;
  setup(&e);
  cases(&e);
  teardown(&e);
  fprintf(stderr, "bad-input cases (%s): %d\n", family, g_cases);
  cr_expect_geq(g_cases, at_least, "the %s table shrank to %d cases", family, g_cases);
}

Test(bad_input, device_count) { run_cases(library_cases, "device_count", 3); }
Test(bad_input, pool_create) { run_cases(pool_create_cases, "pool_create", 31); }
Test(bad_input, pool_kv) { run_cases(pool_kv_cases, "pool_kv", 5); }
Test(bad_input, pool_stats_check_destroy) { run_cases(pool_stats_cases, "pool_stats_check_destroy", 4); }
Test(bad_input, seq_create) { run_cases(seq_create_cases, "seq_create", 6); }
Test(bad_input, seq_match) { run_cases(seq_match_cases, "seq_match", 6); }
Test(bad_input, seq_append) { run_cases(seq_append_cases, "seq_append", 7); }
Test(bad_input, seq_commit) { run_cases(seq_commit_cases, "seq_commit", 6); }
Test(bad_input, seq_pages) { run_cases(seq_pages_cases, "seq_pages", 5); }
Test(bad_input, seq_info_destroy) { run_cases(seq_info_cases, "seq_info_destroy", 3); }
Test(bad_input, layout_strided) { run_cases(layout_strided_cases, "layout_strided", 21); }
Test(bad_input, layout_dense) { run_cases(layout_dense_cases, "layout_dense", 3); }
Test(bad_input, layout_csr) { run_cases(layout_csr_cases, "layout_csr", 16); }
Test(bad_input, layout_allowed_destroy) { run_cases(layout_allowed_cases, "layout_allowed_destroy", 9); }
Test(bad_input, batch_create_destroy) { run_cases(batch_cases, "batch_create_destroy", 16); }
Test(bad_input, kv_write) { run_cases(kv_write_cases, "kv_write", 39); }
Test(bad_input, prefill) { run_cases(prefill_cases, "prefill", 46); }
Test(bad_input, prefill_paged) { run_cases(paged_cases, "prefill_paged", 68); }
