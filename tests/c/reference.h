/* The reference semantics of the prefill, written independently of the library: double
 * precision, an explicit token-level mask over the full ctx + q sequence, and its own
 * block rule (docs/design.md §2). */
#ifndef BSPA_TEST_REFERENCE_H
#define BSPA_TEST_REFERENCE_H

#include <stdint.h>

typedef enum { REF_DENSE = 0, REF_STRIDED = 1, REF_CSR = 2 } ref_kind;

typedef struct ref_layout {
  ref_kind kind;
  int block_size;
  /* strided */
  int local_blocks, vert_stride, homo, heads_total, head_begin;
  /* csr: crow [heads][rows + 1], col */
  int rows;
  const int32_t *crow, *col;
} ref_layout;

/* 1 if query block qb of local head h may see key block kb. */
int ref_block_allowed(const ref_layout *l, int h, int64_t qb, int64_t kb);

/* Attention of the rows [first, n) of one sequence of n tokens:
 * q [n - first][hq][d], k and v [n][hkv][d]; out [n - first][hq][d];
 * lse [hq][n - first] (natural log of the softmax denominator of scaled logits). */
void ref_attention(const ref_layout *l, int hq, int hkv, int d, int64_t n, int64_t first, const double *q,
                   const double *k, const double *v, double scale, double *out, double *lse);

#endif

#ifndef BSPA_TEST_REFERENCE_STORAGE
#define BSPA_TEST_REFERENCE_STORAGE
#include <bspa/bspa.h>
#include <stddef.h>
/* Element i of a buffer of a bspa dtype, as double; and a double rounded into it. */
double ref_load(bspa_dtype t, const void *buf, size_t i);
void ref_store(bspa_dtype t, void *buf, size_t i, double x);
size_t ref_dtype_bytes(bspa_dtype t);
/* Accumulates ||got - want||^2, ||want||^2 and max |got - want| (NaN counts as infinite). */
typedef struct ref_error {
  double diff2, norm2, max_abs;
} ref_error;
void ref_error_add(ref_error *e, double got, double want);
double ref_error_rel(const ref_error *e);
#endif
