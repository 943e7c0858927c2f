/* A KV cache event publisher over libzmq for C/C++ runtimes, the way vLLM's
 * ZmqEventPublisher (vllm/distributed/kv_events.py) publishes: each batch that
 * bspa_pool_events_drain_msgpack drains goes out on a PUB socket as three frames
 * (topic, 8-byte big-endian sequence number from 0, msgpack EventBatch), and the last
 * `replay_batches` of them are kept for an optional ROUTER socket that answers replay
 * requests: a request [identity, "", 8-byte big-endian first sequence] is answered with
 * [identity, "", seq, payload] for every kept batch with seq >= first, then
 * [identity, "", -1 as 8 bytes, ""]. A DEALER client sends ("", seq); a REQ client, seq.
 *
 * Copy these two files into a runtime (they need only bspa.h and zmq.h; link -lzmq). One
 * thread uses a publisher (ZMQ sockets are not thread-safe); the pool may be shared.
 *
 * (The usage below is in line comments: its endpoints hold a slash and a star.) */
//   kv_publisher *pub;
//   kv_publisher_options o = {.endpoint = "tcp://*:5557", .replay_endpoint = "tcp://*:5558"};
//   if (kv_publisher_create(&pub, NULL, &o) != 0) ... kv_publisher_error(NULL)
//   per engine step:  kv_publisher_publish(pub, pool, now_seconds, &seq);
//   kv_publisher_destroy(pub);
#ifndef BSPA_EXAMPLES_KV_EVENT_PUBLISHER_H
#define BSPA_EXAMPLES_KV_EVENT_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>

#include <bspa/bspa.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_publisher kv_publisher;

typedef struct kv_publisher_options {
  /* PUB address. As vLLM: bound when it has "*" or "::" or is ipc:// or inproc://,
   * connected otherwise. Required. */
  const char *endpoint;
  /* ROUTER address for replay requests (always bound); NULL = no replay. */
  const char *replay_endpoint;
  const char *topic;     /* first frame of every message; NULL = "" (vLLM's default) */
  size_t replay_batches; /* batches kept for replay; 0 = 10000 (vLLM's buffer_steps) */
  int hwm;               /* PUB send high-water mark; 0 = 100000 (vLLM's) */
  int32_t dp_rank;       /* the batches' data_parallel_rank; < 0 = nil */
  /* Wait in kv_publisher_create until this many subscriptions reached the PUB side (an
   * XPUB socket then, the same on the wire), or wait_ms passed: messages sent before a
   * subscriber has joined are lost to it (ZMQ's "slow joiner"). 0 = do not wait. */
  int wait_subscribers;
  int wait_ms;
  /* How long kv_publisher_destroy keeps sending what ZMQ still has queued (ZMQ_LINGER);
   * 0 = drop it at once, as vLLM's shutdown does. */
  int linger_ms;
} kv_publisher_options;

/* Creates a publisher on `zmq_context` (NULL: a context of its own). Returns 0, or -1
 * with kv_publisher_error(NULL) saying why (*out is then NULL). */
int kv_publisher_create(kv_publisher **out, void *zmq_context, const kv_publisher_options *options);

/* Drains the pool's events (bspa_pool_events_drain_msgpack, with `ts` and the options'
 * dp_rank) and sends them as one batch; *seq (if not NULL) gets its sequence number, or
 * -1 when the queue was empty and nothing was sent. Serves waiting replay requests too.
 * Returns 0, or -1 with kv_publisher_error(pub) (a failed drain loses no events). */
int kv_publisher_publish(kv_publisher *pub, bspa_pool *pool, double ts, int64_t *seq);

/* Sends one encoded batch as the next sequence number (kept for replay). 0 or -1. */
int kv_publisher_send(kv_publisher *pub, const void *payload, size_t size, int64_t *seq);

/* Answers the replay requests waiting on the ROUTER socket, waiting up to timeout_ms
 * (0: only those already there; -1: until one comes). Returns the number answered, or -1. */
int kv_publisher_serve_replay(kv_publisher *pub, long timeout_ms);

/* The ROUTER socket (NULL without replay), e.g. for a zmq_poll of the caller's own. */
void *kv_publisher_replay_socket(kv_publisher *pub);

/* The sequence number the next batch gets. */
int64_t kv_publisher_next_seq(const kv_publisher *pub);

/* The last error of `pub`, or of the last failed kv_publisher_create when pub is NULL. */
const char *kv_publisher_error(const kv_publisher *pub);

/* Closes the sockets, waiting up to the options' linger_ms for queued messages to go. */
void kv_publisher_destroy(kv_publisher *pub);

#ifdef __cplusplus
}
#endif

#endif
