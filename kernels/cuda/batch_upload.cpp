// upload_batch_cuda: the plan's arrays in one device allocation, copied on the caller's
// stream when the batch is created, so the per-layer launches only read them.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "common/device.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/decode.hpp"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels {
std::unique_ptr<DeviceBatchMetadata> upload_batch_cuda(const BatchPlan &plan, int32_t device, int32_t head_dim,
                                                       int32_t num_kv_heads, void *stream_ptr) {
  const size_t qs = plan.query_starts.size() * sizeof(int32_t);
  const size_t cl = plan.context_lens.size() * sizeof(int32_t);
  const size_t bt = plan.block_table.size() * sizeof(int32_t);
  const size_t wk = plan.work.size() * sizeof(WorkItem);
  const size_t o_cl = cuda::align_to_256(qs), o_bt = o_cl + cuda::align_to_256(cl),
               o_wk = o_bt + cuda::align_to_256(bt);
  const size_t copied = o_wk + cuda::align_to_256(wk);
  auto meta = std::make_unique<DeviceBatchMetadata>();
  meta->device = device;
  meta->allocation = cuda_malloc(device, copied);
  char *base = static_cast<char *>(meta->allocation);
  // One host staging buffer so a single copy moves everything.
  std::unique_ptr<char[]> host(new char[copied]());
  std::memcpy(host.get(), plan.query_starts.data(), qs);
  std::memcpy(host.get() + o_cl, plan.context_lens.data(), cl);
  std::memcpy(host.get() + o_bt, plan.block_table.data(), bt);
  if (wk) std::memcpy(host.get() + o_wk, plan.work.data(), wk);
  cudaError_t e;
  {
    DeviceGuard guard(device);
    // Pageable source: the copy is staged before cudaMemcpyAsync returns, so `host` may die.
    e = cudaMemcpyAsync(base, host.get(), copied, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_ptr));
  }
  cuda::check_cuda(e, "uploading batch metadata");
  meta->query_starts = reinterpret_cast<const int32_t *>(base);
  meta->context_lens = reinterpret_cast<const int32_t *>(base + o_cl);
  meta->block_table = reinterpret_cast<const int32_t *>(base + o_bt);
  meta->work = reinterpret_cast<const WorkItem *>(base + o_wk);
  meta->num_work = static_cast<int32_t>(plan.work.size());
  // A split workspace only where a launch of the plan may split: the sm90a kernel (GPU,
  // build, query tiles of 128 rows) and fewer than kSplitMaxRounds rounds of items even
  // at the fewest query heads a launch can have (one per KV head), or the decode kernel.
  // It is an optimisation: when the device has no room for it, the batch goes without
  // (and never splits).
  // The decode kernel splits key ranges when its (sequence, KV head) items do not fill the GPU.
  const int sms = cuda::multiprocessor_count(device);
  const bool prefill_may_split =
      plan.max_query_len > 64 && static_cast<int64_t>(plan.work.size()) * num_kv_heads < sm90::kSplitMaxRounds * sms;
  // (At the most CTAs an SM the kernel keeps: the pool's page dtype is not known here.)
  const bool decode_may_split =
      plan.decode_seqs > 0 && decode::plan_splits(int64_t{plan.decode_seqs} * num_kv_heads, plan.decode_max_keys, sms,
                                                  decode::kMostCtasPerSm, INT64_MAX, /*even_out_waves=*/true) > 1;
  // Its decode counters are zeroed on the stream of the metadata copy (the launches' stream).
  if (prefill_may_split || decode_may_split) {
    try {
      meta->split = allocate_split_workspace_cuda(device, head_dim, int64_t{plan.num_seqs} * num_kv_heads, stream_ptr);
    } catch (const Error &e) {
      if (e.code() != Errc::OutOfMemory) throw;
    }
  }
  return meta;
}

}  // namespace bspa::kernels
