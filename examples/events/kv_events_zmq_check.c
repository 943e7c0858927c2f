/* End-to-end check of the C publisher (CTest kv_events_zmq): runs kv_events_publisher as a
 * process of its own on ipc:// endpoints, subscribes to it, and checks what arrives against
 * the batches that bspa_pool_events_drain_msgpack gives for the same workload on a twin
 * pool: every live message has the topic, the sequence numbers 0, 1, 2, ... and exactly the
 * twin's payload; replay requests (vLLM's protocol) from 0, from near the end and from past
 * the end get the kept batches from there on, then the end marker (-1, ""). The workload
 * evicts (BlockRemoved) and overflows the event queue (AllBlocksCleared) on purpose.
 *
 *   kv_events_zmq_check PATH/TO/kv_events_publisher
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "kv_events_workload.h"

enum { STEPS = 80, PAGES = 24, EVENTS_CAPACITY = 12, KEEP = 8, TIMEOUT_MS = 60000 };
static const char kTopic[] = "bspa-kv";

static int failures;
#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
      ++failures;                                          \
    }                                                      \
  } while (0)

typedef struct batch {
  unsigned char *data;
  size_t size;
} batch;

static uint64_t be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

static int contains(const batch *b, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i + n <= b->size; ++i)
    if (!memcmp(b->data + i, s, n)) return 1;
  return 0;
}

/* The twin: the same steps on a pool of its own, drained as the publisher drains. */
static int expected_batches(batch *out, int *count) {
  bspa_pool *pool = workload_pool(PAGES, EVENTS_CAPACITY);
  if (!pool) return -1;
  *count = 0;
  for (int step = 0; step < STEPS; ++step) {
    if (workload_step(pool, step) != 0) return -1;
    size_t size = 0;
    bspa_status s = bspa_pool_events_drain_msgpack(pool, (double)step, 0, NULL, 0, &size);
    unsigned char *b = malloc(size);
    if (s == BSPA_OK && b) s = bspa_pool_events_drain_msgpack(pool, (double)step, 0, b, size, &size);
    if (s != BSPA_OK || !b) {
      fprintf(stderr, "twin drain: %s: %s\n", bspa_status_string(s), bspa_last_error());
      return -1;
    }
    if (b[10] == 0x90) { /* no events: the publisher sends nothing either */
      free(b);
      continue;
    }
    out[(*count)++] = (batch){b, size};
  }
  bspa_pool_destroy(pool);
  return 0;
}

/* Receives one multipart message into at most `max` parts; returns the part count or -1. */
static int recv_parts(void *sock, zmq_msg_t *parts, int max) {
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
      zmq_msg_close(&m);
      for (int i = 0; i < n && i < max; ++i) zmq_msg_close(&parts[i]);
      return -1;
    }
    more = zmq_msg_more(&m);
    if (n < max) {
      zmq_msg_init(&parts[n]);
      zmq_msg_move(&parts[n], &m); /* zmq_msg_t must not be copied by assignment */
    }
    zmq_msg_close(&m);
    ++n;
  }
  return n;
}

static void close_parts(zmq_msg_t *parts, int n, int max) {
  for (int i = 0; i < n && i < max; ++i) zmq_msg_close(&parts[i]);
}

/* Asks for a replay from `first` and checks the answer: the kept batches with seq >= first,
 * in order, then the end marker. */
static void check_replay(void *dealer, int64_t first, const batch *want, int n) {
  unsigned char req[8];
  for (int i = 0; i < 8; ++i) req[i] = (unsigned char)((uint64_t)first >> (56 - 8 * i));
  /* A DEALER sends the empty delimiter a REQ socket would add. */
  if (zmq_send(dealer, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(dealer, req, 8, 0) < 0) {
    EXPECT(0, "replay request from %lld: %s", (long long)first, zmq_strerror(zmq_errno()));
    return;
  }
  int64_t next = first > n - KEEP ? first : n - KEEP;
  if (next < 0) next = 0;
  for (;;) {
    zmq_msg_t p[3];
    int k = recv_parts(dealer, p, 3);
    if (k < 0) {
      EXPECT(0, "replay from %lld: no answer (%s)", (long long)first, zmq_strerror(zmq_errno()));
      return;
    }
    if (k != 3 || zmq_msg_size(&p[0]) != 0 || zmq_msg_size(&p[1]) != 8) {
      EXPECT(0, "replay from %lld: a reply of %d parts, not (\"\", seq, payload)", (long long)first, k);
      close_parts(p, k, 3);
      return;
    }
    int64_t seq = (int64_t)be64(zmq_msg_data(&p[1]));
    if (seq == -1) {
      EXPECT(zmq_msg_size(&p[2]) == 0, "the end marker's payload has %zu bytes", zmq_msg_size(&p[2]));
      EXPECT(next == (n > first ? n : first), "replay from %lld ended at %lld, expected %d", (long long)first,
             (long long)next, n);
      close_parts(p, k, 3);
      return;
    }
    EXPECT(seq == next, "replay from %lld: seq %lld, expected %lld", (long long)first, (long long)seq, (long long)next);
    if (seq >= 0 && seq < n)
      EXPECT(zmq_msg_size(&p[2]) == want[seq].size && !memcmp(zmq_msg_data(&p[2]), want[seq].data, want[seq].size),
             "replayed batch %lld differs from the twin's", (long long)seq);
    next = seq + 1;
    close_parts(p, k, 3);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: kv_events_zmq_check PATH/TO/kv_events_publisher\n");
    return 2;
  }
  static batch want[STEPS];
  int n = 0;
  if (expected_batches(want, &n) != 0) return 1;
  int removed = 0, cleared = 0;
  for (int i = 0; i < n; ++i) {
    removed |= contains(&want[i], "BlockRemoved");
    cleared |= contains(&want[i], "AllBlocksCleared");
  }
  EXPECT(n > KEEP && removed && cleared, "the workload must evict and overflow: %d batches, removed %d, cleared %d", n,
         removed, cleared);

  char dir[] = "/tmp/bspa-kv-events-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char pub_ep[64], replay_ep[64];
  snprintf(pub_ep, sizeof pub_ep, "ipc://%s/pub", dir);
  snprintf(replay_ep, sizeof replay_ep, "ipc://%s/replay", dir);

  void *ctx = zmq_ctx_new();
  void *sub = zmq_socket(ctx, ZMQ_SUB), *dealer = zmq_socket(ctx, ZMQ_DEALER);
  int timeout = TIMEOUT_MS, zero = 0;
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, kTopic, strlen(kTopic));
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
  /* Connecting before the publisher binds is fine: ZMQ keeps retrying. */
  if (zmq_connect(sub, pub_ep) != 0 || zmq_connect(dealer, replay_ep) != 0) {
    fprintf(stderr, "zmq_connect: %s\n", zmq_strerror(zmq_errno()));
    return 1;
  }

  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    perror("pipe");
    return 1;
  }
  char steps[16], pages[16], capacity[16], keep[16];
  snprintf(steps, sizeof steps, "%d", STEPS);
  snprintf(pages, sizeof pages, "%d", PAGES);
  snprintf(capacity, sizeof capacity, "%d", EVENTS_CAPACITY);
  snprintf(keep, sizeof keep, "%d", KEEP);
  pid_t child = fork();
  if (child == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[1]);
    close(from_child[0]);
    /* The subscription must have reached the publisher before it sends (XPUB wait). */
    execl(argv[1], argv[1], "--endpoint", pub_ep, "--replay-endpoint", replay_ep, "--topic", kTopic, "--steps", steps,
          "--pages", pages, "--events-capacity", capacity, "--replay-batches", keep, "--wait-subscribers", "1",
          "--wait-ms", "60000", "--ts-step", "--serve-until-eof", (char *)NULL);
    perror("execl");
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);

  /* Live: exactly the twin's batches, in order, numbered from 0. */
  for (int i = 0; i < n; ++i) {
    zmq_msg_t p[3];
    int k = recv_parts(sub, p, 3);
    if (k < 0) {
      EXPECT(0, "live message %d of %d: none within %d ms (%s)", i, n, TIMEOUT_MS, zmq_strerror(zmq_errno()));
      break;
    }
    EXPECT(k == 3, "live message %d has %d parts, not (topic, seq, payload)", i, k);
    if (k == 3) {
      EXPECT(zmq_msg_size(&p[0]) == strlen(kTopic) && !memcmp(zmq_msg_data(&p[0]), kTopic, strlen(kTopic)),
             "live message %d: wrong topic", i);
      EXPECT(zmq_msg_size(&p[1]) == 8 && be64(zmq_msg_data(&p[1])) == (uint64_t)i, "live message %d: seq %llu", i,
             zmq_msg_size(&p[1]) == 8 ? (unsigned long long)be64(zmq_msg_data(&p[1])) : 0ULL);
      EXPECT(zmq_msg_size(&p[2]) == want[i].size && !memcmp(zmq_msg_data(&p[2]), want[i].data, want[i].size),
             "live batch %d (%zu bytes) differs from the twin's (%zu bytes)", i, zmq_msg_size(&p[2]), want[i].size);
    }
    close_parts(p, k, 3);
  }

  /* The publisher's own count, printed after its last send. */
  char line[64] = {0};
  struct pollfd pfd = {from_child[0], POLLIN, 0};
  size_t got = 0;
  while (got + 1 < sizeof line && !memchr(line, '\n', got) && poll(&pfd, 1, TIMEOUT_MS) > 0) {
    ssize_t r = read(from_child[0], line + got, sizeof line - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  long long published = -1;
  EXPECT(sscanf(line, "published %lld", &published) == 1 && published == n,
         "the publisher said \"%s\", expected \"published %d\"", line, n);

  check_replay(dealer, 0, want, n);     /* the last KEEP batches */
  check_replay(dealer, n - 3, want, n); /* the last 3 */
  check_replay(dealer, n + 5, want, n); /* nothing: only the end marker */

  close(to_child[1]); /* end of file: the publisher exits */
  int status = 0;
  for (int waited = 0; waited < TIMEOUT_MS / 100 && waitpid(child, &status, WNOHANG) == 0; ++waited) {
    struct timespec t = {0, 100 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  if (waitpid(child, &status, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    EXPECT(0, "the publisher did not exit after its input closed");
  } else {
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the publisher exited with status %d", status);
  }

  zmq_close(sub);
  zmq_close(dealer);
  zmq_ctx_term(ctx);
  char path[96];
  snprintf(path, sizeof path, "%s/pub", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/replay", dir);
  unlink(path);
  rmdir(dir);
  for (int i = 0; i < n; ++i) free(want[i].data);
  if (failures) {
    fprintf(stderr, "kv_events_zmq_check: %d failures\n", failures);
    return 1;
  }
  printf("kv_events_zmq_check: %d batches live and replayed as drained (removals, an overflow, 2 tenants)\n", n);
  return 0;
}
