// Host cost of the prefix cache through the public C ABI (bspa.h) on one core:
// match + append + commit for a 128k-token prompt (miss and full hit), for a batch of 256
// chat-sized prompts, and for a whole Mooncake trace replay (--trace PATH) with bounded
// and unbounded pools. Prints a table; --json FILE writes the numbers with the machine,
// the git commit and the date. The pools keep no KV (num_layers = 0): this is bookkeeping
// only, the part a scheduler pays on every step.
//
//   bench_host_cost [--trace PATH] [--json FILE] [--reps N]
#include <bspa/bspa.h>

#include <CLI/CLI.hpp>

#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "trace/mooncake.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

void ok(bspa_status s, const char *what) {
  if (s != BSPA_OK) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, bspa_status_string(s), bspa_last_error());
    std::exit(1);
  }
}

bspa_pool *make_pool(int64_t num_pages) {
  bspa_pool_options o;
  ok(bspa_pool_options_init(&o), "bspa_pool_options_init");
  o.num_layers = 0;
  o.page_size = 64;
  o.num_pages = num_pages;
  bspa_pool *pool = nullptr;
  ok(bspa_pool_create(&pool, &o), "bspa_pool_create");
  return pool;
}

struct Cost {
  double match_append_ns = 0;  // match + append
  double commit_ns = 0;
  int64_t cached = 0;
};

// One request: match, append the rest, commit all; the sequence is left alive.
Cost run_request(bspa_seq *seq, const int32_t *tokens, int64_t n) {
  Cost c;
  auto t0 = Clock::now();
  ok(bspa_seq_match(seq, tokens, n, &c.cached), "bspa_seq_match");
  ok(bspa_seq_append(seq, tokens + c.cached, n - c.cached), "bspa_seq_append");
  c.match_append_ns = ns_since(t0);
  t0 = Clock::now();
  ok(bspa_seq_commit(seq, n), "bspa_seq_commit");
  c.commit_ns = ns_since(t0);
  return c;
}

bspa_seq *new_seq(bspa_pool *pool) {
  bspa_seq *s = nullptr;
  ok(bspa_seq_create(&s, pool, nullptr), "bspa_seq_create");
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  std::string name;
  double tokens = 0;           // prompt tokens per measured unit
  double match_append_us = 0;  // medians
  double commit_us = 0;
  double min_total_us = 0;
  double hit_rate = 0;
};

std::vector<Row> rows;

void add_row(const std::string &name, double tokens, const std::vector<double> &ma, const std::vector<double> &cm,
             double hit_rate) {
  Row r;
  r.name = name;
  r.tokens = tokens;
  r.match_append_us = median(ma) / 1e3;
  r.commit_us = median(cm) / 1e3;
  double best = 1e300;
  for (size_t i = 0; i < ma.size(); ++i) best = std::min(best, ma[i] + cm[i]);
  r.min_total_us = best / 1e3;
  r.hit_rate = hit_rate;
  rows.push_back(r);
}

void bench_long_prompt(int reps) {
  const int64_t n = 131072;
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = bspa::trace::block_token(424242, i);
  std::vector<double> miss_ma, miss_cm, hit_ma, hit_cm;
  for (int r = 0; r < reps; ++r) {
    bspa_pool *pool = make_pool(4096);  // fresh: every page comes from the free list
    bspa_seq *s = new_seq(pool);
    Cost c = run_request(s, tokens.data(), n);
    if (c.cached != 0) std::exit(2);
    miss_ma.push_back(c.match_append_ns);
    miss_cm.push_back(c.commit_ns);
    bspa_seq_destroy(s);
    for (int h = 0; h < 4; ++h) {  // the prompt is now cached: full hits
      s = new_seq(pool);
      c = run_request(s, tokens.data(), n);
      if (c.cached != n - 64) std::exit(3);
      hit_ma.push_back(c.match_append_ns);
      hit_cm.push_back(c.commit_ns);
      bspa_seq_destroy(s);
    }
    bspa_pool_destroy(pool);
  }
  add_row("128k prompt, miss", n, miss_ma, miss_cm, 0);
  add_row("128k prompt, full hit", n, hit_ma, hit_cm, double(n - 64) / n);
}

// 256 chat requests: a shared 1024-token system prompt, then 256-2047 tokens of their own;
// the system prompt is cached (warm), the rest is new. Timed per batch.
void bench_chat_batch(int reps) {
  const int batch = 256;
  std::vector<std::vector<int32_t>> prompts(batch);
  uint64_t state = 12345;
  double total_tokens = 0;
  for (int b = 0; b < batch; ++b) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t own = 256 + static_cast<int64_t>((state >> 33) % 1792);
    auto &p = prompts[b];
    for (int64_t i = 0; i < 1024; ++i) p.push_back(bspa::trace::block_token(7, i));
    for (int64_t i = 0; i < own; ++i) p.push_back(bspa::trace::block_token(1000 + b, i));
    total_tokens += static_cast<double>(p.size());
  }
  std::vector<double> ma, cm;
  double hit = 0;
  for (int r = 0; r < reps; ++r) {
    bspa_pool *pool = make_pool(16384);
    bspa_seq *warm = new_seq(pool);
    run_request(warm, prompts[0].data(), 1025);
    bspa_seq_destroy(warm);
    std::vector<bspa_seq *> seqs(batch);
    double batch_ma = 0, batch_cm = 0;
    int64_t cached = 0;
    for (int b = 0; b < batch; ++b) seqs[b] = new_seq(pool);
    for (int b = 0; b < batch; ++b) {
      Cost c = run_request(seqs[b], prompts[b].data(), static_cast<int64_t>(prompts[b].size()));
      batch_ma += c.match_append_ns;
      batch_cm += c.commit_ns;
      cached += c.cached;
    }
    for (int b = 0; b < batch; ++b) bspa_seq_destroy(seqs[b]);
    ma.push_back(batch_ma);
    cm.push_back(batch_cm);
    hit = double(cached) / total_tokens;
    bspa_pool_destroy(pool);
  }
  add_row("256 chat prompts (batch)", total_tokens, ma, cm, hit);
}

struct TraceResult {
  std::string pool;
  int64_t pages = 0;
  double seconds = 0;  // timed bspa calls only (token derivation excluded)
  uint64_t requests = 0, tokens = 0, hit_tokens = 0, evictions = 0;
};
std::vector<TraceResult> trace_results;

void bench_trace(const std::vector<bspa::trace::Request> &reqs, int64_t pages, const char *label) {
  bspa_pool *pool = make_pool(pages);
  std::vector<int32_t> tokens;
  TraceResult t;
  t.pool = label;
  t.pages = pages;
  double ns = 0;
  for (const auto &r : reqs) {
    bspa::trace::request_tokens(r, tokens);
    const auto t0 = Clock::now();
    bspa_seq *s = new_seq(pool);
    Cost c = run_request(s, tokens.data(), r.input_length);
    bspa_seq_destroy(s);
    ns += ns_since(t0);
    t.hit_tokens += static_cast<uint64_t>(c.cached);
    t.tokens += static_cast<uint64_t>(r.input_length);
    ++t.requests;
  }
  struct bspa_pool_stats st;
  ok(bspa_pool_stats(pool, &st), "bspa_pool_stats");
  t.evictions = st.evictions;
  t.seconds = ns / 1e9;
  trace_results.push_back(t);
  bspa_pool_destroy(pool);
}

std::string run_command(const char *cmd) {
  std::string out;
  if (FILE *p = popen(cmd, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string json_escape(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  std::string trace_path, json_path;
  int reps = 20;
  CLI::App app("Host cost of the prefix cache's bookkeeping (match + append + commit) on one core");
  app.option_defaults()->always_capture_default();
  app.add_option("--trace", trace_path, "also replay a Mooncake JSONL trace");
  app.add_option("--json", json_path, "write the results as JSON");
  app.add_option("--reps", reps, "runs per case (median)")->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);

  bench_long_prompt(reps);
  bench_chat_batch(std::max(1, reps / 4));
  std::printf("%-28s %10s %14s %11s %12s %10s %8s\n", "case", "tokens", "match+append", "commit", "ns/token",
              "best total", "hit");
  for (const Row &r : rows) {
    std::printf("%-28s %10.0f %11.1f us %8.1f us %12.2f %7.1f us %7.1f%%\n", r.name.c_str(), r.tokens,
                r.match_append_us, r.commit_us, (r.match_append_us + r.commit_us) * 1e3 / r.tokens, r.min_total_us,
                100 * r.hit_rate);
  }

  if (!trace_path.empty()) {
    const auto reqs = bspa::trace::read_mooncake(trace_path);
    bench_trace(reqs, int64_t{1} << 21, "unbounded");
    bench_trace(reqs, 65536, "65536 pages (4M tokens)");
    bench_trace(reqs, 16384, "16384 pages (1M tokens)");
    std::printf("\ntrace %s: %zu requests\n", trace_path.c_str(), reqs.size());
    std::printf("%-26s %10s %12s %14s %10s %12s\n", "pool", "seconds", "requests/s", "ns/prompt tok", "hit",
                "evictions");
    for (const auto &t : trace_results) {
      std::printf("%-26s %10.3f %12.0f %14.2f %9.2f%% %12llu\n", t.pool.c_str(), t.seconds,
                  double(t.requests) / t.seconds, t.seconds * 1e9 / double(t.tokens),
                  100.0 * double(t.hit_tokens) / double(t.tokens), static_cast<unsigned long long>(t.evictions));
    }
  }

  if (!json_path.empty()) {
    utsname u{};
    uname(&u);
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::FILE *f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"benchmark\": \"host_cost\",\n  \"date\": \"%s\",\n", date);
    std::fprintf(f, "  \"git_commit\": \"%s\",\n", json_escape(run_command("git rev-parse HEAD 2>/dev/null")).c_str());
    std::fprintf(f, "  \"machine\": {\"host\": \"%s\", \"os\": \"%s %s\", \"arch\": \"%s\", \"cpu\": \"%s\"},\n",
                 json_escape(u.nodename).c_str(), u.sysname, u.release, u.machine, json_escape(cpu_model()).c_str());
    std::fprintf(f, "  \"library\": \"%s\",\n  \"page_size\": 64,\n  \"reps\": %d,\n",
                 json_escape(bspa_build_info()).c_str(), reps);
    std::fprintf(f, "  \"cases\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      std::fprintf(
          f,
          "    {\"case\": \"%s\", \"tokens\": %.0f, \"match_append_us_median\": %.3f, "
          "\"commit_us_median\": %.3f, \"total_us_min\": %.3f, \"ns_per_token\": %.3f, \"hit_rate\": %.5f}%s\n",
          r.name.c_str(), r.tokens, r.match_append_us, r.commit_us, r.min_total_us,
          (r.match_append_us + r.commit_us) * 1e3 / r.tokens, r.hit_rate, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"trace\": %s%s%s", trace_path.empty() ? "null" : "{\"path\": \"",
                 trace_path.empty() ? "" : json_escape(trace_path).c_str(),
                 trace_path.empty() ? "\n" : "\", \"pools\": [\n");
    for (size_t i = 0; i < trace_results.size(); ++i) {
      const auto &t = trace_results[i];
      std::fprintf(f,
                   "    {\"pool\": \"%s\", \"pages\": %lld, \"requests\": %llu, \"prompt_tokens\": %llu, "
                   "\"hit_tokens\": %llu, \"hit_rate\": %.5f, \"evictions\": %llu, \"seconds\": %.4f, "
                   "\"requests_per_s\": %.1f, \"ns_per_prompt_token\": %.3f}%s\n",
                   t.pool.c_str(), static_cast<long long>(t.pages), static_cast<unsigned long long>(t.requests),
                   static_cast<unsigned long long>(t.tokens), static_cast<unsigned long long>(t.hit_tokens),
                   double(t.hit_tokens) / double(t.tokens), static_cast<unsigned long long>(t.evictions), t.seconds,
                   double(t.requests) / t.seconds, t.seconds * 1e9 / double(t.tokens),
                   i + 1 < trace_results.size() ? "," : "");
    }
    if (!trace_path.empty()) std::fprintf(f, "  ]}\n");
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
  return 0;
}
