/* A randomized pool workload shared by the prefix-cache tests (header-only: every test
 * file is its own executable). Prompts share prefixes in a tree of 24-token blocks whose
 * contents repeat under different prefixes, so identical pages with different parents are
 * common. Each sequence "computes" its tokens by writing K = token and V = a hash of the
 * whole prefix (salt and extra key included) into a 1-layer f32 pool with one head of
 * dimension 1; every hit is then checked against those values, so a wrongly shared page
 * (other tokens, other prefix, other salt or extra key) fails the test. */
#ifndef BSPA_TEST_CACHE_WORKLOAD_H
#define BSPA_TEST_CACHE_WORKLOAD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#define WL_PROMPTS 64
#define WL_BLOCK 24
#define WL_MAX_LEN (7 * WL_BLOCK)
#define WL_MAX_LIVE 12

typedef struct wl_prompts {
  int32_t tokens[WL_PROMPTS][WL_MAX_LEN];
  int64_t len[WL_PROMPTS];
} wl_prompts;

static void wl_make_prompts(wl_prompts *p) {
  for (int q = 0; q < WL_PROMPTS; ++q) {
    p->len[q] = 1 + (q * 37) % WL_MAX_LEN;
    for (int64_t t = 0; t < WL_MAX_LEN; ++t) {
      int j = (int)(t / WL_BLOCK);
      int shift = 6 - j < 0 ? 0 : 6 - j;
      int block_id = (q >> shift) + 100 * j;                    /* prompts share prefixes as a tree */
      p->tokens[q][t] = (block_id % 3) * 10 + (int32_t)(t % 4); /* contents repeat */
    }
  }
}

static uint64_t wl_mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

/* V value of position t: depends on salt, extra key and tokens [0, t]. */
static float wl_prefix_value(int salt, int extra, const int32_t *tokens, int64_t t) {
  uint64_t h = wl_mix((uint64_t)salt + 1, (uint64_t)extra + 7);
  for (int64_t i = 0; i <= t; ++i) h = wl_mix(h, (uint64_t)tokens[i]);
  return (float)(h & 0xffffff);
}

typedef struct wl_seq {
  bspa_seq *seq;
  int salt, extra, prompt;
  int64_t appended, computed;
} wl_seq;

typedef struct wl_state {
  bspa_pool *pool;
  const wl_prompts *prompts;
  int32_t page_size;
  float *k, *v;
  test_rng rng;
  wl_seq live[WL_MAX_LIVE];
  int num_live;
  uint64_t ops, hit_tokens, verified_tokens, out_of_pages;
  int exact_stats; /* single-threaded: stats must be unchanged by a failed append */
  int failed;      /* Criterion asserts are not for other threads: failures are recorded */
  char message[512];
} wl_state;

/* Records the first failure and returns from the calling function. */
#define WL_CHECK(w, cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) {                                                               \
      if (!(w)->failed) snprintf((w)->message, sizeof(w)->message, __VA_ARGS__); \
      (w)->failed = 1;                                                           \
      return;                                                                    \
    }                                                                            \
  } while (0)
#define WL_OK(w, call)                                                                                    \
  do {                                                                                                    \
    bspa_status st_ = (call);                                                                             \
    WL_CHECK(w, st_ == BSPA_OK, "%s returned %s: %s", #call, bspa_status_string(st_), bspa_last_error()); \
  } while (0)

static bspa_pool *wl_create_pool(int64_t num_pages, int32_t page_size) {
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.dtype = BSPA_DTYPE_F32;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 1;
  o.page_size = page_size;
  o.num_pages = num_pages;
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));
  return pool;
}

static void wl_init(wl_state *w, bspa_pool *pool, const wl_prompts *prompts, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->pool = pool;
  w->prompts = prompts;
  w->rng.state = seed;
  DLTensor k, v;
  WL_OK(w, bspa_pool_kv(pool, 0, &k, &v));
  w->page_size = (int32_t)k.shape[2];
  w->k = (float *)k.data;
  w->v = (float *)v.data;
}

static int64_t wl_rand(wl_state *w, int64_t n) { return (int64_t)(test_rng_next(&w->rng) % (uint64_t)n); }

static void wl_create(wl_state *w) {
  wl_seq *s = &w->live[w->num_live];
  memset(s, 0, sizeof *s);
  s->salt = (int)wl_rand(w, 2);
  s->extra = (int)wl_rand(w, 2);
  s->prompt = (int)wl_rand(w, WL_PROMPTS);
  char salt[8] = {'t', 'e', 'n', 'a', 'n', 't', (char)('0' + s->salt), 0};
  bspa_seq_options so;
  WL_OK(w, bspa_seq_options_init(&so));
  so.salt = s->salt ? salt : NULL; /* salt 0: no salt at all */
  so.salt_len = s->salt ? 7 : 0;
  so.extra_key = (uint64_t)s->extra;
  WL_OK(w, bspa_seq_create(&s->seq, w->pool, &so));
  ++w->num_live; /* live from here on, so wl_finish destroys it even after a failure */
  const int32_t *tok = w->prompts->tokens[s->prompt];
  const int64_t n = w->prompts->len[s->prompt];
  int64_t cached = -1;
  WL_OK(w, bspa_seq_match(s->seq, tok, n, &cached));
  WL_CHECK(w, cached >= 0 && cached % w->page_size == 0 && (n == 0 || cached <= (n - 1) / w->page_size * w->page_size),
           "cached = %lld for n = %lld", (long long)cached, (long long)n);
  int32_t pages[WL_MAX_LEN];
  int64_t np = 0;
  WL_OK(w, bspa_seq_pages(s->seq, pages, WL_MAX_LEN, &np));
  WL_CHECK(w, np == cached / w->page_size, "match kept %lld pages for %lld tokens", (long long)np, (long long)cached);
  for (int64_t t = 0; t < cached; ++t) {
    const int64_t slot = (int64_t)pages[t / w->page_size] * w->page_size + t % w->page_size;
    WL_CHECK(w, w->k[slot] == (float)tok[t], "a hit handed out a page with other tokens at position %lld",
             (long long)t);
    WL_CHECK(w, w->v[slot] == wl_prefix_value(s->salt, s->extra, tok, t),
             "a hit handed out a page of another prefix, salt or extra key at position %lld", (long long)t);
  }
  w->hit_tokens += (uint64_t)cached;
  w->verified_tokens += (uint64_t)cached;
  s->appended = s->computed = cached;
}

static void wl_append(wl_state *w, wl_seq *s) {
  const int64_t n = w->prompts->len[s->prompt];
  if (s->appended == n) return;
  const int64_t len = 1 + wl_rand(w, n - s->appended);
  struct bspa_seq_info before, after;
  struct bspa_pool_stats sb, sa;
  int32_t pages_before[WL_MAX_LEN], pages_after[WL_MAX_LEN];
  int64_t nb = 0, na = 0;
  WL_OK(w, bspa_seq_info(s->seq, &before));
  WL_OK(w, bspa_seq_pages(s->seq, pages_before, WL_MAX_LEN, &nb));
  if (w->exact_stats) WL_OK(w, bspa_pool_stats(w->pool, &sb));
  bspa_status st = bspa_seq_append(s->seq, w->prompts->tokens[s->prompt] + s->appended, len);
  if (st == BSPA_ERR_OUT_OF_PAGES) {
    ++w->out_of_pages;
    WL_CHECK(w, bspa_last_error()[0] != '\0', "out of pages without a message");
    WL_OK(w, bspa_seq_info(s->seq, &after));
    WL_OK(w, bspa_seq_pages(s->seq, pages_after, WL_MAX_LEN, &na));
    WL_CHECK(w, memcmp(&before, &after, sizeof before) == 0, "a failed append changed the sequence");
    WL_CHECK(w, na == nb && memcmp(pages_before, pages_after, sizeof(int32_t) * (size_t)nb) == 0,
             "a failed append changed the page list");
    if (w->exact_stats) {
      WL_OK(w, bspa_pool_stats(w->pool, &sa));
      WL_CHECK(w, memcmp(&sb, &sa, sizeof sb) == 0, "a failed append changed the pool's stats");
    }
    return;
  }
  WL_CHECK(w, st == BSPA_OK, "append: %s", bspa_last_error());
  s->appended += len;
  WL_OK(w, bspa_seq_info(s->seq, &after));
  WL_CHECK(w, after.num_tokens == s->appended && after.num_pages == (s->appended + w->page_size - 1) / w->page_size,
           "after append: %lld tokens in %lld pages, expected %lld tokens", (long long)after.num_tokens,
           (long long)after.num_pages, (long long)s->appended);
}

static void wl_compute(wl_state *w, wl_seq *s) {
  if (s->computed == s->appended) return;
  const int64_t upto = s->computed + 1 + wl_rand(w, s->appended - s->computed);
  const int32_t *tok = w->prompts->tokens[s->prompt];
  int32_t pages[WL_MAX_LEN];
  int64_t np = 0;
  WL_OK(w, bspa_seq_pages(s->seq, pages, WL_MAX_LEN, &np));
  for (int64_t t = s->computed; t < upto; ++t) {
    const int64_t slot = (int64_t)pages[t / w->page_size] * w->page_size + t % w->page_size;
    w->k[slot] = (float)tok[t];
    w->v[slot] = wl_prefix_value(s->salt, s->extra, tok, t);
  }
  WL_OK(w, bspa_seq_commit(s->seq, upto));
  s->computed = upto;
}

static void wl_destroy(wl_state *w, int i) {
  bspa_seq_destroy(w->live[i].seq);
  w->live[i] = w->live[--w->num_live];
}

/* One random operation. */
static void wl_step(wl_state *w) {
  ++w->ops;
  const int64_t r = wl_rand(w, 10);
  if (w->num_live == 0 || (r < 2 && w->num_live < WL_MAX_LIVE)) {
    wl_create(w);
    return;
  }
  const int i = (int)wl_rand(w, w->num_live);
  wl_seq *s = &w->live[i];
  if (r < 5) {
    wl_append(w, s);
  } else if (r < 8) {
    wl_compute(w, s);
  } else {
    wl_destroy(w, i);
  }
}

static void wl_finish(wl_state *w) {
  while (w->num_live > 0) wl_destroy(w, w->num_live - 1);
}

#endif
