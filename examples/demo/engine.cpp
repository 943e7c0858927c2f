#include "engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "clock.hpp"
#include "fault.hpp"
#include "status.hpp"

namespace demo {

namespace {

// The runner's limits from the demo's options: the step budget, the sequences in flight and
// the workload's longest sequence (its prompt and generated tokens; at most the pool's pages).
RunnerOptions runner_options(const Options &o, const Workload &w, bspa_pool *pool) {
  RunnerOptions r;
  r.mode = o.launch == "batch"               ? LaunchMode::Batch
           : o.launch == "fixed" || o.graphs ? LaunchMode::Fixed
                                             : LaunchMode::Plan;
  r.graphs = o.graphs;
  r.max_seqs = o.max_seqs;
  r.max_tokens = o.step_tokens;
  int64_t longest = 1;
  for (const Turn &t : w.turns) longest = std::max<int64_t>(longest, t.prompt_tokens + t.generate);
  struct bspa_pool_stats st;
  DEMO_OK(bspa_pool_stats(pool, &st));
  r.max_seq_tokens = std::max<int64_t>(1, std::min<int64_t>(longest, st.pages_total * o.page_size));
  return r;
}

const char *launch_name(const Options &o) { return o.graphs ? "graphs" : o.launch.c_str(); }

// FNV-1a, 64 bits, over a token id's 4 bytes (little-endian).
uint64_t fnv1a(uint64_t h, int32_t token) {
  const uint32_t u = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xffu;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

Engine::Engine(const Options &o, const Workload &w, bspa_pool *pool, const AttentionSetup &setup, Report &report)
    : o_(o),
      w_(w),
      pool_(pool),
      setup_(setup),
      report_(report),
      buffers_(setup.device, setup.dtype, setup.model->shape(), o.step_tokens),
      runner_(make_runner(pool, setup, buffers_, runner_options(o, w, pool))),
      oracle_(o.page_size),
      progress_(static_cast<int64_t>(w.turns.size()), "turns", o.progress),
      conversations_(static_cast<size_t>(o.workload.conversations)),
      done_(w.turns.size(), false) {
  for (Conversation &c : conversations_) c.history = w.system;
  report_.engine.step_tokens = o.step_tokens;
  report_.engine.max_seqs = o.max_seqs;
  report_.engine.launch = launch_name(o);
}

void Engine::fail(const std::string &what) {
  progress_.clear();
  report_.fail(what);
}

int64_t Engine::pages_owed(const Request &r) const {
  const int32_t generate = w_.turns[r.turn].generate;
  const int64_t last = r.prompt + std::max(generate - 1, 0);  // the last generated token gets no KV
  const int64_t page = o_.page_size, held = static_cast<int64_t>(r.tokens.size());
  return (last + page - 1) / page - (held + page - 1) / page;
}

bool Engine::admit(size_t i) {
  const Turn &turn = w_.turns[i];
  Conversation &conv = conversations_[static_cast<size_t>(turn.conversation)];
  auto r = std::make_unique<Request>();
  r->turn = i;
  r->where = "turn " + std::to_string(i) + " (tenant " + std::to_string(turn.tenant) + ", conversation " +
             std::to_string(turn.conversation) + ", turn " + std::to_string(turn.turn) + ")";
  r->tokens = conv.history;
  r->tokens.insert(r->tokens.end(), turn.user.begin(), turn.user.end());
  const int32_t *prompt = r->tokens.data();
  const int64_t n = static_cast<int64_t>(r->tokens.size());
  if (n != turn.prompt_tokens) throw std::logic_error("the workload's prompt length disagrees with the history");
  r->prompt = n;

  // What the cache may return: only what this tenant committed so far (pages of turns
  // still in flight included, up to their last step). A tenant's first request while
  // another tenant has cached the same system prompt must miss.
  const int64_t expected = oracle_.expected_hit(turn.tenant, prompt, n);
  bool others_have_it = false;
  for (int32_t t = 0; t < o_.workload.tenants && !others_have_it; ++t)
    others_have_it = t != turn.tenant && oracle_.expected_hit(t, prompt, n) > 0;
  struct bspa_pool_stats before;
  DEMO_OK(bspa_pool_stats(pool_, &before));

  const std::string salt = o_.inject_fault == "salt" ? "everyone" : turn.salt();
  bspa_seq_options so;
  DEMO_OK(bspa_seq_options_init(&so));
  so.salt = salt.data();
  so.salt_len = salt.size();
  bspa_seq *raw = nullptr;
  DEMO_OK(bspa_seq_create(&raw, pool_, &so));
  r->seq.reset(raw);
  DEMO_OK(bspa_seq_match(r->seq.get(), prompt, n, &r->cached));
  // Pages for the whole prompt now (its chunks are computed over the next steps). Out
  // of pages while others hold theirs: the turn waits for them to finish (its matched
  // pages go back to the cache meanwhile), as vLLM leaves a request in its queue.
  const bspa_status appended = bspa_seq_append(r->seq.get(), prompt + r->cached, n - r->cached);
  if (appended == BSPA_ERR_OUT_OF_PAGES && !running_.empty()) return false;
  ok(appended, "bspa_seq_append");
  r->computed = r->cached;
  // The tokens it will generate need pages too, and the demo does not preempt: admitted
  // only while the pages not yet taken (free or evictable) cover what every sequence in
  // flight, this one included, still has to append.
  struct bspa_pool_stats now;
  DEMO_OK(bspa_pool_stats(pool_, &now));
  int64_t owed = pages_owed(*r);
  for (const auto &other : running_) owed += pages_owed(*other);
  if (owed > now.pages_free + now.pages_cached) {
    if (running_.empty())
      throw std::runtime_error(r->where + " needs " + std::to_string(owed) +
                               " more pages for its generated tokens than the pool of " +
                               std::to_string(now.pages_total) + " has left (raise --pages)");
    return false;
  }

  const int64_t cached = r->cached;
  ++report_.cache_checks;
  if (cached > expected)
    fail(r->where + ": matched " + std::to_string(cached) + " tokens but this tenant only ever committed a " +
         std::to_string(expected) + "-token prefix of this prompt (pages of another tenant, or never written)");
  else if (before.evictions == 0 && cached != expected)
    fail(r->where + ": matched " + std::to_string(cached) + " tokens, expected " + std::to_string(expected) +
         " (nothing was evicted, so every committed page should be found)");
  if (!oracle_.tenant_seen(turn.tenant) && others_have_it) {
    ++report_.isolation_probes;
    if (cached != 0)
      fail(r->where + ": a new tenant hit " + std::to_string(cached) + " tokens cached by other tenants");
  }
  struct bspa_seq_info info;
  DEMO_OK(bspa_seq_info(r->seq.get(), &info));
  if (info.num_cached != cached || info.num_computed != cached || info.num_tokens != n)
    fail(r->where + ": bspa_seq_info after the match and append disagrees with bspa_seq_match's " +
         std::to_string(cached) + " tokens of " + std::to_string(n));

  if (o_.inject_fault == "kv" && cached > 0 && !injected_ && o_.model.num_layers > 0) {
    corrupt_first_page(pool_, r->seq.get(), setup_.device, o_.model.head_dim, setup_.kv_dtype);
    injected_ = true;
  }
  r->check = static_cast<int64_t>(i) % o_.verify_every == 0;
  if (r->check) r->rows.resize(static_cast<size_t>(o_.model.num_layers));
  report_.requests += 1;
  report_.hit_requests += cached > 0;
  report_.prompt_tokens += n;
  report_.cached_tokens += cached;
  conv.busy = true;
  running_.push_back(std::move(r));
  return true;
}

void Engine::step(const std::vector<Row> &rows) {
  const ModelShape &m = setup_.model->shape();
  const int64_t hq = m.num_q_heads, d = m.head_dim;
  EngineStats &e = report_.engine;
  int64_t total = 0;
  std::vector<bspa_seq *> seqs;
  std::vector<int32_t> query_lens;
  for (const Row &row : rows) {
    total += row.tokens;
    seqs.push_back(row.request->seq.get());
    query_lens.push_back(row.tokens);
  }
  buffers_.set_rows(total);

  // The toy model's projections of every row for every layer (host), into the step's
  // fixed buffers.
  const double tp = now_s();
  for (int32_t layer = 0; layer < m.num_layers; ++layer) {
    Projections all;
    for (const Row &row : rows) {
      const Request &r = *row.request;
      Projections p = setup_.model->project(layer, r.tokens.data() + r.computed, row.tokens, r.computed);
      all.q.insert(all.q.end(), p.q.begin(), p.q.end());
      all.k.insert(all.k.end(), p.k.begin(), p.k.end());
      all.v.insert(all.v.end(), p.v.begin(), p.v.end());
    }
    buffers_.upload(layer, all);
  }
  synchronize(setup_.device);
  report_.with_cache.project_s += now_s() - tp;

  // The step itself: one plan, every layer's K/V write and attention, then the commits.
  const double t0 = now_s();
  runner_->plan(seqs.data(), query_lens.data(), static_cast<int32_t>(seqs.size()));
  runner_->launch();
  const double t1 = now_s();
  synchronize(setup_.device);
  const double t2 = now_s();
  LayerOutputs out;
  for (int32_t layer = 0; layer < m.num_layers; ++layer) out.push_back(buffers_.download_out(layer));
  // A replayed graph against an eager launch of the same plan into the same buffers, on the
  // steps with rows of a checked turn: bitwise (untimed).
  bool sampled = false;
  for (const Row &row : rows) sampled = sampled || row.request->check;
  if (runner_->replayed() && sampled) {
    for (int32_t layer = 0; layer < m.num_layers; ++layer) buffers_.poison_out(layer);
    synchronize(setup_.device);
    runner_->launch_eager();
    synchronize(setup_.device);
    int32_t differ = -1;
    for (int32_t layer = 0; layer < m.num_layers && differ < 0; ++layer) {
      const std::vector<float> eager = buffers_.download_out(layer);
      const std::vector<float> &replay = out[static_cast<size_t>(layer)];
      if (eager.size() != replay.size() ||
          (!eager.empty() && std::memcmp(eager.data(), replay.data(), eager.size() * sizeof(float)) != 0))
        differ = layer;
    }
    e.graph_checks += 1;
    if (differ >= 0) {
      e.graph_mismatches += 1;
      fail("step " + std::to_string(e.steps + 1) + " (" + std::to_string(total) + " rows): layer " +
           std::to_string(differ) + ": the CUDA graph's outputs differ from an eager launch of the same plan");
    }
  }
  runner_->release();
  const double t3 = now_s();
  for (const Row &row : rows) {
    Request &r = *row.request;
    DEMO_OK(bspa_seq_commit(r.seq.get(), r.computed + row.tokens));
  }
  const double commit_s = now_s() - t3;
  const StepCallTimes &calls = runner_->times();
  e.steps += 1;
  e.step_times.push_back(t2 - t0 - calls.capture_s + calls.release_s + commit_s);
  e.host_times.push_back(calls.total() + commit_s);
  e.step_s += e.step_times.back();
  e.capture_s += calls.capture_s;
  report_.with_cache.kv_write_s += calls.kv_write_s;
  // The wait for the device: the launches' work (a replay's too).
  report_.with_cache.prefill_s += calls.prefill_s + calls.replay_s + (t2 - t1);

  // Per row: keep the outputs to check, advance, and sample the next token where the
  // row ends a prompt or is a decode row.
  int64_t first = 0;
  bool prefill = false, decode = false;
  std::vector<Request *> ended;
  for (const Row &row : rows) {
    Request &r = *row.request;
    const Turn &turn = w_.turns[r.turn];
    const bool decoding = r.computed >= r.prompt;
    (decoding ? decode : prefill) = true;
    (decoding ? e.decode_rows : e.prefill_rows) += row.tokens;
    e.chunks += !decoding;
    const int64_t row_len = hq * d;
    if (r.check)
      for (size_t l = 0; l < out.size(); ++l)
        r.rows[l].insert(r.rows[l].end(), out[l].begin() + first * row_len,
                         out[l].begin() + (first + row.tokens) * row_len);
    r.computed += row.tokens;
    oracle_.commit(turn.tenant, r.tokens.data(), r.computed);
    first += row.tokens;
    if (r.computed < r.prompt) continue;  // more chunks to come
    if (static_cast<int32_t>(r.generated.size()) < turn.generate) {
      std::vector<const float *> last;
      for (const auto &layer : out) last.push_back(layer.data() + (first - 1) * row_len);
      r.generated.push_back(next_token(last, row_len, o_.workload.vocab));
      e.token_digest = fnv1a(e.token_digest, r.generated.back());
    }
    if (static_cast<int32_t>(r.generated.size()) >= turn.generate) {
      ended.push_back(&r);
      continue;
    }
    // Fed back in the next step: one row of query length 1.
    DEMO_OK(bspa_seq_append(r.seq.get(), &r.generated.back(), 1));  // pages reserved at admission
    r.tokens.push_back(r.generated.back());
  }
  e.mixed_steps += prefill && decode;
  // Reusable batches keep their last plan's sequences: let go of them before the ended
  // turns' sequences are destroyed, so their pages are freed or cached now (as after a
  // one-step batch), not at the next plan; admission and eviction then see the same pool
  // whatever the launch mode.
  if (!ended.empty()) runner_->drop_sequences();
  for (Request *r : ended) finish(*r);
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto &r) { return !r->seq; }),
                 running_.end());
}

void Engine::finish(Request &r) {
  const Turn &turn = w_.turns[r.turn];
  const int64_t n = static_cast<int64_t>(r.tokens.size()), rows = n - r.cached;
  double worst = 0;
  if (r.check) {
    const LayerOutputs want = prefill_from_scratch(setup_, r.tokens.data(), n, rows, report_.without_cache);
    for (size_t l = 0; l < want.size(); ++l) {
      const double err = relative_l2(r.rows[l], want[l]);
      if (!(err <= report_.tolerance))
        fail(r.where + ": layer " + std::to_string(l) +
             (LayerLayouts::sparse(static_cast<int32_t>(l)) ? " (block-sparse)" : " (dense)") + ": relative L2 error " +
             std::to_string(err) + " against the full recompute (tolerance " + std::to_string(report_.tolerance) +
             ", cached prefix " + std::to_string(r.cached) + " of " + std::to_string(r.prompt) + " prompt tokens, " +
             std::to_string(n - r.prompt) + " generated tokens fed back)");
      if (!(err <= worst)) worst = err;  // NaN sticks
    }
    if (!(worst <= report_.max_rel_l2) || std::isnan(worst)) report_.max_rel_l2 = worst;
    report_.attention_requests += 1;
    report_.attention_prompt_tokens += n;
    report_.attention_computed_tokens += rows;
    report_.attention_verified += worst <= report_.tolerance;
    report_.engine.checked_rows += rows;
  }
  report_.engine.generated += static_cast<int64_t>(r.generated.size());

  Conversation &conv = conversations_[static_cast<size_t>(turn.conversation)];
  conv.history = r.tokens;
  if (!r.generated.empty()) conv.history.push_back(r.generated.back());
  conv.next_turn += 1;
  conv.busy = false;
  done_[r.turn] = true;
  r.seq.reset();  // its published pages stay cached
  const bspa_status check = bspa_pool_check(pool_);
  if (check != BSPA_OK) fail(r.where + ": bspa_pool_check: " + bspa_last_error());
  ++finished_;
  if (o_.verbose) {
    const char *outcome = !r.check ? "not checked" : worst <= report_.tolerance ? "ok" : "FAILED";
    progress_.clear();
    std::printf("  %-44s prompt %5lld  cached %5lld  computed %5lld  generated %3zu  %s\n", r.where.c_str(),
                static_cast<long long>(r.prompt), static_cast<long long>(r.cached),
                static_cast<long long>(r.prompt - r.cached), r.generated.size(), outcome);
  }
  progress_.update(
      finished_,
      "hit " + std::to_string(report_.prompt_tokens ? 100 * report_.cached_tokens / report_.prompt_tokens : 0) + "%");
}

void Engine::run() {
  const int64_t turns = static_cast<int64_t>(w_.turns.size());
  size_t first_waiting = 0;  // turns before it are all admitted or done
  std::vector<bool> admitted(w_.turns.size(), false);
  while (finished_ < turns) {
    // Running sequences first, in admission order: a decode row is one token, a prefill
    // takes the next chunk of its prompt that the budget allows (vLLM's V1 scheduler).
    int64_t budget = o_.step_tokens;
    std::vector<Row> rows;
    for (const auto &r : running_) {
      if (budget == 0) break;
      const int64_t want = static_cast<int64_t>(r->tokens.size()) - r->computed;
      const int32_t take = static_cast<int32_t>(std::min(want, budget));
      rows.push_back({r.get(), take});
      budget -= take;
    }
    // Then waiting turns in arrival order, while budget and sequence slots last. A turn
    // has arrived once its conversation's previous turn has finished.
    for (size_t i = first_waiting;
         i < w_.turns.size() && budget > 0 && static_cast<int32_t>(running_.size()) < o_.max_seqs; ++i) {
      const Turn &t = w_.turns[i];
      const Conversation &c = conversations_[static_cast<size_t>(t.conversation)];
      if (admitted[i] || c.busy || c.next_turn != t.turn) continue;
      if (!admit(i)) break;
      admitted[i] = true;
      Request &r = *running_.back();
      const int32_t take = static_cast<int32_t>(std::min(r.prompt - r.computed, budget));
      rows.push_back({&r, take});
      budget -= take;
    }
    while (first_waiting < admitted.size() && admitted[first_waiting]) ++first_waiting;
    if (rows.empty()) throw std::logic_error("the engine scheduled an empty step");
    report_.engine.max_in_flight =
        std::max<int64_t>(report_.engine.max_in_flight, static_cast<int64_t>(running_.size()));
    step(rows);
  }
  report_.engine.runner = runner_->stats();
  progress_.finish();
}

}  // namespace demo
