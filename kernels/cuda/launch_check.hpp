// Error handling around kernel launches: a failed launch becomes Error(Cuda), and with
// BSPA_CUDA_DEBUG=1 every launch is followed by a stream synchronisation and a check, so
// an asynchronous fault is reported by the call that caused it (not graph capturable).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "common/device.hpp"
#include "common/error.hpp"

namespace bspa::kernels::cuda {

bool debug_sync_enabled();

// The largest gridDim.y and gridDim.z: the prefill grids hold a sequence's (or a work
// list's) query tiles in y and the sequences in z, the decode grid its sequences in z.
constexpr int64_t kMaxGridYZ = 65535;

inline void check_cuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess) fail(Errc::Cuda, what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// Whether work queued on `stream` now may be captured into a graph: true while it (or, for
// the legacy stream, another stream in global capture mode) is capturing, and when the
// runtime cannot say (the question's error is cleared). The one test of capture: calls
// that must not be captured refuse on it, launches keep every grid on it.
bool stream_may_be_capturing(cudaStream_t stream);

// Call right after a <<<...>>> launch.
void check_launch(const char *kernel, cudaStream_t stream);

// The launch attribute of thread-block clusters of cluster_x x 1 x 1 CTAs.
inline cudaLaunchAttribute cluster_dim_attribute(int cluster_x) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster_x);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream
// serialization when `programmatic` (compute capability 9.0+): the grid may then start
// before the previous work on the stream has finished, and the kernel itself waits for it
// (griddepcontrol.wait) before it reads that work's results or exits; and in thread-block
// clusters of cluster_x x 1 x 1 CTAs when cluster_x > 1 (compute capability 9.0+; more
// than 8 needs allow_nonportable_clusters). `what` names the kernel in errors.
template <class... Params, class... Args>
void launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool programmatic,
               int cluster_x, const char *what, Args &&...args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  if (programmatic) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) attrs[n++] = cluster_dim_attribute(cluster_x);
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
  check_launch(what, stream);
}

// Offsets of arrays packed into one device allocation, rounded up so each keeps the 256-byte
// alignment cudaMalloc gives the allocation.
constexpr size_t align_to_256(size_t v) { return (v + 255) & ~size_t{255}; }

// Streaming multiprocessors of `device` (sizes persistent grids and their workspaces;
// cached per device after the first query); -1 = the current device.
int multiprocessor_count(int device = -1);
// The dynamic shared memory a block may opt in to on `device` (cached likewise).
int max_shared_bytes_per_block(int device = -1);
// The SMs' peak clock (Hz) and the memory's peak bandwidth (bytes/s: two transfers a
// memory clock over the bus) of `device`, from its attributes (cached likewise).
double sm_clock_hz(int device = -1);
double memory_peak_bytes_per_s(int device = -1);

// Makes the device that owns `ptr` current for the guard's lifetime (launches go to the
// current device) and restores the caller's device afterwards (a common/ DeviceGuard).
class PointerDeviceGuard {
 public:
  explicit PointerDeviceGuard(const void *ptr);
  // `known_device` >= 0: the caller knows the owner (a pool's launches), so no
  // cudaPointerGetAttributes (a driver call on every launch otherwise); < 0: as above.
  PointerDeviceGuard(const void *ptr, int known_device);
  int device() const { return device_; }

 private:
  int device_;  // before guard_: it is initialised first
  DeviceGuard guard_;
};

// Opts `Kernel` in to `bytes` of dynamic shared memory on the current device once per device
// (cudaFuncSetAttribute is a driver call: per launch it was a measurable part of a launch's
// host time). The attribute belongs to the kernel in the device's context, so it holds for
// every later launch there, captured graphs included.
template <auto Kernel>
void allow_dynamic_smem(int bytes, const char *what) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> allowed[kMaxDevices];  // bytes already allowed per device (0: none)
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device >= 0 && device < kMaxDevices && allowed[device].load(std::memory_order_relaxed) >= bytes) return;
  check_cuda(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  if (device >= 0 && device < kMaxDevices) allowed[device].store(bytes, std::memory_order_relaxed);
}

// Opts `Kernel` in to thread-block clusters of more than 8 CTAs (a non-portable size: up to
// 16 on compute capability 9.0) once per device, as allow_dynamic_smem.
template <auto Kernel>
void allow_nonportable_clusters(const char *what) {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> allowed[kMaxDevices];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device >= 0 && device < kMaxDevices && allowed[device].load(std::memory_order_relaxed)) return;
  check_cuda(cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), what);
  if (device >= 0 && device < kMaxDevices) allowed[device].store(true, std::memory_order_relaxed);
}

// How many clusters of `cluster_x` CTAs of `Kernel` (`threads` threads and `smem` bytes of
// dynamic shared memory a CTA, allowed here before the first query) the current device
// holds at once (cudaOccupancyMaxActiveClusters: a cluster's CTAs share one GPC, so this is not the
// CTA slots divided by cluster_x); 0 where the device has no clusters or the query fails
// (its error cleared, so no later launch check reports it). An answer is cached per device
// and cluster size (a driver query): a kernel's threads and shared memory are fixed by its
// template.
template <auto Kernel>
int max_active_clusters(int cluster_x, int threads, int smem) {
  constexpr int kMaxDevices = 64, kMaxCluster = 16;
  static std::atomic<int> known[kMaxDevices][kMaxCluster + 1];  // clusters + 1 (0: not asked yet)
  if (cluster_x < 1 || cluster_x > kMaxCluster) return 0;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached) {
    const int k = known[device][cluster_x].load(std::memory_order_relaxed);
    if (k > 0) return k - 1;
  }
  allow_dynamic_smem<Kernel>(smem, "cudaFuncSetAttribute(dynamic shared memory)");
  if (cluster_x > 8) allow_nonportable_clusters<Kernel>("cudaFuncSetAttribute(non-portable cluster size)");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster_x));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cudaLaunchAttribute attr = cluster_dim_attribute(cluster_x);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, Kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;  // not cached: a query refused once (e.g. inside a stream capture) is asked again
  }
  if (cached) known[device][cluster_x].store(clusters + 1, std::memory_order_relaxed);
  return clusters;
}

}  // namespace bspa::kernels::cuda
