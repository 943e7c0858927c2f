#include "cli.hpp"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>

namespace demo {

void print_usage(const char *argv0) {
  std::printf(
      "Usage: %s [options]\n"
      "Replays a serving workload through bspa's paged KV pool, prefix cache and block-sparse\n"
      "prefill, checking every turn against a full recompute without the cache.\n"
      "\n"
      "Device\n"
      "  --device cpu|cuda|auto   backend (auto: CUDA when a GPU is visible)    [auto]\n"
      "  --device-id N            CUDA device ordinal                           [0]\n"
      "  --dtype f32|f16|bf16|fp8 KV and attention dtype            [f32 on CPU, bf16 on CUDA]\n"
      "                           fp8: e4m3 pages (scales calibrated from the first prompt),\n"
      "                           bf16 queries, outputs and K/V writes\n"
      "Synthetic workload\n"
      "  --seed N                 everything is a pure function of the seed     [1]\n"
      "  --tenants N              tenants (cache salts); conversation c belongs to tenant c %% N [3]\n"
      "  --conversations N        multi-turn conversations                      [9]\n"
      "  --turns N                turns per conversation                        [4]\n"
      "  --system-tokens N        shared system prompt length                   [700]\n"
      "  --user-tokens MIN:MAX    new user tokens per turn                      [48:160]\n"
      "  --gen-tokens MIN:MAX     generated tokens added to the history per turn [16:64]\n"
      "Model and cache\n"
      "  --layers N               layers, block-sparse and dense alternating    [4]\n"
      "  --q-heads N / --kv-heads N / --head-dim N                       [8 / 2 / 64]\n"
      "  --block N / --local-blocks N / --vert-stride N  sparse layout   [64 / 16 / 8]\n"
      "  --page-size N            tokens per page                               [64]\n"
      "  --pages N                pool capacity in pages; 0 = unbounded (nothing is ever evicted)\n"
      "                           [synthetic: 0; trace: 16384]\n"
      "  --scale X                logit scale                                   [1/sqrt(head_dim)]\n"
      "Mooncake trace replay\n"
      "  --trace FILE             replay a Mooncake JSONL trace instead\n"
      "  --max-requests N         only the first N requests                     [all]\n"
      "  --attention-sample K     requests whose attention is computed and verified [3]\n"
      "  --attention-max-tokens N sampled prompts are cut to N tokens           [2048]\n"
      "  --no-attention           bookkeeping only (a pool without KV storage)\n"
      "  --events N               KV cache events: a queue of N records, drained after every\n"
      "                           request as a vLLM msgpack batch (what a publisher sends) [0: off]\n"
      "Output\n"
      "  --json FILE              write the summary as JSON\n"
      "  --no-progress            no progress bar (it is drawn only on a terminal anyway)\n"
      "  --verbose                one line per request\n"
      "  --inject-fault kv|salt   break the cache on purpose (corrupt one cached page, or one\n"
      "                           salt for all tenants) to see the checks fail\n"
      "Exit status: 0 when every check passed (\"verified\"), 1 when a check failed, 2 on a\n"
      "bad flag, 3 when the library or the device reported an error, 4 when an input file\n"
      "(--trace) cannot be opened or parsed.\n",
      argv0);
}

namespace {

int64_t to_int(const std::string &flag, const std::string &value, int64_t lo, int64_t hi) {
  char *end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi)
    throw std::invalid_argument(flag + " = '" + value + "': expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return v;
}

void to_range(const std::string &flag, const std::string &value, int32_t &lo, int32_t &hi) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) {
    lo = hi = static_cast<int32_t>(to_int(flag, value, 0, 1 << 20));
  } else {
    lo = static_cast<int32_t>(to_int(flag, value.substr(0, colon), 0, 1 << 20));
    hi = static_cast<int32_t>(to_int(flag, value.substr(colon + 1), lo, 1 << 20));
  }
}

}  // namespace

bool parse_options(int argc, char **argv, Options &o, bool *help) {
  *help = false;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  using Setter = std::function<void(const std::string &, const std::string &)>;
  auto i32 = [](int32_t &field, int64_t lo, int64_t hi) -> Setter {
    return [&field, lo, hi](const std::string &f, const std::string &v) { field = static_cast<int32_t>(to_int(f, v, lo, hi)); };
  };
  const int64_t big = 1 << 30;
  std::map<std::string, Setter> with_value = {
      {"--device", [&](const std::string &f, const std::string &v) {
         if (v != "cpu" && v != "cuda" && v != "auto") throw std::invalid_argument(f + " = '" + v + "': expected cpu, cuda or auto");
         o.device = v;
       }},
      {"--device-id", i32(o.device_id, 0, 1024)},
      {"--dtype", [&](const std::string &f, const std::string &v) {
         if (v != "f32" && v != "f16" && v != "bf16" && v != "fp8")
           throw std::invalid_argument(f + " = '" + v + "': expected f32, f16, bf16 or fp8");
         o.dtype = v;
       }},
      {"--seed", [&](const std::string &f, const std::string &v) { o.workload.seed = static_cast<uint64_t>(to_int(f, v, 0, INT64_MAX)); }},
      {"--tenants", i32(o.workload.tenants, 1, 1 << 20)},
      {"--conversations", i32(o.workload.conversations, 1, 1 << 20)},
      {"--turns", i32(o.workload.turns, 1, 1 << 20)},
      {"--system-tokens", i32(o.workload.system_tokens, 0, 1 << 20)},
      {"--user-tokens", [&](const std::string &f, const std::string &v) { to_range(f, v, o.workload.user_min, o.workload.user_max); }},
      {"--gen-tokens", [&](const std::string &f, const std::string &v) { to_range(f, v, o.workload.gen_min, o.workload.gen_max); }},
      {"--layers", i32(o.model.num_layers, 0, 1024)},
      {"--q-heads", i32(o.model.num_q_heads, 1, 1024)},
      {"--kv-heads", i32(o.model.num_kv_heads, 1, 1024)},
      {"--head-dim", i32(o.model.head_dim, 2, 1024)},
      {"--block", i32(o.strided.block_size, 1, 1 << 16)},
      {"--local-blocks", i32(o.strided.local_blocks, 1, 1 << 20)},
      {"--vert-stride", i32(o.strided.vert_stride, 1, 1 << 20)},
      {"--page-size", i32(o.page_size, 1, 1 << 16)},
      {"--events", [&](const std::string &f, const std::string &v) { o.events = to_int(f, v, 0, INT32_MAX); }},
      {"--pages", [&](const std::string &f, const std::string &v) { o.pages = to_int(f, v, 0, big * 64); }},
      {"--scale", [&](const std::string &f, const std::string &v) {
         char *end = nullptr;
         o.scale = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !(o.scale > 0)) throw std::invalid_argument(f + " = '" + v + "': expected a positive number");
       }},
      {"--trace", [&](const std::string &, const std::string &v) { o.trace = v; }},
      {"--max-requests", [&](const std::string &f, const std::string &v) { o.max_requests = to_int(f, v, 1, big * 64); }},
      {"--attention-sample", i32(o.attention_sample, 0, 1 << 20)},
      {"--attention-max-tokens", i32(o.attention_max_tokens, 2, 1 << 24)},
      {"--inject-fault", [&](const std::string &f, const std::string &v) {
         if (v != "kv" && v != "salt") throw std::invalid_argument(f + " = '" + v + "': expected kv or salt");
         o.inject_fault = v;
       }},
      {"--json", [&](const std::string &, const std::string &v) { o.json = v; }},
  };
  try {
    for (int i = 1; i < argc; ++i) {
      std::string flag = argv[i], value;
      const size_t eq = flag.find('=');
      const bool inline_value = flag.rfind("--", 0) == 0 && eq != std::string::npos;
      if (inline_value) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
      }
      if (flag == "--help" || flag == "-h") {
        *help = true;
        return true;
      }
      if (flag == "--no-attention") { o.no_attention = true; continue; }
      if (flag == "--no-progress") { o.progress = false; continue; }
      if (flag == "--verbose" || flag == "-v") { o.verbose = true; continue; }
      auto it = with_value.find(flag);
      if (it == with_value.end()) throw std::invalid_argument("unknown flag '" + flag + "'");
      if (!inline_value) {
        if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
        value = argv[++i];
      }
      it->second(flag, value);
    }
    if (o.model.num_q_heads % o.model.num_kv_heads != 0)
      throw std::invalid_argument("--q-heads = " + std::to_string(o.model.num_q_heads) + " is not a multiple of --kv-heads = " +
                                  std::to_string(o.model.num_kv_heads));
    if (o.model.head_dim % 2 != 0)
      throw std::invalid_argument("--head-dim = " + std::to_string(o.model.head_dim) + " must be even (rotary pairs)");
    if (o.workload.user_min < 1)
      throw std::invalid_argument("--user-tokens: each turn needs at least one new token");
  } catch (const std::invalid_argument &e) {
    std::fprintf(stderr, "bspa-demo: %s\n(see --help)\n", e.what());
    return false;
  }
  return true;
}

}  // namespace demo
