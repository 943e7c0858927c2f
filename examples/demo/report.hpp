// What a run measured and checked; printed as the summary and written as JSON.
#pragma once

#include <bspa/bspa.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention.hpp"
#include "step_runner.hpp"

namespace demo {

// The synthetic replay's engine loop (engine.cpp): its steps and what they computed.
struct EngineStats {
  int32_t step_tokens = 0, max_seqs = 0;  // the scheduler's limits
  int64_t steps = 0;
  int64_t mixed_steps = 0;   // steps with prefill and decode rows together
  int64_t prefill_rows = 0;  // prompt tokens computed (rows of prefill chunks)
  int64_t decode_rows = 0;   // generated tokens fed back one per step (rows of query length 1)
  int64_t chunks = 0;        // prefill chunks; more than the turns when prompts were split across steps
  int64_t generated = 0;     // tokens generated (one per turn more than decode rows: the last has no KV)
  int64_t max_in_flight = 0;
  int64_t checked_rows = 0;                    // rows compared with a full recompute
  double step_s = 0;                           // sum of the step times
  std::vector<double> step_times, host_times;  // per step, seconds
  std::string launch;                          // batch | plan | fixed | graphs (--launch, --graphs)
  RunnerStats runner;
  double capture_s = 0;          // --graphs: stream capture and instantiation (not in the step times)
  int64_t graph_checks = 0;      // replayed steps compared bitwise with an eager launch of the plan
  int64_t graph_mismatches = 0;  // of those, steps whose outputs differed (each a failed check)
  // FNV-1a (64 bits) over every generated token id in the order generated: the same for the
  // same workload, seed and outputs, so runs of different launch modes can be compared.
  uint64_t token_digest = 0xcbf29ce484222325ull;
};

struct Report {
  std::string mode;  // "synthetic" or "trace"
  std::string device;
  std::string dtype;
  std::string command;
  int32_t num_layers = 0, sparse_layers = 0;
  int32_t page_size = 0;
  int64_t num_pages = 0;

  int64_t requests = 0;       // turns (synthetic) or trace requests replayed
  int64_t hit_requests = 0;   // requests whose match returned at least one page
  int64_t prompt_tokens = 0;  // sum of prompt lengths
  int64_t cached_tokens = 0;  // served from the prefix cache (prefill tokens saved)
  int64_t tenants = 0;

  // Attention checks (every turn in synthetic mode; a sample in trace mode).
  int64_t attention_requests = 0;
  int64_t attention_prompt_tokens = 0;
  int64_t attention_computed_tokens = 0;
  int64_t attention_verified = 0;
  double max_rel_l2 = 0;
  double tolerance = 0;
  Timings with_cache, without_cache;
  EngineStats engine;

  // Cache-semantics checks: a tenant only ever hits pages it produced.
  int64_t cache_checks = 0;
  int64_t isolation_probes = 0;  // a tenant's first request while others had cached the same system prompt

  struct bspa_pool_stats stats {};
  std::vector<std::string> failures;
  int64_t failure_count = 0;
  double wall_s = 0;

  void fail(const std::string &message);
  bool verified() const { return failure_count == 0 && attention_verified == attention_requests; }
};

void print_summary(const Report &r, bool attention_skipped);
// Returns false (with a message on stderr) when the file cannot be written.
bool write_json(const Report &r, const std::string &path);

}  // namespace demo
