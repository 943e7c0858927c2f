/* KV cache events through the C ABI: what a commit and an eviction record, block ids and
 * parents, salts, the overflow that clears, bad input to both drains (nothing lost), and a
 * threaded workload whose drained history a router can replay without contradiction. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static bspa_pool *events_pool_of(int64_t num_pages, int32_t page_size, int64_t capacity, bspa_dtype dtype) {
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  cr_assert_eq(o.events_capacity, 0, "events are off by default");
  o.dtype = dtype;
  o.num_layers = 0;
  o.page_size = page_size;
  o.num_pages = num_pages;
  o.events_capacity = capacity;
  bspa_pool *pool = NULL;
  EXPECT_OK(bspa_pool_create(&pool, &o));
  return pool;
}

static bspa_pool *events_pool(int64_t num_pages, int32_t page_size, int64_t capacity) {
  return events_pool_of(num_pages, page_size, capacity, BSPA_DTYPE_BF16);
}

static int64_t serve(bspa_pool *pool, const char *salt, const int32_t *t, int64_t n) {
  bspa_seq *s = test_seq_salted(pool, salt, 0);
  int64_t cached = 0;
  EXPECT_OK(bspa_seq_match(s, t, n, &cached));
  EXPECT_OK(bspa_seq_append(s, t + cached, n - cached));
  EXPECT_OK(bspa_seq_commit(s, n));
  bspa_seq_destroy(s);
  return cached;
}

/* The cached prefix a new sequence's match of t[0, n) finds (the sequence is destroyed). */
static int64_t matched(bspa_pool *pool, const int32_t *t, int64_t n) {
  bspa_seq *s = test_seq_salted(pool, NULL, 0);
  int64_t cached = -1;
  EXPECT_OK(bspa_seq_match(s, t, n, &cached));
  bspa_seq_destroy(s);
  return cached;
}

typedef struct drained {
  bspa_kv_event ev[512];
  int32_t tok[512 * 64];
  int64_t n, nt;
} drained;

static void drain(bspa_pool *pool, drained *d) {
  EXPECT_OK(bspa_pool_events_drain(pool, d->ev, 512, d->tok, 512 * 64, &d->n, &d->nt));
}

Test(events, commit_records_one_stored_event_per_full_page_chained_by_block_id) {
  bspa_pool *pool = events_pool(16, 16, 64);
  int32_t t[56];
  test_fill_tokens(t, 56, 100);
  serve(pool, "tenant-a", t, 56); /* 3 full pages and 8 tokens: 3 stored */
  drained d;
  drain(pool, &d);
  cr_assert_eq(d.n, 3);
  cr_assert_eq(d.nt, 48);
  for (int i = 0; i < 3; ++i) {
    const bspa_kv_event *e = &d.ev[i];
    cr_assert_eq(e->type, BSPA_KV_EVENT_STORED);
    cr_assert_eq(e->block_id, ((uint64_t)1 << 32) | (uint32_t)e->page, "generation 1: first use of the page");
    cr_assert_eq(e->parent_block_id, i == 0 ? 0 : d.ev[i - 1].block_id);
    cr_assert(e->key_lo != 0 || e->key_hi != 0);
    cr_assert_eq(e->token_offset, 16 * i);
    cr_assert_eq(memcmp(d.tok + e->token_offset, t + 16 * i, 16 * sizeof(int32_t)), 0);
    cr_assert_eq(e->salt_len, 8);
    cr_assert_eq(memcmp(e->salt, "tenant-a", 8), 0);
  }
  /* A hit publishes nothing; an empty queue drains to nothing. */
  serve(pool, "tenant-a", t, 49);
  drain(pool, &d);
  cr_assert_eq(d.n, 0);
  /* Without salt: salt NULL; another extra key: recorded. */
  bspa_seq *s = test_seq_salted(pool, NULL, 7);
  int64_t cached = 0;
  EXPECT_OK(bspa_seq_match(s, t, 16, &cached));
  EXPECT_OK(bspa_seq_append(s, t, 16));
  EXPECT_OK(bspa_seq_commit(s, 16));
  bspa_seq_destroy(s);
  drain(pool, &d);
  cr_assert_eq(d.n, 1);
  cr_assert_null(d.ev[0].salt);
  cr_assert_eq(d.ev[0].salt_len, 0);
  cr_assert_eq(d.ev[0].extra_key, 7);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

Test(events, eviction_records_removed_with_the_stored_block_id) {
  bspa_pool *pool = events_pool(4, 16, 64);
  int32_t a[64], b[64];
  test_fill_tokens(a, 64, 1000);
  test_fill_tokens(b, 64, 9000);
  serve(pool, NULL, a, 64); /* 4 pages stored, then cached */
  drained d;
  drain(pool, &d);
  cr_assert_eq(d.n, 4);
  uint64_t stored[4];
  for (int i = 0; i < 4; ++i) stored[i] = d.ev[i].block_id;
  serve(pool, NULL, b, 32); /* evicts 2 (the tail first: pages are freed last first) */
  drain(pool, &d);
  cr_assert_eq(d.n, 4, "2 removed then 2 stored");
  for (int i = 0; i < 2; ++i) {
    cr_assert_eq(d.ev[i].type, BSPA_KV_EVENT_REMOVED);
    cr_assert_eq(d.ev[i].block_id, stored[3 - i]);
    cr_assert_eq(d.ev[i].token_offset, -1);
  }
  for (int i = 2; i < 4; ++i) {
    cr_assert_eq(d.ev[i].type, BSPA_KV_EVENT_STORED);
    cr_assert_eq(d.ev[i].block_id >> 32, 2, "a reused page has generation 2");
  }
  bspa_pool_destroy(pool);
}

Test(events, overflow_clears_the_queue_and_the_index) {
  bspa_pool *pool = events_pool(8, 16, 2);
  int32_t t[64];
  test_fill_tokens(t, 64, 5);
  serve(pool, "x", t, 64); /* 4 stored records into a queue of 2 */
  drained d;
  drain(pool, &d);
  cr_assert_geq(d.n, 1);
  cr_assert_eq(d.ev[0].type, BSPA_KV_EVENT_ALL_CLEARED);
  cr_assert_eq(d.ev[0].page, -1);
  cr_assert_eq(d.ev[0].block_id, 0);
  EXPECT_OK(bspa_pool_check(pool));
  /* What the events after the clear announce is all the pool can match. */
  int64_t announced = 0;
  for (int64_t i = 1; i < d.n; ++i) announced += d.ev[i].type == BSPA_KV_EVENT_STORED;
  bspa_seq *s = test_seq_salted(pool, "x", 0);
  int64_t cached = 0;
  EXPECT_OK(bspa_seq_match(s, t, 64, &cached));
  cr_assert_eq(cached, 0, "the first page was unpublished by the clear, so nothing after it matches either");
  bspa_seq_destroy(s);
  cr_assert_leq(announced, 1);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* Stored events since the last "all cleared" name parents stored after it (or 0): what a
 * router rebuilds from them is a tree of chains from the root. */
static void expect_no_orphans(const drained *d) {
  int64_t from = 0;
  for (int64_t i = 0; i < d->n; ++i)
    if (d->ev[i].type == BSPA_KV_EVENT_ALL_CLEARED) from = i + 1;
  for (int64_t i = from; i < d->n; ++i) {
    if (d->ev[i].type != BSPA_KV_EVENT_STORED || d->ev[i].parent_block_id == 0) continue;
    int found = 0;
    for (int64_t j = from; j < i; ++j)
      found |= d->ev[j].type == BSPA_KV_EVENT_STORED && d->ev[j].block_id == d->ev[i].parent_block_id;
    cr_assert(found, "event %lld: stored under parent %#llx, which no event since the clear stored", (long long)i,
              (unsigned long long)d->ev[i].parent_block_id);
  }
}

/* A prompt committed in chunks, with an overflow between them: the chain's first pages left
 * the index with the clear, so the next chunk's pages would hang under parents nobody has;
 * the chain is published again from its first page and the whole prompt matches. */
Test(events, a_chain_overflowed_between_chunks_is_published_again_from_its_start) {
  bspa_pool *pool = events_pool(16, 16, 6);
  int32_t a[65], b[64];
  test_fill_tokens(a, 65, 1000);
  test_fill_tokens(b, 64, 5000);
  bspa_seq *sa = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(sa, a, 64));
  EXPECT_OK(bspa_seq_commit(sa, 16));
  EXPECT_OK(bspa_seq_commit(sa, 32)); /* 2 records */
  serve(pool, NULL, b, 64);           /* 4 more: the queue of 6 is full */
  EXPECT_OK(bspa_seq_commit(sa, 64)); /* page 2 overflows it */
  drained d;
  drain(pool, &d);
  cr_assert_eq(d.ev[0].type, BSPA_KV_EVENT_ALL_CLEARED);
  cr_assert_eq(d.n, 5, "the clear, then the prompt's 4 pages again from the first (got %lld events)", (long long)d.n);
  expect_no_orphans(&d);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_seq_destroy(sa);
  const int64_t cached = matched(pool, a, 65);
  cr_assert_eq(cached, 64, "the whole prompt is matchable again (got %lld)", (long long)cached);
  /* b's pages went with the clear and nothing published them again: no match, as the
   * router (told "all cleared") believes. */
  cr_assert_eq(matched(pool, b, 64), 0);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* An overflow takes a sequence's published chain out of the index; its next commit puts it
 * back even when it adds no full page, as the header promises. */
Test(events, a_commit_without_a_new_page_republishes_an_overflowed_chain) {
  bspa_pool *pool = events_pool(16, 16, 4);
  int32_t a[33], b[48];
  test_fill_tokens(a, 33, 3000);
  test_fill_tokens(b, 48, 8000);
  bspa_seq *sa = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(sa, a, 33));
  EXPECT_OK(bspa_seq_commit(sa, 32)); /* 2 records */
  serve(pool, NULL, b, 48);           /* its third page overflows the queue of 4 */
  EXPECT_OK(bspa_seq_commit(sa, 33)); /* no new full page */
  drained d;
  drain(pool, &d);
  expect_no_orphans(&d);
  const int64_t cached = matched(pool, a, 33);
  cr_assert_eq(cached, 32, "the chain is matchable again (got %lld)", (long long)cached);
  bspa_seq_destroy(sa);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_pool_destroy(pool);
}

/* A queue shorter than the chain overflows again while the chain is published anew: what
 * went in is a chain from the root, the rest stays out, nothing is orphaned. */
Test(events, a_queue_shorter_than_the_chain_leaves_the_rest_out_without_orphans) {
  bspa_pool *pool = events_pool(16, 16, 2);
  int32_t a[129];
  test_fill_tokens(a, 129, 7);
  bspa_seq *sa = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(sa, a, 128));
  for (int64_t c = 16; c <= 128; c += 16) EXPECT_OK(bspa_seq_commit(sa, c));
  drained d;
  drain(pool, &d);
  expect_no_orphans(&d);
  EXPECT_OK(bspa_pool_check(pool));
  bspa_seq_destroy(sa);
  int64_t announced = 0;
  for (int64_t i = 0; i < d.n; ++i) announced += d.ev[i].type == BSPA_KV_EVENT_STORED;
  const int64_t cached = matched(pool, a, 129);
  cr_assert_eq(cached, 16 * announced, "the pool matches exactly the %lld pages announced since the clear (got %lld)",
               (long long)announced, (long long)cached);
  bspa_pool_destroy(pool);
}

Test(events, msgpack_drain_encodes_a_vllm_event_batch) {
  bspa_pool *pool = events_pool(4, 16, 8);
  int32_t t[17];
  test_fill_tokens(t, 17, 1);
  serve(pool, NULL, t, 17);
  size_t size = 0;
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 2.0, 0, NULL, 0, &size));
  unsigned char buf[512];
  cr_assert_lt(size, sizeof buf);
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 2.0, 0, buf, sizeof buf, &size));
  /* [2.0, [{"type": "BlockStored", ...}], 0]: a map of 9 keys (vLLM's 8 and the dtype) */
  static const unsigned char head[] = {0x93, 0xcb, 0x40, 0x00, 0,   0,   0,   0,   0,   0,   0x91, 0x89, 0xa4, 't', 'y',
                                       'p',  'e',  0xab, 'B',  'l', 'o', 'c', 'k', 'S', 't', 'o',  'r',  'e',  'd'};
  cr_assert_eq(memcmp(buf, head, sizeof head), 0);
  cr_assert_eq(buf[size - 1], 0x00, "dp_rank 0");
  static const char dtype_kv[] =
      "\xaekv_cache_dtype\xa8"
      "bfloat16";
  cr_assert_eq(memcmp(buf + size - 1 - (sizeof dtype_kv - 1), dtype_kv, sizeof dtype_kv - 1), 0,
               "the map's last key is the pool's dtype");
  /* Drained: the next batch is empty, [ts, [], nil] with dp_rank < 0. */
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 2.0, -1, buf, sizeof buf, &size));
  cr_assert_eq(size, 12);
  cr_assert_eq(buf[10], 0x90);
  cr_assert_eq(buf[11], 0xc0);
  bspa_pool_destroy(pool);
}

/* msgpack's shortest unsigned form, as the encoder writes a block id. */
static size_t mp_uint(unsigned char *p, uint64_t v) {
  if (v < 0x80) return p[0] = (unsigned char)v, 1;
  int width = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
  p[0] = (unsigned char)(width == 1 ? 0xcc : width == 2 ? 0xcd : width == 4 ? 0xce : 0xcf);
  for (int k = 0; k < width; ++k) p[1 + k] = (unsigned char)(v >> (8 * (width - 1 - k)));
  return (size_t)(1 + width);
}

static size_t mp_str(unsigned char *p, const char *s) {
  const size_t n = strlen(s);
  cr_assert_lt(n, 32, "a fixstr holds at most 31 bytes");
  p[0] = (unsigned char)(0xa0 | n);
  memcpy(p + 1, s, n);
  return n + 1;
}

/* Evictions: one "BlockRemoved" map of the removed ids in order, then the stored group. */
Test(events, msgpack_removals_share_one_block_removed_map) {
  bspa_pool *pool = events_pool(4, 16, 64);
  int32_t a[64], b[32];
  test_fill_tokens(a, 64, 1000);
  test_fill_tokens(b, 32, 9000);
  serve(pool, NULL, a, 64);
  drained d;
  drain(pool, &d);
  cr_assert_eq(d.n, 4);
  serve(pool, NULL, b, 32); /* evicts the last two pages of a, tail first */
  unsigned char buf[512], want[128];
  size_t size = 0, n = 0;
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 0.5, 3, buf, sizeof buf, &size));
  want[n++] = 0x93;
  want[n++] = 0xcb;
  static const unsigned char half[8] = {0x3f, 0xe0, 0, 0, 0, 0, 0, 0};
  memcpy(want + n, half, 8);
  n += 8;
  want[n++] = 0x92; /* two events: the removal, the stored pages of b */
  want[n++] = 0x83;
  n += mp_str(want + n, "type");
  n += mp_str(want + n, "BlockRemoved");
  n += mp_str(want + n, "block_hashes");
  want[n++] = 0x92;
  n += mp_uint(want + n, d.ev[3].block_id);
  n += mp_uint(want + n, d.ev[2].block_id);
  n += mp_str(want + n, "medium");
  n += mp_str(want + n, "GPU");
  want[n++] = 0x89; /* the stored map (9 keys, no salt) */
  cr_assert_gt(size, n);
  cr_assert_eq(memcmp(buf, want, n), 0, "the removal's bytes");
  cr_assert_eq(buf[size - 1], 0x03, "dp_rank 3");
  bspa_pool_destroy(pool);
}

/* An overflow is one "AllBlocksCleared" map with its type only, first in the batch. */
Test(events, msgpack_overflow_is_an_all_blocks_cleared_map) {
  bspa_pool *pool = events_pool(8, 16, 2);
  int32_t t[64];
  test_fill_tokens(t, 64, 5);
  serve(pool, NULL, t, 64); /* 4 stored records into a queue of 2 */
  unsigned char buf[1024], want[64];
  size_t size = 0, n = 0;
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 0.0, -1, buf, sizeof buf, &size));
  static const unsigned char head[10] = {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0};
  memcpy(want, head, sizeof head);
  n = sizeof head;
  cr_assert(buf[n] >= 0x91 && buf[n] <= 0x93, "an array of the clear and at most 2 events: %#x", buf[n]);
  want[n] = buf[n];
  ++n;
  want[n++] = 0x81;
  n += mp_str(want + n, "type");
  n += mp_str(want + n, "AllBlocksCleared");
  cr_assert_geq(size, n + 1);
  cr_assert_eq(memcmp(buf, want, n), 0, "the clear's bytes");
  cr_assert_eq(buf[size - 1], 0xc0, "dp_rank nil");
  if (buf[sizeof head] == 0x91) cr_assert_eq(size, n + 1, "nothing but the clear and the rank");
  bspa_pool_destroy(pool);
}

/* Every pool dtype is named in its stored pages' maps, in vLLM's --kv-cache-dtype spelling. */
Test(events, msgpack_stored_pages_say_the_pool_dtype) {
  static const struct {
    bspa_dtype dtype;
    const char *name;
  } cases[] = {{BSPA_DTYPE_BF16, "bfloat16"},
               {BSPA_DTYPE_F16, "float16"},
               {BSPA_DTYPE_F32, "float32"},
               {BSPA_DTYPE_FP8_E4M3, "fp8_e4m3"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    bspa_pool *pool = events_pool_of(4, 16, 8, cases[c].dtype);
    int32_t t[33];
    test_fill_tokens(t, 33, 3);
    serve(pool, "tenant", t, 33);
    unsigned char buf[512];
    size_t size = 0;
    EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 0.0, -1, buf, sizeof buf, &size));
    char want[64];
    const int n =
        snprintf(want, sizeof want, "\xaekv_cache_dtype%c%s", (char)(0xa0 | strlen(cases[c].name)), cases[c].name);
    /* The last key of the one BlockStored (after cache_salt), just before the nil rank. */
    cr_assert_eq(buf[size - 1], 0xc0);
    cr_assert_eq(memcmp(buf + size - 1 - n, want, (size_t)n), 0, "dtype %s", cases[c].name);
    bspa_pool_destroy(pool);
  }
}

/* msgpack ints as the encoder may write them (fixint, uint8-32, int8-32). */
static int64_t mp_int(const unsigned char **pp) {
  const unsigned char *p = *pp;
  int64_t v;
  if (p[0] < 0x80)
    v = p[0], *pp += 1;
  else if (p[0] >= 0xe0)
    v = (int8_t)p[0], *pp += 1;
  else if (p[0] == 0xcc)
    v = p[1], *pp += 2;
  else if (p[0] == 0xcd)
    v = (p[1] << 8) | p[2], *pp += 3;
  else if (p[0] == 0xce)
    v = ((int64_t)p[1] << 24) | (p[2] << 16) | (p[3] << 8) | p[4], *pp += 5;
  else if (p[0] == 0xd0)
    v = (int8_t)p[1], *pp += 2;
  else if (p[0] == 0xd1)
    v = (int16_t)((p[1] << 8) | p[2]), *pp += 3;
  else if (p[0] == 0xd2)
    v = (int32_t)(((uint32_t)p[1] << 24) | (p[2] << 16) | (p[3] << 8) | p[4]), *pp += 5;
  else
    cr_assert_fail("unexpected msgpack byte %#x", p[0]);
  return v;
}

/* Every width of token id, mixed at random (the vector path handles runs of ids >= 256,
 * the general path the rest), must come back as it went in. */
Test(events, msgpack_token_ids_of_every_width_round_trip) {
  enum { kPages = 40, kPs = 64 };
  bspa_pool *pool = events_pool(kPages + 1, kPs, 64);
  static int32_t t[kPages * kPs];
  test_rng rng = {test_seed()};
  for (int i = 0; i < kPages * kPs; ++i) {
    const uint64_t r = test_rng_next(&rng);
    switch ((r >> 32) % (i < kPs * kPages / 2 ? 16 : 5)) { /* the first half: mostly wide ids */
      case 0: t[i] = (int32_t)(r % 128); break;
      case 1: t[i] = 128 + (int32_t)(r % 128); break;
      case 2: t[i] = -1 - (int32_t)(r % 70000); break;
      case 3: t[i] = 256 + (int32_t)(r % (65536 - 256)); break;
      default: t[i] = 65536 + (int32_t)(r % (INT32_MAX - 65536)); break;
    }
  }
  bspa_seq *s = test_seq_salted(pool, NULL, 0);
  EXPECT_OK(bspa_seq_append(s, t, kPages * kPs));
  EXPECT_OK(bspa_seq_commit(s, kPages * kPs));
  bspa_seq_destroy(s);
  static unsigned char buf[kPages * kPs * 5 + 4096];
  size_t size = 0;
  EXPECT_OK(bspa_pool_events_drain_msgpack(pool, 0.0, 0, buf, sizeof buf, &size));
  /* One BlockStored: find "token_ids", then an array32/16 header and the ids. */
  const unsigned char *p = NULL;
  for (size_t i = 0; i + 9 < size; ++i)
    if (memcmp(buf + i, "\xa9token_ids", 10) == 0) p = buf + i + 10;
  cr_assert_not_null(p);
  cr_assert_eq(p[0], 0xdc, "an array16 of %d ids", kPages * kPs);
  cr_assert_eq((p[1] << 8) | p[2], kPages * kPs);
  p += 3;
  for (int i = 0; i < kPages * kPs; ++i) {
    const int64_t v = mp_int(&p);
    cr_assert_eq(v, t[i], "token %d: %lld, want %d", i, (long long)v, t[i]);
  }
  cr_assert(memcmp(p,
                   "\xaa"
                   "block_size",
                   11) == 0,
            "the ids end where block_size begins");
  bspa_pool_destroy(pool);
}

Test(events, bad_input_errors_and_loses_nothing) {
  bspa_pool *off = events_pool(4, 16, 0);
  int64_t n = -1, nt = -1;
  size_t size = 0;
  bspa_kv_event ev[4];
  int32_t tok[64];
  unsigned char buf[256];
  EXPECT_STATUS(bspa_pool_events_drain(off, ev, 4, tok, 64, &n, &nt), BSPA_ERR_INVALID_STATE);
  cr_assert(strstr(bspa_last_error(), "events_capacity"), "%s", bspa_last_error());
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(off, 0.0, 0, buf, sizeof buf, &size), BSPA_ERR_INVALID_STATE);
  bspa_pool_destroy(off);

  bspa_pool *pool = events_pool(8, 16, 16);
  int32_t t[48];
  test_fill_tokens(t, 48, 300);
  serve(pool, "s", t, 48); /* 3 stored */
  EXPECT_STATUS(bspa_pool_events_drain(NULL, ev, 4, tok, 64, &n, &nt), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 4, tok, 64, NULL, &nt), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 4, tok, 64, &n, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain(pool, NULL, 4, tok, 64, &n, &nt), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 4, NULL, 64, &n, &nt), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, -1, tok, 64, &n, &nt), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 4, tok, -1, &n, &nt), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 2, tok, 64, &n, &nt), BSPA_ERR_BUFFER_TOO_SMALL);
  cr_assert_eq(n, 3);
  cr_assert_eq(nt, 48);
  EXPECT_STATUS(bspa_pool_events_drain(pool, ev, 4, tok, 47, &n, &nt), BSPA_ERR_BUFFER_TOO_SMALL);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(NULL, 0.0, 0, buf, sizeof buf, &size), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(pool, 0.0, 0, buf, sizeof buf, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(pool, 0.0, 0, NULL, 10, &size), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(pool, NAN, 0, buf, sizeof buf, &size), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(pool, INFINITY, 0, buf, sizeof buf, &size), BSPA_ERR_INVALID_ARGUMENT);
  memset(buf, 0xee, sizeof buf);
  EXPECT_STATUS(bspa_pool_events_drain_msgpack(pool, 0.0, 0, buf, 20, &size), BSPA_ERR_BUFFER_TOO_SMALL);
  cr_assert_gt(size, 20);
  cr_assert_eq(buf[20], 0xee, "nothing written past the capacity");
  /* Size queries drain nothing either. */
  EXPECT_OK(bspa_pool_events_drain(pool, NULL, 0, NULL, 0, &n, &nt));
  cr_assert_eq(n, 3);
  EXPECT_OK(bspa_pool_events_drain(pool, ev, 4, tok, 64, &n, &nt));
  cr_assert_eq(n, 3, "every failed call above left the three events in the queue");
  for (int i = 0; i < 3; ++i) cr_assert_eq(memcmp(tok + 16 * i, t + 16 * i, 64), 0);

  /* Options: a version 1 struct ends before events_capacity; negative is refused. */
  bspa_pool_options o;
  EXPECT_OK(bspa_pool_options_init(&o));
  o.num_layers = 0;
  o.num_pages = 4;
  o.events_capacity = -1;
  bspa_pool *p = NULL;
  EXPECT_STATUS(bspa_pool_create(&p, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(bspa_last_error(), "events_capacity = -1"), "%s", bspa_last_error());
  cr_assert_null(p);
  o.version = 1;
  EXPECT_OK(bspa_pool_create(&p, &o));
  EXPECT_STATUS(bspa_pool_events_drain(p, NULL, 0, NULL, 0, &n, &nt), BSPA_ERR_INVALID_STATE);
  bspa_pool_destroy(p);
  bspa_pool_destroy(pool);
}

/* Four threads serve overlapping prompts of two tenants through a pool small enough to
 * evict, a fifth drains. A router replaying the drained history must never meet a
 * removal of a block it does not hold, a store of a block it holds, or (outside an
 * overflow) a parent it never saw stored. */
enum { kThreads = 4, kRounds = 300, kPage = 16 };
static bspa_pool *g_pool;
static atomic_int g_done;

static void *worker(void *arg) {
  test_rng rng = {(uint64_t)(uintptr_t)arg * 7919u + 1};
  int32_t t[10 * kPage];
  for (int r = 0; r < kRounds; ++r) {
    const int64_t n = 1 + (int64_t)(test_rng_next(&rng) % (10 * kPage));
    const int32_t shared = (int32_t)(test_rng_next(&rng) % 3);
    for (int64_t i = 0; i < n; ++i)
      t[i] = i < 3 * kPage ? shared * 1000 + (int32_t)i : (int32_t)(test_rng_next(&rng) % 50);
    bspa_seq *s = test_seq_salted(g_pool, (r & 1) ? "a" : "b", 0);
    int64_t cached = 0;
    if (bspa_seq_match(s, t, n, &cached) == BSPA_OK && bspa_seq_append(s, t + cached, n - cached) == BSPA_OK)
      bspa_seq_commit(s, n);
    bspa_seq_destroy(s);
  }
  atomic_fetch_add(&g_done, 1);
  return NULL;
}

typedef struct held {
  uint64_t *ids;
  size_t n, cap;
} held;
static long find_id(const held *h, uint64_t id) {
  for (size_t i = 0; i < h->n; ++i)
    if (h->ids[i] == id) return (long)i;
  return -1;
}

Test(events, threaded_history_replays_without_contradiction) {
  g_pool = events_pool(48, kPage, 1 << 14);
  atomic_store(&g_done, 0);
  pthread_t th[kThreads];
  for (uintptr_t i = 0; i < kThreads; ++i) pthread_create(&th[i], NULL, worker, (void *)(i + 1));
  held h = {calloc(1 << 16, sizeof(uint64_t)), 0, 1 << 16};
  static bspa_kv_event ev[1 << 14];
  static int32_t tok[(1 << 14) * kPage];
  int64_t stored = 0, removed = 0;
  for (int last = 0; !last;) {
    last = atomic_load(&g_done) == kThreads;
    int64_t n = 0, nt = 0;
    EXPECT_OK(bspa_pool_events_drain(g_pool, ev, 1 << 14, tok, (1 << 14) * kPage, &n, &nt));
    for (int64_t i = 0; i < n; ++i) {
      const bspa_kv_event *e = &ev[i];
      if (e->type == BSPA_KV_EVENT_ALL_CLEARED) {
        h.n = 0;
      } else if (e->type == BSPA_KV_EVENT_STORED) {
        cr_assert_eq(find_id(&h, e->block_id), -1, "block %llx stored twice", (unsigned long long)e->block_id);
        /* A parent may have left the index already (an orphan): then it was removed
         * earlier in this history, never stored later. */
        h.ids[h.n++] = e->block_id;
        ++stored;
      } else {
        const long at = find_id(&h, e->block_id);
        cr_assert_geq(at, 0, "removal of block %llx that is not held", (unsigned long long)e->block_id);
        h.ids[at] = h.ids[--h.n];
        ++removed;
      }
    }
  }
  for (int i = 0; i < kThreads; ++i) pthread_join(th[i], NULL);
  cr_assert_gt(stored, 100);
  cr_assert_gt(removed, 10);
  struct bspa_pool_stats st;
  EXPECT_OK(bspa_pool_stats(g_pool, &st));
  cr_assert_eq(st.pages_in_use, 0);
  cr_assert_eq((int64_t)h.n, st.pages_cached, "the router holds exactly the published pages (all cached now)");
  EXPECT_OK(bspa_pool_check(g_pool));
  free(h.ids);
  bspa_pool_destroy(g_pool);
}
