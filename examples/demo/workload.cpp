#include "workload.hpp"

#include <algorithm>
#include <cstddef>

#include "rng.hpp"

namespace demo {

namespace {

void append_random(Rng &rng, std::vector<int32_t> &out, int64_t n, int32_t vocab) {
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng.uniform(0, vocab - 1)));
}

}  // namespace

Workload make_workload(const WorkloadOptions &o) {
  Rng rng(o.seed);
  Workload w;
  append_random(rng, w.system, o.system_tokens, o.vocab);

  struct Conversation {
    int32_t tenant;
    int64_t history;  // tokens so far: system prompt + every earlier turn
    int32_t next_turn = 0;
  };
  std::vector<Conversation> conversations;
  for (int32_t c = 0; c < o.conversations; ++c)
    conversations.push_back({c % o.tenants, static_cast<int64_t>(w.system.size()), 0});

  std::vector<int32_t> active;
  for (int32_t c = 0; c < o.conversations; ++c) active.push_back(c);
  while (!active.empty()) {
    // Favour the earliest open conversations, so new tenants keep arriving while older
    // conversations continue: tenant isolation and reuse are both exercised throughout.
    const size_t window = std::min<size_t>(active.size(), 4);
    const size_t pick = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(window) - 1));
    const int32_t c = active[pick];
    Conversation &conv = conversations[static_cast<size_t>(c)];
    Turn t{conv.tenant, c, conv.next_turn, {}, 0, 0};
    append_random(rng, t.user, rng.uniform(o.user_min, o.user_max), o.vocab);
    t.generate = static_cast<int32_t>(rng.uniform(o.gen_min, o.gen_max));
    t.prompt_tokens = conv.history + static_cast<int64_t>(t.user.size());
    conv.history = t.prompt_tokens + t.generate;
    w.turns.push_back(std::move(t));
    if (++conv.next_turn == o.turns) active.erase(active.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return w;
}

}  // namespace demo
