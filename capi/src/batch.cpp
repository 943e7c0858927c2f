// bspa_batch_create / create_reusable / plan / destroy: gathers each sequence's pages and
// computed count under the pool's lock, then plans the step in kernels/ (and uploads the
// plan for a CUDA pool: into a one-step batch's own allocation, or a reusable batch's
// fixed buffers through its pinned staging).
#include <bspa/bspa.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "capi/src/batch_handle.hpp"
#include "capi/src/guard.hpp"
#include "capi/src/handles.hpp"
#include "common/device.hpp"

using bspa::Errc;
using bspa::check;
using bspa::capi::guarded;
using bspa::capi::require;

namespace {

// The sequences' state at planning time and a reference to each of them.
struct Snapshot {
  std::vector<int32_t> contexts;
  std::vector<int32_t> pages;    // their page ids, concatenated
  std::vector<int64_t> offsets;  // pages of sequence i: pages[offsets[i], offsets[i + 1])
  bspa::cache::Pool *owner = nullptr;
  bspa::cache::SequenceHold *hold = nullptr;  // released by the destructor unless taken
  Snapshot() = default;
  Snapshot(const Snapshot &) = delete;
  Snapshot &operator=(const Snapshot &) = delete;
  ~Snapshot() {
    if (owner) owner->release_sequences(hold);
  }
};

void snapshot(Snapshot &s, bspa::cache::Pool &p, bspa_seq *const *seqs, const int32_t *query_lens, int32_t n) {
  require(seqs, "seqs");
  require(query_lens, "query_lens");
  check(n >= 1, Errc::InvalidArgument, "n = ", n, " must be at least 1");
  check(p.num_layers() > 0, Errc::InvalidState, "the pool has num_layers = 0 and keeps no KV storage");
  // Each sequence at most once, so n is bounded by the live sequences: checked before
  // anything of size n is allocated (n = INT32_MAX zero-filled 8 GB, then n + 1 overflowed).
  // A step plans every few milliseconds: no allocation per sequence (a hash set of the
  // handles was most of a plan's allocations); repeats are found by sorting a copy.
  std::lock_guard<std::mutex> lock(p.mutex());
  const size_t live = p.num_sequences_locked();
  check(static_cast<size_t>(n) <= live, Errc::InvalidArgument, "n = ", n, " is more than the pool's ", live,
        " live sequences (a batch holds each sequence at most once)");
  std::vector<bspa::cache::Sequence *> held(static_cast<size_t>(n));
  size_t total_pages = 0;
  for (int32_t i = 0; i < n; ++i) {
    check(seqs[i] != nullptr, Errc::NullPointer, "seqs[", i, "] is NULL");
    bspa::cache::Sequence &q = *bspa::capi::seq_of(seqs[i]);
    check(&q.pool() == &p, Errc::InvalidArgument, "seqs[", i, "] belongs to another pool");
    held[static_cast<size_t>(i)] = &q;
    total_pages += q.page_ids().size();
  }
  {
    std::vector<bspa::cache::Sequence *> sorted = held;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      for (int32_t i = 1; i < n; ++i)  // the first repeat, by index, for the message
        check(std::find(held.begin(), held.begin() + i, held[static_cast<size_t>(i)]) == held.begin() + i,
              Errc::InvalidArgument, "seqs[", i, "] appears twice in the batch");
  }
  s.contexts.resize(static_cast<size_t>(n));
  s.offsets.assign(static_cast<size_t>(n) + 1, 0);
  s.pages.reserve(total_pages);
  for (int32_t i = 0; i < n; ++i) {
    const bspa::cache::Sequence &q = *held[static_cast<size_t>(i)];
    check(query_lens[i] >= 0, Errc::InvalidArgument, "query_lens[", i, "] = ", query_lens[i], " is negative");
    const int64_t end = q.num_computed() + query_lens[i];
    check(end <= q.num_tokens(), Errc::OutOfRange, "seqs[", i, "]: computed ", q.num_computed(), " + query_lens[", i,
          "] ", query_lens[i], " = ", end, " is past its ", q.num_tokens(), " appended tokens");
    check(end <= std::numeric_limits<int32_t>::max(), Errc::OutOfRange, "seqs[", i, "]: ", end,
          " tokens exceed INT32_MAX");
    s.contexts[static_cast<size_t>(i)] = static_cast<int32_t>(q.num_computed());
    s.pages.insert(s.pages.end(), q.page_ids().begin(), q.page_ids().end());
    s.offsets[static_cast<size_t>(i) + 1] = static_cast<int64_t>(s.pages.size());
  }
  // Under the same lock as the snapshot: no sequence can release these pages between.
  s.hold = p.hold_sequences_locked(std::move(held));
  s.owner = &p;
}

bspa::kernels::BatchPlanInput plan_input(const bspa::cache::Pool &p, const Snapshot &s, const int32_t *query_lens,
                                         int32_t n) {
  const bool cuda = p.device() == bspa::cache::DeviceKind::Cuda;
  bspa::kernels::BatchPlanInput in;
  in.num_seqs = n;
  in.query_lens = query_lens;
  in.context_lens = s.contexts.data();
  in.pages = s.pages.data();
  in.page_offsets = s.offsets.data();
  in.page_size = p.page_size();
  in.tile_rows = cuda ? bspa::kernels::kCudaTileRows : bspa::kernels::kCpuTileRows;
  in.decode_max_query_len = cuda ? bspa::kernels::cuda_decode_max_query_len() : 0;
  return in;
}

// The limits of a reusable batch from its options, each checked and named.
bspa::kernels::BatchLimits limits_of(const bspa_batch_options &o, const bspa::cache::Pool &p) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  check(o.max_seqs >= 1, Errc::InvalidArgument, "options->max_seqs = ", o.max_seqs, " must be at least 1");
  check(o.max_tokens >= 1 && o.max_tokens <= kMax, Errc::InvalidArgument, "options->max_tokens = ", o.max_tokens,
        " must be in [1, ", kMax, "]");
  check(o.max_query_len >= 0 && o.max_query_len <= o.max_tokens, Errc::InvalidArgument,
        "options->max_query_len = ", o.max_query_len, " must be in [0, max_tokens = ", o.max_tokens,
        "] (0: max_tokens)");
  check(o.max_seq_tokens >= 1 && o.max_seq_tokens <= kMax, Errc::InvalidArgument,
        "options->max_seq_tokens = ", o.max_seq_tokens, " must be in [1, ", kMax, "]");
  // The work list of a step within the limits (max_work_items) is counted in int32.
  check(o.max_seqs <= (kMax - o.max_tokens) / 2, Errc::InvalidArgument, "options->max_seqs = ", o.max_seqs,
        " is too large: max_tokens + 2 x max_seqs must be at most ", kMax);
  check(o.fixed_launch_shape == 0 || o.fixed_launch_shape == 1, Errc::InvalidArgument,
        "options->fixed_launch_shape = ", o.fixed_launch_shape, " must be 0 or 1");
  // Version 1 callers' structs end before it.
  check(o.version < 2 || o.max_decode_query_len >= 0, Errc::InvalidArgument,
        "options->max_decode_query_len = ", o.max_decode_query_len, " is negative");
  bspa::kernels::BatchLimits l;
  l.max_seqs = o.max_seqs;
  l.max_tokens = o.max_tokens;
  l.max_query_len = o.max_query_len ? o.max_query_len : static_cast<int32_t>(o.max_tokens);
  l.max_seq_tokens = o.max_seq_tokens;
  // No sequence holds more pages than the pool has.
  l.max_pages_per_seq = std::min<int64_t>((o.max_seq_tokens + p.page_size() - 1) / p.page_size(), p.num_pages());
  l.fixed_launch_shape = o.fixed_launch_shape != 0;
  l.decode_query_bound = o.version >= 2 ? o.max_decode_query_len : 0;
  return l;
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_batch_create(bspa_batch **batch, bspa_pool *pool, bspa_seq *const *seqs,
                                       const int32_t *query_lens, int32_t n, bspa_stream stream) {
  if (batch) *batch = nullptr;
  return guarded(__func__, [&] {
    require(batch, "batch");
    bspa::cache::Pool &p = *bspa::capi::pool_of(require(pool, "pool"));
    auto b = std::make_unique<bspa_batch>();
    Snapshot s;
    snapshot(s, p, seqs, query_lens, n);
    b->plan = bspa::kernels::plan_batch(plan_input(p, s, query_lens, n));
    b->owner = s.owner;
    b->seqs = s.hold;
    s.owner = nullptr;  // the batch releases them now
    b->pool = pool;
    if (p.device() == bspa::cache::DeviceKind::Cuda)
      b->device = bspa::kernels::upload_batch_cuda(b->plan, p.device_id(), p.head_dim(), p.num_kv_heads(), stream);
    *batch = b.release();
  });
}

BSPA_API bspa_status bspa_batch_options_init(bspa_batch_options *options) {
  return guarded(__func__, [&] {
    require(options, "options");
    *options = bspa_batch_options{};
    options->version = BSPA_BATCH_OPTIONS_VERSION;
  });
}

BSPA_API bspa_status bspa_batch_create_reusable(bspa_batch **batch, bspa_pool *pool,
                                                const bspa_batch_options *options) {
  if (batch) *batch = nullptr;
  return guarded(__func__, [&] {
    require(batch, "batch");
    bspa::cache::Pool &p = *bspa::capi::pool_of(require(pool, "pool"));
    require(options, "options");
    bspa::capi::check_options_version(options->version, BSPA_BATCH_OPTIONS_VERSION, "options",
                                      "bspa_batch_options_init");
    check(p.num_layers() > 0, Errc::InvalidState, "the pool has num_layers = 0 and keeps no KV storage");
    auto b = std::make_unique<bspa_batch>();
    b->pool = pool;
    b->reusable = true;
    b->limits = limits_of(*options, p);
    if (p.device() == bspa::cache::DeviceKind::Cuda)
      b->step = std::make_unique<bspa::kernels::StepBuffers>(b->limits, p.device_id(), p.head_dim(), p.num_kv_heads(),
                                                             bspa::kernels::kCudaTileRows);
    *batch = b.release();
  });
}

BSPA_API bspa_status bspa_batch_plan(bspa_batch *batch, bspa_seq *const *seqs, const int32_t *query_lens, int32_t n,
                                     bspa_stream stream) {
  return guarded(__func__, [&] {
    require(batch, "batch");
    check(batch->reusable, Errc::InvalidArgument,
          "batch was made by bspa_batch_create (one step); re-planning needs bspa_batch_create_reusable");
    bspa::cache::Pool &p = *bspa::capi::pool_of(const_cast<bspa_pool *>(batch->pool));
    // Before anything touches the device: next_block_table may wait on an event, which
    // would end a capture on the stream with an error instead of this refusal.
    if (batch->step) batch->step->refuse_capture(stream);
    Snapshot s;
    snapshot(s, p, seqs, query_lens, n);
    bspa::kernels::BatchPlanInput in = plan_input(p, s, query_lens, n);
    in.limits = &batch->limits;
    if (batch->step) in.block_table_out = batch->step->next_block_table();
    bspa::kernels::BatchPlan plan = bspa::kernels::plan_batch(in);
    if (batch->step) batch->step->upload(plan, stream);
    // Nothing below throws: the batch takes the new plan and its pages, the old pages go back.
    std::swap(batch->seqs, s.hold);
    batch->owner = &p;
    batch->plan = std::move(plan);
    batch->planned = true;
  });
}

BSPA_API void bspa_batch_destroy(bspa_batch *batch) { delete batch; }

BSPA_API bspa_status bspa_device_allocation_counts(uint64_t *allocations, uint64_t *frees) {
  return guarded(__func__, [&] {
    require(allocations, "allocations");
    require(frees, "frees");
    const bspa::AllocationCounts c = bspa::cuda_allocation_counts();
    *allocations = c.allocations;
    *frees = c.frees;
  });
}

}  // extern "C"
