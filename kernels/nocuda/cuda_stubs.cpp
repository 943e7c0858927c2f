// The CUDA entry points of a build without CUDA: every one reports NotSupported, so
// capi/ can dispatch unconditionally and a CUDA pool simply cannot exist here.
#include "common/error.hpp"
#include "kernels/backend.hpp"

namespace bspa::kernels {

void prefill_cuda(const PrefillProblem &, void *) {
  fail(Errc::NotSupported, "CUDA prefill: bspa was built without CUDA");
}

void kv_write_cuda(const KvWriteProblem &, void *) {
  fail(Errc::NotSupported, "CUDA kv write: bspa was built without CUDA");
}

std::unique_ptr<DeviceBatchMetadata> upload_batch_cuda(const BatchPlan &, int32_t, int32_t, int32_t, void *) {
  fail(Errc::NotSupported, "CUDA batch metadata: bspa was built without CUDA");
}

int32_t cuda_decode_max_query_len() { return 0; }

// A CUDA pool cannot exist in this build, so a reusable batch never asks for these.
StepBuffers::StepBuffers(const BatchLimits &, int32_t, int32_t, int32_t, int32_t) : device_(0) {
  fail(Errc::NotSupported, "CUDA batch buffers: bspa was built without CUDA");
}
struct StepBuffers::Staging {};
StepBuffers::~StepBuffers() = default;
void StepBuffers::refuse_capture(void *) const {
  fail(Errc::NotSupported, "CUDA batch buffers: bspa was built without CUDA");
}
int32_t *StepBuffers::next_block_table() {
  fail(Errc::NotSupported, "CUDA batch buffers: bspa was built without CUDA");
}
void StepBuffers::upload(const BatchPlan &, void *) {
  fail(Errc::NotSupported, "CUDA batch buffers: bspa was built without CUDA");
}

size_t prefill_workspace_bytes_cuda(int32_t, int32_t) {
  fail(Errc::NotSupported, "CUDA prefill workspace: bspa was built without CUDA");
}

SplitWorkspace allocate_split_workspace_cuda(int32_t, int32_t, int64_t, void *) {
  fail(Errc::NotSupported, "CUDA split workspace: bspa was built without CUDA");
}

}  // namespace bspa::kernels
