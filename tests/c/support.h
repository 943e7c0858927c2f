/* Shared helpers of the Criterion tests: random data, poisoning, error checks. */
#ifndef BSPA_TEST_SUPPORT_H
#define BSPA_TEST_SUPPORT_H

#include <bspa/bspa.h>
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

/* Asserts a call's status and, for failures, that a message was recorded. */
#define EXPECT_STATUS(call, expected)                                                                       \
  do {                                                                                                      \
    bspa_status s_ = (call);                                                                                \
    cr_assert_eq(s_, (expected), "%s returned %s (%d), expected %s: %s", #call, bspa_status_string(s_), s_, \
                 bspa_status_string(expected), bspa_last_error());                                          \
    if ((expected) != BSPA_OK) cr_assert_neq(bspa_last_error()[0], '\0', "%s set no message", #call);       \
  } while (0)
#define EXPECT_OK(call) EXPECT_STATUS(call, BSPA_OK)

/* A small deterministic generator (splitmix64) so failures reproduce from the seed. */
typedef struct test_rng {
  uint64_t state;
} test_rng;
uint64_t test_rng_next(test_rng *r);
double test_rng_uniform(test_rng *r); /* [0, 1) */
double test_rng_normal(test_rng *r);  /* N(0, 1) */
/* A seed that differs per run unless BSPA_TEST_SEED is set; printed by the tests. */
uint64_t test_seed(void);

/* float <-> half / bfloat16 (round to nearest even), for building test inputs. */
uint16_t test_f32_to_f16(float f);
float test_f16_to_f32(uint16_t h);
uint16_t test_f32_to_bf16(float f);
float test_bf16_to_f32(uint16_t b);

/* FP8 e4m3fn, written independently of the library: a code's value (NaN for 0x7f / 0xff),
 * and the code nearest to x by search over all 256 (ties to the even code, |x| >= 448 and
 * inf saturated to +-448, NaN to 0x7f with x's sign, the sign of zero kept). */
double test_fp8_to_double(uint8_t code);
uint8_t test_fp8_nearest(float x);

/* A pool of those dimensions on device_type (kDLCPU or kDLCUDA), every other option its
 * default; the test fails unless it is created. */
bspa_pool *test_pool_create(int32_t device_type, bspa_dtype dtype, int32_t layers, int32_t num_kv_heads,
                            int32_t head_dim, int32_t page_size, int64_t num_pages);
/* A sequence of pool under salt (NULL: none) and extra_key; the test fails unless it is created. */
bspa_seq *test_seq_salted(bspa_pool *pool, const char *salt, uint64_t extra_key);

/* A host DLTensor over caller memory; shape copied into the struct's own storage.
 * BSPA_DTYPE_FP8_E4M3 gives dtype {BSPA_DL_FLOAT8_E4M3FN, 8, 1}. */
typedef struct test_tensor {
  DLTensor t;
  int64_t shape[4];
} test_tensor;
void test_tensor_init(test_tensor *tt, void *data, bspa_dtype dtype, int ndim, const int64_t *shape);

/* Tokens base, base + 1, ...: a prompt of its own for each base. */
static inline void test_fill_tokens(int32_t *t, int64_t n, int32_t base) {
  for (int64_t i = 0; i < n; ++i) t[i] = base + (int32_t)i;
}

/* bspa_kv_write / bspa_prefill on the default stream with their args structs filled here
 * from the arguments the tests vary (test_abi.c and test_bad_input.c test the structs
 * themselves: versions, init defaults, NULL args). Inline: test_collisions links a
 * library without the launches. */
static inline bspa_status test_kv_write(bspa_pool *pool, const bspa_batch *batch, int32_t layer, const DLTensor *k_new,
                                        const DLTensor *v_new) {
  bspa_kv_write_args a;
  bspa_status s = bspa_kv_write_args_init(&a);
  if (s != BSPA_OK) return s;
  a.layer = layer;
  a.k_new = k_new;
  a.v_new = v_new;
  return bspa_kv_write(pool, batch, &a, NULL);
}

static inline bspa_status test_prefill(bspa_pool *pool, const bspa_batch *batch, int32_t layer,
                                       const bspa_layout *layout, const DLTensor *q, DLTensor *out, float scale,
                                       DLTensor *lse) {
  bspa_prefill_args a;
  bspa_status s = bspa_prefill_args_init(&a);
  if (s != BSPA_OK) return s;
  a.layer = layer;
  a.layout = layout;
  a.q = q;
  a.out = out;
  a.lse = lse;
  a.scale = scale;
  return bspa_prefill(pool, batch, &a, NULL);
}

#endif
