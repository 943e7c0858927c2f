// KV cache events: drain + encode throughput (bspa_pool_events_drain_msgpack) and the
// structured drain, in pages per second, on the CPU. A bookkeeping-only pool publishes
// `batch` pages per round (sequences of 16 pages of random tokens over a vocabulary of
// 100,352 ids, Phi-3-small's); each round's events are then drained, the median round
// time is reported. Publishing itself is not timed.
//
//   bench_events [--page-size N] [--batch PAGES] [--rounds N] [--json FILE]
#include <bspa/bspa.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

void ok(bspa_status s, const char *what) {
  if (s != BSPA_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, bspa_status_string(s), bspa_last_error());
    std::exit(1);
  }
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char **argv) {
  int32_t page = 64;
  int64_t batch = 4096, rounds = 30;
  std::string json;
  CLI::App app("KV cache events: drain + msgpack encode rate on one core");
  app.option_defaults()->always_capture_default();
  app.add_option("--page-size", page, "tokens per page")->check(CLI::Range(1, 1 << 16));
  app.add_option("--batch", batch, "pages stored (and evicted) per round")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--rounds", rounds, "timed rounds")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--json", json, "write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  bspa_pool_options o;
  ok(bspa_pool_options_init(&o), "options");
  o.num_layers = 0;
  o.page_size = page;
  o.num_pages = 2 * batch;  // half of each round's pages evict the previous round's: removals too
  o.events_capacity = 4 * batch;
  bspa_pool *pool = nullptr;
  ok(bspa_pool_create(&pool, &o), "bspa_pool_create");

  std::mt19937 rng(21);
  std::uniform_int_distribution<int32_t> vocab(0, 100351);
  const int64_t seq_pages = 16;
  std::vector<int32_t> tokens(static_cast<size_t>(seq_pages * page));
  std::vector<unsigned char> buffer(1);  // never empty: a NULL buffer would be a size query
  std::vector<bspa_kv_event> events(static_cast<size_t>(4 * batch));
  std::vector<int32_t> event_tokens(static_cast<size_t>(4 * batch * page));
  std::vector<double> t_msgpack, t_struct;
  int64_t pages_per_round = 0, bytes = 0;
  for (int64_t r = 0; r < 2 * rounds + 2; ++r) {
    int64_t stored = 0, n_events = 0, n_tokens = 0;
    while (stored < batch) {
      for (int32_t &t : tokens) t = vocab(rng);
      bspa_seq *s = nullptr;
      ok(bspa_seq_create(&s, pool, nullptr), "bspa_seq_create");
      int64_t cached = 0;
      ok(bspa_seq_match(s, tokens.data(), static_cast<int64_t>(tokens.size()), &cached), "match");
      ok(bspa_seq_append(s, tokens.data(), static_cast<int64_t>(tokens.size())), "append");
      ok(bspa_seq_commit(s, static_cast<int64_t>(tokens.size())), "commit");
      bspa_seq_destroy(s);
      stored += seq_pages;
    }
    ok(bspa_pool_events_drain(pool, nullptr, 0, nullptr, 0, &n_events, &n_tokens), "size query");
    const bool structured = r % 2 == 1;
    const double t0 = now();
    if (structured) {
      ok(bspa_pool_events_drain(pool, events.data(), static_cast<int64_t>(events.size()), event_tokens.data(),
                                static_cast<int64_t>(event_tokens.size()), &n_events, &n_tokens),
         "bspa_pool_events_drain");
    } else {
      size_t size = 0;
      bspa_status st;
      while ((st = bspa_pool_events_drain_msgpack(pool, 1.0, 0, buffer.data(), buffer.size(), &size)) ==
             BSPA_ERR_BUFFER_TOO_SMALL)
        buffer.resize(size * 2);
      ok(st, "bspa_pool_events_drain_msgpack");
      bytes = static_cast<int64_t>(size);
    }
    const double dt = now() - t0;
    if (r >= 2) (structured ? t_struct : t_msgpack).push_back(dt);  // 2 warm-up rounds
    pages_per_round = n_events;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };

  // The pool's side: serving the same requests (match, append, commit, destroy, with
  // evictions) in a pool without events and in one with events drained after each.
  auto serve_cost = [&](int64_t capacity) {
    bspa_pool_options po = o;
    po.events_capacity = capacity;
    bspa_pool *p = nullptr;
    ok(bspa_pool_create(&p, &po), "bspa_pool_create");
    std::mt19937 g(7);
    std::vector<double> times;
    std::vector<int32_t> all(static_cast<size_t>(batch * page));  // a round's prompts, made before timing
    for (int64_t r = 0; r < rounds + 2; ++r) {
      for (int32_t &t : all) t = vocab(g);
      const double t0 = now();
      for (int64_t stored = 0; stored < batch; stored += seq_pages) {
        std::memcpy(tokens.data(), all.data() + stored * page, tokens.size() * sizeof(int32_t));
        bspa_seq *s = nullptr;
        ok(bspa_seq_create(&s, p, nullptr), "bspa_seq_create");
        int64_t cached = 0;
        ok(bspa_seq_match(s, tokens.data(), static_cast<int64_t>(tokens.size()), &cached), "match");
        ok(bspa_seq_append(s, tokens.data(), static_cast<int64_t>(tokens.size())), "append");
        ok(bspa_seq_commit(s, static_cast<int64_t>(tokens.size())), "commit");
        bspa_seq_destroy(s);
        if (capacity > 0) {
          size_t size = 0;
          bspa_status st;
          while ((st = bspa_pool_events_drain_msgpack(p, 1.0, 0, buffer.data(), buffer.size(), &size)) ==
                 BSPA_ERR_BUFFER_TOO_SMALL)
            buffer.resize(size * 2);
          ok(st, "drain");
        }
      }
      if (r >= 2) times.push_back(now() - t0);
    }
    bspa_pool_destroy(p);
    return median(times);
  };
  const double m = median(t_msgpack), s = median(t_struct);
  std::printf("page_size %d, %lld events (stored + removed pages) per drain, %lld rounds each\n", page,
              static_cast<long long>(pages_per_round), static_cast<long long>(rounds));
  std::printf("%-28s %10.3f ms  %8.2f M pages/s  %7.1f MB/s\n", "drain + vLLM msgpack encode", m * 1e3,
              pages_per_round / m / 1e6, bytes / m / 1e6);
  std::printf("%-28s %10.3f ms  %8.2f M pages/s\n", "structured drain", s * 1e3, pages_per_round / s / 1e6);
  // Random tokens never hit, so this is the costliest case for events: every page is
  // hashed, published (stored) and later evicted (removed). Interleaved A/B, best of 3.
  double off = 1e30, on = 1e30;
  for (int k = 0; k < 3; ++k) {
    off = std::min(off, serve_cost(0));
    on = std::min(on, serve_cost(4 * batch));
  }
  std::printf("%-28s %10.1f ns/page off, %.1f ns/page with events drained per request (+%.0f%%)\n",
              "serve (match..destroy)", off / batch * 1e9, on / batch * 1e9, 100 * (on / off - 1));
  if (!json.empty()) {
    FILE *f = std::fopen(json.c_str(), "w");
    if (!f) return 1;
    std::fprintf(f,
                 "{\"page_size\": %d, \"events_per_drain\": %lld, \"msgpack_bytes\": %lld, "
                 "\"msgpack_ms\": %.4f, \"msgpack_mpages_per_s\": %.3f, \"structured_ms\": %.4f, "
                 "\"structured_mpages_per_s\": %.3f}\n",
                 page, static_cast<long long>(pages_per_round), static_cast<long long>(bytes), m * 1e3,
                 pages_per_round / m / 1e6, s * 1e3, pages_per_round / s / 1e6);
    std::fclose(f);
  }
  bspa_pool_destroy(pool);
  return 0;
}
