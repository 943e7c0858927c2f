#include "report.hpp"

#include <cmath>
#include <cstdio>

namespace demo {

namespace {

double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0; }

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string json_timings(const Timings &t) {
  return "{\"project_s\": " + json_number(t.project_s) + ", \"kv_write_s\": " + json_number(t.kv_write_s) +
         ", \"prefill_s\": " + json_number(t.prefill_s) + "}";
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
  std::printf("requests            %lld from %lld tenants; %lld hit the cache (%.1f%%)\n", ll(r.requests), ll(r.tenants),
              ll(r.hit_requests), pct(r.hit_requests, r.requests));
  std::printf("prompt tokens       %lld, of which %lld served from the cache: token hit rate %.2f%%\n",
              ll(r.prompt_tokens), ll(r.cached_tokens), pct(r.cached_tokens, r.prompt_tokens));
  std::printf("prefill saved       %lld tokens not recomputed\n", ll(r.cached_tokens));
  if (attention_skipped) {
    std::printf("attention           skipped (--no-attention)\n");
  } else if (r.attention_requests > 0) {
    const double w = r.with_cache.prefill_s, wo = r.without_cache.prefill_s;
    std::printf("attention checked   %lld requests, %lld of %lld prompt tokens computed (%.1f%%)\n",
                ll(r.attention_requests), ll(r.attention_computed_tokens), ll(r.attention_prompt_tokens),
                pct(r.attention_computed_tokens, r.attention_prompt_tokens));
    std::printf("prefill time        %.3f s with the cache, %.3f s without (full recompute): %.2fx\n", w, wo,
                w > 0 ? wo / w : 0.0);
    std::printf("kv write time       %.3f s with the cache, %.3f s without\n", r.with_cache.kv_write_s,
                r.without_cache.kv_write_s);
    std::printf("max rel. L2 error   %.3g vs full recompute (tolerance %.0e), %lld/%lld requests within\n",
                r.max_rel_l2, r.tolerance, ll(r.attention_verified), ll(r.attention_requests));
  }
  if (r.mode == "synthetic")
    std::printf("tenant isolation    %lld matches checked against what each tenant produced; %lld first requests of\n"
                "                    a tenant found the shared system prompt cached only by others and missed\n",
                ll(r.cache_checks), ll(r.isolation_probes));
  else
    std::printf("cache checks        %lld matches checked against the trace's own prefixes (exact while nothing\n"
                "                    was evicted, an upper bound after)\n",
                ll(r.cache_checks));
  const auto &s = r.stats;
  std::printf("pool                %lld pages: %lld in use, %lld cached, %lld free; %llu evictions, %llu pages published\n",
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
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::perror(("bspa-demo: cannot write " + path).c_str());
    return false;
  }
  const auto &s = r.stats;
  std::string failures = "[";
  for (size_t i = 0; i < r.failures.size(); ++i) failures += (i ? ", " : "") + json_string(r.failures[i]);
  failures += "]";
  std::fprintf(f,
               "{\n"
               "  \"mode\": %s,\n  \"command\": %s,\n  \"device\": %s,\n  \"dtype\": %s,\n"
               "  \"num_layers\": %d,\n  \"sparse_layers\": %d,\n  \"page_size\": %d,\n  \"num_pages\": %lld,\n"
               "  \"requests\": %lld,\n  \"tenants\": %lld,\n  \"hit_requests\": %lld,\n"
               "  \"prompt_tokens\": %lld,\n  \"cached_tokens\": %lld,\n  \"token_hit_rate\": %s,\n"
               "  \"attention\": {\"requests\": %lld, \"prompt_tokens\": %lld, \"computed_tokens\": %lld, "
               "\"verified\": %lld, \"max_rel_l2\": %s, \"tolerance\": %s,\n"
               "                \"with_cache\": %s,\n                \"without_cache\": %s},\n"
               "  \"cache_checks\": %lld,\n  \"isolation_probes\": %lld,\n"
               "  \"pool\": {\"pages_total\": %lld, \"pages_free\": %lld, \"pages_cached\": %lld, \"pages_in_use\": %lld, "
               "\"match_calls\": %llu, \"hits\": %llu, \"misses\": %llu, \"matched_tokens\": %llu, \"queried_tokens\": %llu, "
               "\"hashed_tokens\": %llu, \"published_pages\": %llu, \"evictions\": %llu},\n"
               "  \"wall_s\": %s,\n  \"failure_count\": %lld,\n  \"failures\": %s,\n  \"verified\": %s\n}\n",
               json_string(r.mode).c_str(), json_string(r.command).c_str(), json_string(r.device).c_str(),
               json_string(r.dtype).c_str(), r.num_layers, r.sparse_layers, r.page_size, static_cast<long long>(r.num_pages),
               static_cast<long long>(r.requests), static_cast<long long>(r.tenants), static_cast<long long>(r.hit_requests),
               static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.cached_tokens),
               json_number(r.prompt_tokens ? static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0).c_str(),
               static_cast<long long>(r.attention_requests), static_cast<long long>(r.attention_prompt_tokens),
               static_cast<long long>(r.attention_computed_tokens), static_cast<long long>(r.attention_verified),
               json_number(r.max_rel_l2).c_str(), json_number(r.tolerance).c_str(), json_timings(r.with_cache).c_str(),
               json_timings(r.without_cache).c_str(), static_cast<long long>(r.cache_checks),
               static_cast<long long>(r.isolation_probes), static_cast<long long>(s.pages_total),
               static_cast<long long>(s.pages_free), static_cast<long long>(s.pages_cached),
               static_cast<long long>(s.pages_in_use), static_cast<unsigned long long>(s.match_calls),
               static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
               static_cast<unsigned long long>(s.matched_tokens), static_cast<unsigned long long>(s.queried_tokens),
               static_cast<unsigned long long>(s.hashed_tokens), static_cast<unsigned long long>(s.published_pages),
               static_cast<unsigned long long>(s.evictions), json_number(r.wall_s).c_str(),
               static_cast<long long>(r.failure_count), failures.c_str(), r.verified() ? "true" : "false");
  const bool ok = std::fclose(f) == 0;
  if (!ok) std::perror(("bspa-demo: cannot write " + path).c_str());
  return ok;
}

}  // namespace demo
