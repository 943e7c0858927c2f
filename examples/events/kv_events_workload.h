/* The deterministic serving workload of the publisher example (kv_events_publisher.c) and
 * its end-to-end check (kv_events_zmq_check.c): both run it on a pool of their own, so the
 * check knows the batches the publisher must have sent without trusting its word. */
#ifndef BSPA_EXAMPLES_KV_EVENTS_WORKLOAD_H
#define BSPA_EXAMPLES_KV_EVENTS_WORKLOAD_H

#include <stdint.h>

#include <bspa/bspa.h>

/* A bookkeeping-only pool (no KV storage) small enough to evict: 16-token pages. */
bspa_pool *workload_pool(int64_t num_pages, int64_t events_capacity);

/* Engine step `step`: one request of two tenants' multi-turn conversations (a shared
 * system prompt per tenant, turns that extend the conversation), served as an engine
 * does (match, append the rest, commit, release). Returns 0, or -1 having printed why. */
int workload_step(bspa_pool *pool, int step);

#endif
