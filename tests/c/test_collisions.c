/* Built against bspa_tinykeys: the same pool with page keys cut to 4 bits, so nearly every
 * lookup meets pages of other contents, other prefixes, other salts under its key. Every
 * hit must still be exactly right: checked against the KV each sequence wrote (see
 * cache_workload.h) and against crafted same-key pages. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <string.h>

#include "cache_workload.h"
#include "support.h"

Test(collisions, randomized_workload_hits_stay_correct) {
  const uint64_t seed = test_seed();
  cr_log_info("seed %llu", (unsigned long long)seed);
  static wl_prompts prompts;
  wl_make_prompts(&prompts);
  bspa_pool *pool = wl_create_pool(96, 16);
  static wl_state w;
  wl_init(&w, pool, &prompts, seed);
  w.exact_stats = 1;
  for (int i = 0; i < 100000 && !w.failed; ++i) {
    wl_step(&w);
    if (i % 16 == 0) {
      bspa_status st = bspa_pool_check(pool);
      cr_assert_eq(st, BSPA_OK, "step %d: %s", i, bspa_last_error());
    }
  }
  cr_assert(!w.failed, "seed %llu: %s", (unsigned long long)seed, w.message);
  wl_finish(&w);
  EXPECT_OK(bspa_pool_check(pool));
  cr_assert(w.verified_tokens > 100000, "only %llu hit tokens verified", (unsigned long long)w.verified_tokens);
  bspa_pool_destroy(pool);
}

/* 400 distinct prompts of 4 full pages + 1 token; each re-match must return its own 4
 * pages, although the index holds 1600 pages under 16 keys. */
Test(collisions, many_distinct_prompts_each_find_their_own_pages) {
  enum { N = 400, PS = 16, LEN = 4 * PS + 1 };
  bspa_pool *pool = wl_create_pool(4 * N + 8, PS);
  static bspa_seq *seqs[N];
  static int32_t tokens[N][LEN];
  static int32_t pages[N][5];
  test_rng rng = {test_seed()};
  for (int i = 0; i < N; ++i) {
    for (int t = 0; t < LEN; ++t) tokens[i][t] = (int32_t)(test_rng_next(&rng) % 4); /* tiny alphabet */
    tokens[i][0] = i; /* distinct prompts, and every later page's parent differs */
    EXPECT_OK(bspa_seq_create(&seqs[i], pool, NULL));
    int64_t cached = -1, n = 0;
    EXPECT_OK(bspa_seq_match(seqs[i], tokens[i], LEN, &cached));
    cr_assert_eq(cached, 0, "prompt %d is new but matched %lld tokens", i, (long long)cached);
    EXPECT_OK(bspa_seq_append(seqs[i], tokens[i], LEN));
    EXPECT_OK(bspa_seq_commit(seqs[i], LEN));
    EXPECT_OK(bspa_seq_pages(seqs[i], pages[i], 5, &n));
    bspa_seq_destroy(seqs[i]);
  }
  EXPECT_OK(bspa_pool_check(pool));
  for (int i = 0; i < N; ++i) {
    bspa_seq *s = NULL;
    int32_t got[5];
    int64_t cached = -1, n = 0;
    EXPECT_OK(bspa_seq_create(&s, pool, NULL));
    EXPECT_OK(bspa_seq_match(s, tokens[i], LEN, &cached));
    cr_assert_eq(cached, 4 * PS, "prompt %d matched %lld tokens", i, (long long)cached);
    EXPECT_OK(bspa_seq_pages(s, got, 5, &n));
    cr_assert(memcmp(got, pages[i], 4 * sizeof(int32_t)) == 0, "prompt %d got another prompt's pages", i);
    bspa_seq_destroy(s);
  }
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* The 4-bit key the library computes (cache/key.hpp documents the layout). */
static uint64_t tiny_key(uint64_t parent_lo, const int32_t *tokens, int ps, uint64_t extra) {
  unsigned char buf[16 + 4 * 256 + 8];
  const uint64_t zero = 0;
  memcpy(buf, &parent_lo, 8);
  memcpy(buf + 8, &zero, 8);
  memcpy(buf + 16, tokens, 4 * (size_t)ps);
  memcpy(buf + 16 + 4 * ps, &extra, 8);
  return XXH3_128bits_withSeed(buf, 16 + 4 * (size_t)ps + 8, BSPA_DEFAULT_HASH_SEED).low64 & 15;
}

/* Pages X and Y of equal key, each followed by the same page P: P after Y must never be
 * served P after X (a parent compared by key alone would do exactly that). */
Test(collisions, same_key_parents_are_told_apart) {
  enum { PS = 16 };
  const uint64_t root = XXH3_128bits_withSeed("", 0, BSPA_DEFAULT_HASH_SEED).low64 & 15;
  int32_t x[3 * PS], y[3 * PS];
  for (int t = 0; t < 3 * PS; ++t) x[t] = y[t] = 1000 + t;
  const uint64_t kx = tiny_key(root, x, PS, 0);
  int tries = 0;
  do {
    y[0] = 5000 + tries++;
  } while (tiny_key(root, y, PS, 0) != kx);
  cr_log_info("same 4-bit key after %d tries", tries);

  bspa_pool *pool = wl_create_pool(16, PS);
  bspa_seq *a = NULL, *b = NULL, *c = NULL;
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_create(&a, pool, NULL));
  EXPECT_OK(bspa_seq_append(a, x, 2 * PS));
  EXPECT_OK(bspa_seq_commit(a, 2 * PS));
  EXPECT_OK(bspa_seq_create(&b, pool, NULL));
  EXPECT_OK(bspa_seq_match(b, y, 2 * PS + 1, &cached));
  cr_assert_eq(cached, 0, "y's first page has x's key but other tokens");
  EXPECT_OK(bspa_seq_append(b, y, 2 * PS));
  EXPECT_OK(bspa_seq_commit(b, 2 * PS));
  int32_t pa[2], pb[2], pc[3];
  int64_t n = 0;
  EXPECT_OK(bspa_seq_pages(a, pa, 2, &n));
  EXPECT_OK(bspa_seq_pages(b, pb, 2, &n));
  bspa_seq_destroy(a);
  bspa_seq_destroy(b);
  EXPECT_OK(bspa_seq_create(&c, pool, NULL));
  EXPECT_OK(bspa_seq_match(c, y, 3 * PS, &cached));
  cr_assert_eq(cached, 2 * PS);
  EXPECT_OK(bspa_seq_pages(c, pc, 3, &n));
  cr_assert(pc[0] == pb[0] && pc[1] == pb[1], "y's chain got pages %d %d, not its own %d %d (x's: %d %d)", pc[0], pc[1],
            pb[0], pb[1], pa[0], pa[1]);
  bspa_seq_destroy(c);

  /* salts whose 4-bit root keys are equal still never share */
  char salt[32];
  int s2 = 0;
  do {
    snprintf(salt, sizeof salt, "tenant%d", s2++);
  } while ((XXH3_128bits_withSeed(salt, strlen(salt), BSPA_DEFAULT_HASH_SEED).low64 & 15) != root);
  bspa_seq_options so;
  EXPECT_OK(bspa_seq_options_init(&so));
  so.salt = salt;
  so.salt_len = strlen(salt);
  EXPECT_OK(bspa_seq_create(&c, pool, &so));
  EXPECT_OK(bspa_seq_match(c, y, 3 * PS, &cached));
  cr_assert_eq(cached, 0, "salt \"%s\" (same 4-bit root key as no salt) shared a page", salt);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* A published page whose parent was evicted and re-used for other tokens of the same key
 * must not be reachable through the new parent. */
Test(collisions, a_child_of_an_evicted_parent_is_never_served) {
  enum { PS = 16 };
  const uint64_t root = XXH3_128bits_withSeed("", 0, BSPA_DEFAULT_HASH_SEED).low64 & 15;
  int32_t xc[2 * PS], zc[2 * PS + 1];
  for (int t = 0; t < 2 * PS; ++t) xc[t] = zc[t] = 700 + t;
  zc[2 * PS] = 1;
  const uint64_t kx = tiny_key(root, xc, PS, 0);
  int tries = 0;
  do {
    zc[0] = 9000 + tries++;
  } while (tiny_key(root, zc, PS, 0) != kx);

  bspa_pool *pool = wl_create_pool(3, PS);
  bspa_seq *a = NULL, *s = NULL, *t = NULL, *u = NULL;
  int32_t ps[2], pt[1], pu[2];
  int64_t n = 0, cached = -1;
  EXPECT_OK(bspa_seq_create(&a, pool, NULL)); /* page X: tokens x */
  EXPECT_OK(bspa_seq_append(a, xc, PS));
  EXPECT_OK(bspa_seq_commit(a, PS));
  bspa_seq_destroy(a);                        /* X cached */
  EXPECT_OK(bspa_seq_create(&s, pool, NULL)); /* x again (a duplicate of X) then c */
  EXPECT_OK(bspa_seq_append(s, xc, 2 * PS));
  EXPECT_OK(bspa_seq_commit(s, 2 * PS)); /* c is published as X's child; s does not hold X */
  EXPECT_OK(bspa_seq_pages(s, ps, 2, &n));
  EXPECT_OK(bspa_seq_create(&t, pool, NULL)); /* evicts X and re-uses it for z, of x's key */
  EXPECT_OK(bspa_seq_append(t, zc, PS));
  EXPECT_OK(bspa_seq_commit(t, PS));
  EXPECT_OK(bspa_seq_pages(t, pt, 1, &n));
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert_eq(st.evictions, 1);
  EXPECT_OK(bspa_seq_create(&u, pool, NULL));
  EXPECT_OK(bspa_seq_match(u, zc, 2 * PS + 1, &cached));
  EXPECT_OK(bspa_seq_pages(u, pu, 2, &n));
  cr_assert_eq(cached, PS,
               "z's page hits, but c after z must not (it was computed after x): got page %d, "
               "c is page %d",
               n > 1 ? pu[1] : -1, ps[1]);
  cr_assert_eq(pu[0], pt[0]);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}
