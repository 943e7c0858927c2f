#include "common/device.hpp"

#include <atomic>

#include "common/error.hpp"

#ifdef BSPA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace bspa {

namespace {
std::atomic<uint64_t> g_allocations{0}, g_frees{0};
}  // namespace

AllocationCounts cuda_allocation_counts() {
  return AllocationCounts{g_allocations.load(std::memory_order_relaxed), g_frees.load(std::memory_order_relaxed)};
}

#ifdef BSPA_HAVE_CUDA

bool cuda_compiled_in() { return true; }

int32_t cuda_device_count() {
  int n = 0;
  // Without a driver (CI, development machines) this fails with
  // cudaErrorInsufficientDriver or cudaErrorNoDevice: that means zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceGuard::DeviceGuard(int32_t device, bool nothrow) {
  int previous = -1;
  cudaError_t e = cudaGetDevice(&previous);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (!nothrow) fail(Errc::Cuda, "cudaGetDevice: ", cudaGetErrorString(e));
    previous = -1;  // unknown: set the device anyway, restore nothing
  }
  if (previous == device) return;
  e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (!nothrow) fail(Errc::Cuda, "cudaSetDevice(", device, "): ", cudaGetErrorString(e));
    return;
  }
  previous_ = previous;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void *cuda_malloc(int32_t device, size_t bytes) {
  const int32_t n = cuda_device_count();
  check(device >= 0 && device < n, Errc::NoDevice, "device_type = kDLCUDA with device_id = ", device,
        ", but this machine has ", n, " CUDA device(s)");
  DeviceGuard guard(device);
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail(Errc::OutOfMemory, "cudaMalloc of ", bytes, " bytes on device ", device, " failed: out of memory");
  }
  if (e != cudaSuccess) fail(Errc::Cuda, "cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(e));
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void cuda_free(int32_t device, void *ptr) noexcept {
  if (!ptr) return;
  DeviceGuard guard(device, /*nothrow=*/true);
  cudaFree(ptr);
  g_frees.fetch_add(1, std::memory_order_relaxed);
}

void *cuda_host_alloc(size_t bytes) {
  void *p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(e == cudaErrorMemoryAllocation ? Errc::OutOfMemory : Errc::Cuda, "cudaHostAlloc of ", bytes,
         " bytes: ", cudaGetErrorString(e));
  }
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void cuda_host_free(void *ptr) noexcept {
  if (!ptr) return;
  cudaFreeHost(ptr);
  g_frees.fetch_add(1, std::memory_order_relaxed);
}

void cuda_copy_to_device(int32_t device, void *dst, const void *src, size_t bytes) {
  DeviceGuard guard(device);
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(Errc::Cuda, "cudaMemcpy of ", bytes, " bytes to device ", device, ": ", cudaGetErrorString(e));
  }
}

#else

bool cuda_compiled_in() { return false; }
int32_t cuda_device_count() { return 0; }
void *cuda_malloc(int32_t, size_t) {
  fail(Errc::NotSupported, "device_type = kDLCUDA but this build of bspa has no CUDA backend");
}
void cuda_free(int32_t, void *) noexcept {}
void *cuda_host_alloc(size_t) {
  fail(Errc::NotSupported, "pinned host memory, but this build of bspa has no CUDA backend");
}
void cuda_host_free(void *) noexcept {}
void cuda_copy_to_device(int32_t, void *, const void *, size_t) {
  fail(Errc::NotSupported, "a copy to a CUDA device, but this build of bspa has no CUDA backend");
}
DeviceGuard::DeviceGuard(int32_t, bool) {}
DeviceGuard::~DeviceGuard() {}

#endif

}  // namespace bspa
