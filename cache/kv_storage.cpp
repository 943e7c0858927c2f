#include "cache/kv_storage.hpp"

#include <cstring>
#include <new>

#include "common/device.hpp"
#include "common/error.hpp"

namespace bspa::cache {

namespace {
constexpr std::align_val_t kHostAlignment{256};
}

KvStorage::KvStorage(DeviceKind device, int32_t device_id, size_t bytes)
    : device_(device), device_id_(device_id), bytes_(bytes) {
  if (bytes == 0) return;
  if (device == DeviceKind::Cuda) {
    data_ = cuda_malloc(device_id, bytes);
    return;
  }
  // Left uninitialised on purpose: the OS backs pages lazily, and KV is only read after
  // it has been written (rows past a sequence's tokens are masked by the kernels).
  data_ = ::operator new(bytes, kHostAlignment, std::nothrow);
  check(data_ != nullptr, Errc::OutOfMemory, "host allocation of ", bytes, " bytes of KV storage failed");
}

void KvStorage::write(size_t offset, const void *src, size_t bytes) {
  if (bytes == 0) return;
  char *dst = static_cast<char *>(data_) + offset;
  if (device_ == DeviceKind::Cuda)
    cuda_copy_to_device(device_id_, dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

KvStorage::~KvStorage() {
  if (!data_) return;
  if (device_ == DeviceKind::Cuda) {
    cuda_free(device_id_, data_);
  } else {
    ::operator delete(data_, kHostAlignment);
  }
}

}  // namespace bspa::cache
