/* The ABI skeleton: versions, status strings, last error, options versions, symbol
 * hygiene and loading through dlopen. */
#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

Test(abi, version_macros_equal_runtime_values) {
  cr_assert_eq(bspa_version_number(), BSPA_VERSION_NUMBER);
  cr_assert_str_eq(bspa_version_string(), BSPA_VERSION_STRING);
  cr_assert_eq(bspa_abi_version(), BSPA_ABI_VERSION);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", BSPA_VERSION_MAJOR, BSPA_VERSION_MINOR, BSPA_VERSION_PATCH);
  cr_assert_str_eq(bspa_version_string(), expected);
}

Test(abi, build_info_names_backends_dtypes_and_head_dims) {
  const char *info = bspa_build_info();
  cr_assert_not_null(info);
  cr_assert(strstr(info, "backends: cpu") != NULL, "%s", info);
  cr_assert(strstr(info, "dtypes:") != NULL, "%s", info);
  cr_assert(strstr(info, "head_dims:") != NULL, "%s", info);
  cr_assert(strstr(info, "cuda_archs:") != NULL, "%s", info);
}

Test(abi, every_status_code_has_a_distinct_string) {
  const bspa_status codes[] = {BSPA_OK,
                               BSPA_ERR_INVALID_ARGUMENT,
                               BSPA_ERR_NULL_POINTER,
                               BSPA_ERR_OUT_OF_RANGE,
                               BSPA_ERR_SHAPE_MISMATCH,
                               BSPA_ERR_DTYPE_MISMATCH,
                               BSPA_ERR_DEVICE_MISMATCH,
                               BSPA_ERR_BUFFER_TOO_SMALL,
                               BSPA_ERR_INVALID_STATE,
                               BSPA_ERR_NOT_SUPPORTED,
                               BSPA_ERR_NO_DEVICE,
                               BSPA_ERR_OUT_OF_PAGES,
                               BSPA_ERR_OUT_OF_MEMORY,
                               BSPA_ERR_CUDA,
                               BSPA_ERR_VERSION,
                               BSPA_ERR_INTERNAL};
  const size_t n = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < n; ++i) {
    const char *s = bspa_status_string(codes[i]);
    cr_assert_not_null(s);
    cr_assert(strncmp(s, "BSPA_", 5) == 0, "status %d: %s", codes[i], s);
    cr_assert_str_neq(s, "BSPA_UNKNOWN_STATUS", "status %d has no string", codes[i]);
    for (size_t j = 0; j < i; ++j) cr_assert_str_neq(s, bspa_status_string(codes[j]));
  }
  cr_assert_str_eq(bspa_status_string(12345), "BSPA_UNKNOWN_STATUS");
  cr_assert_str_eq(bspa_status_string(-1), "BSPA_UNKNOWN_STATUS");
  cr_assert_eq(BSPA_STATUS_CATEGORY(BSPA_ERR_OUT_OF_PAGES), 3);
  cr_assert_eq(BSPA_STATUS_CATEGORY(BSPA_ERR_SHAPE_MISMATCH), 1);
}

static void *fresh_thread_last_error(void *arg) {
  (void)arg;
  return (void *)bspa_last_error();
}

static void *failing_thread(void *arg) {
  (void)arg;
  int32_t count = 0;
  bspa_status s = bspa_device_count(77, &count);
  return (void *)(intptr_t)(s == BSPA_ERR_NOT_SUPPORTED && strstr(bspa_last_error(), "77") != NULL);
}

Test(abi, last_error_is_never_null_and_per_thread) {
  pthread_t t;
  void *result = NULL;
  cr_assert_eq(pthread_create(&t, NULL, fresh_thread_last_error, NULL), 0);
  pthread_join(t, &result);
  cr_assert_not_null(result);
  cr_assert_str_eq((const char *)result, "");

  /* A failure on another thread leaves this thread's message alone. */
  EXPECT_STATUS(bspa_device_count(kDLCPU, NULL), BSPA_ERR_NULL_POINTER);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", bspa_last_error());
  cr_assert(strstr(mine, "count") != NULL, "message does not name the argument: %s", mine);
  cr_assert_eq(pthread_create(&t, NULL, failing_thread, NULL), 0);
  pthread_join(t, &result);
  cr_assert_eq((intptr_t)result, 1, "the other thread did not see its own error");
  cr_assert_str_eq(bspa_last_error(), mine);
}

Test(abi, device_count) {
  int32_t n = -1;
  EXPECT_OK(bspa_device_count(kDLCPU, &n));
  cr_assert_eq(n, 1);
  n = -1;
  EXPECT_OK(bspa_device_count(kDLCUDA, &n)); /* no driver means zero, not an error */
  cr_assert_geq(n, 0);
  EXPECT_STATUS(bspa_device_count(kDLOpenCL, &n), BSPA_ERR_NOT_SUPPORTED);
}

Test(abi, options_structs_reject_version_zero_and_unknown_versions) {
  bspa_pool_options po;
  EXPECT_OK(bspa_pool_options_init(&po));
  cr_assert_eq(po.version, BSPA_POOL_OPTIONS_VERSION);
  bspa_pool *pool = (bspa_pool *)0x1;
  po.num_layers = 0;
  po.num_pages = 4;
  po.version = 0;
  EXPECT_STATUS(bspa_pool_create(&pool, &po), BSPA_ERR_VERSION);
  cr_assert_null(pool);
  po.version = BSPA_POOL_OPTIONS_VERSION + 1;
  EXPECT_STATUS(bspa_pool_create(&pool, &po), BSPA_ERR_VERSION);
  cr_assert_null(pool);
  po.version = BSPA_POOL_OPTIONS_VERSION;
  EXPECT_OK(bspa_pool_create(&pool, &po));

  bspa_seq_options so;
  EXPECT_OK(bspa_seq_options_init(&so));
  cr_assert_eq(so.version, BSPA_SEQ_OPTIONS_VERSION);
  bspa_seq *seq = (bspa_seq *)0x1;
  so.version = 0;
  EXPECT_STATUS(bspa_seq_create(&seq, pool, &so), BSPA_ERR_VERSION);
  cr_assert_null(seq);
  so.version = BSPA_SEQ_OPTIONS_VERSION + 7;
  EXPECT_STATUS(bspa_seq_create(&seq, pool, &so), BSPA_ERR_VERSION);
  cr_assert_null(seq);

  bspa_layout_strided_options lo;
  EXPECT_OK(bspa_layout_strided_options_init(&lo));
  cr_assert_eq(lo.version, BSPA_LAYOUT_STRIDED_OPTIONS_VERSION);
  bspa_layout *layout = (bspa_layout *)0x1;
  lo.version = 0;
  EXPECT_STATUS(bspa_layout_create_strided(&layout, &lo), BSPA_ERR_VERSION);
  cr_assert_null(layout);
  lo.version = 99;
  EXPECT_STATUS(bspa_layout_create_strided(&layout, &lo), BSPA_ERR_VERSION);
  cr_assert_null(layout);

  bspa_paged_args pa;
  memset(&pa, 0x5a, sizeof pa);
  EXPECT_OK(bspa_paged_args_init(&pa));
  cr_assert_eq(pa.version, BSPA_PAGED_ARGS_VERSION);
  cr_assert_eq(pa.max_query_len, 0);
  cr_assert_eq(pa.scale, 1.0f);
  cr_assert_null(pa.workspace);
  cr_assert_null(pa.k_scale);
  cr_assert_null(pa.v_scale);
  cr_assert_eq(pa.max_decode_query_len, 0);
  pa.version = 0;
  EXPECT_STATUS(bspa_prefill_paged(&pa, NULL), BSPA_ERR_VERSION);

  /* The launch args structs: init fills the defaults the header documents; a version the
   * library does not know is refused before any other argument is looked at. */
  bspa_kv_write_args ka;
  memset(&ka, 0x5a, sizeof ka);
  EXPECT_OK(bspa_kv_write_args_init(&ka));
  cr_assert_eq(ka.version, BSPA_KV_WRITE_ARGS_VERSION);
  cr_assert_eq(ka.layer, 0);
  cr_assert_null(ka.k_new);
  cr_assert_null(ka.v_new);
  ka.version = 0;
  EXPECT_STATUS(bspa_kv_write(pool, NULL, &ka, NULL), BSPA_ERR_VERSION);
  ka.version = BSPA_KV_WRITE_ARGS_VERSION + 1;
  EXPECT_STATUS(bspa_kv_write(pool, NULL, &ka, NULL), BSPA_ERR_VERSION);
  EXPECT_STATUS(bspa_kv_write(pool, NULL, NULL, NULL), BSPA_ERR_NULL_POINTER);
  cr_assert(strstr(bspa_last_error(), "args") != NULL, "%s", bspa_last_error());

  bspa_prefill_args fa;
  memset(&fa, 0x5a, sizeof fa);
  EXPECT_OK(bspa_prefill_args_init(&fa));
  cr_assert_eq(fa.version, BSPA_PREFILL_ARGS_VERSION);
  cr_assert_eq(fa.layer, 0);
  cr_assert_null(fa.layout);
  cr_assert_null(fa.q);
  cr_assert_null(fa.out);
  cr_assert_null(fa.lse);
  cr_assert_eq(fa.scale, 1.0f);
  fa.version = 0;
  EXPECT_STATUS(bspa_prefill(pool, NULL, &fa, NULL), BSPA_ERR_VERSION);
  fa.version = BSPA_PREFILL_ARGS_VERSION + 1;
  EXPECT_STATUS(bspa_prefill(pool, NULL, &fa, NULL), BSPA_ERR_VERSION);
  EXPECT_STATUS(bspa_prefill(pool, NULL, NULL, NULL), BSPA_ERR_NULL_POINTER);
  cr_assert(strstr(bspa_last_error(), "args") != NULL, "%s", bspa_last_error());

  EXPECT_STATUS(bspa_pool_options_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_seq_options_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_layout_strided_options_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_paged_args_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_kv_write_args_init(NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_prefill_args_init(NULL), BSPA_ERR_NULL_POINTER);
  bspa_pool_destroy(pool);
}

/* Fields added since ABI 3 took padding: the structs keep their ABI 3 sizes and offsets, so
 * a binary built against an older header that calls this library's _init (which writes the
 * whole struct it knows) is not written past its end. A struct that must grow past its size
 * needs an ABI bump instead. LP64 targets (the ones CUDA and the bindings support). */
Test(abi, launch_structs_keep_their_abi3_layout) {
#if UINTPTR_MAX == UINT64_MAX
  cr_expect_eq(sizeof(bspa_paged_args), 120);
  cr_expect_eq(offsetof(bspa_paged_args, max_query_len), 72);
  cr_expect_eq(offsetof(bspa_paged_args, max_decode_query_len), 76); /* version 4 */
  cr_expect_eq(offsetof(bspa_paged_args, layout), 80);
  cr_expect_eq(offsetof(bspa_paged_args, v_scale), 112);
  cr_expect_eq(sizeof(bspa_batch_options), 40);
  cr_expect_eq(offsetof(bspa_batch_options, fixed_launch_shape), 32);
  cr_expect_eq(offsetof(bspa_batch_options, max_decode_query_len), 36); /* version 2 */
#else
  cr_skip_test("the layout is pinned for LP64 targets");
#endif
}

Test(abi, destroy_functions_accept_null) {
  bspa_pool_destroy(NULL);
  bspa_seq_destroy(NULL);
  bspa_layout_destroy(NULL);
  bspa_batch_destroy(NULL);
}

/* Every function the header declares, read from the header itself so a new function
 * cannot be forgotten here. */
static size_t public_function_names(char names[][64], size_t cap) {
  FILE *f = fopen(BSPA_HEADER_PATH, "r");
  cr_assert_not_null(f, "cannot open %s", BSPA_HEADER_PATH);
  char line[512];
  size_t n = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "BSPA_API ", 9) != 0) continue;
    char *paren = strchr(line, '(');
    cr_assert_not_null(paren, "unexpected declaration: %s", line);
    char *end = paren;
    char *begin = end;
    while (begin > line &&
           (begin[-1] == '_' || (begin[-1] >= 'a' && begin[-1] <= 'z') || (begin[-1] >= '0' && begin[-1] <= '9')))
      --begin;
    cr_assert_lt(n, cap);
    snprintf(names[n], 64, "%.*s", (int)(end - begin), begin);
    cr_assert(strncmp(names[n], "bspa_", 5) == 0, "declared function without bspa_ prefix: %s", names[n]);
    ++n;
  }
  fclose(f);
  return n;
}

Test(abi, dlopen_resolves_every_public_function) {
  void *lib = dlopen(BSPA_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(lib, "dlopen(%s): %s", BSPA_LIBRARY_PATH, dlerror());
  static char names[128][64];
  size_t n = public_function_names(names, 128);
  cr_assert_gt(n, 30, "only %zu functions found in the header", n);
  for (size_t i = 0; i < n; ++i) cr_assert_not_null(dlsym(lib, names[i]), "dlsym(%s): %s", names[i], dlerror());

  uint32_t (*version_number)(void) = (uint32_t(*)(void))dlsym(lib, "bspa_version_number");
  const char *(*version_string)(void) = (const char *(*)(void))dlsym(lib, "bspa_version_string");
  uint32_t (*abi_version)(void) = (uint32_t(*)(void))dlsym(lib, "bspa_abi_version");
  cr_assert_eq(version_number(), BSPA_VERSION_NUMBER);
  cr_assert_str_eq(version_string(), BSPA_VERSION_STRING);
  cr_assert_eq(abi_version(), BSPA_ABI_VERSION);
  dlclose(lib);
}

Test(abi, exported_symbols_are_only_bspa_functions) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s'", BSPA_LIBRARY_PATH);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char line[1024];
  int exported = 0;
  while (fgets(line, sizeof line, p)) {
    char addr[64], type[8], name[900];
    if (sscanf(line, "%63s %7s %899s", addr, type, name) != 3) continue;
    /* Version-script nodes (e.g. "A BSPA_1") are not symbols of ours. */
    if (strcmp(type, "A") == 0) continue;
    cr_assert(strncmp(name, "bspa_", 5) == 0, "exported symbol without bspa_ prefix: %s", name);
    ++exported;
  }
  cr_assert_eq(pclose(p), 0, "nm failed");
  cr_assert_gt(exported, 30);
}
