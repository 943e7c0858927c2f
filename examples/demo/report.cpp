#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace demo {

namespace {

double pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

using Json = nlohmann::ordered_json;  // keys in the order written

// Non-finite numbers are written as null (JSON has no NaN).
Json number(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

Json timings(const Timings &t) {
  return {{"project_s", number(t.project_s)}, {"kv_write_s", number(t.kv_write_s)}, {"prefill_s", number(t.prefill_s)}};
}

// The q-quantile of xs (nearest rank); 0 for none.
double quantile(std::vector<double> xs, double q) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(xs.size())));
  return xs[std::min(xs.size() - 1, i > 0 ? i - 1 : 0)];
}

double per_s(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }

std::string hex64(uint64_t x) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// "1, 2, 4 .. 37": the max_tokens of the buckets that may hold prompt chunks (decode_only
// false) or of those of decode rows only.
std::string bucket_list(const RunnerStats &s, bool decode_only) {
  std::string out;
  for (size_t i = 0; i < s.bucket_rows.size(); ++i)
    if (s.bucket_decode_only[i] == decode_only) out += (out.empty() ? "" : ", ") + std::to_string(s.bucket_rows[i]);
  return out;
}

}  // namespace

void Report::fail(const std::string &message) {
  ++failure_count;
  if (failures.size() < 20) failures.push_back(message);
  if (failure_count <= 20) std::fprintf(stderr, "CHECK FAILED: %s\n", message.c_str());
}

void print_summary(const Report &r, bool attention_skipped) {
  const auto ll = [](int64_t x) { return static_cast<long long>(x); };
  std::printf("\n== bspa-demo summary (%s) ==\n", r.mode.c_str());
  std::printf("device              %s, %s, %d layers (%d block-sparse), page %d, %lld pages\n", r.device.c_str(),
              r.dtype.c_str(), r.num_layers, r.sparse_layers, r.page_size, ll(r.num_pages));
  std::printf("requests            %lld from %lld tenants; %lld hit the cache (%.1f%%)\n", ll(r.requests),
              ll(r.tenants), ll(r.hit_requests), pct(r.hit_requests, r.requests));
  std::printf("prompt tokens       %lld, of which %lld served from the cache: token hit rate %.2f%%\n",
              ll(r.prompt_tokens), ll(r.cached_tokens), pct(r.cached_tokens, r.prompt_tokens));
  std::printf("prefill saved       %lld tokens not recomputed\n", ll(r.cached_tokens));
  const EngineStats &e = r.engine;
  if (e.steps > 0) {
    std::printf(
        "engine              %lld steps of at most %d tokens, at most %d sequences in flight (%lld reached);\n"
        "                    %lld steps mixed prefill chunks with decode rows\n",
        ll(e.steps), e.step_tokens, e.max_seqs, ll(e.max_in_flight), ll(e.mixed_steps));
    std::printf("tokens computed     %lld prefill (%lld chunks for %lld turns), %lld decode; %lld generated\n",
                ll(e.prefill_rows), ll(e.chunks), ll(r.requests), ll(e.decode_rows), ll(e.generated));
    std::printf("throughput          prefill %.0f tokens/s, decode %.0f tokens/s (both over the %.3f s of steps)\n",
                per_s(e.prefill_rows, e.step_s), per_s(e.decode_rows, e.step_s), e.step_s);
    std::printf(
        "step time           median %.3f ms, p90 %.3f ms (plan, launches of every layer, device wait,\n"
        "                    release, commits)\n",
        1e3 * quantile(e.step_times, 0.5), 1e3 * quantile(e.step_times, 0.9));
    std::printf(
        "host time per step  median %.3f ms, p90 %.3f ms (the bspa calls as the host sees them; on the\n"
        "                    CPU backend the attention runs inside them)\n",
        1e3 * quantile(e.host_times, 0.5), 1e3 * quantile(e.host_times, 0.9));
    const RunnerStats &rs = e.runner;
    if (e.launch == "batch")
      std::printf("launches            batch: a one-step batch per step (bspa_batch_create/destroy), eager\n");
    else if (e.launch == "plan")
      std::printf("launches            plan: one reusable batch re-planned every step (bspa_batch_plan), eager\n");
    else
      std::printf(
          "launches            %s: %lld fixed-shape reusable batches (max_tokens %s; decode rows only %s), %s;\n"
          "                    %lld steps no bucket held, launched through a one-step batch\n",
          e.launch.c_str(), ll(rs.buckets), bucket_list(rs, false).c_str(), bucket_list(rs, true).c_str(),
          e.launch == "graphs" ? "a CUDA graph per bucket" : "eager", ll(rs.eager_fallbacks));
    if (e.launch == "graphs")
      std::printf(
          "graphs              %lld captured (%.3f s, not in the step times), %lld steps replayed; %lld replays\n"
          "                    compared bitwise with an eager launch of the same plan: %lld differ\n",
          ll(rs.graph_captures), e.capture_s, ll(rs.graph_replays), ll(e.graph_checks), ll(e.graph_mismatches));
    std::printf("token digest        %s (FNV-1a 64 over the %lld generated token ids, in order)\n",
                hex64(e.token_digest).c_str(), ll(e.generated));
  }
  if (attention_skipped) {
    std::printf("attention           skipped (--no-attention)\n");
  } else if (r.attention_requests > 0) {
    const double w = r.with_cache.prefill_s, wo = r.without_cache.prefill_s;
    if (e.steps > 0)
      std::printf(
          "attention checked   %lld turns: all %lld rows the engine computed for them (prompt chunks and\n"
          "                    decode rows) against a full recompute of their %lld tokens (%.1f%% computed)\n",
          ll(r.attention_requests), ll(e.checked_rows), ll(r.attention_prompt_tokens),
          pct(r.attention_computed_tokens, r.attention_prompt_tokens));
    else
      std::printf("attention checked   %lld requests, %lld of %lld prompt tokens computed (%.1f%%)\n",
                  ll(r.attention_requests), ll(r.attention_computed_tokens), ll(r.attention_prompt_tokens),
                  pct(r.attention_computed_tokens, r.attention_prompt_tokens));
    if (e.steps > 0)
      std::printf(
          "attention time      %.3f s in the engine's steps (chunks and decode rows, with the cache),\n"
          "                    %.3f s in the full recomputes (no cache): %.2fx\n",
          w, wo, w > 0 ? wo / w : 0.0);
    else
      std::printf("prefill time        %.3f s with the cache, %.3f s without (full recompute): %.2fx\n", w, wo,
                  w > 0 ? wo / w : 0.0);
    std::printf("kv write time       %.3f s with the cache, %.3f s without\n", r.with_cache.kv_write_s,
                r.without_cache.kv_write_s);
    std::printf("max rel. L2 error   %.3g vs full recompute (tolerance %.0e), %lld/%lld requests within\n",
                r.max_rel_l2, r.tolerance, ll(r.attention_verified), ll(r.attention_requests));
  }
  if (r.mode == "synthetic")
    std::printf(
        "tenant isolation    %lld matches checked against what each tenant produced; %lld first requests of\n"
        "                    a tenant found the shared system prompt cached only by others and missed\n",
        ll(r.cache_checks), ll(r.isolation_probes));
  else
    std::printf(
        "cache checks        %lld matches checked against the trace's own prefixes (exact while nothing\n"
        "                    was evicted, an upper bound after)\n",
        ll(r.cache_checks));
  const auto &s = r.stats;
  std::printf(
      "pool                %lld pages: %lld in use, %lld cached, %lld free; %llu evictions, %llu pages published\n",
      ll(s.pages_total), ll(s.pages_in_use), ll(s.pages_cached), ll(s.pages_free),
      static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.published_pages));
  std::printf("wall time           %.2f s\n", r.wall_s);
  if (r.verified())
    std::printf("result              verified: every check passed\n");
  else
    std::printf("result              NOT VERIFIED: %lld check(s) failed (first: %s)\n", ll(r.failure_count),
                r.failures.empty() ? "an attention mismatch" : r.failures.front().c_str());
}

bool write_json(const Report &r, const std::string &path) {
  const auto &st = r.stats;
  Json j;
  j["mode"] = r.mode;
  j["command"] = r.command;
  j["device"] = r.device;
  j["dtype"] = r.dtype;
  j["num_layers"] = r.num_layers;
  j["sparse_layers"] = r.sparse_layers;
  j["page_size"] = r.page_size;
  j["num_pages"] = r.num_pages;
  j["requests"] = r.requests;
  j["tenants"] = r.tenants;
  j["hit_requests"] = r.hit_requests;
  j["prompt_tokens"] = r.prompt_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["token_hit_rate"] =
      number(r.prompt_tokens ? static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0);
  j["attention"] = {{"requests", r.attention_requests},
                    {"prompt_tokens", r.attention_prompt_tokens},
                    {"computed_tokens", r.attention_computed_tokens},
                    {"verified", r.attention_verified},
                    {"max_rel_l2", number(r.max_rel_l2)},
                    {"tolerance", number(r.tolerance)},
                    {"with_cache", timings(r.with_cache)},
                    {"without_cache", timings(r.without_cache)}};
  if (r.engine.steps > 0) {
    const EngineStats &e = r.engine;
    j["engine"] = {{"step_tokens", e.step_tokens},
                   {"max_seqs", e.max_seqs},
                   {"steps", e.steps},
                   {"mixed_steps", e.mixed_steps},
                   {"max_in_flight", e.max_in_flight},
                   {"prefill_tokens", e.prefill_rows},
                   {"decode_tokens", e.decode_rows},
                   {"prefill_chunks", e.chunks},
                   {"generated_tokens", e.generated},
                   {"checked_rows", e.checked_rows},
                   {"step_s", number(e.step_s)},
                   {"prefill_tokens_per_s", number(per_s(e.prefill_rows, e.step_s))},
                   {"decode_tokens_per_s", number(per_s(e.decode_rows, e.step_s))},
                   {"step_ms_median", number(1e3 * quantile(e.step_times, 0.5))},
                   {"step_ms_p90", number(1e3 * quantile(e.step_times, 0.9))},
                   {"host_ms_per_step_median", number(1e3 * quantile(e.host_times, 0.5))},
                   {"host_ms_per_step_p90", number(1e3 * quantile(e.host_times, 0.9))},
                   {"launch", e.launch},
                   {"token_digest", hex64(e.token_digest)}};
    if (e.launch == "fixed" || e.launch == "graphs") {
      Json buckets = Json::array();
      for (size_t i = 0; i < e.runner.bucket_rows.size(); ++i)
        buckets.push_back({{"max_tokens", e.runner.bucket_rows[i]},
                           {"decode_only", static_cast<bool>(e.runner.bucket_decode_only[i])},
                           {"steps", e.runner.bucket_steps[i]}});
      j["engine"]["buckets"] = buckets;
      j["engine"]["eager_fallback_steps"] = e.runner.eager_fallbacks;
    }
    if (e.launch == "graphs")
      j["engine"]["graphs"] = {{"captured", e.runner.graph_captures},
                               {"capture_s", number(e.capture_s)},
                               {"replayed_steps", e.runner.graph_replays},
                               {"checked_against_eager", e.graph_checks},
                               {"mismatches", e.graph_mismatches}};
  }
  j["cache_checks"] = r.cache_checks;
  j["isolation_probes"] = r.isolation_probes;
  j["pool"] = {{"pages_total", st.pages_total},
               {"pages_free", st.pages_free},
               {"pages_cached", st.pages_cached},
               {"pages_in_use", st.pages_in_use},
               {"match_calls", st.match_calls},
               {"hits", st.hits},
               {"misses", st.misses},
               {"matched_tokens", st.matched_tokens},
               {"queried_tokens", st.queried_tokens},
               {"hashed_tokens", st.hashed_tokens},
               {"published_pages", st.published_pages},
               {"evictions", st.evictions}};
  j["wall_s"] = number(r.wall_s);
  j["failure_count"] = r.failure_count;
  j["failures"] = r.failures;
  j["verified"] = r.verified();
  std::ofstream f(path);
  // Invalid UTF-8 in a failure message (it quotes no user text today) is replaced, not thrown.
  if (f) f << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "bspa-demo: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace demo
