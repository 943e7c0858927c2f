// The synthetic serving workload: one system prompt shared by every tenant, multi-turn
// conversations spread over tenants, turns interleaved as a server would see them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace demo {

struct WorkloadOptions {
  uint64_t seed = 1;
  int32_t tenants = 3;
  int32_t conversations = 9;
  int32_t turns = 4;
  int32_t system_tokens = 700;
  int32_t user_min = 48, user_max = 160;  // new user tokens per turn
  int32_t gen_min = 16, gen_max = 64;     // "generated" tokens appended to the history after a turn
  int32_t vocab = 100352;                 // Phi-3-small's vocabulary size
};

struct Turn {
  int32_t tenant;
  int32_t conversation;
  int32_t turn;                 // 0-based within its conversation
  std::vector<int32_t> prompt;  // system prompt + previous turns + this turn's user tokens
  std::string salt() const { return "tenant-" + std::to_string(tenant); }
};

// All turns in the order they reach the server: a conversation's turns stay in order,
// different conversations interleave (seeded).
std::vector<Turn> make_workload(const WorkloadOptions &options);

}  // namespace demo
