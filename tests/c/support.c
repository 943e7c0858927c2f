#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t test_rng_next(test_rng *r) {
  uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double test_rng_uniform(test_rng *r) { return (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

double test_rng_normal(test_rng *r) {
  double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t test_seed(void) {
  const char *s = getenv("BSPA_TEST_SEED");
  if (s && *s) return strtoull(s, NULL, 0);
  return (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
}

uint16_t test_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float test_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t test_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
  return (uint16_t)half;
}

float test_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        exp--;
      }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void test_tensor_init(test_tensor *tt, void *data, bspa_dtype dtype, int ndim, const int64_t *shape) {
  memset(tt, 0, sizeof *tt);
  for (int i = 0; i < ndim; ++i) tt->shape[i] = shape[i];
  tt->t.data = data;
  tt->t.device.device_type = kDLCPU;
  tt->t.device.device_id = 0;
  tt->t.ndim = ndim;
  tt->t.dtype.code = dtype == BSPA_DTYPE_F32        ? kDLFloat
                     : dtype == BSPA_DTYPE_F16      ? kDLFloat
                     : dtype == BSPA_DTYPE_FP8_E4M3 ? BSPA_DL_FLOAT8_E4M3FN
                                                    : kDLBfloat;
  tt->t.dtype.bits = dtype == BSPA_DTYPE_F32 ? 32 : dtype == BSPA_DTYPE_FP8_E4M3 ? 8 : 16;
  tt->t.dtype.lanes = 1;
  tt->t.shape = tt->shape;
  tt->t.strides = NULL;
  tt->t.byte_offset = 0;
}

double test_fp8_to_double(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, mant = code & 7;
  double v;
  if (exp == 15 && mant == 7) return sign ? -NAN : NAN;
  if (exp == 0)
    v = ldexp((double)mant, -9);
  else
    v = ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -v : v;
}

uint8_t test_fp8_nearest(float x) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (uint8_t)(sign | 0x7f);
  const double a = fabs((double)x);
  if (a >= 448.0) return (uint8_t)(sign | 0x7e);
  static double table[0x7f];
  static int have_table;
  if (!have_table) { /* the non-negative finite codes' values, in increasing order */
    for (int c = 0; c <= 0x7e; ++c) table[c] = test_fp8_to_double((uint8_t)c);
    have_table = 1;
  }
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = fabs(table[c] - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return (uint8_t)(sign | best);
}

bspa_pool *test_pool_create(int32_t device_type, bspa_dtype dtype, int32_t layers, int32_t num_kv_heads,
                            int32_t head_dim, int32_t page_size, int64_t num_pages) {
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.device_type = device_type;
  o.dtype = dtype;
  o.num_layers = layers;
  o.num_kv_heads = num_kv_heads;
  o.head_dim = head_dim;
  o.page_size = page_size;
  o.num_pages = num_pages;
  bspa_pool *p = NULL;
  EXPECT_OK(bspa_pool_create(&p, &o));
  return p;
}

bspa_seq *test_seq_salted(bspa_pool *pool, const char *salt, uint64_t extra_key) {
  bspa_seq_options so;
  EXPECT_OK(bspa_seq_options_init(&so));
  so.salt = salt;
  so.salt_len = salt ? strlen(salt) : 0;
  so.extra_key = extra_key;
  bspa_seq *s = NULL;
  EXPECT_OK(bspa_seq_create(&s, pool, &so));
  return s;
}
