// The few CUDA runtime calls the host side needs (device count, device memory), kept in
// one place so cache/ and capi/ need no CUDA headers and work in a build without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bspa {

// Visible CUDA devices; 0 without a driver or in a build without CUDA.
int32_t cuda_device_count();
// True when this build has the CUDA backend compiled in.
bool cuda_compiled_in();

// cudaMalloc on `device`; throws Error(NoDevice / NotSupported / OutOfMemory / Cuda).
void *cuda_malloc(int32_t device, size_t bytes);
// cudaFree; never throws (errors during teardown are ignored).
void cuda_free(int32_t device, void *ptr) noexcept;
// Page-locked host memory (cudaHostAlloc), for staging buffers whose copies to a device
// are asynchronous; throws Error(OutOfMemory / Cuda / NotSupported). Freed with cuda_host_free.
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *ptr) noexcept;
// Process-wide counts of the calls above that succeeded (device and pinned allocations,
// and their frees), so tests and benchmarks can show that a steady state allocates nothing
// (bspa_device_allocation_counts).
struct AllocationCounts {
  uint64_t allocations = 0, frees = 0;
};
AllocationCounts cuda_allocation_counts();
// A synchronous cudaMemcpy of host memory to `dst` on `device` (for small, rare uploads
// such as an FP8 pool's scales, never per step); throws Error(Cuda / NotSupported).
void cuda_copy_to_device(int32_t device, void *dst, const void *src, size_t bytes);

// Makes `device` the calling thread's current CUDA device for the guard's lifetime, then
// restores the caller's, so bspa never changes a runtime's thread state. The one device
// save/restore of the library. Throws Error(Cuda) when the current device cannot be read or
// set; with `nothrow` (teardown) it tries and ignores failures. Without CUDA it does nothing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device, bool nothrow = false);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  int32_t previous_ = -1;  // the caller's device, restored when >= 0
};

}  // namespace bspa
