/* Concurrency stress: 8 threads share one small pool and run 100k operations each
 * (create / match / append / write KV / commit / pages / info / stats / destroy) over
 * prompts with shared prefixes, two tenants (salts), and a pool small enough that
 * BSPA_ERR_OUT_OF_PAGES and evictions happen all the time. A checker thread runs
 * bspa_pool_check and the stats identity meanwhile.
 *
 * Every thread writes K for its own new tokens (one float per token: a hash of the
 * prefix up to it, so a page's contents depend on the whole prefix and the tenant) and
 * checks, on every prefix hit, that each matched token's K is the one its own prompt
 * implies: a hit never hands out pages of another prefix or tenant, even under races.
 * At the end, with every sequence destroyed, no page is in use and the invariants hold.
 *
 * BSPA_TEST_QUICK=1 (sanitizer runs) cuts the operations to 10k per thread;
 * BSPA_STRESS_OPS overrides the count. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support.h"

enum {
  THREADS = 8,
  PS = 16,
  /* Smaller than one thread's three longest prompts (3 x 12 pages), so OUT_OF_PAGES
   * happens however the scheduler interleaves the threads (with 96 a run under ASan on
   * two cores once let each thread finish before the next started, and saw none). */
  POOL_PAGES = 32,
  SLOTS = 3,    /* live sequences per thread */
  FAMILIES = 4, /* system prompts */
  VARIANTS = 6, /* user prompts per family */
  SYS_LEN = 40,
  MAX_PROMPT = 200,
};

typedef struct prompt {
  int32_t tokens[MAX_PROMPT];
  int64_t n;
} prompt;

static prompt g_prompts[FAMILIES][VARIANTS];
static const char *const g_salts[2] = {"tenant-a", "tenant-b"};

static bspa_pool *g_pool;
static float *g_k; /* layer 0's K: [POOL_PAGES, 1, PS, 1] */
static long g_ops_per_thread;
static atomic_int g_failures;
static atomic_int g_done;
static char g_first_failure[512];
static pthread_mutex_t g_failure_lock = PTHREAD_MUTEX_INITIALIZER;

static atomic_long g_hits, g_out_of_pages, g_checks;

/* Records the first failure (Criterion asserts belong to the main thread). */
static int failed(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failed(int cond, const char *fmt, ...) {
  if (!cond) return 0;
  if (atomic_fetch_add(&g_failures, 1) == 0) {
    pthread_mutex_lock(&g_failure_lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_first_failure, sizeof g_first_failure, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&g_failure_lock);
  }
  return 1;
}
#define FAIL_IF(cond, ...)                   \
  do {                                       \
    if (failed((cond), __VA_ARGS__)) return; \
  } while (0)

/* K of position p: a hash of the salt and of every token up to p, exact in a float. */
static float expected_k(int salt, const int32_t *tokens, int64_t p) {
  uint32_t h = 2166136261u ^ (uint32_t)(salt * 7919);
  for (int64_t i = 0; i <= p; ++i) h = (h ^ (uint32_t)tokens[i]) * 16777619u;
  return (float)(h & 0xffffff);
}

static void make_prompts(void) {
  test_rng r = {12345};
  for (int f = 0; f < FAMILIES; ++f) {
    int32_t sys[SYS_LEN];
    for (int i = 0; i < SYS_LEN; ++i) sys[i] = (int32_t)(test_rng_next(&r) % 50);
    for (int v = 0; v < VARIANTS; ++v) {
      prompt *p = &g_prompts[f][v];
      memcpy(p->tokens, sys, sizeof sys);
      /* Variants of a family share the system prompt; pairs share a longer user prefix. */
      const int64_t user = 20 + (int64_t)(test_rng_next(&r) % 120);
      for (int64_t i = 0; i < user; ++i)
        p->tokens[SYS_LEN + i] =
            i < 24 && v % 2 == 1 ? g_prompts[f][v - 1].tokens[SYS_LEN + i] : (int32_t)(test_rng_next(&r) % 50);
      p->n = SYS_LEN + user;
    }
  }
}

typedef struct slot {
  bspa_seq *seq;
  const prompt *p;
  int salt;
  int64_t tokens, computed;
} slot;

typedef struct worker {
  int id;
  test_rng rng;
  slot slots[SLOTS];
  long ops;
} worker;

static int32_t g_page_buf[THREADS][MAX_PROMPT / PS + 2];

static void destroy_slot(worker *w, slot *s) {
  bspa_seq_destroy(s->seq);
  memset(s, 0, sizeof *s);
  ++w->ops;
}

/* Pages of the slot's sequence into the thread's buffer; checks count and range. */
static int64_t slot_pages(worker *w, slot *s) {
  int64_t n = -1;
  int32_t *buf = g_page_buf[w->id];
  const bspa_status st = bspa_seq_pages(s->seq, buf, MAX_PROMPT / PS + 2, &n);
  ++w->ops;
  if (st != BSPA_OK) return -1;
  if (n != (s->tokens + PS - 1) / PS) return -2;
  for (int64_t i = 0; i < n; ++i)
    if (buf[i] < 0 || buf[i] >= POOL_PAGES) return -3;
  return n;
}

static void op_create(worker *w, slot *s) {
  const prompt *p = &g_prompts[test_rng_next(&w->rng) % FAMILIES][test_rng_next(&w->rng) % VARIANTS];
  const int salt = (int)(test_rng_next(&w->rng) % 2);
  bspa_seq_options o;
  bspa_seq_options_init(&o);
  o.salt = g_salts[salt];
  o.salt_len = strlen(g_salts[salt]);
  bspa_seq *seq = NULL;
  FAIL_IF(bspa_seq_create(&seq, g_pool, &o) != BSPA_OK, "seq_create: %s", bspa_last_error());
  ++w->ops;
  int64_t cached = -1;
  FAIL_IF(bspa_seq_match(seq, p->tokens, p->n, &cached) != BSPA_OK, "seq_match: %s", bspa_last_error());
  ++w->ops;
  FAIL_IF(cached < 0 || cached % PS != 0 || cached > (p->n - 1) / PS * PS, "seq_match: cached = %lld of %lld",
          (long long)cached, (long long)p->n);
  s->seq = seq;
  s->p = p;
  s->salt = salt;
  s->tokens = s->computed = cached;
  if (cached == 0) return;
  atomic_fetch_add(&g_hits, 1);
  const int64_t n = slot_pages(w, s);
  FAIL_IF(n < 0, "seq_pages after a hit: %lld", (long long)n);
  const int32_t *pages = g_page_buf[w->id];
  for (int64_t t = 0; t < cached; ++t) {
    const float k = g_k[(size_t)pages[t / PS] * PS + (size_t)(t % PS)];
    FAIL_IF(k != expected_k(salt, p->tokens, t),
            "a hit handed out wrong KV: token %lld of a %lld-token prompt "
            "(page %d): K %.0f, expected %.0f",
            (long long)t, (long long)p->n, pages[t / PS], k, expected_k(salt, p->tokens, t));
  }
}

static void op_append(worker *w, slot *s) {
  if (s->tokens == s->p->n) return;
  int64_t chunk = 1 + (int64_t)(test_rng_next(&w->rng) % 48);
  if (chunk > s->p->n - s->tokens) chunk = s->p->n - s->tokens;
  struct bspa_seq_info before, after;
  bspa_seq_info(s->seq, &before);
  const bspa_status st = bspa_seq_append(s->seq, s->p->tokens + s->tokens, chunk);
  w->ops += 2;
  if (st == BSPA_ERR_OUT_OF_PAGES) {
    atomic_fetch_add(&g_out_of_pages, 1);
    bspa_seq_info(s->seq, &after);
    ++w->ops;
    FAIL_IF(memcmp(&before, &after, sizeof before) != 0, "a failed append changed the sequence");
    /* Give pages back now and then, as a scheduler preempting a request would. */
    if (test_rng_next(&w->rng) % 2) destroy_slot(w, s);
    return;
  }
  FAIL_IF(st != BSPA_OK, "seq_append: %s", bspa_last_error());
  s->tokens += chunk;
  /* "Compute" the new tokens: write their K into the sequence's own pages. */
  const int64_t n = slot_pages(w, s);
  FAIL_IF(n < 0, "seq_pages after append: %lld", (long long)n);
  const int32_t *pages = g_page_buf[w->id];
  for (int64_t t = s->tokens - chunk; t < s->tokens; ++t)
    g_k[(size_t)pages[t / PS] * PS + (size_t)(t % PS)] = expected_k(s->salt, s->p->tokens, t);
}

static void op_commit(worker *w, slot *s) {
  if (s->computed == s->tokens) return;
  int64_t c = s->computed + 1 + (int64_t)(test_rng_next(&w->rng) % (uint64_t)(s->tokens - s->computed));
  FAIL_IF(bspa_seq_commit(s->seq, c) != BSPA_OK, "seq_commit(%lld): %s", (long long)c, bspa_last_error());
  ++w->ops;
  s->computed = c;
}

static void op_info(worker *w, slot *s) {
  struct bspa_seq_info info;
  FAIL_IF(bspa_seq_info(s->seq, &info) != BSPA_OK, "seq_info: %s", bspa_last_error());
  ++w->ops;
  FAIL_IF(
      info.num_tokens != s->tokens || info.num_computed != s->computed || info.num_pages != (s->tokens + PS - 1) / PS,
      "seq_info: %lld/%lld tokens/computed, expected %lld/%lld", (long long)info.num_tokens,
      (long long)info.num_computed, (long long)s->tokens, (long long)s->computed);
}

static pthread_barrier_t g_start; /* every worker starts together, so their sequences coexist */

static void *work(void *arg) {
  worker *w = arg;
  pthread_barrier_wait(&g_start);
  while (w->ops < g_ops_per_thread && atomic_load(&g_failures) == 0) {
    slot *s = &w->slots[test_rng_next(&w->rng) % SLOTS];
    if (!s->seq) {
      op_create(w, s);
      continue;
    }
    const uint64_t r = test_rng_next(&w->rng) % 100;
    if (r < 35) {
      op_append(w, s);
    } else if (r < 60) {
      op_commit(w, s);
    } else if (r < 72) {
      op_info(w, s);
    } else if (r < 82) {
      if (failed(slot_pages(w, s) < 0, "seq_pages")) break;
    } else if (r < 86) {
      struct bspa_pool_stats st;
      if (failed(bspa_pool_stats(g_pool, &st) != BSPA_OK, "pool_stats")) break;
      ++w->ops;
    } else if (r < 92 || s->tokens == s->p->n) {
      destroy_slot(w, s); /* finished or abandoned: its pages stay cached */
    } else {
      op_append(w, s);
    }
  }
  for (int i = 0; i < SLOTS; ++i)
    if (w->slots[i].seq) destroy_slot(w, &w->slots[i]);
  return NULL;
}

/* Invariants and the stats identity while the workers run. */
static void *checker(void *arg) {
  (void)arg;
  while (!atomic_load(&g_done)) {
    if (failed(bspa_pool_check(g_pool) != BSPA_OK, "bspa_pool_check during the run: %s", bspa_last_error())) break;
    struct bspa_pool_stats st;
    bspa_pool_stats(g_pool, &st);
    if (failed(st.pages_free + st.pages_cached + st.pages_in_use != POOL_PAGES || st.pages_in_use < 0,
               "stats: free %lld + cached %lld + in use %lld != %d", (long long)st.pages_free,
               (long long)st.pages_cached, (long long)st.pages_in_use, POOL_PAGES))
      break;
    atomic_fetch_add(&g_checks, 1);
    const struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

Test(stress, eight_threads_share_one_pool, .timeout = 300) {
  const char *ops = getenv("BSPA_STRESS_OPS");
  const char *quick = getenv("BSPA_TEST_QUICK");
  g_ops_per_thread = ops ? atol(ops) : (quick && atoi(quick) ? 10000 : 100000);
  make_prompts();

  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.dtype = BSPA_DTYPE_F32;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 1;
  o.page_size = PS;
  o.num_pages = POOL_PAGES;
  EXPECT_OK(bspa_pool_create(&g_pool, &o));
  DLTensor k;
  EXPECT_OK(bspa_pool_kv(g_pool, 0, &k, NULL));
  g_k = k.data;

  static worker workers[THREADS];
  pthread_t threads[THREADS], check_thread;
  const uint64_t seed = test_seed();
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cr_assert_eq(pthread_barrier_init(&g_start, NULL, THREADS), 0);
  cr_assert_eq(pthread_create(&check_thread, NULL, checker, NULL), 0);
  for (int i = 0; i < THREADS; ++i) {
    memset(&workers[i], 0, sizeof workers[i]);
    workers[i].id = i;
    workers[i].rng.state = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    cr_assert_eq(pthread_create(&threads[i], NULL, work, &workers[i]), 0);
  }
  long total = 0;
  for (int i = 0; i < THREADS; ++i) {
    pthread_join(threads[i], NULL);
    total += workers[i].ops;
  }
  atomic_store(&g_done, 1);
  pthread_join(check_thread, NULL);
  pthread_barrier_destroy(&g_start);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

  cr_assert_eq(atomic_load(&g_failures), 0, "%d failures; first: %s", atomic_load(&g_failures), g_first_failure);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(g_pool, &st));
  EXPECT_OK(bspa_pool_check(g_pool));
  fprintf(stderr,
          "stress: %d threads, %ld operations in %.2f s (%.0f ops/s); %ld hits verified, %ld OUT_OF_PAGES, "
          "%llu evictions, %ld invariant checks meanwhile\n",
          THREADS, total, secs, (double)total / secs, atomic_load(&g_hits), atomic_load(&g_out_of_pages),
          (unsigned long long)st.evictions, atomic_load(&g_checks));
  cr_expect_eq(st.num_sequences, 0);
  cr_expect_eq(st.pages_in_use, 0, "pages still referenced after every sequence was destroyed");
  cr_expect_eq(st.pages_free + st.pages_cached, POOL_PAGES);
  cr_expect_gt(atomic_load(&g_hits), 0, "no prefix hit: the workload does not exercise sharing");
  cr_expect_gt(atomic_load(&g_out_of_pages), 0, "no OUT_OF_PAGES: the pool is too large for the test");
  cr_expect_gt(st.evictions, 0, "no eviction happened");
  bspa_pool_destroy(g_pool);
}
