/* See kv_event_publisher.h. */
#include "kv_event_publisher.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

typedef struct kept_batch {
  int64_t seq;
  unsigned char *payload;
  size_t size;
} kept_batch;

struct kv_publisher {
  void *ctx;
  int own_ctx;
  void *pub;
  void *replay;
  char *topic;
  int32_t dp_rank;
  int linger_ms;
  int64_t next_seq;
  /* The replay buffer: a ring of the last `keep` batches, oldest at `head`. */
  kept_batch *kept;
  size_t keep, head, count;
  /* The drain buffer, grown to the largest batch seen. */
  unsigned char *buf;
  size_t buf_size;
  char error[256];
};

static _Thread_local char create_error[256];

static int fail(kv_publisher *pub, const char *fmt, ...) {
  char *dst = pub ? pub->error : create_error;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, 256, fmt, ap);
  va_end(ap);
  return -1;
}

static void put_be64(unsigned char *p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = (unsigned char)v;
}

static uint64_t get_be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

/* vLLM's rule (ZmqEventPublisher._socket_setup): bind a wildcard or local transport,
 * connect to anything else. */
static int binds(const char *endpoint) {
  return strchr(endpoint, '*') || strstr(endpoint, "::") || !strncmp(endpoint, "ipc://", 6) ||
         !strncmp(endpoint, "inproc://", 9);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* An XPUB socket passes each subscription up as a message whose first byte is 1. */
static int wait_for_subscribers(kv_publisher *p, int count, int wait_ms) {
  long long deadline = now_ms() + (wait_ms > 0 ? wait_ms : 0);
  int seen = 0;
  while (seen < count) {
    long long left = deadline - now_ms();
    if (left <= 0) return fail(p, "%d of %d subscribers joined within %d ms", seen, count, wait_ms);
    zmq_pollitem_t item = {p->pub, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, left) < 0) return fail(p, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    unsigned char msg[256];
    int n = zmq_recv(p->pub, msg, sizeof msg, 0);
    if (n < 0) return fail(p, "zmq_recv on the XPUB socket: %s", zmq_strerror(zmq_errno()));
    if (n >= 1 && msg[0] == 1) ++seen;
  }
  return 0;
}

int kv_publisher_create(kv_publisher **out, void *zmq_context, const kv_publisher_options *o) {
  if (!out) return fail(NULL, "kv_publisher_create: out is NULL");
  *out = NULL;
  if (!o || !o->endpoint) return fail(NULL, "kv_publisher_create: options or options->endpoint is NULL");
  if (o->wait_subscribers < 0 || o->wait_ms < 0 || o->hwm < 0 || o->linger_ms < 0)
    return fail(NULL, "kv_publisher_create: wait_subscribers %d, wait_ms %d, hwm %d, linger_ms %d (each must be >= 0)",
                o->wait_subscribers, o->wait_ms, o->hwm, o->linger_ms);
  kv_publisher *p = calloc(1, sizeof *p);
  if (!p) return fail(NULL, "kv_publisher_create: out of memory");
  p->keep = o->replay_batches ? o->replay_batches : 10000;
  p->kept = calloc(p->keep, sizeof *p->kept);
  p->topic = strdup(o->topic ? o->topic : "");
  p->dp_rank = o->dp_rank;
  p->linger_ms = o->linger_ms;
  p->buf_size = 1 << 16;
  p->buf = malloc(p->buf_size);
  p->ctx = zmq_context;
  if (!p->ctx) {
    p->ctx = zmq_ctx_new();
    p->own_ctx = 1;
  }
  if (!p->kept || !p->topic || !p->buf || !p->ctx) {
    kv_publisher_destroy(p);
    return fail(NULL, "kv_publisher_create: out of memory (replay_batches %zu)", o->replay_batches);
  }
  int hwm = o->hwm ? o->hwm : 100000;
  p->pub = zmq_socket(p->ctx, o->wait_subscribers ? ZMQ_XPUB : ZMQ_PUB);
  int rc = p->pub ? zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm) : -1;
  if (rc == 0) rc = binds(o->endpoint) ? zmq_bind(p->pub, o->endpoint) : zmq_connect(p->pub, o->endpoint);
  if (rc != 0) {
    fail(NULL, "kv_publisher_create: endpoint \"%s\": %s", o->endpoint, zmq_strerror(zmq_errno()));
    kv_publisher_destroy(p);
    return -1;
  }
  if (o->replay_endpoint) {
    p->replay = zmq_socket(p->ctx, ZMQ_ROUTER);
    /* A ROUTER drops what passes its high-water mark: a replay of every kept batch must fit. */
    int replay_hwm = p->keep + 2 > (size_t)hwm ? (p->keep + 2 > INT_MAX ? INT_MAX : (int)(p->keep + 2)) : hwm;
    if (!p->replay || zmq_setsockopt(p->replay, ZMQ_SNDHWM, &replay_hwm, sizeof replay_hwm) != 0 ||
        zmq_bind(p->replay, o->replay_endpoint) != 0) {
      fail(NULL, "kv_publisher_create: replay_endpoint \"%s\": %s", o->replay_endpoint, zmq_strerror(zmq_errno()));
      kv_publisher_destroy(p);
      return -1;
    }
  }
  if (o->wait_subscribers && wait_for_subscribers(p, o->wait_subscribers, o->wait_ms) != 0) {
    fail(NULL, "kv_publisher_create: %s", p->error);
    kv_publisher_destroy(p);
    return -1;
  }
  *out = p;
  return 0;
}

static int send_frames(void *sock, const void *a, size_t an, const void *b, size_t bn, const void *c, size_t cn,
                       const void *d, size_t dn, int frames) {
  const void *data[4] = {a, b, c, d};
  size_t size[4] = {an, bn, cn, dn};
  for (int i = 0; i < frames; ++i)
    if (zmq_send(sock, data[i], size[i], i + 1 < frames ? ZMQ_SNDMORE : 0) < 0) return -1;
  return 0;
}

int kv_publisher_send(kv_publisher *p, const void *payload, size_t size, int64_t *seq) {
  if (!p || (!payload && size)) return fail(p, "kv_publisher_send: publisher or payload is NULL");
  /* Kept before it is sent: the copy can fail, a send that happened cannot be undone. */
  unsigned char *copy = malloc(size ? size : 1);
  if (!copy) return fail(p, "kv_publisher_send: out of memory for a %zu-byte batch", size);
  if (size) memcpy(copy, payload, size);
  unsigned char seq_be[8];
  put_be64(seq_be, (uint64_t)p->next_seq);
  if (send_frames(p->pub, p->topic, strlen(p->topic), seq_be, 8, payload, size, NULL, 0, 3) != 0) {
    free(copy);
    return fail(p, "kv_publisher_send: zmq_send: %s", zmq_strerror(zmq_errno()));
  }
  size_t slot = (p->head + p->count) % p->keep;
  if (p->count == p->keep) { /* full: the oldest goes */
    free(p->kept[p->head].payload);
    slot = p->head;
    p->head = (p->head + 1) % p->keep;
  } else {
    ++p->count;
  }
  p->kept[slot] = (kept_batch){p->next_seq, copy, size};
  if (seq) *seq = p->next_seq;
  ++p->next_seq;
  return kv_publisher_serve_replay(p, 0) < 0 ? -1 : 0;
}

int kv_publisher_publish(kv_publisher *p, bspa_pool *pool, double ts, int64_t *seq) {
  if (seq) *seq = -1;
  if (!p) return fail(NULL, "kv_publisher_publish: publisher is NULL");
  size_t size = 0;
  bspa_status s;
  /* A batch larger than the buffer is not drained: grow the buffer and ask again (events
   * recorded meanwhile can make it larger still). */
  while ((s = bspa_pool_events_drain_msgpack(pool, ts, p->dp_rank, p->buf, p->buf_size, &size)) ==
         BSPA_ERR_BUFFER_TOO_SMALL) {
    size_t grown = size + size / 2;
    unsigned char *b = realloc(p->buf, grown);
    if (!b) return fail(p, "kv_publisher_publish: out of memory for a %zu-byte batch", grown);
    p->buf = b;
    p->buf_size = grown;
  }
  if (s != BSPA_OK)
    return fail(p, "kv_publisher_publish: bspa_pool_events_drain_msgpack: %s: %s", bspa_status_string(s),
                bspa_last_error());
  /* [ts, [], rank]: fixarray 3, float64 (9 bytes), then the events array; 0x90 = empty. */
  if (size > 10 && p->buf[10] == 0x90) return kv_publisher_serve_replay(p, 0) < 0 ? -1 : 0;
  return kv_publisher_send(p, p->buf, size, seq);
}

/* One request: [identity, "", 8-byte first seq]. Anything else is ignored, as vLLM does. */
static int answer(kv_publisher *p) {
  zmq_msg_t part[3];
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->replay, 0) < 0) {
      zmq_msg_close(&m);
      for (int i = 0; i < n && i < 3; ++i) zmq_msg_close(&part[i]);
      return fail(p, "replay: zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
    }
    more = zmq_msg_more(&m);
    if (n < 3) {
      zmq_msg_init(&part[n]);
      zmq_msg_move(&part[n], &m); /* zmq_msg_t must not be copied by assignment */
    }
    zmq_msg_close(&m);
    ++n;
  }
  int rc = 0;
  if (n == 3 && zmq_msg_size(&part[1]) == 0 && zmq_msg_size(&part[2]) == 8) {
    const void *id = zmq_msg_data(&part[0]);
    size_t id_len = zmq_msg_size(&part[0]);
    uint64_t first = get_be64(zmq_msg_data(&part[2])); /* unsigned, as vLLM reads it */
    unsigned char seq_be[8];
    for (size_t i = 0; i < p->count && rc == 0; ++i) {
      const kept_batch *k = &p->kept[(p->head + i) % p->keep];
      if ((uint64_t)k->seq < first) continue;
      put_be64(seq_be, (uint64_t)k->seq);
      rc = send_frames(p->replay, id, id_len, "", 0, seq_be, 8, k->payload, k->size, 4);
    }
    put_be64(seq_be, UINT64_MAX); /* -1: the end of the replay */
    if (rc == 0) rc = send_frames(p->replay, id, id_len, "", 0, seq_be, 8, "", 0, 4);
    if (rc != 0) fail(p, "replay: zmq_send: %s", zmq_strerror(zmq_errno()));
  }
  for (int i = 0; i < (n < 3 ? n : 3); ++i) zmq_msg_close(&part[i]);
  return rc;
}

int kv_publisher_serve_replay(kv_publisher *p, long timeout_ms) {
  if (!p) return fail(NULL, "kv_publisher_serve_replay: publisher is NULL");
  if (!p->replay) return 0;
  int served = 0;
  for (;;) {
    zmq_pollitem_t item = {p->replay, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&item, 1, served ? 0 : timeout_ms);
    if (rc < 0) return fail(p, "replay: zmq_poll: %s", zmq_strerror(zmq_errno()));
    if (rc == 0) return served;
    if (answer(p) != 0) return -1;
    ++served;
  }
}

void *kv_publisher_replay_socket(kv_publisher *p) { return p ? p->replay : NULL; }

int64_t kv_publisher_next_seq(const kv_publisher *p) { return p ? p->next_seq : 0; }

const char *kv_publisher_error(const kv_publisher *p) { return p ? p->error : create_error; }

void kv_publisher_destroy(kv_publisher *p) {
  if (!p) return;
  int linger = p->linger_ms;
  if (p->pub) {
    zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(p->pub);
  }
  if (p->replay) {
    zmq_setsockopt(p->replay, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(p->replay);
  }
  if (p->own_ctx && p->ctx) zmq_ctx_term(p->ctx);
  if (p->kept)
    for (size_t i = 0; i < p->count; ++i) free(p->kept[(p->head + i) % p->keep].payload);
  free(p->kept);
  free(p->topic);
  free(p->buf);
  free(p);
}
