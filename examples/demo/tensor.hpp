// Buffers on the demo's device (host memory or CUDA through the runtime) and the
// DLTensor views the library borrows. The demo computes in float on the host and
// converts to the pool's dtype at the boundary.
#pragma once

#include <bspa/bspa.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace demo {

struct Device {
  int32_t type = kDLCPU;  // kDLCPU or kDLCUDA
  int32_t id = 0;
  bool cuda() const { return type == kDLCUDA; }
};

DLDataType dl_dtype(bspa_dtype t);  // FP8_E4M3: {BSPA_DL_FLOAT8_E4M3FN, 8, 1}
// x rounded to a float dtype (f32, f16, bf16) and back: what a tensor of it holds.
float round_to(bspa_dtype t, float x);
int dtype_bytes(bspa_dtype t);
const char *dtype_name(bspa_dtype t);

// Bytes on a device; moves, never copies.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer &&other) noexcept;
  Buffer &operator=(Buffer &&other) noexcept;
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  void *data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void upload(const void *host, size_t bytes);
  void download(void *host, size_t bytes) const;

 private:
  void release() noexcept;
  Device device_;
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

// A compact row-major tensor that owns its buffer and its DLTensor's shape array.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Device device, DLDataType dtype, std::vector<int64_t> shape);
  Tensor(Tensor &&) = default;
  Tensor &operator=(Tensor &&) = default;

  DLTensor *dl() { return &dl_; }
  const DLTensor *dl() const { return &dl_; }
  int64_t numel() const;
  Buffer &buffer() { return buffer_; }
  const Buffer &buffer() const { return buffer_; }

  // Host floats in, converted to the tensor's float dtype (f32, f16, bf16).
  void upload_floats(const std::vector<float> &values);
  std::vector<float> download_floats() const;
  // The same for the first elements only: a step's rows in a buffer sized for the
  // largest step (values.size() / count at most numel()).
  void upload_front(const std::vector<float> &values);
  std::vector<float> download_front(int64_t count) const;
  void poison_front(int64_t count);
  void upload_ints(const std::vector<int32_t> &values);
  // Fills every element with NaN, so rows a kernel forgot to write fail the check.
  void poison();

 private:
  void refresh();
  std::vector<int64_t> shape_;
  Buffer buffer_;
  DLTensor dl_{};
};

// Copies bytes within one device's memory (host memcpy or cudaMemcpy device to device).
void copy_on_device(Device device, void *dst, const void *src, size_t bytes);

// Waits for the device (so host timers measure the work); a no-op on CPU.
void synchronize(Device device);

}  // namespace demo
