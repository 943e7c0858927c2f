/* Inputs that made the library read or write outside its memory (issue 24: an outside
 * review with ASan/UBSan), one Test per case, in the seven classes the review found plus
 * a sequence destroyed under a live batch. Every case must return its error code with a
 * message naming the argument, change no state (pool statistics, sequence info, every KV
 * byte, the caller's outputs) and draw no sanitizer report. Run against the library
 * before the fix under scripts/sanitize.sh's build (-fno-sanitize-recover=all), 32 of
 * the 34 there were then failed (8 by crashing on an ASan or UBSan report); the two others are
 * pool_bytes_just_past_ptrdiff_max (a guard of the limit) and
 * q_in_the_pools_storage_is_allowed (what must keep working). Four cases a coverage audit
 * found untested (lse_on_q, lse_in_the_pools_storage, paged_q_rows_without_sequences,
 * paged_context_plus_rows_past_int32_max) each fail with their check taken out.
 *
 * Tensor memory comes from malloc with exactly the bytes the header defines, so one
 * element read past it is an ASan report. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* The fixture's pool is small; the ones the cases ask for must fail as allocations that
 * return NULL under ASan, not abort (ASAN_OPTIONS still overrides this). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

enum { T = 4, HKV = 2, HQ = 4, D = 8, PS = 16, PAGES = 4, LAYERS = 2 };
#define LAYER_ELEMS (PAGES * HKV * PS * D)

/* One pool with one sequence S (16 computed + T new tokens, pages 0 and 1) and its batch. */
static bspa_pool *P;
static bspa_seq *S;
static bspa_batch *B;
static bspa_layout *dense;
static float *kn, *vn, *q, *out, *lse, *kp, *vp; /* exact-size heap buffers */
static int32_t *bt, *qs, *cl;
static test_tensor tk, tv, tq, tout, tlse, tkp, tvp, tbt, tqs, tcl;
static bspa_paged_args pa;

static void *exact(size_t bytes) {
  void *p = malloc(bytes);
  cr_assert_not_null(p);
  return p;
}

static void f32_tensor(test_tensor *tt, float *data, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t shape[4] = {d0, d1, d2, d3};
  test_tensor_init(tt, data, BSPA_DTYPE_F32, ndim, shape);
}

static void i32_tensor(test_tensor *tt, int32_t *data, int64_t d0, int64_t d1, int ndim) {
  const int64_t shape[2] = {d0, d1};
  test_tensor_init(tt, data, BSPA_DTYPE_F32, ndim, shape);
  tt->t.dtype.code = kDLInt;
}

static void reset_tensors(void) {
  f32_tensor(&tk, kn, 3, T, HKV, D, 0);
  f32_tensor(&tv, vn, 3, T, HKV, D, 0);
  f32_tensor(&tq, q, 3, T, HQ, D, 0);
  f32_tensor(&tout, out, 3, T, HQ, D, 0);
  f32_tensor(&tlse, lse, 2, HQ, T, 0, 0);
  f32_tensor(&tkp, kp, 4, PAGES, HKV, PS, D);
  f32_tensor(&tvp, vp, 4, PAGES, HKV, PS, D);
  bt[0] = 2;
  bt[1] = 0;
  qs[0] = 0;
  qs[1] = T;
  cl[0] = PS;
  i32_tensor(&tbt, bt, 1, 2, 2);
  i32_tensor(&tqs, qs, 2, 0, 1);
  i32_tensor(&tcl, cl, 1, 0, 1);
  EXPECT_OK(bspa_paged_args_init(&pa));
  pa.q = &tq.t;
  pa.out = &tout.t;
  pa.lse = &tlse.t;
  pa.k_pages = &tkp.t;
  pa.v_pages = &tvp.t;
  pa.block_table = &tbt.t;
  pa.query_starts = &tqs.t;
  pa.context_lens = &tcl.t;
  pa.max_query_len = T;
  pa.layout = dense;
  pa.scale = 0.125f;
}

static void setup(void) {
  P = test_pool_create(kDLCPU, BSPA_DTYPE_F32, LAYERS, HKV, D, PS, PAGES);
  int32_t tokens[PS + T];
  for (int i = 0; i < PS + T; ++i) tokens[i] = 100 + i;
  EXPECT_OK(bspa_seq_create(&S, P, NULL));
  EXPECT_OK(bspa_seq_append(S, tokens, PS + T));
  EXPECT_OK(bspa_seq_commit(S, PS));
  const int32_t ql = T;
  EXPECT_OK(bspa_batch_create(&B, P, &S, &ql, 1, NULL));
  EXPECT_OK(bspa_layout_create_dense(&dense, HQ));
  kn = exact(sizeof(float) * T * HKV * D);
  vn = exact(sizeof(float) * T * HKV * D);
  q = exact(sizeof(float) * T * HQ * D);
  out = exact(sizeof(float) * T * HQ * D);
  lse = exact(sizeof(float) * HQ * T);
  kp = exact(sizeof(float) * LAYER_ELEMS);
  vp = exact(sizeof(float) * LAYER_ELEMS);
  bt = exact(sizeof(int32_t) * 2);
  qs = exact(sizeof(int32_t) * 2);
  cl = exact(sizeof(int32_t) * 1);
  for (int i = 0; i < T * HKV * D; ++i) kn[i] = vn[i] = (float)((i % 7) - 3) / 4.0f;
  for (int i = 0; i < T * HQ * D; ++i) q[i] = (float)((i % 5) - 2) / 4.0f;
  for (int i = 0; i < LAYER_ELEMS; ++i) kp[i] = vp[i] = (float)((i % 11) - 5) / 8.0f;
  reset_tensors();
  /* The valid calls succeed, so each case fails because of its one bad argument. */
  for (int layer = 0; layer < LAYERS; ++layer) EXPECT_OK(test_kv_write(P, B, layer, &tk.t, &tv.t));
  EXPECT_OK(test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
  EXPECT_OK(bspa_prefill_paged(&pa, NULL));
  for (int i = 0; i < T * HQ * D; ++i) out[i] = NAN; /* failed calls must leave this poison */
  for (int i = 0; i < HQ * T; ++i) lse[i] = NAN;
}

static void teardown(void) {
  bspa_batch_destroy(B);
  bspa_layout_destroy(dense);
  bspa_pool_destroy(P);
  free(kn), free(vn), free(q), free(out), free(lse), free(kp), free(vp), free(bt), free(qs), free(cl);
}

TestSuite(memory_safety, .init = setup, .fini = teardown);

/* ---- state before and after a failed call ------------------------------------------- */

typedef struct snapshot {
  struct bspa_pool_stats stats;
  struct bspa_seq_info info;
  float kv[LAYERS][2 * LAYER_ELEMS];
  float out[T * HQ * D], lse[HQ * T], kp[LAYER_ELEMS];
  int32_t bt[2], qs[2], cl[1];
} snapshot;
static snapshot before, after;

static void take(snapshot *s) {
  memset(s, 0, sizeof *s);
  cr_assert_eq(bspa_pool_stats(P, &s->stats), BSPA_OK);
  cr_assert_eq(bspa_seq_info(S, &s->info), BSPA_OK);
  for (int layer = 0; layer < LAYERS; ++layer) {
    DLTensor k, v;
    cr_assert_eq(bspa_pool_kv(P, layer, &k, &v), BSPA_OK);
    memcpy(s->kv[layer], k.data, sizeof(float) * LAYER_ELEMS);
    memcpy(s->kv[layer] + LAYER_ELEMS, v.data, sizeof(float) * LAYER_ELEMS);
  }
  memcpy(s->out, out, sizeof s->out);
  memcpy(s->lse, lse, sizeof s->lse);
  memcpy(s->kp, kp, sizeof s->kp);
  memcpy(s->bt, bt, sizeof s->bt);
  memcpy(s->qs, qs, sizeof s->qs);
  memcpy(s->cl, cl, sizeof s->cl);
}

/* NaN poison compares by bytes, so memcmp is the right test. */
static void expect_refused(const char *call, bspa_status got, bspa_status want, const char *needle) {
  const char *msg = bspa_last_error();
  cr_expect_eq(got, want, "%s returned %s, expected %s (%s)", call, bspa_status_string(got), bspa_status_string(want),
               msg);
  cr_expect(strstr(msg, needle) != NULL, "%s: message \"%s\" does not name \"%s\"", call, msg, needle);
  take(&after);
  cr_expect(memcmp(&before.stats, &after.stats, sizeof after.stats) == 0, "%s changed pool statistics", call);
  cr_expect(memcmp(&before.info, &after.info, sizeof after.info) == 0, "%s changed the sequence", call);
  cr_expect(memcmp(before.kv, after.kv, sizeof after.kv) == 0, "%s changed KV storage", call);
  cr_expect(
      memcmp(before.out, after.out, sizeof after.out) == 0 && memcmp(before.lse, after.lse, sizeof after.lse) == 0,
      "%s wrote into out or lse", call);
  cr_expect(memcmp(before.kp, after.kp, sizeof after.kp) == 0 && memcmp(before.bt, after.bt, sizeof after.bt) == 0 &&
                memcmp(before.qs, after.qs, sizeof after.qs) == 0 && memcmp(before.cl, after.cl, sizeof after.cl) == 0,
            "%s wrote into an input", call);
  cr_expect_eq(bspa_pool_check(P), BSPA_OK, "after %s: %s", call, bspa_last_error());
}

#define REFUSED(want, needle, call)                    \
  do {                                                 \
    take(&before);                                     \
    bspa_seq_options_init(NULL); /* a stale message */ \
    const bspa_status got_ = (call);                   \
    expect_refused(#call, got_, (want), (needle));     \
  } while (0)

/* ---- 1. pool sizes: checked factor by factor, no wrap ------------------------------- */

static bspa_pool_options huge_options(void) {
  bspa_pool_options o;
  bspa_pool_options_init(&o);
  o.dtype = BSPA_DTYPE_F32;
  o.num_layers = 2059719833;
  o.num_kv_heads = 1993418163;
  o.head_dim = 1929630342;
  o.page_size = 256;
  o.num_pages = 20971467; /* 2^128 + 2.7 GiB bytes: the 128-bit product wrapped to 2.7 GiB */
  return o;
}

Test(memory_safety, pool_bytes_wrapping_2_pow_128) {
  bspa_pool_options o = huge_options();
  bspa_pool *pool = (bspa_pool *)(uintptr_t)0x10;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "num_kv_heads", bspa_pool_create(&pool, &o));
  cr_expect_null(pool);
  if (pool && pool != (bspa_pool *)(uintptr_t)0x10) bspa_pool_destroy(pool);
}

Test(memory_safety, pool_bytes_per_page_past_ptrdiff_max_from_memory_bytes) {
  bspa_pool_options o = huge_options();
  o.num_pages = 0; /* derived from the budget: one page's bytes alone overflow */
  o.memory_bytes = UINT64_MAX;
  bspa_pool *pool = (bspa_pool *)(uintptr_t)0x10;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "head_dim", bspa_pool_create(&pool, &o));
  cr_expect_null(pool);
  if (pool && pool != (bspa_pool *)(uintptr_t)0x10) bspa_pool_destroy(pool);
}

Test(memory_safety, pool_bytes_just_past_ptrdiff_max) {
  /* 2^31 - 1 pages x 2^31 - 1 layers x 2 x 1 x 256 x 8 x 4 bytes, ~2^76: refused by the
   * limit itself, with the factors in the message (this one was refused before too; it
   * guards the limit, the case above the wrap). */
  bspa_pool_options o = huge_options();
  o.num_layers = INT32_MAX;
  o.num_kv_heads = 1;
  o.head_dim = 8;
  o.num_pages = INT32_MAX;
  bspa_pool *pool = (bspa_pool *)(uintptr_t)0x10;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "num_pages", bspa_pool_create(&pool, &o));
  cr_expect_null(pool);
  if (pool && pool != (bspa_pool *)(uintptr_t)0x10) bspa_pool_destroy(pool);
}

/* ---- 2. CSR layouts: crow validated completely before col is read -------------------- */

/* crow and col copied into exact heap arrays: col holds what crow's last value says. */
static bspa_status csr(int32_t heads, int32_t rows, const int32_t *crow, const int32_t *col, size_t col_n) {
  const size_t crow_n = (size_t)heads * (size_t)(rows + 1);
  int32_t *c = exact(sizeof(int32_t) * crow_n), *k = exact(sizeof(int32_t) * col_n); /* malloc(0): no entry */
  memcpy(c, crow, sizeof(int32_t) * crow_n);
  if (col_n) memcpy(k, col, sizeof(int32_t) * col_n);
  bspa_layout *l = (bspa_layout *)(uintptr_t)0x10;
  const bspa_status s = bspa_layout_create_csr(&l, heads, PS, rows, c, k);
  cr_expect(s == BSPA_OK || l == NULL, "a failed bspa_layout_create_csr left *layout non-NULL");
  if (s == BSPA_OK) bspa_layout_destroy(l);
  free(c);
  free(k);
  return s;
}

Test(memory_safety, csr_crow_decreasing_after_a_row) {
  const int32_t crow[3] = {0, 2, 1}, col[1] = {0}; /* col's length is crow's last value, 1 */
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "crow[0][2]", csr(1, 2, crow, col, 1));
}

Test(memory_safety, csr_crow_0_1_3_2) {
  const int32_t crow[4] = {0, 1, 3, 2}, col[2] = {0, 0};
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "crow[0][3]", csr(1, 3, crow, col, 2));
}

Test(memory_safety, csr_second_head_decreasing) {
  const int32_t crow[6] = {0, 1, 3, 3, 6, 4}, col[4] = {0, 0, 1, 0};
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "crow[1][2]", csr(2, 2, crow, col, 4));
}

Test(memory_safety, csr_crow_int32_max_then_0) {
  const int32_t crow[3] = {0, INT32_MAX, 0};
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "crow[0][2]", csr(1, 2, crow, NULL, 0));
}

/* ---- 3. strides bounded in bytes, not elements --------------------------------------- */

Test(memory_safety, q_token_stride_2_pow_61_f32) {
  int64_t strides[3] = {INT64_C(1) << 61, D, 1}; /* 3 * 2^61 elements: fits int64, not in bytes */
  tq.t.strides = strides;
  tq.shape[0] = T;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "q.strides", test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, k_pages_page_stride_2_pow_62_minus_4) {
  /* Two pages 2^62 - 4 elements apart: x 4 bytes wraps to -16, a read before the buffer. */
  int64_t strides[4] = {(INT64_C(1) << 62) - 4, PS * D, D, 1};
  tkp.t.strides = strides;
  tkp.shape[0] = 2;
  tvp.shape[0] = 2;
  bt[0] = 1;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "k_pages.strides", bspa_prefill_paged(&pa, NULL));
}

Test(memory_safety, k_new_head_stride_2_pow_62) {
  int64_t strides[3] = {HKV * D, INT64_C(1) << 62, 1};
  tk.t.strides = strides;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "k_new.strides", test_kv_write(P, B, 0, &tk.t, &tv.t));
}

Test(memory_safety, lse_stride_past_ptrdiff_max) {
  int64_t strides[2] = {INT64_MAX / 4, 1}; /* (HQ - 1) * that fits int64; x 4 bytes does not */
  tlse.t.strides = strides;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "lse.strides", test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, byte_offset_past_ptrdiff_max) {
  tq.t.byte_offset = UINT64_C(1) << 63;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "q.byte_offset", bspa_prefill_paged(&pa, NULL));
}

/* ---- 4. element addresses aligned to the element size -------------------------------- */

/* f16 tensors for prefill_paged, built over bytes of one exact allocation each. */
static uint16_t *h_q, *h_out, *h_kp, *h_vp;
static void f16_paged(void) {
  const size_t qn = (size_t)T * HQ * D, kvn = (size_t)LAYER_ELEMS;
  h_q = exact(2 * qn + 2);
  h_out = exact(2 * qn + 2);
  h_kp = exact(2 * kvn);
  h_vp = exact(2 * kvn);
  for (size_t i = 0; i < qn + 1; ++i) h_q[i] = h_out[i] = test_f32_to_f16(0.25f);
  for (size_t i = 0; i < kvn; ++i) h_kp[i] = h_vp[i] = test_f32_to_f16(-0.5f);
  const int64_t qshape[3] = {T, HQ, D}, kshape[4] = {PAGES, HKV, PS, D};
  test_tensor_init(&tq, h_q, BSPA_DTYPE_F16, 3, qshape);
  test_tensor_init(&tout, h_out, BSPA_DTYPE_F16, 3, qshape);
  test_tensor_init(&tkp, h_kp, BSPA_DTYPE_F16, 4, kshape);
  test_tensor_init(&tvp, h_vp, BSPA_DTYPE_F16, 4, kshape);
  EXPECT_OK(bspa_prefill_paged(&pa, NULL)); /* valid as it stands */
}
static void f16_free(void) { free(h_q), free(h_out), free(h_kp), free(h_vp); }

Test(memory_safety, f16_q_at_an_odd_byte_offset) {
  f16_paged();
  tq.t.byte_offset = 1;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "q.data", bspa_prefill_paged(&pa, NULL));
  f16_free();
}

Test(memory_safety, f16_out_at_an_odd_byte_offset) {
  f16_paged();
  tout.t.byte_offset = 1;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "out.data", bspa_prefill_paged(&pa, NULL));
  f16_free();
}

Test(memory_safety, lse_at_byte_offset_2) {
  float *l = exact(sizeof(float) * HQ * T + 4);
  tlse.t.data = l;
  tlse.t.byte_offset = 2;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "lse.data", bspa_prefill_paged(&pa, NULL));
  free(l);
}

Test(memory_safety, k_new_at_byte_offset_2) {
  float *k = exact(sizeof(float) * T * HKV * D + 4);
  memcpy((char *)k + 2, kn, sizeof(float) * T * HKV * D);
  tk.t.data = k;
  tk.t.byte_offset = 2;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "k_new.data", test_kv_write(P, B, 0, &tk.t, &tv.t));
  free(k);
}

Test(memory_safety, block_table_at_byte_offset_2) {
  int32_t *b = exact(sizeof(int32_t) * 2 + 4);
  memcpy((char *)b + 2, bt, sizeof(int32_t) * 2);
  tbt.t.data = b;
  tbt.t.byte_offset = 2;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "block_table.data", bspa_prefill_paged(&pa, NULL));
  free(b);
}

/* ---- 5. kv_write sources inside the pool's own storage -------------------------------- */

/* The element offset in layer `layer`'s K where S's first new token (position PS) goes. */
static float *destination(int32_t layer) {
  DLTensor k;
  EXPECT_OK(bspa_pool_kv(P, layer, &k, NULL));
  int32_t pages[2];
  int64_t n = 0;
  EXPECT_OK(bspa_seq_pages(S, pages, 2, &n));
  return (float *)k.data + (int64_t)pages[1] * HKV * PS * D;
}

Test(memory_safety, k_new_one_element_after_its_destination) {
  tk.t.data = destination(0) + 1; /* memcpy with overlapping source and destination */
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "pool's KV storage", test_kv_write(P, B, 0, &tk.t, &tv.t));
}

Test(memory_safety, k_new_exactly_its_destination) {
  tk.t.data = destination(0);
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "k_new", test_kv_write(P, B, 0, &tk.t, &tv.t));
}

Test(memory_safety, v_new_in_another_layer_of_the_pool) {
  tv.t.data = destination(1);
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "v_new", test_kv_write(P, B, 0, &tk.t, &tv.t));
}

/* ---- 6. the two "+ 1" overflows -------------------------------------------------------- */

Test(memory_safety, batch_of_int32_max_sequences) {
  /* Refused by the pool's one live sequence before anything of size n is allocated (it
   * zero-filled 8 GB, then n + 1 overflowed); only seqs[0] and query_lens[0] exist. */
  bspa_batch *b = (bspa_batch *)(uintptr_t)0x10;
  const int32_t ql = T;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "n = 2147483647", bspa_batch_create(&b, P, &S, &ql, INT32_MAX, NULL));
  cr_expect_null(b);
}

Test(memory_safety, batch_of_more_sequences_than_the_pool_has) {
  bspa_seq *two[2] = {S, S};
  const int32_t ql[2] = {T, T};
  bspa_batch *b = (bspa_batch *)(uintptr_t)0x10;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "live sequences", bspa_batch_create(&b, P, two, ql, 2, NULL));
  cr_expect_null(b);
}

Test(memory_safety, block_table_of_int64_max_rows) {
  tbt.shape[0] = INT64_MAX; /* num_seqs + 1 wrapped to the "any dimension" marker */
  tbt.shape[1] = 0;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "block_table.shape[0]", bspa_prefill_paged(&pa, NULL));
}

/* ---- 7. outputs whose elements overlap, or overlap an input ---------------------------- */

Test(memory_safety, out_rows_all_the_same_memory) {
  int64_t strides[3] = {0, 0, 1};
  tout.t.strides = strides;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "out.strides", test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, out_heads_overlapping) {
  int64_t strides[3] = {HQ * D, D / 2, 1};
  tout.t.strides = strides;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "out.strides", bspa_prefill_paged(&pa, NULL));
}

Test(memory_safety, lse_rows_all_the_same_memory) {
  int64_t strides[2] = {0, 1};
  tlse.t.strides = strides;
  REFUSED(BSPA_ERR_SHAPE_MISMATCH, "lse.strides", test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, out_on_q) {
  tout.t.data = q;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "out", test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, lse_inside_out) {
  tlse.t.data = out + D;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "lse", bspa_prefill_paged(&pa, NULL));
}

Test(memory_safety, out_in_the_pools_storage) {
  DLTensor k;
  EXPECT_OK(bspa_pool_kv(P, 1, &k, NULL));
  tout.t.data = k.data; /* layer 1's K: prefill of layer 0 reads only layer 0, still refused */
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "pool's KV storage",
          test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, lse_on_q) {
  tlse.t.data = q; /* lse would overwrite q rows before the last head reads them */
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "which overlap q at",
          test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, lse_in_the_pools_storage) {
  DLTensor v;
  EXPECT_OK(bspa_pool_kv(P, 0, NULL, &v));
  tlse.t.data = (float *)v.data + LAYER_ELEMS - HQ * T; /* the last elements of layer 0's V */
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "pool's KV storage",
          test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
}

Test(memory_safety, paged_q_rows_without_sequences) {
  /* No sequence owns the rows: a CUDA launch would leave out unwritten and report success. */
  tbt.shape[0] = 0;
  tcl.shape[0] = 0;
  tqs.shape[0] = 1;
  REFUSED(BSPA_ERR_OUT_OF_RANGE, "block_table has no sequences but q has 4 rows", bspa_prefill_paged(&pa, NULL));
}

Test(memory_safety, paged_context_plus_rows_past_int32_max) {
  /* Positions are int32 in the backends. Pages of 2^16 tokens let a block table of 32769
   * columns (every entry page 0) reach the INT32_MAX check itself, past the page-count one. */
  enum { BIG_PS = 1 << 16, COLS = 32769 };
  float *k1 = exact(sizeof(float) * HKV * BIG_PS * D), *v1 = exact(sizeof(float) * HKV * BIG_PS * D);
  int32_t *table = calloc(COLS, sizeof(int32_t));
  cr_assert_not_null(table);
  f32_tensor(&tkp, k1, 4, 1, HKV, BIG_PS, D);
  f32_tensor(&tvp, v1, 4, 1, HKV, BIG_PS, D);
  i32_tensor(&tbt, table, 1, COLS, 2);
  cl[0] = INT32_MAX - 1; /* + T = 4 rows: INT32_MAX + 3 tokens, 32769 pages */
  REFUSED(BSPA_ERR_OUT_OF_RANGE, "tokens exceed INT32_MAX", bspa_prefill_paged(&pa, NULL));
  free(k1), free(v1), free(table);
}

Test(memory_safety, paged_out_on_k_pages) {
  tout.t.data = kp + LAYER_ELEMS / 2;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "k_pages", bspa_prefill_paged(&pa, NULL));
}

Test(memory_safety, paged_lse_on_block_table) {
  /* The CPU backend would read page ids it had already overwritten with lse values. */
  float *l = exact(sizeof(float) * HQ * T);
  memcpy(l, bt, sizeof(int32_t) * 2);
  tbt.t.data = l;
  tlse.t.data = l;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "block_table", bspa_prefill_paged(&pa, NULL));
  free(l);
}

Test(memory_safety, paged_workspace_on_out) {
  char *raw = exact(sizeof(float) * T * HQ * D + 16);
  float *o = (float *)(raw + (16 - (uintptr_t)raw % 16) % 16); /* the workspace must be 16-byte aligned */
  memcpy(o, out, sizeof(float) * T * HQ * D);
  tout.t.data = o;
  int64_t ws_shape[1] = {64};
  DLTensor ws = {o, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, ws_shape, NULL, 0};
  pa.workspace = &ws;
  REFUSED(BSPA_ERR_INVALID_ARGUMENT, "workspace", bspa_prefill_paged(&pa, NULL));
  free(raw);
}

Test(memory_safety, q_in_the_pools_storage_is_allowed) {
  /* Both read: no overlap rule applies (and layer 0's K has room for q). */
  DLTensor k;
  EXPECT_OK(bspa_pool_kv(P, 0, &k, NULL));
  tq.t.data = k.data;
  EXPECT_OK(test_prefill(P, B, 0, dense, &tq.t, &tout.t, 0.125f, &tlse.t));
  for (int i = 0; i < T * HQ * D; ++i) cr_expect(isfinite(out[i]), "out[%d] = %f", i, out[i]);
}

/* ---- a batch outlives its sequence --------------------------------------------------- */

Test(memory_safety, sequence_destroyed_under_a_live_batch) {
  /* A's batch keeps A's pages: after bspa_seq_destroy(A) they are not handed to C, so a
   * write through the batch cannot overwrite C's KV (it did: the freed pages were reused). */
  bspa_seq *A = NULL, *C = NULL;
  int32_t tokens[2 * PS];
  for (int i = 0; i < 2 * PS; ++i) tokens[i] = 7000 + i;
  EXPECT_OK(bspa_seq_create(&A, P, NULL));
  EXPECT_OK(bspa_seq_append(A, tokens, T)); /* one page */
  const int32_t ql = T;
  bspa_batch *b = NULL;
  EXPECT_OK(bspa_batch_create(&b, P, &A, &ql, 1, NULL));
  int32_t a_page = -1;
  int64_t n = 0;
  EXPECT_OK(bspa_seq_pages(A, &a_page, 1, &n));
  struct bspa_pool_stats st0, st1;
  EXPECT_OK(bspa_pool_stats(P, &st0));
  bspa_seq_destroy(A);
  EXPECT_OK(bspa_pool_stats(P, &st1));
  cr_expect_eq(st1.pages_in_use, st0.pages_in_use, "the batch's page left use with its sequence");
  EXPECT_OK(bspa_pool_check(P));

  /* C takes the one free page left (pages 0, 1: S; 2: A's, held; 3: free). */
  EXPECT_OK(bspa_seq_create(&C, P, NULL));
  EXPECT_OK(bspa_seq_append(C, tokens + PS, T));
  int32_t c_page = -1;
  EXPECT_OK(bspa_seq_pages(C, &c_page, 1, &n));
  cr_expect_neq(c_page, a_page, "page %d of the destroyed sequence was reused while its batch lives", a_page);
  EXPECT_STATUS(bspa_seq_append(C, tokens, PS), BSPA_ERR_OUT_OF_PAGES); /* and A's page is not evictable */

  DLTensor k;
  EXPECT_OK(bspa_pool_kv(P, 0, &k, NULL));
  float *c_kv = (float *)k.data + (int64_t)c_page * HKV * PS * D;
  float saved[HKV * PS * D];
  memcpy(saved, c_kv, sizeof saved);
  EXPECT_OK(test_kv_write(P, b, 0, &tk.t, &tv.t));
  cr_expect(memcmp(saved, c_kv, sizeof saved) == 0, "a write through the stale batch changed C's KV");
  EXPECT_OK(bspa_pool_check(P));

  bspa_batch_destroy(b); /* now A's page goes back */
  struct bspa_pool_stats st2;
  EXPECT_OK(bspa_pool_stats(P, &st2));
  cr_expect_eq(st2.pages_free, 1, "the batch's destroy did not free the page (free %lld)", (long long)st2.pages_free);
  EXPECT_OK(bspa_pool_check(P));
  bspa_seq_destroy(C);
}
