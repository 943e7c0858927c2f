// bspa_batch_create / destroy: gathers each sequence's pages and computed count under the
// pool's lock, then plans the step in kernels/ (and uploads the plan for a CUDA pool).
#include <bspa/bspa.h>

#include <limits>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "capi/src/batch_handle.hpp"
#include "capi/src/guard.hpp"
#include "capi/src/handles.hpp"

using bspa::Errc;
using bspa::check;
using bspa::capi::guarded;
using bspa::capi::require;

extern "C" {

BSPA_API bspa_status bspa_batch_create(bspa_batch **batch, bspa_pool *pool, bspa_seq *const *seqs,
                                       const int32_t *query_lens, int32_t n, bspa_stream stream) {
  if (batch) *batch = nullptr;
  return guarded(__func__, [&] {
    require(batch, "batch");
    bspa::cache::Pool &p = *bspa::capi::pool_of(require(pool, "pool"));
    require(seqs, "seqs");
    require(query_lens, "query_lens");
    check(n >= 1, Errc::InvalidArgument, "n = ", n, " must be at least 1");
    check(p.num_layers() > 0, Errc::InvalidState, "the pool has num_layers = 0 and keeps no KV storage");

    auto b = std::make_unique<bspa_batch>();
    std::vector<int32_t> contexts, pages;
    std::vector<int64_t> offsets;
    {
      std::lock_guard<std::mutex> lock(p.mutex());
      // Each sequence at most once, so n is bounded by the live sequences: checked before
      // anything of size n is allocated (n = INT32_MAX zero-filled 8 GB, then n + 1 overflowed).
      const size_t live = p.num_sequences_locked();
      check(static_cast<size_t>(n) <= live, Errc::InvalidArgument, "n = ", n, " is more than the pool's ", live,
            " live sequences (a batch holds each sequence at most once)");
      contexts.resize(static_cast<size_t>(n));
      offsets.assign(static_cast<size_t>(n) + 1, 0);
      std::unordered_set<const bspa_seq *> seen;
      for (int32_t i = 0; i < n; ++i) {
        check(seqs[i] != nullptr, Errc::NullPointer, "seqs[", i, "] is NULL");
        const bspa::cache::Sequence &s = *bspa::capi::seq_of(seqs[i]);
        check(&s.pool() == &p, Errc::InvalidArgument, "seqs[", i, "] belongs to another pool");
        check(seen.insert(seqs[i]).second, Errc::InvalidArgument, "seqs[", i, "] appears twice in the batch");
        check(query_lens[i] >= 0, Errc::InvalidArgument, "query_lens[", i, "] = ", query_lens[i], " is negative");
        const int64_t end = s.num_computed() + query_lens[i];
        check(end <= s.num_tokens(), Errc::OutOfRange, "seqs[", i, "]: computed ", s.num_computed(), " + query_lens[",
              i, "] ", query_lens[i], " = ", end, " is past its ", s.num_tokens(), " appended tokens");
        check(end <= std::numeric_limits<int32_t>::max(), Errc::OutOfRange, "seqs[", i, "]: ", end,
              " tokens exceed INT32_MAX");
        contexts[static_cast<size_t>(i)] = static_cast<int32_t>(s.num_computed());
        pages.insert(pages.end(), s.page_ids().begin(), s.page_ids().end());
        offsets[static_cast<size_t>(i) + 1] = static_cast<int64_t>(pages.size());
      }
      // Under the same lock as the snapshot: no sequence can release these pages between.
      b->pages = p.hold_pages_locked(std::move(pages));
      b->owner = &p;
    }
    const bool cuda = p.device() == bspa::cache::DeviceKind::Cuda;
    bspa::kernels::BatchPlanInput in;
    in.num_seqs = n;
    in.query_lens = query_lens;
    in.context_lens = contexts.data();
    in.pages = b->pages->pages().data();
    in.page_offsets = offsets.data();
    in.page_size = p.page_size();
    in.tile_rows = cuda ? bspa::kernels::kCudaTileRows : bspa::kernels::kCpuTileRows;
    in.decode_max_query_len = cuda ? bspa::kernels::cuda_decode_max_query_len() : 0;
    b->pool = pool;
    b->plan = bspa::kernels::plan_batch(in);
    if (cuda)
      b->device = bspa::kernels::upload_batch_cuda(b->plan, p.device_id(), p.head_dim(), p.num_kv_heads(), stream);
    *batch = b.release();
  });
}

BSPA_API void bspa_batch_destroy(bspa_batch *batch) { delete batch; }

}  // extern "C"
