#include "kernels/cuda/launch_check.hpp"

#include <atomic>

#include "kernels/cuda/env_switch.hpp"

namespace bspa::kernels::cuda {

bool debug_sync_enabled() {
  static const bool on = env_flag("BSPA_CUDA_DEBUG", false);
  return on;
}

void check_launch(const char *kernel, cudaStream_t stream) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail(Errc::Cuda, "launch of ", kernel, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (debug_sync_enabled()) {
    e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
      fail(Errc::Cuda, kernel, " failed (BSPA_CUDA_DEBUG=1 synchronised after it): ", cudaGetErrorName(e), " (",
           cudaGetErrorString(e), ")");
  }
}

bool stream_may_be_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

namespace {
// A device attribute, asked once per device (they do not change).
template <cudaDeviceAttr kAttr>
int cached_attribute(int device, const char *what) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0 = not asked yet
  if (device < 0) check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device >= 0 && device < kMaxDevices) {
    const int n = cached[device].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  check_cuda(cudaDeviceGetAttribute(&n, kAttr, device), what);
  if (device >= 0 && device < kMaxDevices) cached[device].store(n, std::memory_order_relaxed);
  return n;
}
}  // namespace

int multiprocessor_count(int device) {
  return cached_attribute<cudaDevAttrMultiProcessorCount>(device, "cudaDeviceGetAttribute(SM count)");
}

int max_shared_bytes_per_block(int device) {
  return cached_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device,
                                                                   "cudaDeviceGetAttribute(shared memory per block)");
}

double sm_clock_hz(int device) {
  return 1e3 * cached_attribute<cudaDevAttrClockRate>(device, "cudaDeviceGetAttribute(SM clock)");
}

double memory_peak_bytes_per_s(int device) {
  const double clock_hz =
      1e3 * cached_attribute<cudaDevAttrMemoryClockRate>(device, "cudaDeviceGetAttribute(memory clock)");
  const int bus_bits = cached_attribute<cudaDevAttrGlobalMemoryBusWidth>(device, "cudaDeviceGetAttribute(memory bus)");
  return 2.0 * clock_hz * bus_bits / 8;
}

namespace {
int device_of_pointer(const void *ptr) {
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(Errc::DeviceMismatch, "pointer ", ptr, " is not known to CUDA: ", cudaGetErrorString(e));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    fail(Errc::DeviceMismatch, "pointer ", ptr, " is not device memory");
  return attr.device;
}
}  // namespace

PointerDeviceGuard::PointerDeviceGuard(const void *ptr) : device_(device_of_pointer(ptr)), guard_(device_) {}
PointerDeviceGuard::PointerDeviceGuard(const void *ptr, int known_device)
    : device_(known_device >= 0 ? known_device : device_of_pointer(ptr)), guard_(device_) {}

}  // namespace bspa::kernels::cuda
