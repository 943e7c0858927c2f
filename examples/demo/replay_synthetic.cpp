#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "clock.hpp"
#include "fault.hpp"
#include "handles.hpp"
#include "prefix_oracle.hpp"
#include "progress.hpp"
#include "replay.hpp"
#include "status.hpp"

namespace demo {

bspa_pool *create_pool(const Options &o, Device device, bspa_dtype dtype, int32_t num_layers, int64_t num_pages,
                       int64_t events_capacity) {
  bspa_pool_options po;
  DEMO_OK(bspa_pool_options_init(&po));
  po.device_type = device.type;
  po.device_id = device.id;
  po.dtype = dtype;
  po.num_layers = num_layers;
  po.num_kv_heads = o.model.num_kv_heads;
  po.head_dim = o.model.head_dim;
  po.page_size = o.page_size;
  po.num_pages = num_pages;
  po.events_capacity = events_capacity;
  bspa_pool *pool = nullptr;
  DEMO_OK(bspa_pool_create(&pool, &po));
  return pool;
}

void replay_synthetic(const Options &o, Device device, bspa_dtype dtype, Report &report) {
  const std::vector<Turn> turns = make_workload(o.workload);
  const int64_t page = o.page_size;

  // Enough pages that nothing is ever evicted, unless the caller asks for fewer.
  int64_t num_pages = o.pages > 0 ? o.pages : 0;
  if (num_pages == 0)
    for (const Turn &t : turns) num_pages += (static_cast<int64_t>(t.prompt.size()) + page - 1) / page;
  PoolPtr pool(create_pool(o, device, dtype, o.model.num_layers, num_pages));

  const ToyModel model(o.model, o.workload.seed);
  // FP8: the scales once, from the first prompt, before anything is written (fp8.hpp).
  Fp8Scales fp8;
  if (dtype == BSPA_DTYPE_FP8_E4M3 && !turns.empty()) {
    fp8 = calibrate_fp8(model, turns[0].prompt.data(), static_cast<int64_t>(turns[0].prompt.size()));
    set_fp8_scales(pool.get(), fp8, o.model.num_layers);
  }
  const LayerLayouts layouts(o.model.num_layers, o.model.num_q_heads, o.strided);
  AttentionSetup setup;
  setup.device = device;
  setup.dtype = dtype == BSPA_DTYPE_FP8_E4M3 ? BSPA_DTYPE_BF16 : dtype;
  setup.kv_dtype = dtype;
  setup.fp8 = dtype == BSPA_DTYPE_FP8_E4M3 ? &fp8 : nullptr;
  setup.page_size = o.page_size;
  setup.scale = static_cast<float>(o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(o.model.head_dim)));
  setup.model = &model;
  setup.layouts = &layouts;

  report.num_pages = num_pages;
  report.tenants = o.workload.tenants;
  report.tolerance = dtype == BSPA_DTYPE_F32 ? 1e-5 : 1e-2;
  PrefixOracle oracle(page);
  bool injected = false;
  Progress progress(static_cast<int64_t>(turns.size()), "turns", o.progress);

  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn &turn = turns[i];
    const int32_t *prompt = turn.prompt.data();
    const int64_t n = static_cast<int64_t>(turn.prompt.size());
    const std::string where = "turn " + std::to_string(i) + " (tenant " + std::to_string(turn.tenant) +
                              ", conversation " + std::to_string(turn.conversation) + ", turn " +
                              std::to_string(turn.turn) + ")";
    auto fail = [&](const std::string &what) {
      progress.clear();
      report.fail(where + ": " + what);
    };

    // What the cache may return: only what this tenant committed. A tenant's first
    // request while another tenant has cached the same system prompt must miss.
    const int64_t expected = oracle.expected_hit(turn.tenant, prompt, n);
    bool others_have_it = false;
    for (int32_t t = 0; t < o.workload.tenants && !others_have_it; ++t)
      others_have_it = t != turn.tenant && oracle.expected_hit(t, prompt, n) > 0;
    struct bspa_pool_stats before;
    DEMO_OK(bspa_pool_stats(pool.get(), &before));

    const std::string salt = o.inject_fault == "salt" ? "everyone" : turn.salt();
    bspa_seq_options so;
    DEMO_OK(bspa_seq_options_init(&so));
    so.salt = salt.data();
    so.salt_len = salt.size();
    bspa_seq *raw = nullptr;
    DEMO_OK(bspa_seq_create(&raw, pool.get(), &so));
    SeqPtr seq(raw);

    int64_t cached = 0;
    DEMO_OK(bspa_seq_match(seq.get(), prompt, n, &cached));
    ++report.cache_checks;
    if (cached > expected)
      fail("matched " + std::to_string(cached) + " tokens but this tenant only ever committed a " +
           std::to_string(expected) + "-token prefix of this prompt (pages of another tenant, or never written)");
    else if (before.evictions == 0 && cached != expected)
      fail("matched " + std::to_string(cached) + " tokens, expected " + std::to_string(expected) +
           " (nothing was evicted, so every committed page should be found)");
    if (!oracle.tenant_seen(turn.tenant) && others_have_it) {
      ++report.isolation_probes;
      if (cached != 0) fail("a new tenant hit " + std::to_string(cached) + " tokens cached by other tenants");
    }
    struct bspa_seq_info info;
    DEMO_OK(bspa_seq_info(seq.get(), &info));
    if (info.num_cached != cached || info.num_computed != cached || info.num_tokens != cached)
      fail("bspa_seq_info after the match disagrees with bspa_seq_match's " + std::to_string(cached) + " tokens");

    if (o.inject_fault == "kv" && cached > 0 && !injected && o.model.num_layers > 0) {
      corrupt_first_page(pool.get(), seq.get(), device, o.model.head_dim, dtype);
      injected = true;
    }
    DEMO_OK(bspa_seq_append(seq.get(), prompt + cached, n - cached));

    Timings with, without;
    const LayerOutputs got = prefill_with_cache(setup, pool.get(), seq.get(), prompt, n, cached, with);
    const LayerOutputs want = prefill_from_scratch(setup, prompt, n, n - cached, without);
    double worst = 0;
    for (size_t l = 0; l < got.size(); ++l) {
      const double err = relative_l2(got[l], want[l]);
      if (!(err <= report.tolerance))
        fail("layer " + std::to_string(l) +
             (LayerLayouts::sparse(static_cast<int32_t>(l)) ? " (block-sparse)" : " (dense)") + ": relative L2 error " +
             std::to_string(err) + " against the full recompute (tolerance " + std::to_string(report.tolerance) +
             ", cached prefix " + std::to_string(cached) + " of " + std::to_string(n) + " tokens)");
      if (!(err <= worst)) worst = err;  // NaN sticks
    }
    if (!(worst <= report.max_rel_l2) || std::isnan(worst)) report.max_rel_l2 = worst;
    const bool turn_ok = worst <= report.tolerance;

    DEMO_OK(bspa_seq_commit(seq.get(), n));
    seq.reset();
    oracle.commit(turn.tenant, prompt, n);
    const bspa_status check = bspa_pool_check(pool.get());
    if (check != BSPA_OK) fail(std::string("bspa_pool_check: ") + bspa_last_error());

    report.requests += 1;
    report.hit_requests += cached > 0;
    report.prompt_tokens += n;
    report.cached_tokens += cached;
    report.attention_requests += 1;
    report.attention_prompt_tokens += n;
    report.attention_computed_tokens += n - cached;
    report.attention_verified += turn_ok;
    report.with_cache += with;
    report.without_cache += without;
    if (o.verbose) {
      progress.clear();
      std::printf("  %-44s prompt %5lld  cached %5lld  computed %5lld  err %.2e  %s\n", where.c_str(),
                  static_cast<long long>(n), static_cast<long long>(cached), static_cast<long long>(n - cached), worst,
                  turn_ok ? "ok" : "FAILED");
    }
    progress.update(
        static_cast<int64_t>(i + 1),
        "hit " + std::to_string(report.prompt_tokens ? 100 * report.cached_tokens / report.prompt_tokens : 0) + "%");
  }
  progress.finish();
  DEMO_OK(bspa_pool_stats(pool.get(), &report.stats));
}

}  // namespace demo
