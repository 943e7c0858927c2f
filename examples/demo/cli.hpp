// Command-line flags of bspa-demo.
#pragma once

#include <cstdint>
#include <string>

#include "attention.hpp"
#include "model.hpp"
#include "workload.hpp"

namespace demo {

struct Options {
  std::string device = "auto";  // cpu | cuda | auto
  std::string dtype;            // f32 | f16 | bf16 | fp8; empty = f32 on CPU, bf16 on CUDA
  int32_t device_id = 0;
  WorkloadOptions workload;
  ModelShape model;
  LayerLayouts::Strided strided;
  int32_t page_size = 64;
  int64_t pages = -1;  // -1 = not given; 0 = unbounded (enough that nothing is evicted); trace default: 16384
  double scale = 0;    // 0 = 1/sqrt(head_dim)

  // The synthetic replay's engine loop (engine.hpp).
  int32_t step_tokens = 512;  // token budget of a step (decode rows + prefill chunks)
  int32_t max_seqs = 16;      // sequences in flight at most
  int32_t verify_every = 1;   // every N-th turn's rows are compared with a full recompute
  // How a step's launches are issued (step_runner.hpp): batch | plan | fixed.
  std::string launch = "plan";
  bool graphs = false;  // CUDA graphs per bucket of step sizes (implies fixed; CUDA only)

  std::string trace;                    // Mooncake JSONL file: replay it instead of the synthetic workload
  int64_t max_requests = 0;             // trace: replay only the first N requests (0 = all)
  int32_t attention_sample = 3;         // trace: requests whose attention is computed and checked
  int32_t attention_max_tokens = 2048;  // trace: sampled prompts are cut to this many tokens
  bool no_attention = false;
  int64_t events = 0;  // trace: KV cache event queue capacity, drained as vLLM msgpack after each request

  // Testing the checks themselves: "kv" corrupts one cached page once, "salt" gives every
  // tenant the same salt. Either must make the run fail with exit status 1.
  std::string inject_fault;

  std::string json;
  bool progress = true;
  bool verbose = false;
  std::string command_line;
};

// Parses argv; on a bad flag prints the reason and the usage and returns false
// (exit code 2). `--help` prints the usage and sets *help.
bool parse_options(int argc, char **argv, Options &options, bool *help);
void print_usage(const char *argv0);

}  // namespace demo
