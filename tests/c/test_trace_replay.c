/* Replays the Mooncake conversation trace (BSPA_TRACE_PATH; see its README) through a
 * bookkeeping-only pool with 64-token pages and room for everything: requests one after
 * another, match, append the rest, commit all, destroy. The README's exact figure for
 * these rules: 54,093,952 of 144,793,823 prompt tokens hit. Tokens are derived from block
 * ids exactly as examples/trace/mooncake.hpp does. The trace ships in data/traces/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#define BLOCK 512
#define VOCAB 100352

static int32_t block_token(int64_t h, int64_t i) {
  uint64_t z = (uint64_t)h * 0x9e3779b97f4a7c15ull + (uint64_t)i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (int32_t)(z % VOCAB);
}

/* The number after "key": in line; -1 if absent. */
static int64_t field(const char *line, const char *key) {
  const char *p = strstr(line, key);
  if (!p) return -1;
  p = strchr(p + strlen(key), ':');
  return p ? (int64_t)strtod(p + 1, NULL) : -1;
}

static char *read_all(FILE *f, size_t *size) {
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  *size = (size_t)n;
  return buf;
}

Test(trace_replay, unbounded_pool_hits_the_readme_figure_exactly) {
  FILE *f = fopen(BSPA_TRACE_PATH, "rb");
  cr_assert_not_null(f, "trace %s not found: it ships in the repository (data/traces/)", BSPA_TRACE_PATH);
  size_t size = 0;
  char *text = read_all(f, &size);
  fclose(f);

  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.num_layers = 0;
  o.page_size = 64;
  o.num_pages = 1 << 21; /* more than the trace's distinct full pages (about 1.42M): nothing is evicted */
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));

  int64_t cap = 1 << 16, *ids = malloc(sizeof(int64_t) * (size_t)cap);
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)cap * BLOCK);
  uint64_t hit = 0, total = 0, requests = 0;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    const int64_t n = field(line, "\"input_length\"");
    const char *arr = strstr(line, "\"hash_ids\"");
    if (n < 0 || !arr || !(arr = strchr(arr, '['))) {
      line = next;
      continue;
    }
    int64_t nids = 0;
    for (const char *s = arr + 1;;) {
      while (*s == ' ' || *s == ',') ++s;
      if (*s == ']' || *s == '\0') break;
      char *end;
      long long v = strtoll(s, &end, 10);
      cr_assert(end != s, "bad hash_ids in request %llu", (unsigned long long)requests);
      cr_assert(nids < cap);
      ids[nids++] = v;
      s = end;
    }
    cr_assert(n <= nids * BLOCK, "request %llu: input_length %lld past its blocks", (unsigned long long)requests,
              (long long)n);
    for (int64_t t = 0; t < n; ++t) tokens[t] = block_token(ids[t / BLOCK], t % BLOCK);

    bspa_seq *seq = NULL;
    int64_t cached = -1;
    EXPECT_OK(bspa_seq_create(&seq, pool, NULL));
    EXPECT_OK(bspa_seq_match(seq, tokens, n, &cached));
    EXPECT_OK(bspa_seq_append(seq, tokens + cached, n - cached));
    EXPECT_OK(bspa_seq_commit(seq, n));
    bspa_seq_destroy(seq);
    hit += (uint64_t)cached;
    total += (uint64_t)n;
    ++requests;
    line = next;
  }
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(pool, &st));
  cr_log_info("%llu requests, %llu of %llu prompt tokens hit (%.2f%%), %lld pages cached", (unsigned long long)requests,
              (unsigned long long)hit, (unsigned long long)total, 100.0 * (double)hit / (double)total,
              (long long)st.pages_cached);
  cr_assert_eq(requests, 12031);
  cr_assert_eq(total, 144793823ull);
  cr_assert_eq(hit, 54093952ull, "hit %llu tokens", (unsigned long long)hit);
  cr_assert(st.matched_tokens == hit && st.queried_tokens == total && st.evictions == 0 && st.match_calls == requests &&
            st.pages_in_use == 0 && st.num_sequences == 0);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
  free(ids);
  free(tokens);
  free(text);
}
