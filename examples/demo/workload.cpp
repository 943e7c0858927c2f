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

std::vector<Turn> make_workload(const WorkloadOptions &o) {
  Rng rng(o.seed);
  std::vector<int32_t> system;
  append_random(rng, system, o.system_tokens, o.vocab);

  struct Conversation {
    int32_t tenant;
    std::vector<int32_t> history;  // system prompt + every earlier turn
    int32_t next_turn = 0;
  };
  std::vector<Conversation> conversations;
  for (int32_t c = 0; c < o.conversations; ++c) conversations.push_back({c % o.tenants, system, 0});

  std::vector<Turn> turns;
  std::vector<int32_t> active;
  for (int32_t c = 0; c < o.conversations; ++c) active.push_back(c);
  while (!active.empty()) {
    // Favour the earliest open conversations, so new tenants keep arriving while older
    // conversations continue: tenant isolation and reuse are both exercised throughout.
    const size_t window = std::min<size_t>(active.size(), 4);
    const size_t pick = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(window) - 1));
    const int32_t c = active[pick];
    Conversation &conv = conversations[static_cast<size_t>(c)];
    append_random(rng, conv.history, rng.uniform(o.user_min, o.user_max), o.vocab);
    turns.push_back({conv.tenant, c, conv.next_turn, conv.history});
    append_random(rng, conv.history, rng.uniform(o.gen_min, o.gen_max), o.vocab);
    if (++conv.next_turn == o.turns) active.erase(active.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return turns;
}

}  // namespace demo
