// StepBuffers: a reusable batch's device metadata, sized once from its limits. Each plan is
// written to one of two pinned staging buffers and moved by one cudaMemcpyAsync, so planning
// a step costs host time only (no allocation, no free, no synchronisation with the device
// beyond the wait for a staging buffer's copy of two plans ago).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common/checked_size.hpp"
#include "common/device.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/launch_check.hpp"

namespace bspa::kernels {

struct StepBuffers::Staging {
  char *host = nullptr;          // pinned, bytes_ long
  cudaEvent_t copied = nullptr;  // recorded after the copy from `host`
  bool pending = false;          // `copied` was recorded since the last wait

  Staging() = default;
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  // A copy still queued reads the buffer: it finishes before the memory goes back. Also
  // what frees a constructor's first buffer when the second cannot be made.
  ~Staging() {
    if (copied) {
      if (pending) cudaEventSynchronize(copied);
      cudaEventDestroy(copied);
    }
    if (host) cuda_host_free(host);
  }
};

namespace {
size_t region(Errc code, const char *what, uint64_t count, size_t element) {
  return cuda::align_to_256(static_cast<size_t>(
      checked_product(code, what, {{"entries", count}, {"bytes each", static_cast<uint64_t>(element)}})));
}
}  // namespace

StepBuffers::StepBuffers(const BatchLimits &limits, int32_t device, int32_t head_dim, int32_t num_kv_heads,
                         int32_t tile_rows)
    : limits_(limits), device_(device) {
  // Limits no launch could hold are refused here, not at every launch of a planned step:
  // the grids hold at most kMaxGridYZ sequences, and a fixed launch shape's work list at
  // most kMaxGridYZ query tiles, which are twice its items when the sm80 kernel's 64-row
  // tiles run it (max_query_len <= 64).
  check(limits.max_seqs <= cuda::kMaxGridYZ, Errc::InvalidArgument, "max_seqs = ", limits.max_seqs, " exceeds the ",
        cuda::kMaxGridYZ, " sequences a CUDA launch holds");
  check(!limits.fixed_launch_shape || 2 * max_work_items(limits, tile_rows) <= cuda::kMaxGridYZ, Errc::InvalidArgument,
        "a fixed launch shape of max_tokens = ", limits.max_tokens, " and max_seqs = ", limits.max_seqs, " launches ",
        2 * max_work_items(limits, tile_rows), " query tiles, over the ", cuda::kMaxGridYZ,
        " a CUDA grid holds (max_tokens / ", tile_rows, " + 2 x max_seqs must be at most ", cuda::kMaxGridYZ / 2, ")");
  const uint64_t seqs = static_cast<uint64_t>(limits.max_seqs);
  const uint64_t work = static_cast<uint64_t>(max_work_items(limits, tile_rows));
  const uint64_t table = static_cast<uint64_t>(
      checked_product(Errc::OutOfMemory, "the batch's block table",
                      {{"max_seqs", seqs}, {"max_pages_per_seq", static_cast<uint64_t>(limits.max_pages_per_seq)}}));
  // Layout: query_starts, context_lens, work, the count of the plan's own work items, block
  // table (last, so a plan of n sequences copies a prefix: everything up to its n-th table
  // row).
  off_context_ = region(Errc::OutOfMemory, "query_starts", seqs + 1, sizeof(int32_t));
  off_work_ = off_context_ + region(Errc::OutOfMemory, "context_lens", seqs, sizeof(int32_t));
  off_live_work_ = off_work_ + region(Errc::OutOfMemory, "work items", work, sizeof(WorkItem));
  off_table_ = off_live_work_ + region(Errc::OutOfMemory, "the live work count", 1, sizeof(int32_t));
  bytes_ = off_table_ + region(Errc::OutOfMemory, "the block table", table, sizeof(int32_t));

  meta_ = std::make_unique<DeviceBatchMetadata>();
  meta_->device = device;
  meta_->allocation = cuda_malloc(device, bytes_);
  char *base = static_cast<char *>(meta_->allocation);
  meta_->query_starts = reinterpret_cast<const int32_t *>(base);
  meta_->context_lens = reinterpret_cast<const int32_t *>(base + off_context_);
  meta_->work = reinterpret_cast<const WorkItem *>(base + off_work_);
  if (limits.fixed_launch_shape) meta_->live_work = reinterpret_cast<const int32_t *>(base + off_live_work_);
  meta_->block_table = reinterpret_cast<const int32_t *>(base + off_table_);
  // Sized once for every launch the limits allow (the prefill's last-round split and the
  // decode key split, with a counter for each of max_seqs x KV heads items); without room
  // the launches do not split. Its counters are zeroed on the legacy default stream and
  // waited for here, so a launch on any stream finds them so.
  DeviceGuard guard(device);
  try {
    meta_->split = allocate_split_workspace_cuda(device, head_dim, int64_t{limits.max_seqs} * num_kv_heads, nullptr);
    if (meta_->split.data) cuda::check_cuda(cudaStreamSynchronize(nullptr), "zeroing the split workspace's counters");
  } catch (const Error &e) {
    if (e.code() != Errc::OutOfMemory) throw;
  }
  staging_.reset(new Staging[2]);
  for (int i = 0; i < 2; ++i) {
    staging_[i].host = static_cast<char *>(cuda_host_alloc(bytes_));
    std::memset(staging_[i].host, 0, bytes_);
    cuda::check_cuda(cudaEventCreateWithFlags(&staging_[i].copied, cudaEventDisableTiming), "cudaEventCreate");
  }
}

StepBuffers::~StepBuffers() {
  if (!staging_) return;
  DeviceGuard guard(device_, /*nothrow=*/true);
  staging_.reset();
}

void StepBuffers::refuse_capture(void *stream) const {
  DeviceGuard guard(device_);
  check(!cuda::stream_may_be_capturing(static_cast<cudaStream_t>(stream)), Errc::InvalidState,
        "the stream is capturing a CUDA graph: plan a batch before capturing its launches (a captured copy would "
        "replay this plan forever)");
}

int32_t *StepBuffers::next_block_table() {
  Staging &s = staging_[next_];
  if (s.pending) {
    DeviceGuard guard(device_);
    cuda::check_cuda(cudaEventSynchronize(s.copied), "waiting for a staging buffer's earlier copy");
    s.pending = false;
  }
  return reinterpret_cast<int32_t *>(s.host + off_table_);
}

void StepBuffers::upload(const BatchPlan &plan, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  Staging &s = staging_[next_];
  const bool fixed = limits_.fixed_launch_shape;
  const int32_t n = plan.num_seqs;
  const int32_t seqs = fixed ? limits_.max_seqs : n;
  // The work region was sized by max_work_items: a longer list would overrun the table.
  check(static_cast<int64_t>(plan.work.size()) <= max_work_items(limits_, plan.tile_rows), Errc::Internal,
        "the plan has ", plan.work.size(), " work items, more than the batch's buffers hold");
  int32_t *qs = reinterpret_cast<int32_t *>(s.host);
  int32_t *ctx = reinterpret_cast<int32_t *>(s.host + off_context_);
  WorkItem *work = reinterpret_cast<WorkItem *>(s.host + off_work_);
  std::memcpy(qs, plan.query_starts.data(), (static_cast<size_t>(n) + 1) * sizeof(int32_t));
  std::memcpy(ctx, plan.context_lens.data(), static_cast<size_t>(n) * sizeof(int32_t));
  if (!plan.work.empty()) std::memcpy(work, plan.work.data(), plan.work.size() * sizeof(WorkItem));
  if (fixed) {
    // Padding the grids cover: sequences without new tokens (their CTAs exit at once) and
    // empty work items (q_begin == q_end: no tile).
    std::fill(qs + n + 1, qs + seqs + 1, plan.total_q);
    std::fill(ctx + n, ctx + seqs, 0);
    std::fill(work + plan.work.size(), work + plan.shape.num_work, WorkItem{0, 0, 0, 0});
  }
  *reinterpret_cast<int32_t *>(s.host + off_live_work_) = static_cast<int32_t>(plan.work.size());
  // Everything up to the end of the n-th table row (row tails are never read).
  const size_t bytes = off_table_ + static_cast<size_t>(n) * plan.block_table_stride * sizeof(int32_t);
  DeviceGuard guard(device_);
  cuda::check_cuda(cudaMemcpyAsync(meta_->allocation, s.host, bytes, cudaMemcpyHostToDevice, stream),
                   "uploading the batch's plan");
  cuda::check_cuda(cudaEventRecord(s.copied, stream), "cudaEventRecord");
  s.pending = true;
  meta_->num_work = plan.shape.num_work;
  next_ ^= 1;
}

}  // namespace bspa::kernels
