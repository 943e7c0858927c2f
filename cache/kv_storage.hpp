// The pool's KV memory: one allocation, host (256-byte aligned) or CUDA (one cudaMalloc).
// Also holds an FP8 pool's device copy of its scales (a second, small KvStorage).
#pragma once

#include <cstddef>
#include <cstdint>

namespace bspa::cache {

enum class DeviceKind : int32_t { Cpu = 0, Cuda = 1 };

class KvStorage {
 public:
  KvStorage() = default;
  // Throws Error(OutOfMemory) or, for CUDA, whatever bspa::cuda_malloc throws.
  KvStorage(DeviceKind device, int32_t device_id, size_t bytes);
  KvStorage(const KvStorage &) = delete;
  KvStorage &operator=(const KvStorage &) = delete;
  ~KvStorage();

  void *data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Copies host memory into [offset, offset + bytes) of the allocation: memcpy for host
  // storage, a synchronous cudaMemcpy for CUDA storage (Error(Cuda) on failure).
  // Precondition: offset + bytes <= bytes().
  void write(size_t offset, const void *src, size_t bytes);

 private:
  DeviceKind device_ = DeviceKind::Cpu;
  int32_t device_id_ = 0;
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace bspa::cache
