/* Pools and sequences through the C ABI: options, creation errors, KV views, stats, and
 * every function's bad arguments (status, message, no state change, invariants intact). */
#include <stdint.h>
#include <string.h>

#include "support.h"

static bspa_pool_options options(void) {
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  return o;
}

/* Expects creation to fail with `status` and a message mentioning `needle`; *pool = NULL. */
static void expect_create_fails(const bspa_pool_options *o, bspa_status status, const char *needle) {
  bspa_pool *pool = (bspa_pool *)(uintptr_t)0x1;
  EXPECT_STATUS(bspa_pool_create(&pool, o), status);
  cr_assert_null(pool, "*pool must be NULL after a failure");
  cr_assert(strstr(bspa_last_error(), needle) != NULL, "message \"%s\" does not name %s", bspa_last_error(), needle);
}

Test(pool, options_init_fills_the_documented_defaults) {
  bspa_pool_options o;
  memset(&o, 0xab, sizeof o);
  EXPECT_OK(bspa_pool_options_init(&o));
  cr_assert_eq(o.version, BSPA_POOL_OPTIONS_VERSION);
  cr_assert(o.device_type == kDLCPU && o.device_id == 0 && o.dtype == BSPA_DTYPE_BF16 && o.num_layers == 1 &&
            o.num_kv_heads == 1 && o.head_dim == 128 && o.page_size == 64 && o.num_pages == 0 && o.memory_bytes == 0 &&
            o.hash_seed == BSPA_DEFAULT_HASH_SEED);
  EXPECT_STATUS(bspa_pool_options_init(NULL), BSPA_ERR_NULL_POINTER);
  bspa_seq_options so;
  memset(&so, 0xab, sizeof so);
  EXPECT_OK(bspa_seq_options_init(&so));
  cr_assert(so.version == BSPA_SEQ_OPTIONS_VERSION && so.salt == NULL && so.salt_len == 0 && so.extra_key == 0);
  EXPECT_STATUS(bspa_seq_options_init(NULL), BSPA_ERR_NULL_POINTER);
}

Test(pool, create_rejects_every_bad_option_naming_it) {
  bspa_pool_options o = options();
  o.num_pages = 4;
  EXPECT_STATUS(bspa_pool_create(NULL, &o), BSPA_ERR_NULL_POINTER);
  expect_create_fails(NULL, BSPA_ERR_NULL_POINTER, "options");

  bspa_pool_options b = o;
  b.version = 0;
  expect_create_fails(&b, BSPA_ERR_VERSION, "version");
  b.version = BSPA_POOL_OPTIONS_VERSION + 1;
  expect_create_fails(&b, BSPA_ERR_VERSION, "version");
  b = o, b.device_type = 99;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "device_type = 99");
  b = o, b.device_id = 1;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "device_id = 1");
  b = o, b.dtype = 7;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "dtype = 7");
  b = o, b.num_layers = -1;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_layers = -1");
  b = o, b.num_kv_heads = 0;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_kv_heads = 0");
  b = o, b.head_dim = 0;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "head_dim = 0");
  const int32_t bad_sizes[] = {0, 8, 48, 100, 512, -64};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; ++i) {
    b = o, b.page_size = bad_sizes[i];
    expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "page_size");
  }
  b = o, b.num_pages = -1;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_pages = -1");
  b = o, b.num_pages = (int64_t)INT32_MAX + 1;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_pages");
  b = o, b.num_pages = 0, b.memory_bytes = 1000; /* one page: 2 * 1 * 64 * 128 * 2 bytes */
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "memory_bytes = 1000");
  b = o, b.num_pages = 0, b.num_layers = 0, b.memory_bytes = 1 << 30;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_pages = 0");
  b = o, b.num_layers = 1000000, b.num_kv_heads = 1000000, b.num_pages = 1000000;
  expect_create_fails(&b, BSPA_ERR_INVALID_ARGUMENT, "num_pages");
}

Test(pool, cuda_pools_fail_clearly_without_a_gpu) {
  int32_t gpus = 0;
  EXPECT_OK(bspa_device_count(kDLCUDA, &gpus));
  bspa_pool_options o = options();
  o.device_type = kDLCUDA;
  o.device_id = gpus; /* one past the last GPU */
  o.num_pages = 4;
  const int has_cuda = strstr(bspa_build_info(), "cuda_archs: none") == NULL;
  expect_create_fails(&o, has_cuda ? BSPA_ERR_NO_DEVICE : BSPA_ERR_NOT_SUPPORTED, "kDLCUDA");
}

Test(pool, memory_budget_derives_the_page_count) {
  bspa_pool_options o = options();
  o.dtype = BSPA_DTYPE_F16;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.page_size = 16;
  o.num_pages = 0;
  o.memory_bytes = 100000; /* a page over all layers, K and V: 2 * 2 * 2 * 16 * 64 * 2 = 16384 bytes */
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert_eq(st.pages_total, 6);
  cr_assert(st.pages_free == 6 && st.pages_cached == 0 && st.pages_in_use == 0 && st.num_sequences == 0);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

Test(pool, kv_views_describe_each_layer_of_every_dtype) {
  const bspa_dtype dtypes[] = {BSPA_DTYPE_F32, BSPA_DTYPE_F16, BSPA_DTYPE_BF16};
  const uint8_t codes[] = {kDLFloat, kDLFloat, kDLBfloat};
  const uint8_t bits[] = {32, 16, 16};
  for (int d = 0; d < 3; ++d) {
    bspa_pool_options o = options();
    o.dtype = dtypes[d];
    o.num_layers = 3;
    o.num_kv_heads = 2;
    o.head_dim = 8;
    o.page_size = 32;
    o.num_pages = 5;
    bspa_pool *pool = NULL;
    EXPECT_OK(bspa_pool_create(&pool, &o));
    const size_t layer_bytes = (size_t)5 * 2 * 32 * 8 * bits[d] / 8;
    DLTensor k0, v0;
    EXPECT_OK(bspa_pool_kv(pool, 0, &k0, &v0));
    for (int32_t l = 0; l < 3; ++l) {
      DLTensor k, v;
      EXPECT_OK(bspa_pool_kv(pool, l, &k, &v));
      const DLTensor *views[2] = {&k, &v};
      for (int i = 0; i < 2; ++i) {
        const DLTensor *t = views[i];
        cr_assert(t->device.device_type == kDLCPU && t->device.device_id == 0);
        cr_assert(t->dtype.code == codes[d] && t->dtype.bits == bits[d] && t->dtype.lanes == 1);
        cr_assert(t->ndim == 4 && t->strides == NULL && t->byte_offset == 0);
        cr_assert(t->shape[0] == 5 && t->shape[1] == 2 && t->shape[2] == 32 && t->shape[3] == 8);
        cr_assert_eq((uintptr_t)t->data % 256, 0, "storage is 256-byte aligned");
      }
      cr_assert_eq((char *)k.data, (char *)k0.data + 2 * (size_t)l * layer_bytes);
      cr_assert_eq((char *)v.data, (char *)k.data + layer_bytes);
      /* the whole view is ours to write (a sanitizer build checks the bounds) */
      memset(k.data, 0x11 + l, layer_bytes);
      memset(v.data, 0x22 + l, layer_bytes);
    }
    for (int32_t l = 0; l < 3; ++l) {
      DLTensor k;
      EXPECT_OK(bspa_pool_kv(pool, l, &k, NULL));
      cr_assert_eq(((unsigned char *)k.data)[layer_bytes - 1], 0x11 + l, "layers overlap");
    }
    EXPECT_OK(bspa_pool_kv(pool, 1, NULL, NULL));
    bspa_pool_destroy(pool);
  }
}

Test(pool, kv_rejects_bad_layers_and_storage_less_pools_without_touching_the_views) {
  bspa_pool_options o = options();
  o.num_layers = 2;
  o.num_pages = 2;
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));
  DLTensor k, v, k0;
  memset(&k, 0x5a, sizeof k);
  memset(&v, 0x5a, sizeof v);
  k0 = k;
  EXPECT_STATUS(bspa_pool_kv(pool, 2, &k, &v), BSPA_ERR_OUT_OF_RANGE);
  cr_assert(strstr(bspa_last_error(), "layer = 2") != NULL, "%s", bspa_last_error());
  EXPECT_STATUS(bspa_pool_kv(pool, -1, &k, &v), BSPA_ERR_OUT_OF_RANGE);
  cr_assert(memcmp(&k, &k0, sizeof k) == 0 && memcmp(&v, &k0, sizeof v) == 0, "a failed call wrote a view");
  EXPECT_STATUS(bspa_pool_kv(NULL, 0, &k, &v), BSPA_ERR_NULL_POINTER);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);

  o.num_layers = 0;
  o.num_pages = 1000000; /* bookkeeping only: no KV storage */
  EXPECT_OK(bspa_pool_create(&pool, &o));
  EXPECT_STATUS(bspa_pool_kv(pool, 0, &k, &v), BSPA_ERR_INVALID_STATE);
  cr_assert(strstr(bspa_last_error(), "num_layers = 0") != NULL, "%s", bspa_last_error());
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

Test(pool, stats_check_and_destroy_handle_null) {
  struct bspa_pool_stats st;
  EXPECT_STATUS(bspa_pool_stats(NULL, &st), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_check(NULL), BSPA_ERR_NULL_POINTER);
  bspa_pool_options o = options();
  o.num_layers = 0;
  o.num_pages = 8;
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));
  EXPECT_STATUS(bspa_pool_stats(pool, NULL), BSPA_ERR_NULL_POINTER);
  bspa_pool_destroy(pool);
  bspa_pool_destroy(NULL);
  bspa_seq_destroy(NULL);
}

/* A pool with one sequence holding 40 computed tokens (ps 16) and another holding 10. */
typedef struct fixture {
  bspa_pool *pool;
  bspa_seq *seq, *other;
  int32_t tokens[64];
} fixture;

static void setup(fixture *f) {
  bspa_pool_options o = options();
  o.num_layers = 0;
  o.page_size = 16;
  o.num_pages = 16;
  EXPECT_OK(bspa_pool_create(&f->pool, &o));
  for (int i = 0; i < 64; ++i) f->tokens[i] = i * 3;
  EXPECT_OK(bspa_seq_create(&f->seq, f->pool, NULL));
  EXPECT_OK(bspa_seq_append(f->seq, f->tokens, 40));
  EXPECT_OK(bspa_seq_commit(f->seq, 40));
  EXPECT_OK(bspa_seq_create(&f->other, f->pool, NULL));
  EXPECT_OK(bspa_seq_append(f->other, f->tokens, 10));
}

typedef struct snapshot {
  struct bspa_pool_stats stats;
  struct bspa_seq_info info;
  int32_t pages[16];
  int64_t num_pages;
} snapshot;

static snapshot snap(const fixture *f) {
  snapshot s;
  memset(&s, 0, sizeof s);
  EXPECT_OK(bspa_pool_stats(f->pool, &s.stats));
  EXPECT_OK(bspa_seq_info(f->seq, &s.info));
  EXPECT_OK(bspa_seq_pages(f->seq, s.pages, 16, &s.num_pages));
  return s;
}

/* The call failed: nothing changed and the invariants hold. */
static void expect_unchanged(const fixture *f, const snapshot *before, const char *what) {
  snapshot after = snap(f);
  cr_assert(memcmp(before, &after, sizeof after) == 0, "%s changed the pool or the sequence", what);
  EXPECT_OK(bspa_pool_check(f->pool));
}

#define EXPECT_FAILS(f, call, status, needle)                                                                         \
  do {                                                                                                                \
    snapshot before_ = snap(f);                                                                                       \
    EXPECT_STATUS(call, status);                                                                                      \
    cr_assert(strstr(bspa_last_error(), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", #call, bspa_last_error(), \
              needle);                                                                                                \
    expect_unchanged(f, &before_, #call);                                                                             \
  } while (0)

Test(pool, seq_create_rejects_bad_arguments) {
  fixture f;
  setup(&f);
  bspa_seq *s = (bspa_seq *)(uintptr_t)0x1;
  EXPECT_FAILS(&f, bspa_seq_create(NULL, f.pool, NULL), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_create(&s, NULL, NULL), BSPA_ERR_NULL_POINTER, "pool");
  cr_assert_null(s);
  bspa_seq_options so;
  EXPECT_OK(bspa_seq_options_init(&so));
  so.version = 0;
  EXPECT_FAILS(&f, bspa_seq_create(&s, f.pool, &so), BSPA_ERR_VERSION, "version = 0");
  so.version = BSPA_SEQ_OPTIONS_VERSION + 1;
  EXPECT_FAILS(&f, bspa_seq_create(&s, f.pool, &so), BSPA_ERR_VERSION, "newer");
  so.version = BSPA_SEQ_OPTIONS_VERSION;
  so.salt = NULL;
  so.salt_len = 5;
  EXPECT_FAILS(&f, bspa_seq_create(&s, f.pool, &so), BSPA_ERR_INVALID_ARGUMENT, "salt_len = 5");
  cr_assert_null(s);
  bspa_pool_destroy(f.pool);
}

Test(pool, match_rejects_bad_arguments) {
  fixture f;
  setup(&f);
  bspa_seq *fresh = NULL;
  EXPECT_OK(bspa_seq_create(&fresh, f.pool, NULL));
  int64_t cached = 77;
  EXPECT_FAILS(&f, bspa_seq_match(NULL, f.tokens, 10, &cached), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_match(fresh, f.tokens, 10, NULL), BSPA_ERR_NULL_POINTER, "cached");
  EXPECT_FAILS(&f, bspa_seq_match(fresh, NULL, 10, &cached), BSPA_ERR_NULL_POINTER, "tokens");
  EXPECT_FAILS(&f, bspa_seq_match(fresh, f.tokens, -1, &cached), BSPA_ERR_INVALID_ARGUMENT, "n = -1");
  EXPECT_FAILS(&f, bspa_seq_match(f.seq, f.tokens, 40, &cached), BSPA_ERR_INVALID_STATE, "empty");
  cr_assert_eq(cached, 77, "a failed match wrote *cached");
  EXPECT_OK(bspa_seq_match(fresh, NULL, 0, &cached));
  cr_assert_eq(cached, 0);
  bspa_pool_destroy(f.pool);
}

Test(pool, append_and_commit_reject_bad_arguments) {
  fixture f;
  setup(&f);
  EXPECT_FAILS(&f, bspa_seq_append(NULL, f.tokens, 1), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_append(f.seq, NULL, 1), BSPA_ERR_NULL_POINTER, "tokens");
  EXPECT_FAILS(&f, bspa_seq_append(f.seq, f.tokens, -3), BSPA_ERR_INVALID_ARGUMENT, "n = -3");
  EXPECT_FAILS(&f, bspa_seq_append(f.seq, f.tokens, INT64_MAX), BSPA_ERR_INVALID_ARGUMENT, "n = ");
  EXPECT_FAILS(&f, bspa_seq_append(f.seq, f.tokens, 1000), BSPA_ERR_OUT_OF_PAGES, "pages");
  EXPECT_FAILS(&f, bspa_seq_commit(NULL, 1), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_commit(f.seq, 41), BSPA_ERR_INVALID_ARGUMENT, "computed = 41");
  EXPECT_FAILS(&f, bspa_seq_commit(f.seq, 39), BSPA_ERR_INVALID_ARGUMENT, "computed = 39");
  EXPECT_FAILS(&f, bspa_seq_commit(f.seq, -1), BSPA_ERR_INVALID_ARGUMENT, "computed = -1");
  EXPECT_OK(bspa_seq_append(f.seq, NULL, 0));
  EXPECT_OK(bspa_seq_commit(f.seq, 40));
  bspa_pool_destroy(f.pool);
}

Test(pool, pages_sizes_in_two_calls_and_rejects_bad_arguments) {
  fixture f;
  setup(&f);
  int64_t n = -1;
  EXPECT_OK(bspa_seq_pages(f.seq, NULL, 0, &n));
  cr_assert_eq(n, 3, "40 tokens in 16-token pages");
  int32_t pages[3] = {-7, -7, -7};
  EXPECT_OK(bspa_seq_pages(f.seq, pages, 3, &n));
  cr_assert(pages[0] >= 0 && pages[1] >= 0 && pages[2] >= 0 && pages[0] != pages[1] && pages[1] != pages[2]);
  int32_t small[2] = {-7, -7};
  n = -1;
  EXPECT_FAILS(&f, bspa_seq_pages(f.seq, small, 2, &n), BSPA_ERR_BUFFER_TOO_SMALL, "capacity = 2");
  cr_assert_eq(n, 3, "BUFFER_TOO_SMALL reports the count needed");
  cr_assert(small[0] == -7 && small[1] == -7, "pages untouched on BUFFER_TOO_SMALL");
  EXPECT_FAILS(&f, bspa_seq_pages(NULL, pages, 3, &n), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_pages(f.seq, pages, 3, NULL), BSPA_ERR_NULL_POINTER, "num_pages");
  EXPECT_FAILS(&f, bspa_seq_pages(f.seq, NULL, 3, &n), BSPA_ERR_NULL_POINTER, "pages");
  EXPECT_FAILS(&f, bspa_seq_pages(f.seq, pages, -1, &n), BSPA_ERR_INVALID_ARGUMENT, "capacity = -1");
  struct bspa_seq_info info;
  EXPECT_FAILS(&f, bspa_seq_info(NULL, &info), BSPA_ERR_NULL_POINTER, "seq");
  EXPECT_FAILS(&f, bspa_seq_info(f.seq, NULL), BSPA_ERR_NULL_POINTER, "info");
  EXPECT_OK(bspa_seq_info(f.other, &info));
  cr_assert(info.num_tokens == 10 && info.num_computed == 0 && info.num_cached == 0 && info.num_pages == 1);
  bspa_pool_destroy(f.pool);
}

Test(pool, destroying_a_pool_destroys_its_live_sequences) {
  fixture f;
  setup(&f);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(f.pool, &st));
  cr_assert(st.num_sequences == 2 && st.pages_in_use == 4);
  bspa_seq_destroy(f.other);
  EXPECT_OK(bspa_pool_stats(f.pool, &st));
  cr_assert(st.num_sequences == 1 && st.pages_in_use == 3 && st.pages_free == 13);
  EXPECT_OK(bspa_pool_check(f.pool));
  bspa_pool_destroy(f.pool); /* f.seq is still alive: freed with the pool (sanitizers check the leak) */
}
