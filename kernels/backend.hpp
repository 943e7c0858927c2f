// The backends' entry points. capi/ dispatches on the pool's or the tensors' device;
// kernels/cpu implements the CPU ones, kernels/cuda the CUDA ones, and in a build
// without CUDA kernels/nocuda supplies CUDA entry points that throw NotSupported.
// All of them take plain arrays (prefill_problem.hpp, batch_plan.hpp) and assume capi/
// validated shapes, dtypes and devices.
#pragma once

#include <cstdint>
#include <memory>

#include "common/device.hpp"
#include "kernels/batch_plan.hpp"
#include "kernels/prefill_problem.hpp"

namespace bspa::kernels {

// CPU (host pointers everywhere). OpenMP-parallel; synchronous.
void prefill_cpu(const PrefillProblem &p);
void kv_write_cpu(const KvWriteProblem &p);

// CUDA (device pointers, including the metadata arrays). Asynchronous on `stream`
// (a cudaStream_t; nullptr = the legacy default stream); never allocate, never
// synchronise. Errors: Error(NotSupported) for dtypes/head dims the kernels lack,
// Error(Cuda) for launch failures.
void prefill_cuda(const PrefillProblem &p, void *stream);
// Bytes of SplitWorkspace with which prefill_cuda may split work across SMs on `device`
// for head_dim: the sm90a kernel's last round and the decode kernel's key ranges.
// Throws Error(Cuda / NoDevice) for a bad device, Error(NotSupported) without CUDA.
size_t prefill_workspace_bytes_cuda(int32_t device, int32_t head_dim);
// A split workspace for a batch to own (freed with bspa::cuda_free(device, data)):
// prefill_workspace_bytes_cuda's bytes and a decode counter for each of `counter_items`
// (sequence, KV head) items its launches may index, the counters zeroed on `stream`
// (SplitWorkspace::kept_clear_counters: its launches then clear nothing). Empty when no
// launch at head_dim can split. Throws Error(OutOfMemory / Cuda / NoDevice).
SplitWorkspace allocate_split_workspace_cuda(int32_t device, int32_t head_dim, int64_t counter_items, void *stream);
void kv_write_cuda(const KvWriteProblem &p, void *stream);

// Query rows per work item in plans made for CUDA pools (the kernels' query tile).
constexpr int32_t kCudaTileRows = 128;
// Sequences with 1..kCudaDecodeMaxQueryLen new tokens (decode, speculative verification)
// take the CUDA decode kernel (kernels/cuda/decode.hpp) rather than the prefill tiling.
constexpr int32_t kCudaDecodeMaxQueryLen = 8;
// kCudaDecodeMaxQueryLen, or what BSPA_CUDA_DECODE=N (0..kCudaDecodeMaxQueryLen) asks for:
// 0 turns the decode kernel off (to time or test the prefill kernels on decode rows), N
// sends only queries of up to N tokens to it (to time its tile sizes); any other value is
// ignored. Read once per process, so batch planning (which leaves the decode rows out of
// the prefill work list) and launches agree. 0 in a build without CUDA.
int32_t cuda_decode_max_query_len();
// Query rows per work item on the CPU.
constexpr int32_t kCpuTileRows = 32;

// Device copies of a BatchPlan's arrays, in one allocation on `device`, owned here.
struct DeviceBatchMetadata {
  int32_t device = 0;
  const int32_t *query_starts = nullptr;  // [num_seqs + 1]
  const int32_t *context_lens = nullptr;  // [num_seqs]
  const int32_t *block_table = nullptr;   // [num_seqs][block_table_stride]
  const WorkItem *work = nullptr;         // [num_work]
  int32_t num_work = 0;
  // A fixed-shape batch's (StepBuffers): how many of the num_work entries are this plan's,
  // the rest being padding (PrefillProblem::live_work_entries); nullptr elsewhere.
  const int32_t *live_work = nullptr;
  SplitWorkspace split;        // empty when no launch of the plan can split; split.data freed alike
  void *allocation = nullptr;  // the arrays above; freed by the destructor with bspa::cuda_free

  DeviceBatchMetadata() = default;
  DeviceBatchMetadata(const DeviceBatchMetadata &) = delete;
  DeviceBatchMetadata &operator=(const DeviceBatchMetadata &) = delete;
  ~DeviceBatchMetadata() {
    cuda_free(device, split.data);
    cuda_free(device, allocation);
  }
};

// Allocates and fills the device copies (asynchronously on `stream`; the plan's host
// vectors must outlive the copy, i.e. stay in the batch), with a split workspace for
// head_dim when the plan's launches may split (none if the device has no room for it).
// Throws Error(OutOfMemory / Cuda / NoDevice), or Error(NotSupported) in a build without CUDA.
std::unique_ptr<DeviceBatchMetadata> upload_batch_cuda(const BatchPlan &plan, int32_t device, int32_t head_dim,
                                                       int32_t num_kv_heads, void *stream);

// The device side of a reusable batch (bspa_batch_create_reusable): metadata arrays sized
// once from the batch's limits, two pinned staging buffers and a split workspace, all
// allocated here and never again, so planning a step neither allocates nor frees device
// memory and its launches read fixed addresses (what a CUDA graph replays).
class StepBuffers {
 public:
  // Throws Error(OutOfMemory / Cuda / NoDevice), or Error(NotSupported) without CUDA.
  StepBuffers(const BatchLimits &limits, int32_t device, int32_t head_dim, int32_t num_kv_heads, int32_t tile_rows);
  ~StepBuffers();
  StepBuffers(const StepBuffers &) = delete;
  StepBuffers &operator=(const StepBuffers &) = delete;

  // Error(InvalidState) when `stream` may be capturing a CUDA graph (a captured copy of a
  // plan would replay it forever). Asked first, before next_block_table's wait: a
  // synchronisation while the stream captures would end the capture with an error.
  void refuse_capture(void *stream) const;
  // The host buffer the next plan's block table goes to (BatchPlanInput::block_table_out):
  // the staging buffer the next upload copies from. Waits until that buffer's previous copy
  // has executed on its stream (two plans ago: normally long done).
  int32_t *next_block_table();
  // Queues one host-to-device copy of the plan (its table already in next_block_table()) on
  // `stream`; launches after it on that stream see the plan. Fixed launch shapes get the
  // arrays padded to the limits (no new tokens, empty work items). Throws Error(Cuda); the
  // caller has asked refuse_capture first.
  void upload(const BatchPlan &plan, void *stream);
  // The device arrays (fixed addresses) and the workspace, for launches.
  const DeviceBatchMetadata &metadata() const { return *meta_; }

 private:
  struct Staging;
  BatchLimits limits_;
  int32_t device_;
  size_t off_context_ = 0, off_work_ = 0, off_live_work_ = 0, off_table_ = 0, bytes_ = 0;
  std::unique_ptr<DeviceBatchMetadata> meta_;
  std::unique_ptr<Staging[]> staging_;  // two, used in turn
  int next_ = 0;
};

}  // namespace bspa::kernels
