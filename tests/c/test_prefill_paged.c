/* bspa_prefill_paged on the CPU against the double-precision reference (reference.c):
 * the prefix identity over unaligned contexts, mixed batches, GQA, head dims, page and
 * block sizes, homo/hetero heads, TP offsets, dense and CSR layouts, three dtypes; and
 * its argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "support.h"

#define MAX_SEQS 12

typedef struct pcase {
  const char *name;
  bspa_dtype dtype;
  int hq, hkv, d, page_size;
  ref_layout rl;
  int num_heads_total; /* strided only: TP */
  double scale;
  int nseq;
  int64_t ctx[MAX_SEQS];
  int32_t qlen[MAX_SEQS];
  int full_identity;            /* also compare with the library's own full prefill (ctx = 0) */
  int32_t max_decode_query_len; /* bspa_paged_args' (a routing hint on CUDA; 0: none) */
} pcase;

static uint64_t g_seed;
static uint64_t g_case;

static bspa_layout *make_layout(const pcase *c, int32_t **crow_out, int32_t **col_out) {
  bspa_layout *l = NULL;
  if (c->rl.kind == REF_DENSE) {
    EXPECT_OK(bspa_layout_create_dense(&l, c->hq));
  } else if (c->rl.kind == REF_STRIDED) {
    bspa_layout_strided_options o;
    EXPECT_OK(bspa_layout_strided_options_init(&o));
    o.block_size = c->rl.block_size;
    o.local_blocks = c->rl.local_blocks;
    o.vert_stride = c->rl.vert_stride;
    o.homo_head = c->rl.homo;
    o.num_heads_total = c->rl.heads_total;
    o.head_begin = c->rl.head_begin;
    o.num_heads = c->hq;
    EXPECT_OK(bspa_layout_create_strided(&l, &o));
  } else {
    EXPECT_OK(bspa_layout_create_csr(&l, c->hq, c->rl.block_size, c->rl.rows, c->rl.crow, c->rl.col));
  }
  (void)crow_out;
  (void)col_out;
  return l;
}

/* A random CSR layout: every row keeps its diagonal and each earlier block with p = 0.3. */
static void random_csr(ref_layout *rl, int heads, int rows, int block_size, test_rng *rng) {
  int32_t *crow = malloc(sizeof(int32_t) * (size_t)heads * (rows + 1));
  int32_t *col = malloc(sizeof(int32_t) * (size_t)heads * rows * (rows + 1) / 2 + 1);
  int32_t nnz = 0;
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r <= rows; ++r) {
      crow[h * (rows + 1) + r] = nnz;
      if (r == rows) break;
      for (int k = 0; k <= r; ++k)
        if (k == r || test_rng_uniform(rng) < 0.3) col[nnz++] = k;
    }
  rl->kind = REF_CSR;
  rl->block_size = block_size;
  rl->rows = rows;
  rl->crow = crow;
  rl->col = col;
}

static void fill_normal(double *x, size_t n, bspa_dtype t, test_rng *rng) {
  /* Rounded through the storage type so the reference sees what the library sees. */
  for (size_t i = 0; i < n; ++i) {
    char tmp[4];
    ref_store(t, tmp, 0, test_rng_normal(rng));
    x[i] = ref_load(t, tmp, 0);
  }
}

/* Runs bspa_prefill_paged with contexts ctx[i] (pass ctx_override to replace them by 0
 * and queries by ctx + q: the full prefill) and compares with the reference. Returns the
 * library's output (as doubles, [T][hq][d]) for the identity check; caller frees. */
static double *run_case(const pcase *c, int full, double *rel_out) {
  const int hq = c->hq, hkv = c->hkv, d = c->d, ps = c->page_size;
  test_rng rng = {g_seed ^ (0x51ed27u * ++g_case)};
  if (full) rng.state = g_seed ^ (0x51ed27u * (g_case - 1)); /* same data as the chunked run */
  int64_t n[MAX_SEQS], ctx[MAX_SEQS], ql[MAX_SEQS], pages_of[MAX_SEQS];
  int64_t total_q = 0, total_pages = 0, maxp = 1;
  for (int s = 0; s < c->nseq; ++s) {
    n[s] = c->ctx[s] + c->qlen[s];
    ctx[s] = full ? 0 : c->ctx[s];
    ql[s] = full ? n[s] : c->qlen[s];
    pages_of[s] = (n[s] + ps - 1) / ps;
    total_q += ql[s];
    total_pages += pages_of[s];
    if (pages_of[s] > maxp) maxp = pages_of[s];
  }
  const int64_t num_pages = total_pages + 3;
  /* Pages padded so the page stride is not compact: strides are honoured. */
  const int64_t token_stride = d, head_stride = (int64_t)ps * d, page_stride = hkv * head_stride + d;
  const size_t eb = ref_dtype_bytes(c->dtype);
  const size_t page_elems = (size_t)(num_pages * page_stride);
  void *kp = malloc(page_elems * eb), *vp = malloc(page_elems * eb);
  for (size_t i = 0; i < page_elems; ++i) {
    ref_store(c->dtype, kp, i, NAN); /* unused slots are NaN: reading one poisons the output */
    ref_store(c->dtype, vp, i, NAN);
  }
  /* Shuffled page ids so sequences never see contiguous pages. */
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)num_pages);
  for (int64_t i = 0; i < num_pages; ++i) perm[i] = (int32_t)i;
  for (int64_t i = num_pages - 1; i > 0; --i) {
    int64_t j = (int64_t)(test_rng_next(&rng) % (uint64_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)(c->nseq * maxp));
  int32_t qs[MAX_SEQS + 1], cl[MAX_SEQS];
  double *kd[MAX_SEQS], *vd[MAX_SEQS], *qd[MAX_SEQS];
  int64_t next_page = 0;
  qs[0] = 0;
  for (int s = 0; s < c->nseq; ++s) {
    for (int64_t j = 0; j < maxp; ++j) bt[s * maxp + j] = j < pages_of[s] ? perm[next_page++] : -1;
    kd[s] = malloc(sizeof(double) * (size_t)(n[s] * hkv * d));
    vd[s] = malloc(sizeof(double) * (size_t)(n[s] * hkv * d));
    qd[s] = malloc(sizeof(double) * (size_t)(n[s] * hq * d));
    fill_normal(kd[s], (size_t)(n[s] * hkv * d), c->dtype, &rng);
    fill_normal(vd[s], (size_t)(n[s] * hkv * d), c->dtype, &rng);
    fill_normal(qd[s], (size_t)(n[s] * hq * d), c->dtype, &rng);
    for (int64_t j = 0; j < n[s]; ++j)
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < d; ++i) {
          size_t at = (size_t)(bt[s * maxp + j / ps] * page_stride + h * head_stride + (j % ps) * token_stride + i);
          ref_store(c->dtype, kp, at, kd[s][(j * hkv + h) * d + i]);
          ref_store(c->dtype, vp, at, vd[s][(j * hkv + h) * d + i]);
        }
    qs[s + 1] = (int32_t)(qs[s] + ql[s]);
    cl[s] = (int32_t)ctx[s];
  }
  void *q = malloc((size_t)(total_q * hq * d) * eb), *out = malloc((size_t)(total_q * hq * d) * eb);
  float *lse = malloc(sizeof(float) * (size_t)(hq * total_q));
  int32_t maxq = 0;
  for (int s = 0; s < c->nseq; ++s) {
    for (int64_t r = 0; r < ql[s]; ++r)
      for (int i = 0; i < hq * d; ++i)
        ref_store(c->dtype, q, (size_t)((qs[s] + r) * hq * d + i), qd[s][(ctx[s] + r) * hq * d + i]);
    if (ql[s] > maxq) maxq = (int32_t)ql[s];
  }
  for (size_t i = 0; i < (size_t)(total_q * hq * d); ++i) ref_store(c->dtype, out, i, NAN);
  for (size_t i = 0; i < (size_t)(hq * total_q); ++i) lse[i] = NAN;

  test_tensor tq, tout, tk, tv, tlse, tbt, tqs, tcl;
  int64_t sq[3] = {total_q, hq, d}, sp[4] = {num_pages, hkv, ps, d}, sl[2] = {hq, total_q};
  int64_t sbt[2] = {c->nseq, maxp}, sqs[1] = {c->nseq + 1}, scl[1] = {c->nseq};
  int64_t pstrides[4] = {page_stride, head_stride, token_stride, 1};
  test_tensor_init(&tq, q, c->dtype, 3, sq);
  test_tensor_init(&tout, out, c->dtype, 3, sq);
  test_tensor_init(&tk, kp, c->dtype, 4, sp);
  test_tensor_init(&tv, vp, c->dtype, 4, sp);
  tk.t.strides = pstrides;
  tv.t.strides = pstrides;
  test_tensor_init(&tlse, lse, BSPA_DTYPE_F32, 2, sl);
  test_tensor_init(&tbt, bt, BSPA_DTYPE_F32, 2, sbt);
  test_tensor_init(&tqs, qs, BSPA_DTYPE_F32, 1, sqs);
  test_tensor_init(&tcl, cl, BSPA_DTYPE_F32, 1, scl);
  tbt.t.dtype.code = tqs.t.dtype.code = tcl.t.dtype.code = kDLInt;

  bspa_layout *layout = make_layout(c, NULL, NULL);
  bspa_paged_args a;
  EXPECT_OK(bspa_paged_args_init(&a));
  a.q = &tq.t;
  a.out = &tout.t;
  a.lse = &tlse.t;
  a.k_pages = &tk.t;
  a.v_pages = &tv.t;
  a.block_table = &tbt.t;
  a.query_starts = &tqs.t;
  a.context_lens = &tcl.t;
  a.max_query_len = maxq;
  a.layout = layout;
  a.scale = (float)c->scale;
  a.max_decode_query_len = c->max_decode_query_len;
  EXPECT_OK(bspa_prefill_paged(&a, NULL));

  ref_error err = {0, 0, 0}, lerr = {0, 0, 0};
  double *got = malloc(sizeof(double) * (size_t)(total_q * hq * d));
  for (int s = 0; s < c->nseq; ++s) {
    if (ql[s] == 0) continue;
    double *ro = malloc(sizeof(double) * (size_t)(ql[s] * hq * d));
    double *rl = malloc(sizeof(double) * (size_t)(ql[s] * hq));
    ref_attention(&c->rl, hq, hkv, d, n[s], ctx[s], qd[s] + ctx[s] * hq * d, kd[s], vd[s], (double)(float)c->scale, ro,
                  rl);
    for (int64_t r = 0; r < ql[s]; ++r)
      for (int i = 0; i < hq * d; ++i) {
        const size_t at = (size_t)((qs[s] + r) * hq * d + i);
        got[at] = ref_load(c->dtype, out, at);
        ref_error_add(&err, got[at], ro[r * hq * d + i]);
      }
    for (int h = 0; h < hq; ++h)
      for (int64_t r = 0; r < ql[s]; ++r) ref_error_add(&lerr, lse[h * total_q + qs[s] + r], rl[h * ql[s] + r]);
    free(ro);
    free(rl);
  }
  const double tol = c->dtype == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;
  const double rel = ref_error_rel(&err);
  cr_log_info("%s%s [%s]: rel L2 %.3g, max abs %.3g; lse max abs %.3g", c->name, full ? " (full prefill)" : "",
              c->dtype == BSPA_DTYPE_F32   ? "f32"
              : c->dtype == BSPA_DTYPE_F16 ? "f16"
                                           : "bf16",
              rel, err.max_abs, lerr.max_abs);
  cr_expect(rel <= tol, "%s: relative L2 error %.3g > %.0e (max abs %.3g), seed %llu", c->name, rel, tol, err.max_abs,
            (unsigned long long)g_seed);
  cr_expect(lerr.max_abs <= 1e-3, "%s: lse max abs error %.3g, seed %llu", c->name, lerr.max_abs,
            (unsigned long long)g_seed);
  if (rel_out) *rel_out = rel;

  bspa_layout_destroy(layout);
  for (int s = 0; s < c->nseq; ++s) {
    free(kd[s]);
    free(vd[s]);
    free(qd[s]);
  }
  free(kp);
  free(vp);
  free(perm);
  free(bt);
  free(q);
  free(out);
  free(lse);
  return got;
}

static void setup(void) {
  g_seed = test_seed();
  cr_log_info("seed %llu (set BSPA_TEST_SEED to reproduce)", (unsigned long long)g_seed);
}

TestSuite(prefill_paged, .init = setup);

static ref_layout phi3(int homo, int heads_total, int head_begin) {
  ref_layout l = {REF_STRIDED, 64, 16, 8, homo, heads_total, head_begin, 0, NULL, NULL};
  return l;
}

/* The identity over contexts r = ctx mod 64 in {0,1,2,16,32,36,48,63}, q around 64 - r,
 * contexts just below, across and past Lb*B = 1024 and up to ~2.1k, in one mixed batch each. */
Test(prefill_paged, identity_unaligned_contexts) {
  static const int residues[8] = {0, 1, 2, 16, 32, 36, 48, 63};
  static const int64_t bases[3] = {960, 1024, 2048};
  for (int b = 0; b < 3; ++b)
    for (int delta = -1; delta <= 1; ++delta) {
      pcase c = {"identity", BSPA_DTYPE_F32, 4, 1, 64, 64, phi3(0, 4, 0), 4, 1.0 / 128, 8, {0}, {0}, 0, 0};
      c.rl.vert_stride = 4; /* step 1 over 4 heads: every head its own stripe */
      for (int i = 0; i < 8; ++i) {
        c.ctx[i] = bases[b] + residues[i];
        int32_t q = 64 - residues[i] + delta;
        c.qlen[i] = q < 1 ? 1 : q;
      }
      free(run_case(&c, 0, NULL));
    }
}

/* The identity against the library itself: chunked output == last q rows of its full prefill. */
Test(prefill_paged, identity_against_full_prefill) {
  pcase c = {"identity-full",  BSPA_DTYPE_F32, 4, 2, 64, 32, phi3(0, 4, 0), 4, 1.0 / 128, 3,
             {1060, 36, 1023}, {28, 28, 2},    1, 0};
  c.rl.local_blocks = 4;
  c.rl.vert_stride = 4;
  double *chunked = run_case(&c, 0, NULL);
  double *full = run_case(&c, 1, NULL);
  int64_t row_c = 0, row_f = 0;
  double worst = 0;
  for (int s = 0; s < c.nseq; ++s) {
    row_f += c.ctx[s];
    for (int r = 0; r < c.qlen[s]; ++r)
      for (int i = 0; i < c.hq * c.d; ++i) {
        double e = fabs(chunked[(row_c + r) * c.hq * c.d + i] - full[(row_f + r) * c.hq * c.d + i]);
        if (!(e <= worst)) worst = e;
      }
    row_c += c.qlen[s];
    row_f += c.qlen[s];
  }
  cr_log_info("chunked vs full prefill: max abs difference %.3g", worst);
  cr_expect(worst <= 1e-5, "chunked prefill differs from the full prefill by %.3g", worst);
  free(chunked);
  free(full);
}

/* max_decode_query_len routes rows between CUDA's kernels and changes nothing else: on the
 * CPU (no decode kernel) every bound gives the same bytes over the same inputs, each
 * checked against the reference (bench_gpu_check runs the CUDA routings). */
Test(prefill_paged, decode_bound_is_a_hint) {
  static const int32_t bounds[5] = {1, 3, 8, 100, INT32_MAX};
  pcase c = {"decode-bound",         BSPA_DTYPE_BF16,   8, 2, 64, 16, phi3(0, 8, 0), 8, 1.0 / 128, 5,
             {0, 1000, 77, 16, 300}, {200, 1, 3, 5, 1}, 0, 0};
  c.rl.local_blocks = 4;
  c.rl.vert_stride = 4;
  const int64_t elems = (int64_t)(200 + 1 + 3 + 5 + 1) * c.hq * c.d;
  double *base = run_case(&c, 0, NULL);
  for (int b = 0; b < 5; ++b) {
    c.max_decode_query_len = bounds[b];
    --g_case; /* run_case's data follows g_case: the same inputs again */
    double *got = run_case(&c, 0, NULL);
    cr_expect(memcmp(got, base, sizeof(double) * (size_t)elems) == 0,
              "max_decode_query_len = %d changed the CPU's output", bounds[b]);
    free(got);
  }
  free(base);
}

/* Mixed batches over the configuration matrix; every batch holds aligned and unaligned
 * contexts, a fresh prompt and decode rows. */
Test(prefill_paged, matrix) {
  static const bspa_dtype dtypes[3] = {BSPA_DTYPE_F32, BSPA_DTYPE_BF16, BSPA_DTYPE_F16};
  static const int gqa[3][2] = {{8, 8}, {8, 2}, {16, 2}};
  static const int page_sizes[4] = {16, 32, 64, 128};
  test_rng rng = {g_seed ^ 0xabcdef};
  int k = 0;
  for (int g = 0; g < 3; ++g)
    for (int di = 0; di < 2; ++di)
      for (int lk = 0; lk < 4; ++lk, ++k) {
        pcase c = {"matrix",
                   dtypes[k % 3],
                   gqa[g][0],
                   gqa[g][1],
                   di ? 128 : 64,
                   page_sizes[k % 4],
                   phi3(0, gqa[g][0], 0),
                   0,
                   1.0 / 128,
                   6,
                   {0, 64, 100, 1088, 1153, 517},
                   {70, 64, 1, 1, 33, 2},
                   0,
                   0};
        static char names[64][64];
        if (lk == 0) {
          c.rl = phi3(0, 32, 8); /* TP rank 1 of 4: global heads 8.. */
          c.rl.vert_stride = 8;
          c.rl.local_blocks = 2;
          c.rl.heads_total = 32;
        } else if (lk == 1) {
          c.rl = phi3(1, gqa[g][0], 0);
          c.rl.local_blocks = 3;
          c.rl.block_size = 16; /* blocks smaller than pages, and straddling them */
          c.rl.vert_stride = 4;
          c.scale = 1.0 / sqrt((double)c.d);
        } else if (lk == 2) {
          c.rl.kind = REF_DENSE;
          c.rl.block_size = 64;
        } else {
          random_csr(&c.rl, c.hq, 20, 64, &rng);
        }
        snprintf(names[k], sizeof names[k], "matrix hq%d hkv%d d%d ps%d %s", c.hq, c.hkv, c.d, c.page_size,
                 lk == 0   ? "strided-tp"
                 : lk == 1 ? "strided-homo-b16"
                 : lk == 2 ? "dense"
                           : "csr");
        c.name = names[k];
        free(run_case(&c, 0, NULL));
        if (c.rl.kind == REF_CSR) {
          free((void *)c.rl.crow);
          free((void *)c.rl.col);
        }
      }
}

/* Long contexts, bf16, Phi-3-small heads (8 query heads of a rank, 2 kv heads). */
Test(prefill_paged, long_context_bf16) {
  pcase c = {"long-bf16", BSPA_DTYPE_BF16, 8,       2, 128, 64, phi3(0, 32, 24), 0, 1.0 / 128,
             2,           {3071, 2600},    {33, 1}, 0, 0};
  c.rl = phi3(0, 32, 24);
  free(run_case(&c, 0, NULL));
}
