#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

namespace demo {

namespace {

constexpr int64_t kBig = int64_t{1} << 30;
constexpr const char *kFooter =
    "Exit status: 0 when every check passed (\"verified\"), 1 when a check failed, 2 on a\n"
    "bad flag, 3 when the library or the device reported an error, 4 when an input file\n"
    "(--trace) cannot be opened or parsed.\n";

// MIN:MAX, or one number for both, each in [0, 2^20].
void to_range(const std::string &flag, const std::string &value, int32_t &lo, int32_t &hi) {
  auto number = [&](const std::string &s, int64_t min) {
    int64_t v = 0;
    if (!CLI::detail::lexical_cast(s, v) || v < min || v > (1 << 20))
      throw CLI::ValidationError(flag, "'" + value + "': expected MIN:MAX, integers in [0, 1048576], MIN <= MAX");
    return static_cast<int32_t>(v);
  };
  const size_t colon = value.find(':');
  if (colon == std::string::npos) {
    lo = hi = number(value, 0);
  } else {
    lo = number(value.substr(0, colon), 0);
    hi = number(value.substr(colon + 1), lo);
  }
}

// The flags, their defaults (the fields' initial values) and their checks, in --help's groups.
void define(CLI::App &app, Options &o, std::string &user_tokens, std::string &gen_tokens, bool &no_progress) {
  app.description(
      "Replays a serving workload through bspa's paged KV pool, prefix cache and block-sparse\n"
      "prefill: an engine loop of steps that batch decode rows with chunked prefills, every\n"
      "turn's rows checked against a full recompute without the cache.");
  app.footer(kFooter);
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "print this help and exit");

  const char *g = "Device";
  app.add_option("--device", o.device, "backend (auto: CUDA when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->group(g);
  app.add_option("--device-id", o.device_id, "CUDA device ordinal")->check(CLI::Range(0, 1024))->group(g);
  app.add_option("--dtype", o.dtype,
                 "KV and attention dtype [f32 on CPU, bf16 on CUDA]; fp8: e4m3 pages (scales calibrated from "
                 "the first prompt), bf16 queries, outputs and K/V writes")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "fp8"}))
      ->group(g);

  g = "Synthetic workload";
  app.add_option("--seed", o.workload.seed, "everything is a pure function of the seed")
      ->check(CLI::Range(uint64_t{0}, uint64_t{INT64_MAX}))
      ->group(g);
  app.add_option("--tenants", o.workload.tenants, "tenants (cache salts); conversation c belongs to tenant c % N")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  app.add_option("--conversations", o.workload.conversations, "multi-turn conversations")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  app.add_option("--turns", o.workload.turns, "turns per conversation")->check(CLI::Range(1, 1 << 20))->group(g);
  app.add_option("--system-tokens", o.workload.system_tokens, "shared system prompt length")
      ->check(CLI::Range(0, 1 << 20))
      ->group(g);
  user_tokens = std::to_string(o.workload.user_min) + ":" + std::to_string(o.workload.user_max);
  gen_tokens = std::to_string(o.workload.gen_min) + ":" + std::to_string(o.workload.gen_max);
  app.add_option("--user-tokens", user_tokens, "MIN:MAX new user tokens per turn")->group(g);
  app.add_option("--gen-tokens", gen_tokens, "MIN:MAX tokens generated per turn (decode steps)")->group(g);

  g = "Engine loop (synthetic workload)";
  app.add_option("--step-tokens", o.step_tokens,
                 "token budget of a step: one per decode row, the rest for prefill chunks (vLLM's "
                 "max_num_batched_tokens)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  app.add_option("--max-seqs", o.max_seqs, "sequences in flight at most (vLLM's max_num_seqs)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  auto *launch = app.add_option("--launch", o.launch,
                                "how a step's launches are issued: batch = a one-step batch per step "
                                "(bspa_batch_create/destroy); plan = one reusable batch re-planned every step "
                                "(bspa_batch_plan); fixed = fixed-shape reusable batches, one per bucket of step sizes "
                                "(max_tokens 1, 2, 4, ... up to --step-tokens, and the same sizes up to --max-seqs for "
                                "steps of decode rows only); all eager")
                     ->check(CLI::IsMember({"batch", "plan", "fixed"}))
                     ->group(g);
  app.add_flag("--graphs", o.graphs,
               "CUDA only: the fixed buckets, and each bucket's kv_write + prefill of every layer captured "
               "once in a CUDA graph (after one eager launch), replayed for its later steps after "
               "re-planning (only the plan changes between replays: sequences, lengths, page tables, "
               "decode vs prefill rows, within the bucket's limits); replays on checked steps compared "
               "bitwise with an eager launch of the same plan")
      ->excludes(launch)
      ->group(g);
  app.add_option("--verify-every", o.verify_every,
                 "compare every row the engine computed for every N-th turn with a full recompute")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);

  g = "Model and cache";
  app.add_option("--layers", o.model.num_layers, "layers, block-sparse and dense alternating")
      ->check(CLI::Range(0, 1024))
      ->group(g);
  app.add_option("--q-heads", o.model.num_q_heads, "query heads")->check(CLI::Range(1, 1024))->group(g);
  app.add_option("--kv-heads", o.model.num_kv_heads, "KV heads")->check(CLI::Range(1, 1024))->group(g);
  app.add_option("--head-dim", o.model.head_dim, "head dimension (even)")->check(CLI::Range(2, 1024))->group(g);
  app.add_option("--block", o.strided.block_size, "sparse layout: tokens per block")
      ->check(CLI::Range(1, 1 << 16))
      ->group(g);
  app.add_option("--local-blocks", o.strided.local_blocks, "sparse layout: local blocks")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  app.add_option("--vert-stride", o.strided.vert_stride, "sparse layout: vertical stride")
      ->check(CLI::Range(1, 1 << 20))
      ->group(g);
  app.add_option("--page-size", o.page_size, "tokens per page")->check(CLI::Range(1, 1 << 16))->group(g);
  app.add_option("--pages", o.pages,
                 "pool capacity in pages; 0 = unbounded (nothing is ever evicted) [synthetic: 0; trace: 16384]")
      ->check(CLI::Range(int64_t{0}, kBig * 64))
      ->default_str("")
      ->group(g);
  app.add_option("--scale", o.scale, "logit scale [1/sqrt(head_dim)]")
      ->check(CLI::PositiveNumber)
      ->default_str("")
      ->group(g);

  g = "Mooncake trace replay";
  app.add_option("--trace", o.trace, "replay a Mooncake JSONL trace instead")->group(g);
  app.add_option("--max-requests", o.max_requests, "only the first N requests [all]")
      ->check(CLI::Range(int64_t{1}, kBig * 64))
      ->default_str("")
      ->group(g);
  app.add_option("--attention-sample", o.attention_sample, "requests whose attention is computed and verified")
      ->check(CLI::Range(0, 1 << 20))
      ->group(g);
  app.add_option("--attention-max-tokens", o.attention_max_tokens, "sampled prompts are cut to N tokens")
      ->check(CLI::Range(2, 1 << 24))
      ->group(g);
  app.add_flag("--no-attention", o.no_attention, "bookkeeping only (a pool without KV storage)")->group(g);
  app.add_option("--events", o.events,
                 "KV cache events: a queue of N records, drained after every request as a vLLM msgpack "
                 "batch (what a publisher sends) [0: off]")
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}))
      ->group(g);

  g = "Output";
  app.add_option("--json", o.json, "write the summary as JSON")->group(g);
  app.add_flag("--no-progress", no_progress, "no progress bar (it is drawn only on a terminal anyway)")->group(g);
  app.add_flag("-v,--verbose", o.verbose, "one line per request")->group(g);
  app.add_option("--inject-fault", o.inject_fault,
                 "break the cache on purpose (corrupt one cached page, or one salt for all tenants) to see "
                 "the checks fail")
      ->check(CLI::IsMember({"kv", "salt"}))
      ->group(g);
}

}  // namespace

void print_usage(const char *argv0) {
  Options o;
  std::string user_tokens, gen_tokens;
  bool no_progress = false;
  CLI::App app;
  app.name(argv0);
  define(app, o, user_tokens, gen_tokens, no_progress);
  std::fputs(app.help().c_str(), stdout);
}

bool parse_options(int argc, char **argv, Options &o, bool *help) {
  *help = false;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  std::string user_tokens, gen_tokens;
  bool no_progress = false;
  CLI::App app;
  app.name(argv[0]);
  define(app, o, user_tokens, gen_tokens, no_progress);
  try {
    app.parse(argc, argv);
    o.progress = !no_progress;
    to_range("--user-tokens", user_tokens, o.workload.user_min, o.workload.user_max);
    to_range("--gen-tokens", gen_tokens, o.workload.gen_min, o.workload.gen_max);
    if (o.model.num_q_heads % o.model.num_kv_heads != 0)
      throw CLI::ValidationError("--q-heads = " + std::to_string(o.model.num_q_heads) +
                                 " is not a multiple of --kv-heads = " + std::to_string(o.model.num_kv_heads));
    if (o.model.head_dim % 2 != 0)
      throw CLI::ValidationError("--head-dim = " + std::to_string(o.model.head_dim) + " must be even (rotary pairs)");
    if (o.workload.user_min < 1) throw CLI::ValidationError("--user-tokens: each turn needs at least one new token");
    if (!o.trace.empty() && (o.graphs || app.count("--launch") > 0))
      throw CLI::ValidationError(std::string(o.graphs ? "--graphs" : "--launch") +
                                 ": the synthetic workload's engine loop only (--trace replays without it)");
  } catch (const CLI::CallForHelp &) {
    *help = true;
  } catch (const CLI::ParseError &e) {
    std::fprintf(stderr, "bspa-demo: %s\n(see --help)\n", e.what());
    return false;
  }
  return true;
}

}  // namespace demo
