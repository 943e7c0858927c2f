#include "reference.h"

#include <math.h>
#include <stdlib.h>

int ref_block_allowed(const ref_layout *l, int h, int64_t qb, int64_t kb) {
  if (kb > qb) return 0;
  if (l->kind == REF_DENSE) return 1;
  if (l->kind == REF_STRIDED) {
    int step = 0;
    if (!l->homo) {
      step = l->vert_stride / l->heads_total;
      if (step < 1) step = 1;
    }
    if (qb - kb < l->local_blocks) return 1;
    return (kb + (int64_t)(l->head_begin + h) * step + 1) % l->vert_stride == 0;
  }
  {
    const int32_t *row = l->crow + (int64_t)h * (l->rows + 1);
    for (int32_t e = row[qb]; e < row[qb + 1]; ++e)
      if (l->col[e] == kb) return 1;
    return 0;
  }
}

void ref_attention(const ref_layout *l, int hq, int hkv, int d, int64_t n, int64_t first, const double *q,
                   const double *k, const double *v, double scale, double *out, double *lse) {
  const int64_t rows = n - first;
  char *mask = malloc((size_t)n);
  double *logit = malloc(sizeof(double) * (size_t)n);
  for (int h = 0; h < hq; ++h) {
    const int kvh = h / (hq / hkv);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = first + r;
      /* The token-level mask of this row over the whole sequence. */
      for (int64_t j = 0; j < n; ++j) mask[j] = j <= p && ref_block_allowed(l, h, p / l->block_size, j / l->block_size);
      const double *qr = q + (r * hq + h) * d;
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        if (!mask[j]) continue;
        const double *kj = k + (j * hkv + kvh) * d;
        double s = 0;
        for (int i = 0; i < d; ++i) s += qr[i] * kj[i];
        logit[j] = s * scale;
        if (logit[j] > mx) mx = logit[j];
      }
      double den = 0;
      double *o = out + (r * hq + h) * d;
      for (int i = 0; i < d; ++i) o[i] = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!mask[j]) continue;
        const double e = exp(logit[j] - mx);
        den += e;
        const double *vj = v + (j * hkv + kvh) * d;
        for (int i = 0; i < d; ++i) o[i] += e * vj[i];
      }
      for (int i = 0; i < d; ++i) o[i] /= den;
      if (lse) lse[h * rows + r] = mx + log(den);
    }
  }
  free(mask);
  free(logit);
}

#include <string.h>

#include "support.h"

size_t ref_dtype_bytes(bspa_dtype t) { return t == BSPA_DTYPE_F32 ? 4 : t == BSPA_DTYPE_FP8_E4M3 ? 1 : 2; }

double ref_load(bspa_dtype t, const void *buf, size_t i) {
  if (t == BSPA_DTYPE_FP8_E4M3) return test_fp8_to_double(((const uint8_t *)buf)[i]); /* unscaled */
  if (t == BSPA_DTYPE_F32) return ((const float *)buf)[i];
  if (t == BSPA_DTYPE_F16) return test_f16_to_f32(((const uint16_t *)buf)[i]);
  return test_bf16_to_f32(((const uint16_t *)buf)[i]);
}

void ref_store(bspa_dtype t, void *buf, size_t i, double x) {
  if (t == BSPA_DTYPE_F32)
    ((float *)buf)[i] = (float)x;
  else if (t == BSPA_DTYPE_F16)
    ((uint16_t *)buf)[i] = test_f32_to_f16((float)x);
  else
    ((uint16_t *)buf)[i] = test_f32_to_bf16((float)x);
}

void ref_error_add(ref_error *e, double got, double want) {
  const double d = got - want;
  if (isnan(d)) {
    e->diff2 = INFINITY;
    e->max_abs = INFINITY;
  } else {
    e->diff2 += d * d;
    if (fabs(d) > e->max_abs) e->max_abs = fabs(d);
  }
  e->norm2 += want * want;
}

double ref_error_rel(const ref_error *e) { return e->norm2 > 0 ? sqrt(e->diff2 / e->norm2) : sqrt(e->diff2); }
