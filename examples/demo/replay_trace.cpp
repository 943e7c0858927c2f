// Mooncake trace replay: every request's prefix-cache bookkeeping through a pool without
// KV storage (the whole trace in seconds), and for a few sampled requests the attention
// itself, over the cached length the trace replay produced, checked against a recompute.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "clock.hpp"
#include "handles.hpp"
#include "prefix_oracle.hpp"
#include "progress.hpp"
#include "replay.hpp"
#include "status.hpp"
#include "trace/mooncake.hpp"

namespace demo {

namespace {

SeqPtr new_seq(bspa_pool *pool) {
  bspa_seq *raw = nullptr;
  DEMO_OK(bspa_seq_create(&raw, pool, nullptr));
  return SeqPtr(raw);
}

// Rebuilds the cache state a sampled request met (its first `cached` tokens computed by
// an earlier request) in a private pool with KV storage, then runs the request itself:
// match, append, prefill of the uncached tokens, compared with a full recompute.
void attention_sample(const Options &o, const AttentionSetup &setup, Device device, bspa_dtype dtype,
                      const std::vector<int32_t> &prompt, int64_t cached, Report &report, const std::string &where) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t pages = 2 * ((n + o.page_size - 1) / o.page_size) + 1;
  PoolPtr pool(create_pool(o, device, dtype, o.model.num_layers, pages));
  // FP8: this private pool's scales, from the sampled prompt itself (fp8.hpp).
  Fp8Scales fp8;
  AttentionSetup own = setup;
  if (dtype == BSPA_DTYPE_FP8_E4M3) {
    fp8 = calibrate_fp8(*setup.model, prompt.data(), n);
    set_fp8_scales(pool.get(), fp8, o.model.num_layers);
    own.fp8 = &fp8;
  }
  const AttentionSetup &s = own;
  Timings ignored, with, without;
  if (cached > 0) {  // the earlier request that left the prefix in the cache
    SeqPtr warm = new_seq(pool.get());
    int64_t none = 0;
    DEMO_OK(bspa_seq_match(warm.get(), prompt.data(), cached, &none));
    DEMO_OK(bspa_seq_append(warm.get(), prompt.data(), cached));
    prefill_with_cache(s, pool.get(), warm.get(), prompt.data(), cached, 0, ignored);
    DEMO_OK(bspa_seq_commit(warm.get(), cached));
  }
  SeqPtr seq = new_seq(pool.get());
  int64_t hit = 0;
  DEMO_OK(bspa_seq_match(seq.get(), prompt.data(), n, &hit));
  if (hit != cached)
    report.fail(where + ": the private pool matched " + std::to_string(hit) + " tokens, expected " +
                std::to_string(cached));
  DEMO_OK(bspa_seq_append(seq.get(), prompt.data() + hit, n - hit));
  const LayerOutputs got = prefill_with_cache(s, pool.get(), seq.get(), prompt.data(), n, hit, with);
  const LayerOutputs want = prefill_from_scratch(s, prompt.data(), n, n - hit, without);
  double worst = 0;
  for (size_t l = 0; l < got.size(); ++l) {
    const double err = relative_l2(got[l], want[l]);
    if (!(err <= report.tolerance))
      report.fail(where + ": layer " + std::to_string(l) + ": relative L2 error " + std::to_string(err) +
                  " against the full recompute (cached prefix " + std::to_string(hit) + " of " + std::to_string(n) +
                  ")");
    if (!(err <= worst)) worst = err;
  }
  if (!(worst <= report.max_rel_l2) || std::isnan(worst)) report.max_rel_l2 = worst;
  report.attention_requests += 1;
  report.attention_prompt_tokens += n;
  report.attention_computed_tokens += n - hit;
  report.attention_verified += worst <= report.tolerance;
  report.with_cache += with;
  report.without_cache += without;
  if (o.verbose)
    std::printf("  attention %-34s prompt %5lld  cached %5lld  err %.2e\n", where.c_str(), static_cast<long long>(n),
                static_cast<long long>(hit), worst);
}

}  // namespace

void replay_trace(const Options &o, Device device, bspa_dtype dtype, Report &report) {
  const double t0 = now_s();
  std::vector<bspa::trace::Request> requests;
  try {
    requests = bspa::trace::read_mooncake(o.trace);
  } catch (const std::runtime_error &e) {
    throw InputError(e.what());  // the file, not the library: its own exit status
  }
  if (o.max_requests > 0 && static_cast<int64_t>(requests.size()) > o.max_requests)
    requests.resize(static_cast<size_t>(o.max_requests));
  std::printf("trace %s: %zu requests loaded in %.2f s\n", o.trace.c_str(), requests.size(), now_s() - t0);

  const int64_t page = o.page_size;
  // --pages 0: unbounded, i.e. every page of every prompt fits at once and nothing is
  // ever evicted (the trace README's reference figure). Not given: 16384 pages.
  int64_t num_pages = o.pages > 0 ? o.pages : 16384;
  if (o.pages == 0) {
    num_pages = 0;
    for (const auto &r : requests) num_pages += (r.input_length + page - 1) / page;
    num_pages = std::max<int64_t>(num_pages, 1);
  }
  // Bookkeeping only: no KV storage, so the capacity costs nothing but page records.
  Device host;
  PoolPtr pool(create_pool(o, host, dtype, 0, num_pages, o.events));
  // --events: what a runtime's publisher does once per step, minus the socket.
  std::vector<unsigned char> batch(1 << 16);
  int64_t event_batches = 0, event_bytes = 0, event_overflows = 0;
  auto drain_events = [&] {
    size_t size = 0;
    bspa_status st;
    while ((st = bspa_pool_events_drain_msgpack(pool.get(), now_s(), 0, batch.data(), batch.size(), &size)) ==
           BSPA_ERR_BUFFER_TOO_SMALL)
      batch.resize(size + size / 2);
    DEMO_OK(st);
    ++event_batches;
    event_bytes += static_cast<int64_t>(size);
    // [ts, events, rank]: the events' array header sits at byte 10 (1, 3 or 5 bytes); an
    // overflow's batch begins with {"type": "AllBlocksCleared"}, the only 1-entry map.
    const size_t first = batch[10] == 0xdc ? 13 : batch[10] == 0xdd ? 15 : 11;
    event_overflows += size > first && batch[first] == 0x81;
  };
  report.num_pages = num_pages;
  report.tenants = 1;
  report.tolerance = dtype == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;

  std::unique_ptr<ToyModel> model;
  std::unique_ptr<LayerLayouts> layouts;
  AttentionSetup setup;
  std::set<size_t> sample;
  if (!o.no_attention && o.attention_sample > 0 && !requests.empty()) {
    model = std::make_unique<ToyModel>(o.model, o.workload.seed);
    layouts = std::make_unique<LayerLayouts>(o.model.num_layers, o.model.num_q_heads, o.strided);
    setup.device = device;
    setup.dtype = dtype == BSPA_DTYPE_FP8_E4M3 ? BSPA_DTYPE_BF16 : dtype;
    setup.kv_dtype = dtype;
    setup.page_size = o.page_size;
    setup.scale = static_cast<float>(o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(o.model.head_dim)));
    setup.model = model.get();
    setup.layouts = layouts.get();
    // Spread over the trace, so later samples meet a warm cache.
    const size_t k = static_cast<size_t>(o.attention_sample);
    for (size_t i = 1; i <= k; ++i) sample.insert(std::min(requests.size() - 1, i * requests.size() / (k + 1)));
  }

  PrefixOracle oracle(page);
  Progress progress(static_cast<int64_t>(requests.size()), "requests", o.progress);
  std::vector<int32_t> prompt;
  int64_t too_long = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    bspa::trace::request_tokens(requests[i], prompt);
    const int64_t n = static_cast<int64_t>(prompt.size());
    const std::string where = "request " + std::to_string(i);
    if ((n + page - 1) / page > num_pages) {
      ++too_long;  // cannot be held by this pool at all: a server would reject it
      continue;
    }
    struct bspa_pool_stats before;
    DEMO_OK(bspa_pool_stats(pool.get(), &before));
    const int64_t expected = oracle.expected_hit(0, prompt.data(), n);
    SeqPtr seq = new_seq(pool.get());
    int64_t cached = 0;
    DEMO_OK(bspa_seq_match(seq.get(), prompt.data(), n, &cached));
    ++report.cache_checks;
    if (cached > expected || (before.evictions == 0 && cached != expected)) {
      progress.clear();
      report.fail(where + ": matched " + std::to_string(cached) + " tokens, the trace's own prefixes allow " +
                  std::to_string(expected) + (before.evictions == 0 ? " exactly" : " at most"));
    }
    DEMO_OK(bspa_seq_append(seq.get(), prompt.data() + cached, n - cached));
    DEMO_OK(bspa_seq_commit(seq.get(), n));
    seq.reset();
    if (o.events > 0) drain_events();
    oracle.commit(0, prompt.data(), n);
    report.requests += 1;
    report.hit_requests += cached > 0;
    report.prompt_tokens += n;
    report.cached_tokens += cached;

    if (sample.count(i)) {
      progress.clear();
      // A long prompt is cut to its first attention_max_tokens tokens, keeping as much of
      // the cached prefix as still fits (whole pages, the last token computed).
      const int64_t m = std::min<int64_t>(n, o.attention_max_tokens);
      const int64_t c = std::min<int64_t>(cached, (m - 1) / page * page);
      std::vector<int32_t> cut(prompt.begin(), prompt.begin() + m);
      attention_sample(o, setup, device, dtype, cut, c, report, where);
    }
    progress.update(
        static_cast<int64_t>(i + 1),
        "hit " + std::to_string(report.prompt_tokens ? 100 * report.cached_tokens / report.prompt_tokens : 0) + "%");
  }
  progress.finish();
  if (too_long)
    std::printf("%lld requests skipped: longer than the whole pool (%lld pages)\n", static_cast<long long>(too_long),
                static_cast<long long>(num_pages));
  if (o.events > 0)
    std::printf("events: %lld msgpack batches, %.1f MB, %lld began with an overflow (queue of %lld records)\n",
                static_cast<long long>(event_batches), static_cast<double>(event_bytes) / 1e6,
                static_cast<long long>(event_overflows), static_cast<long long>(o.events));
  const bspa_status check = bspa_pool_check(pool.get());
  if (check != BSPA_OK) report.fail(std::string("bspa_pool_check: ") + bspa_last_error());
  DEMO_OK(bspa_pool_stats(pool.get(), &report.stats));
}

}  // namespace demo
