#include "kv_events_workload.h"

#include <stdio.h>
#include <stdlib.h>

bspa_pool *workload_pool(int64_t num_pages, int64_t events_capacity) {
  bspa_pool_options o;
  bspa_pool *pool = NULL;
  if (bspa_pool_options_init(&o) != BSPA_OK) return NULL;
  o.num_layers = 0;
  o.page_size = 16;
  o.num_pages = num_pages;
  o.events_capacity = events_capacity;
  bspa_status s = bspa_pool_create(&pool, &o);
  if (s != BSPA_OK) fprintf(stderr, "bspa_pool_create: %s: %s\n", bspa_status_string(s), bspa_last_error());
  return pool;
}

#define CHECK(call)                                                                      \
  do {                                                                                   \
    bspa_status s_ = (call);                                                             \
    if (s_ != BSPA_OK) {                                                                 \
      fprintf(stderr, "%s: %s: %s\n", #call, bspa_status_string(s_), bspa_last_error()); \
      rc = -1;                                                                           \
      goto done;                                                                         \
    }                                                                                    \
  } while (0)

int workload_step(bspa_pool *pool, int step) {
  static const char *const tenants[2] = {"tenant-a", "tenant-b"};
  const int tenant = step % 2, conversation = (step / 2) % 5, turn = step / 10;
  /* 40 system tokens, then 24 per turn of the conversation so far, then 9 new ones. */
  const int64_t n = 40 + 24 * (int64_t)(turn + 1) + 9;
  int32_t *t = malloc((size_t)n * sizeof *t);
  bspa_seq *seq = NULL;
  int rc = 0;
  if (!t) return -1;
  for (int64_t i = 0; i < n; ++i)
    t[i] = i < 40 ? 1000 + (int32_t)i : 100000 * (conversation + 1) + (int32_t)i + (i >= n - 9 ? 7 * step : 0);
  bspa_seq_options so;
  CHECK(bspa_seq_options_init(&so));
  so.salt = tenants[tenant];
  so.salt_len = 8;
  CHECK(bspa_seq_create(&seq, pool, &so));
  int64_t cached = 0;
  CHECK(bspa_seq_match(seq, t, n, &cached));
  CHECK(bspa_seq_append(seq, t + cached, n - cached));
  CHECK(bspa_seq_commit(seq, n));
done:
  bspa_seq_destroy(seq);
  free(t);
  return rc;
}
