/* A C engine loop that publishes its pool's KV cache events over ZMQ for a KV-aware router
 * (NVIDIA Dynamo's, llm-d's), with kv_event_publisher.c: after each engine step of a
 * synthetic two-tenant workload it drains the pool's events as one vLLM EventBatch and sends
 * it as (topic, 8-byte big-endian seq, payload) on a PUB socket, keeping the last batches for
 * replay on a ROUTER socket. Usage (in line comments: the endpoints hold a slash and a star):
 */
//   kv_events_publisher [--endpoint tcp://*:5557] [--replay-endpoint tcp://*:5558]
//       [--topic T] [--steps 200] [--pages 48] [--events-capacity 4096]
//       [--replay-batches 10000] [--wait-subscribers N --wait-ms 10000] [--ts-step]
//       [--serve-until-eof]
/*
 * The endpoint is bound when it has a star (any address) or is ipc:// / inproc://, else
 * connected, as vLLM does; no replay socket without --replay-endpoint.
 * --ts-step stamps batch k's ts with its step number instead of the wall clock (so a
 * checker can rebuild the exact bytes); --serve-until-eof prints "published N" after the
 * last step and keeps answering replay requests until its standard input closes.
 * Exit status 0, 1 on a failure, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "kv_event_publisher.h"
#include "kv_events_workload.h"

static double wall_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int usage(const char *what) {
  fprintf(stderr, "kv_events_publisher: %s (see the comment at the top of kv_events_publisher.c)\n", what);
  return 2;
}

/* Answers replay requests until standard input reaches end of file. */
static int serve_until_eof(kv_publisher *pub) {
  void *replay = kv_publisher_replay_socket(pub);
  for (;;) {
    zmq_pollitem_t items[2] = {{NULL, STDIN_FILENO, ZMQ_POLLIN, 0}, {replay, 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, replay ? 2 : 1, -1) < 0) {
      fprintf(stderr, "zmq_poll: %s\n", zmq_strerror(zmq_errno()));
      return -1;
    }
    if (items[0].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
      char c;
      ssize_t n = read(STDIN_FILENO, &c, 1);
      if (n <= 0) return 0; /* end of file (or a broken pipe): done */
    }
    if (replay && (items[1].revents & ZMQ_POLLIN) && kv_publisher_serve_replay(pub, 0) < 0) {
      fprintf(stderr, "%s\n", kv_publisher_error(pub));
      return -1;
    }
  }
}

int main(int argc, char **argv) {
  kv_publisher_options o = {.endpoint = "tcp://*:5557", .wait_ms = 10000, .linger_ms = 1000};
  long steps = 200, pages = 48, capacity = 4096;
  int ts_step = 0, until_eof = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--ts-step")) {
      ts_step = 1;
    } else if (!strcmp(a, "--serve-until-eof")) {
      until_eof = 1;
    } else if (!v) {
      return usage("an option without its value, or an unknown option");
    } else {
      ++i;
      if (!strcmp(a, "--endpoint"))
        o.endpoint = v;
      else if (!strcmp(a, "--replay-endpoint"))
        o.replay_endpoint = v;
      else if (!strcmp(a, "--topic"))
        o.topic = v;
      else if (!strcmp(a, "--steps"))
        steps = strtol(v, NULL, 10);
      else if (!strcmp(a, "--pages"))
        pages = strtol(v, NULL, 10);
      else if (!strcmp(a, "--events-capacity"))
        capacity = strtol(v, NULL, 10);
      else if (!strcmp(a, "--replay-batches"))
        o.replay_batches = (size_t)strtoul(v, NULL, 10);
      else if (!strcmp(a, "--wait-subscribers"))
        o.wait_subscribers = atoi(v);
      else if (!strcmp(a, "--wait-ms"))
        o.wait_ms = atoi(v);
      else
        return usage(a);
    }
  }
  if (steps < 0 || pages <= 0 || capacity <= 0) return usage("--steps >= 0, --pages > 0, --events-capacity > 0");

  bspa_pool *pool = workload_pool(pages, capacity);
  if (!pool) return 1;
  kv_publisher *pub = NULL;
  if (kv_publisher_create(&pub, NULL, &o) != 0) {
    fprintf(stderr, "%s\n", kv_publisher_error(NULL));
    bspa_pool_destroy(pool);
    return 1;
  }
  int rc = 0;
  for (long step = 0; step < steps && rc == 0; ++step) {
    if (workload_step(pool, (int)step) != 0) {
      rc = 1;
    } else if (kv_publisher_publish(pub, pool, ts_step ? (double)step : wall_seconds(), NULL) != 0) {
      fprintf(stderr, "step %ld: %s\n", step, kv_publisher_error(pub));
      rc = 1;
    }
  }
  if (rc == 0) {
    printf("published %lld\n", (long long)kv_publisher_next_seq(pub));
    fflush(stdout);
    if (until_eof && serve_until_eof(pub) != 0) rc = 1;
  }
  kv_publisher_destroy(pub);
  bspa_pool_destroy(pool);
  return rc;
}
