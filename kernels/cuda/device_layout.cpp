#include "kernels/cuda/device_layout.hpp"

#include <mutex>
#include <vector>

#include "common/device.hpp"
#include "kernels/cuda/launch_check.hpp"

namespace bspa::kernels::cuda {
namespace {

// One device allocation per device holding crow then col.
struct CsrCopies {
  std::vector<void *> per_device;  // indexed by device ordinal
  ~CsrCopies() {
    for (size_t d = 0; d < per_device.size(); ++d) cuda_free(static_cast<int32_t>(d), per_device[d]);
  }
};

std::mutex copies_mutex;  // guards every Layout::device_copies (layouts are shared across threads)

}  // namespace

DeviceLayout device_layout(const Layout &layout, int device, cudaStream_t stream) {
  DeviceLayout d;
  d.kind = static_cast<int32_t>(layout.kind);
  d.block_size = layout.block_size;
  d.local_blocks = layout.local_blocks;
  d.vert_stride = layout.vert_stride;
  d.head_begin = layout.head_begin;
  d.head_step = layout.head_step;
  d.num_block_rows = layout.num_block_rows;
  if (layout.kind != Layout::Kind::Csr) return d;

  std::lock_guard<std::mutex> lock(copies_mutex);
  if (!layout.device_copies) layout.device_copies = std::make_shared<CsrCopies>();
  auto *copies = static_cast<CsrCopies *>(layout.device_copies.get());
  if (copies->per_device.size() <= static_cast<size_t>(device)) copies->per_device.resize(device + 1, nullptr);
  void *&mem = copies->per_device[device];
  if (!mem) {
    check(!stream_may_be_capturing(stream), Errc::InvalidState, "a CSR layout's first use on CUDA device ", device,
          " uploads its arrays and cannot happen during graph capture: launch once before capturing");
    const size_t crow_bytes = layout.crow.size() * sizeof(int32_t);
    const size_t col_bytes = layout.col.size() * sizeof(int32_t);
    void *p = cuda_malloc(device, crow_bytes + col_bytes + 16);
    cudaError_t e = cudaMemcpy(p, layout.crow.data(), crow_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && col_bytes)
      e = cudaMemcpy(static_cast<char *>(p) + crow_bytes, layout.col.data(), col_bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      cuda_free(device, p);
      check_cuda(e, "uploading a CSR layout");
    }
    mem = p;
  }
  d.crow = static_cast<const int32_t *>(mem);
  d.col = d.crow + layout.crow.size();
  return d;
}

}  // namespace bspa::kernels::cuda
