// The synthetic replay as an engine loop, the way vLLM schedules a server's steps: turns
// arrive (a conversation's next turn once its previous answer is generated), each step
// has a token budget, running sequences come first (a decode row takes one token, a
// prefill takes a chunk of its prompt) and waiting turns are admitted, prefix cache
// matched first, with what is left. Every row of a step goes through one plan and one
// kv write and attention launch per layer (StepRunner: how, --launch and --graphs say);
// the step commits; a prompt's last row and every decode row yield the next token
// (next_token, also hashed into the run's token digest). When a turn ends,
// every row the engine computed for it is compared with a full recompute without the
// cache over the same tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention.hpp"
#include "cli.hpp"
#include "handles.hpp"
#include "prefix_oracle.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "step_runner.hpp"
#include "workload.hpp"

namespace demo {

class Engine {
 public:
  // The pool and the setup outlive the engine.
  Engine(const Options &options, const Workload &workload, bspa_pool *pool, const AttentionSetup &setup,
         Report &report);
  void run();

 private:
  struct Request {
    size_t turn = 0;
    std::string where;
    SeqPtr seq;
    std::vector<int32_t> tokens;     // what the sequence holds: the prompt, then generated tokens
    std::vector<int32_t> generated;  // all of them; the last one is never fed back (no KV)
    int64_t prompt = 0, cached = 0, computed = 0;
    bool check = false;  // compared with a full recompute when it ends (--verify-every)
    LayerOutputs rows;   // when checked: per layer, the output rows of tokens [cached, computed)
  };
  struct Row {
    Request *request;
    int32_t tokens;
  };
  struct Conversation {
    std::vector<int32_t> history;  // system prompt + every finished turn (user and generated)
    int32_t next_turn = 0;
    bool busy = false;
  };

  // Admits a waiting turn (match, checks, append); false when the pool has no room for
  // its prompt and generated tokens while other sequences hold pages (it keeps waiting).
  bool admit(size_t turn);
  // Pages r still has to take for the rest of its turn (its generated tokens).
  int64_t pages_owed(const Request &r) const;
  void step(const std::vector<Row> &rows);
  void finish(Request &r);
  void fail(const std::string &what);

  const Options &o_;
  const Workload &w_;
  bspa_pool *pool_;
  const AttentionSetup &setup_;
  Report &report_;
  StepBuffers buffers_;
  std::unique_ptr<StepRunner> runner_;
  PrefixOracle oracle_;
  Progress progress_;
  std::vector<Conversation> conversations_;
  std::vector<bool> done_;  // per turn
  std::vector<std::unique_ptr<Request>> running_;
  int64_t finished_ = 0;
  bool injected_ = false;
};

}  // namespace demo
