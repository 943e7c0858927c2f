/* Prefix-cache semantics through the C ABI: what is shared and what never is, LRU
 * eviction order, transactional out-of-pages, pinning, and randomized and threaded
 * workloads whose every hit is checked against the KV the sequences wrote. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cache_workload.h"
#include "support.h"

static bspa_pool *pool_of_pages(int64_t num_pages, int32_t page_size) {
  return test_pool_create(kDLCPU, BSPA_DTYPE_BF16, 0, 1, 128, page_size, num_pages); /* no layers: keys only */
}

/* match, append the rest, commit everything; returns the cached count. */
static int64_t run_prompt(bspa_seq *s, const int32_t *tokens, int64_t n) {
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s, tokens, n, &cached));
  EXPECT_OK(bspa_seq_append(s, tokens + cached, n - cached));
  EXPECT_OK(bspa_seq_commit(s, n));
  return cached;
}

static int64_t pages_of(bspa_seq *s, int32_t *pages, int64_t cap) {
  int64_t n = 0;
  EXPECT_OK(bspa_seq_pages(s, pages, cap, &n));
  return n;
}

static void expect_check(bspa_pool *pool) { EXPECT_OK(bspa_pool_check(pool)); }

Test(prefix_cache, shared_prefix_hits_exactly_the_full_shared_pages) {
  bspa_pool *pool = pool_of_pages(64, 16);
  int32_t a[100], b[100];
  test_fill_tokens(a, 100, 1000);
  memcpy(b, a, sizeof a);
  for (int i = 40; i < 100; ++i) b[i] = 5000 + i; /* 40 shared tokens: 2 full pages + 8 */
  bspa_seq *sa = test_seq_salted(pool, NULL, 0), *sb = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(sa, a, 100), 0);
  cr_assert_eq(run_prompt(sb, b, 100), 32, "the 8 shared tokens of the third page must not be shared");
  int32_t pa[8], pb[8];
  cr_assert_eq(pages_of(sa, pa, 8), 7);
  cr_assert_eq(pages_of(sb, pb, 8), 7);
  cr_assert(pa[0] == pb[0] && pa[1] == pb[1], "the shared pages are the same pages");
  for (int i = 2; i < 7; ++i)
    for (int j = 0; j < 7; ++j) cr_assert_neq(pb[i], pa[j], "page %d of b must be its own", i);
  struct bspa_seq_info info;
  EXPECT_OK(bspa_seq_info(sb, &info));
  cr_assert(info.num_tokens == 100 && info.num_computed == 100 && info.num_cached == 32 && info.num_pages == 7);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.match_calls == 2 && st.hits == 1 && st.misses == 1 && st.matched_tokens == 32 &&
            st.queried_tokens == 200 && st.pages_in_use == 12 && st.num_sequences == 2);
  cr_assert_eq(st.published_pages, 6 + 4, "a publishes 6 full pages, b its 4 own full pages");
  expect_check(pool);
  bspa_pool_destroy(pool); /* destroys both sequences */
}

Test(prefix_cache, a_partial_page_is_never_shared_and_the_last_token_is_always_computed) {
  bspa_pool *pool = pool_of_pages(64, 16);
  int32_t a[70];
  test_fill_tokens(a, 70, 7);
  bspa_seq *s1 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s1, a, 40), 0); /* 2 full pages + a partial one */
  bspa_seq *s2 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s2, a, 70), 32, "the partial page of s1 holds 8 of the tokens but is not shared");
  bspa_seq *s3 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s3, a, 64), 48, "a 64-token prompt recomputes its last page");
  bspa_seq *s4 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s4, a, 65), 64);
  bspa_seq *s5 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s5, a, 1), 0);
  bspa_seq *s6 = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s6, a, 0, &cached));
  cr_assert_eq(cached, 0, "an empty prompt is a miss");
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, different_salts_or_extra_keys_never_share) {
  bspa_pool *pool = pool_of_pages(128, 16);
  int32_t a[80];
  test_fill_tokens(a, 80, 3);
  bspa_seq *base = test_seq_salted(pool, "tenant-a", 0);
  cr_assert_eq(run_prompt(base, a, 80), 0);
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-b", 0), a, 80), 0, "another salt");
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-a", 1), a, 80), 0, "another extra key");
  cr_assert_eq(run_prompt(test_seq_salted(pool, NULL, 0), a, 80), 0, "no salt");
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-", 0), a, 80), 0, "a prefix of the salt");
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-a", 0), a, 80), 64, "the same salt and extra key share");
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-b", 0), a, 80), 64);
  cr_assert_eq(run_prompt(test_seq_salted(pool, "tenant-a", 1), a, 80), 64);
  /* options NULL is no salt and extra key 0, like an empty salt */
  bspa_seq *s = NULL;
  EXPECT_OK(bspa_seq_create(&s, pool, NULL));
  cr_assert_eq(run_prompt(s, a, 80), 64);
  bspa_seq_options so;
  EXPECT_OK(bspa_seq_options_init(&so));
  so.salt = "";
  so.salt_len = 0;
  EXPECT_OK(bspa_seq_create(&s, pool, &so));
  cr_assert_eq(run_prompt(s, a, 80), 64);
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, identical_prompts_hit_after_the_first_is_destroyed) {
  bspa_pool *pool = pool_of_pages(32, 16);
  int32_t a[100];
  test_fill_tokens(a, 100, 11);
  bspa_seq *s1 = test_seq_salted(pool, NULL, 0);
  run_prompt(s1, a, 100);
  int32_t p1[8], p2[8];
  cr_assert_eq(pages_of(s1, p1, 8), 7);
  bspa_seq_destroy(s1);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_in_use == 0 && st.pages_cached == 6 && st.pages_free == 26 && st.num_sequences == 0,
            "in use %lld cached %lld free %lld", (long long)st.pages_in_use, (long long)st.pages_cached,
            (long long)st.pages_free);
  bspa_seq *s2 = test_seq_salted(pool, NULL, 0);
  cr_assert_eq(run_prompt(s2, a, 100), 96);
  cr_assert_eq(pages_of(s2, p2, 8), 7);
  cr_assert(memcmp(p1, p2, 6 * sizeof(int32_t)) == 0, "the cached pages are handed out again");
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_cached == 0 && st.pages_in_use == 7 && st.evictions == 0);
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, uncommitted_pages_are_not_shared) {
  bspa_pool *pool = pool_of_pages(32, 16);
  int32_t a[80];
  test_fill_tokens(a, 80, 100);
  bspa_seq *s1 = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s1, a, 80, &cached));
  EXPECT_OK(bspa_seq_append(s1, a, 80));
  cr_assert_eq(run_prompt(test_seq_salted(pool, NULL, 0), a, 80), 0, "nothing is committed yet");
  EXPECT_OK(bspa_seq_commit(s1, 20)); /* one full page computed */
  EXPECT_OK(bspa_seq_commit(s1, 20)); /* committing the same count again is allowed */
  bspa_seq *s3 = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_match(s3, a, 80, &cached));
  /* s2 published all of its pages meanwhile, so s3 hits those: the point is s1's pages */
  int32_t pages1[5], pages3[5];
  pages_of(s1, pages1, 5);
  pages_of(s3, pages3, 5);
  cr_assert_eq(cached, 64);
  for (int i = 1; i < 4; ++i) cr_assert_neq(pages3[i], pages1[i], "s1's uncommitted page %d was shared", i);
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, eviction_takes_least_recently_used_chain_tails_first) {
  bspa_pool *pool = pool_of_pages(12, 16);
  int32_t a[80], b[80], filler[16 * 12];
  test_fill_tokens(a, 80, 1);
  test_fill_tokens(b, 80, 10000);
  test_fill_tokens(filler, 16 * 12, 50000);
  bspa_seq *sa = test_seq_salted(pool, NULL, 0);
  run_prompt(sa, a, 64); /* 4 full pages */
  int32_t pa[5];
  pages_of(sa, pa, 5);
  bspa_seq_destroy(sa); /* released tail first: a3 a2 a1 a0 */
  bspa_seq *sb = test_seq_salted(pool, NULL, 0);
  run_prompt(sb, b, 64);
  bspa_seq_destroy(sb); /* b's pages are more recent than a's */
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_free == 4 && st.pages_cached == 8);

  /* 5 pages: the 4 free ones first, then one eviction: a's tail */
  bspa_seq *f = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(f, filler, 5 * 16));
  int32_t pf[12];
  cr_assert_eq(pages_of(f, pf, 12), 5);
  cr_assert_eq(pf[4], pa[3], "the first eviction takes a's last page, got page %d", pf[4]);
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.evictions == 1 && st.pages_free == 0 && st.pages_cached == 7);
  EXPECT_OK(bspa_seq_append(f, filler + 80, 16));
  cr_assert_eq(pages_of(f, pf, 12), 6);
  cr_assert_eq(pf[5], pa[2], "then a's third page");
  expect_check(pool);

  bspa_seq *a2 = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(a2, a, 80, &cached));
  cr_assert_eq(cached, 32, "a's head pages are still cached");
  bspa_seq *b2 = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_match(b2, b, 80, &cached));
  cr_assert_eq(cached, 64, "b, used more recently, is untouched");
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, out_of_pages_is_transactional) {
  bspa_pool *pool = pool_of_pages(8, 16);
  int32_t a[200];
  test_fill_tokens(a, 200, 1);
  bspa_seq *s1 = test_seq_salted(pool, NULL, 0);
  run_prompt(s1, a, 48); /* 3 pages, published */
  bspa_seq_destroy(s1);  /* 3 cached, 5 free */
  bspa_seq *s2 = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(s2, a + 100, 20)); /* 2 pages */
  struct bspa_pool_stats before, after;
  struct bspa_seq_info ib, ia;
  int32_t pb[16], pa[16];
  EXPECT_OK(bspa_pool_stats(pool, &before));
  EXPECT_OK(bspa_seq_info(s2, &ib));
  int64_t nb = pages_of(s2, pb, 16);
  /* 20 + 109 tokens need 9 pages: 7 more, but only 3 free + 3 cached remain */
  EXPECT_STATUS(bspa_seq_append(s2, a, 109), BSPA_ERR_OUT_OF_PAGES);
  cr_assert(strstr(bspa_last_error(), "pages") != NULL, "%s", bspa_last_error());
  EXPECT_OK(bspa_pool_stats(pool, &after));
  EXPECT_OK(bspa_seq_info(s2, &ia));
  int64_t na = pages_of(s2, pa, 16);
  cr_assert(memcmp(&before, &after, sizeof before) == 0, "the pool's stats changed");
  cr_assert(memcmp(&ib, &ia, sizeof ib) == 0, "the sequence's info changed");
  cr_assert(na == nb && memcmp(pa, pb, sizeof(int32_t) * (size_t)nb) == 0, "the sequence's pages changed");
  expect_check(pool);
  /* cached pages are still there: a new match still hits them */
  bspa_seq *s3 = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s3, a, 49, &cached));
  cr_assert_eq(cached, 48);
  bspa_seq_destroy(s3);
  /* exactly what is left succeeds, evicting all cached pages */
  EXPECT_OK(bspa_seq_append(s2, a, 108));
  EXPECT_OK(bspa_pool_stats(pool, &after));
  cr_assert(after.pages_in_use == 8 && after.pages_free == 0 && after.pages_cached == 0 && after.evictions == 3);
  EXPECT_STATUS(bspa_seq_append(s2, a, 1), BSPA_ERR_OUT_OF_PAGES);
  EXPECT_OK(bspa_seq_append(s2, a, 0));
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, matched_pages_are_pinned_before_new_pages_are_taken) {
  bspa_pool *pool = pool_of_pages(4, 16);
  int32_t a[80];
  test_fill_tokens(a, 80, 1);
  bspa_seq *s1 = test_seq_salted(pool, NULL, 0);
  run_prompt(s1, a, 48);
  bspa_seq_destroy(s1); /* 3 cached, 1 free */
  bspa_seq *s2 = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s2, a, 65, &cached));
  cr_assert_eq(cached, 48);
  EXPECT_STATUS(bspa_seq_append(s2, a + 48, 17), BSPA_ERR_OUT_OF_PAGES); /* never evicts its own pages */
  EXPECT_OK(bspa_seq_append(s2, a + 48, 16));
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.evictions == 0 && st.pages_in_use == 4);
  /* a second sequence shares the pinned pages and cannot get any new one */
  bspa_seq *s3 = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_match(s3, a, 49, &cached));
  cr_assert_eq(cached, 48);
  EXPECT_STATUS(bspa_seq_append(s3, a + 48, 1), BSPA_ERR_OUT_OF_PAGES);
  expect_check(pool);
  bspa_pool_destroy(pool);
}

Test(prefix_cache, destroying_everything_returns_every_reference) {
  bspa_pool *pool = pool_of_pages(256, 16);
  int32_t a[300];
  test_fill_tokens(a, 300, 1);
  bspa_seq *seqs[20];
  for (int i = 0; i < 20; ++i) {
    seqs[i] = test_seq_salted(pool, i % 3 ? "x" : NULL, (uint64_t)(i % 2));
    run_prompt(seqs[i], a, 17 + 13 * i);
  }
  for (int i = 0; i < 20; i += 2) bspa_seq_destroy(seqs[i]);
  expect_check(pool);
  for (int i = 1; i < 20; i += 2) bspa_seq_destroy(seqs[i]);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_in_use == 0 && st.num_sequences == 0 && st.pages_free + st.pages_cached == 256);
  expect_check(pool); /* every ref count is zero: it equals the (empty) live page lists */
  bspa_pool_destroy(pool);
}

Test(prefix_cache, randomized_100k_operations_with_the_invariants_checked_after_each) {
  const uint64_t seed = test_seed();
  cr_log_info("seed %llu (set BSPA_TEST_SEED to reproduce)", (unsigned long long)seed);
  static wl_prompts prompts;
  wl_make_prompts(&prompts);
  bspa_pool *pool = wl_create_pool(40, 16);
  static wl_state w;
  wl_init(&w, pool, &prompts, seed);
  w.exact_stats = 1;
  for (int i = 0; i < 100000 && !w.failed; ++i) {
    wl_step(&w);
    bspa_status st = bspa_pool_check(pool);
    cr_assert_eq(st, BSPA_OK, "step %d: %s", i, bspa_last_error());
  }
  cr_assert(!w.failed, "seed %llu: %s", (unsigned long long)seed, w.message);
  wl_finish(&w);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_in_use == 0);
  EXPECT_OK(bspa_pool_check(pool));
  cr_assert(w.hit_tokens > 10000 && w.out_of_pages > 100 && st.evictions > 1000,
            "the workload must exercise hits, exhaustion and eviction: %llu hit tokens, %llu out of pages, "
            "%llu evictions",
            (unsigned long long)w.hit_tokens, (unsigned long long)w.out_of_pages, (unsigned long long)st.evictions);
  bspa_pool_destroy(pool);
}

typedef struct thread_job {
  wl_state w;
  int ops;
} thread_job;

static void *run_job(void *arg) {
  thread_job *j = arg;
  for (int i = 0; i < j->ops && !j->w.failed; ++i) wl_step(&j->w);
  wl_finish(&j->w);
  return NULL;
}

typedef struct checker_job {
  bspa_pool *pool;
  atomic_int stop; /* read by the checker thread: volatile is a data race (ThreadSanitizer) */
  int checks;
  bspa_status status;
  char message[512];
} checker_job;

static void *run_checker(void *arg) {
  checker_job *c = arg;
  while (!c->stop && c->status == BSPA_OK) {
    struct bspa_pool_stats st;
    c->status = bspa_pool_check(c->pool);
    if (c->status == BSPA_OK) c->status = bspa_pool_stats(c->pool, &st);
    if (c->status == BSPA_OK && st.pages_free + st.pages_cached + st.pages_in_use != st.pages_total)
      c->status = BSPA_ERR_INTERNAL;
    ++c->checks;
  }
  if (c->status != BSPA_OK) snprintf(c->message, sizeof c->message, "%s", bspa_last_error());
  return NULL;
}

Test(prefix_cache, eight_threads_on_one_pool_keep_every_invariant) {
  enum { THREADS = 8 };
  const uint64_t seed = test_seed();
  cr_log_info("seed %llu", (unsigned long long)seed);
  static wl_prompts prompts;
  wl_make_prompts(&prompts);
  bspa_pool *pool = wl_create_pool(64, 16);
  static thread_job jobs[THREADS];
  pthread_t th[THREADS], checker;
  checker_job cj = {pool, 0, 0, BSPA_OK, ""};
  for (int t = 0; t < THREADS; ++t) {
    wl_init(&jobs[t].w, pool, &prompts, seed + 1000003u * (uint64_t)t);
    jobs[t].ops = 20000;
    cr_assert_eq(pthread_create(&th[t], NULL, run_job, &jobs[t]), 0);
  }
  cr_assert_eq(pthread_create(&checker, NULL, run_checker, &cj), 0);
  uint64_t hits = 0, oop = 0;
  for (int t = 0; t < THREADS; ++t) {
    pthread_join(th[t], NULL);
    cr_assert(!jobs[t].w.failed, "thread %d (seed %llu): %s", t, (unsigned long long)seed, jobs[t].w.message);
    hits += jobs[t].w.hit_tokens;
    oop += jobs[t].w.out_of_pages;
  }
  cj.stop = 1;
  pthread_join(checker, NULL);
  cr_assert_eq(cj.status, BSPA_OK, "concurrent check: %s", cj.message);
  EXPECT_OK(bspa_pool_check(pool));
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_assert(st.pages_in_use == 0 && st.num_sequences == 0);
  cr_log_info("%llu hit tokens, %llu out-of-pages, %d concurrent checks", (unsigned long long)hits,
              (unsigned long long)oop, cj.checks);
  cr_assert(hits > 0 && oop > 0 && st.evictions > 0 && cj.checks > 0);
  bspa_pool_destroy(pool);
}
