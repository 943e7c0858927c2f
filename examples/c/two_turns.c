/* A two-turn conversation through bspa's C ABI on the CPU backend, once with f32 and once
 * with bf16 storage: the second turn's prompt starts with the first turn's, finds its full
 * pages in the prefix cache and computes only the new tokens. The example then checks the
 * identity the library promises (docs/design.md §2): the second turn's output equals the
 * last rows of a prefill of the whole prompt in a pool with nothing cached.
 *
 *   cc two_turns.c $(pkg-config --cflags --libs bspa) -lm -o two_turns && ./two_turns
 *
 * Every call's status is checked; on failure bspa_last_error() names the argument and the
 * value. Exit status 0 when both dtypes pass, 1 otherwise. */
#include <bspa/bspa.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 64, PAGE = 16 };

/* Prints the failed call and the library's message, then jumps to the function's cleanup. */
#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    bspa_status status_ = (call);                                                                      \
    if (status_ != BSPA_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, bspa_status_string(status_), \
              bspa_last_error());                                                                      \
      goto fail;                                                                                       \
    }                                                                                                  \
  } while (0)

/* bf16 is the upper half of an f32, rounded to nearest even. */
static uint16_t to_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if (isnan(x)) return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* A host tensor: the numbers as f32 plus the bytes the library reads (f32 or bf16). The
 * DLTensor borrows `bytes` and `shape`; strides NULL means compact row-major. */
typedef struct {
  DLTensor t;
  int64_t shape[3];
  float *values;
  void *bytes;
  int64_t count;
} host_tensor;

static void host_tensor_free(host_tensor *h) {
  free(h->values);
  free(h->bytes);
}

static int host_tensor_init(host_tensor *h, bspa_dtype dtype, int64_t rows, int64_t heads) {
  host_tensor_free(h); /* an output reused across turns */
  memset(h, 0, sizeof *h);
  h->shape[0] = rows;
  h->shape[1] = heads;
  h->shape[2] = D;
  h->count = rows * heads * D;
  const size_t item = dtype == BSPA_DTYPE_F32 ? 4 : 2;
  h->values = calloc((size_t)h->count, sizeof(float));
  h->bytes = calloc((size_t)h->count, item);
  if (!h->values || !h->bytes) return 0;
  h->t.data = h->bytes;
  h->t.device.device_type = kDLCPU;
  h->t.device.device_id = 0;
  h->t.ndim = 3;
  /* f32: kDLFloat, 32 bits; bf16: kDLBfloat, 16 bits (f16 would be kDLFloat, 16 bits). */
  h->t.dtype.code = dtype == BSPA_DTYPE_F32 ? kDLFloat : kDLBfloat;
  h->t.dtype.bits = (uint8_t)(item * 8);
  h->t.dtype.lanes = 1;
  h->t.shape = h->shape;
  h->t.strides = NULL;
  h->t.byte_offset = 0;
  return 1;
}

/* values -> bytes (before a call) and bytes -> values (after one). */
static void store(host_tensor *h) {
  for (int64_t i = 0; i < h->count; ++i) {
    if (h->t.dtype.code == kDLFloat)
      ((float *)h->bytes)[i] = h->values[i];
    else
      ((uint16_t *)h->bytes)[i] = to_bf16(h->values[i]);
  }
}

static void load(host_tensor *h) {
  for (int64_t i = 0; i < h->count; ++i)
    h->values[i] = h->t.dtype.code == kDLFloat ? ((float *)h->bytes)[i] : from_bf16(((uint16_t *)h->bytes)[i]);
}

/* Stand-in for a model's projections: a fixed function of (position, head, dim), so the
 * shared prefix has the same K and V in both turns. */
static void fill(host_tensor *h, int64_t first_position, float salt) {
  const int64_t heads = h->shape[1];
  for (int64_t r = 0; r < h->shape[0]; ++r)
    for (int64_t i = 0; i < heads * D; ++i)
      h->values[r * heads * D + i] = sinf(0.618f * (float)((first_position + r) * heads * D + i) + salt);
  store(h);
}

/* One turn: match the cached prefix, append the rest, write K/V, prefill, commit. `out`
 * receives the new tokens' rows; *cached the tokens served from the cache. */
static int turn(bspa_pool *pool, const bspa_layout *layout, bspa_dtype dtype, const int32_t *prompt, int64_t n,
                host_tensor *out, int64_t *cached) {
  bspa_seq *seq = NULL;
  bspa_batch *batch = NULL;
  host_tensor q = {0}, k = {0}, v = {0};
  int ok = 0;
  CHECK(bspa_seq_create(&seq, pool, NULL));                   /* NULL options: no salt, no extra key */
  CHECK(bspa_seq_match(seq, prompt, n, cached));              /* a miss is *cached = 0, not an error */
  CHECK(bspa_seq_append(seq, prompt + *cached, n - *cached)); /* all or nothing */
  const int32_t q_len = (int32_t)(n - *cached);
  CHECK(bspa_batch_create(&batch, pool, &seq, &q_len, 1, NULL));

  const int have_tensors = host_tensor_init(&q, dtype, q_len, HQ) & host_tensor_init(&k, dtype, q_len, HKV) &
                           host_tensor_init(&v, dtype, q_len, HKV) & host_tensor_init(out, dtype, q_len, HQ);
  if (!have_tensors) {
    fprintf(stderr, "out of host memory\n");
    goto fail;
  }
  fill(&q, *cached, 3.0f);
  fill(&k, *cached, 1.0f);
  fill(&v, *cached, 2.0f);
  /* Launch arguments come in versioned structs: init, then set the fields (layer 0 here). */
  bspa_kv_write_args kw;
  CHECK(bspa_kv_write_args_init(&kw));
  kw.k_new = &k.t; /* [q_len, HKV, D] */
  kw.v_new = &v.t;
  CHECK(bspa_kv_write(pool, batch, &kw, NULL));
  bspa_prefill_args pf;
  CHECK(bspa_prefill_args_init(&pf));
  pf.layout = layout;
  pf.q = &q.t; /* [q_len, HQ, D] */
  pf.out = &out->t;
  pf.scale = 0.125f;
  CHECK(bspa_prefill(pool, batch, &pf, NULL));
  load(out);
  CHECK(bspa_seq_commit(seq, n)); /* publishes the full pages for later turns */
  ok = 1;
fail:
  host_tensor_free(&q); /* free(NULL) is fine: the structs start zeroed */
  host_tensor_free(&k);
  host_tensor_free(&v);
  bspa_batch_destroy(batch); /* before the sequences it uses; NULL is a no-op */
  bspa_seq_destroy(seq);     /* its published pages stay cached */
  return ok;
}

static bspa_pool *new_pool(bspa_dtype dtype) {
  bspa_pool_options o;
  bspa_pool *pool = NULL;
  CHECK(bspa_pool_options_init(&o));
  o.device_type = kDLCPU;
  o.dtype = dtype;
  o.num_layers = 1;
  o.num_kv_heads = HKV;
  o.head_dim = D;
  o.page_size = PAGE;
  o.num_pages = 64;
  CHECK(bspa_pool_create(&pool, &o));
  return pool;
fail:
  return NULL;
}

static int run(bspa_dtype dtype, const char *name) {
  bspa_pool *pool = new_pool(dtype), *fresh = new_pool(dtype);
  bspa_layout *layout = NULL;
  host_tensor first_out = {0}, second_out = {0}, full_out = {0};
  int ok = 0;
  if (!pool || !fresh) goto fail;
  bspa_layout_strided_options lo;
  CHECK(bspa_layout_strided_options_init(&lo));
  lo.num_heads = lo.num_heads_total = HQ;
  lo.block_size = 16;
  lo.local_blocks = 4;
  lo.vert_stride = 4;
  CHECK(bspa_layout_create_strided(&layout, &lo));

  int32_t prompt[420];
  for (int i = 0; i < 300; ++i) prompt[i] = (int32_t)((i * 7919) % 32000); /* turn 1 */
  for (int i = 300; i < 420; ++i) prompt[i] = 1000 + i;                    /* turn 2 adds 120 */
  int64_t cached1 = 0, cached2 = 0, cached_full = 0;
  if (!turn(pool, layout, dtype, prompt, 300, &first_out, &cached1)) goto fail;
  if (!turn(pool, layout, dtype, prompt, 420, &second_out, &cached2)) goto fail;
  if (!turn(fresh, layout, dtype, prompt, 420, &full_out, &cached_full)) goto fail;

  /* Turn 2's rows against the last rows of the uncached prefill of the same prompt. */
  const int64_t rows = 420 - cached2, skip = (420 - rows) * HQ * D;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < rows * HQ * D; ++i) {
    const double d = (double)second_out.values[i] - full_out.values[skip + i];
    diff += d * d;
    norm += (double)full_out.values[skip + i] * full_out.values[skip + i];
  }
  const double rel = sqrt(diff / norm), tolerance = dtype == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;
  struct bspa_pool_stats s;
  CHECK(bspa_pool_stats(pool, &s));
  printf(
      "%-4s turn 1: %lld cached of 300; turn 2: %lld cached of 420, %lld computed; "
      "rel. L2 vs uncached %.2e (tolerance %.0e); %llu hits\n",
      name, (long long)cached1, (long long)cached2, (long long)rows, rel, tolerance, (unsigned long long)s.hits);
  /* 300 tokens fill 18 pages of 16 (288 tokens); turn 2 reuses them all. */
  ok = cached1 == 0 && cached2 == 288 && cached_full == 0 && rel <= tolerance;
  if (!ok) fprintf(stderr, "%s: unexpected result\n", name);
fail:
  host_tensor_free(&first_out);
  host_tensor_free(&second_out);
  host_tensor_free(&full_out);
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
  bspa_pool_destroy(fresh);
  return ok;
}

int main(void) {
  printf("%s\n", bspa_build_info());
  if (bspa_abi_version() != BSPA_ABI_VERSION) {
    fprintf(stderr, "libbspa has ABI %u, this program was built for %u\n", bspa_abi_version(), BSPA_ABI_VERSION);
    return 1;
  }
  const int f32 = run(BSPA_DTYPE_F32, "f32");
  const int bf16 = run(BSPA_DTYPE_BF16, "bf16");
  return f32 && bf16 ? 0 : 1;
}
