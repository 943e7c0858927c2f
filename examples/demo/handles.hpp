// Owning pointers for bspa's C handles, so every early return of the demo releases them.
#pragma once

#include <bspa/bspa.h>

#include <memory>

namespace demo {

struct PoolDeleter {
  void operator()(bspa_pool *p) const { bspa_pool_destroy(p); }
};
struct SeqDeleter {
  void operator()(bspa_seq *s) const { bspa_seq_destroy(s); }
};
struct BatchDeleter {
  void operator()(bspa_batch *b) const { bspa_batch_destroy(b); }
};
using PoolPtr = std::unique_ptr<bspa_pool, PoolDeleter>;
using SeqPtr = std::unique_ptr<bspa_seq, SeqDeleter>;
using BatchPtr = std::unique_ptr<bspa_batch, BatchDeleter>;

}  // namespace demo
