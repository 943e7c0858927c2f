#include "tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#ifdef BSPA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace demo {

namespace {

#ifdef BSPA_HAVE_CUDA
void cuda_ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

#ifndef BSPA_HAVE_CUDA
[[noreturn]] void no_cuda() { throw std::runtime_error("this bspa-demo was built without CUDA"); }
#endif

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t to_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, rounded to nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  int exp = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exp << 10) | static_cast<uint16_t>(mant);
}

float from_f16(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant + 1024), exp - 25);
}

}  // namespace

DLDataType dl_dtype(bspa_dtype t) {
  switch (t) {
    case BSPA_DTYPE_F32: return DLDataType{kDLFloat, 32, 1};
    case BSPA_DTYPE_F16: return DLDataType{kDLFloat, 16, 1};
    case BSPA_DTYPE_FP8_E4M3: return DLDataType{BSPA_DL_FLOAT8_E4M3FN, 8, 1};
    default: return DLDataType{kDLBfloat, 16, 1};
  }
}

int dtype_bytes(bspa_dtype t) { return t == BSPA_DTYPE_F32 ? 4 : t == BSPA_DTYPE_FP8_E4M3 ? 1 : 2; }

const char *dtype_name(bspa_dtype t) {
  return t == BSPA_DTYPE_F32 ? "f32" : t == BSPA_DTYPE_F16 ? "f16" : t == BSPA_DTYPE_FP8_E4M3 ? "fp8_e4m3" : "bf16";
}

float round_to(bspa_dtype t, float x) {
  if (t == BSPA_DTYPE_BF16) return from_bf16(to_bf16(x));
  if (t == BSPA_DTYPE_F16) return from_f16(to_f16(x));
  return x;
}

Buffer::Buffer(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  if (device.cuda()) {
#ifdef BSPA_HAVE_CUDA
    cuda_ok(cudaSetDevice(device.id), "cudaSetDevice");
    cuda_ok(cudaMalloc(&data_, bytes), "cudaMalloc");
#else
    no_cuda();
#endif
  } else {
    data_ = std::malloc(bytes);
    if (!data_) throw std::bad_alloc();
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer &&other) noexcept : device_(other.device_), data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer &Buffer::operator=(Buffer &&other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() noexcept {
  if (!data_) return;
#ifdef BSPA_HAVE_CUDA
  if (device_.cuda()) {
    cudaFree(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

void Buffer::upload(const void *host, size_t bytes) {
  if (bytes > bytes_) throw std::logic_error("Buffer::upload past the end");
  if (device_.cuda()) {
#ifdef BSPA_HAVE_CUDA
    cuda_ok(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#else
    no_cuda();
#endif
  } else if (bytes) {
    std::memcpy(data_, host, bytes);
  }
}

void Buffer::download(void *host, size_t bytes) const {
  if (bytes > bytes_) throw std::logic_error("Buffer::download past the end");
  if (device_.cuda()) {
#ifdef BSPA_HAVE_CUDA
    cuda_ok(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#else
    no_cuda();
#endif
  } else if (bytes) {
    std::memcpy(host, data_, bytes);
  }
}

Tensor::Tensor(Device device, DLDataType dtype, std::vector<int64_t> shape) : shape_(std::move(shape)) {
  dl_.device = DLDevice{static_cast<DLDeviceType>(device.type), device.id};
  dl_.dtype = dtype;
  buffer_ = Buffer(device, static_cast<size_t>(numel()) * (dtype.bits / 8));
  refresh();
}

void Tensor::refresh() {
  dl_.data = buffer_.data();
  dl_.ndim = static_cast<int32_t>(shape_.size());
  dl_.shape = shape_.data();
  dl_.strides = nullptr;
  dl_.byte_offset = 0;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

void Tensor::upload_floats(const std::vector<float> &values) {
  if (static_cast<int64_t>(values.size()) != numel()) throw std::logic_error("upload_floats: size mismatch");
  upload_front(values);
}

std::vector<float> Tensor::download_floats() const { return download_front(numel()); }

void Tensor::upload_front(const std::vector<float> &values) {
  if (static_cast<int64_t>(values.size()) > numel()) throw std::logic_error("upload_front: past the end");
  if (dl_.dtype.bits == 32) {
    buffer_.upload(values.data(), values.size() * 4);
    return;
  }
  std::vector<uint16_t> half(values.size());
  const bool bf = dl_.dtype.code == kDLBfloat;
  for (size_t i = 0; i < values.size(); ++i) half[i] = bf ? to_bf16(values[i]) : to_f16(values[i]);
  buffer_.upload(half.data(), half.size() * 2);
}

std::vector<float> Tensor::download_front(int64_t count) const {
  if (count < 0 || count > numel()) throw std::logic_error("download_front: past the end");
  std::vector<float> values(static_cast<size_t>(count));
  if (dl_.dtype.bits == 32) {
    buffer_.download(values.data(), values.size() * 4);
    return values;
  }
  std::vector<uint16_t> half(values.size());
  buffer_.download(half.data(), half.size() * 2);
  const bool bf = dl_.dtype.code == kDLBfloat;
  for (size_t i = 0; i < values.size(); ++i) values[i] = bf ? from_bf16(half[i]) : from_f16(half[i]);
  return values;
}

void Tensor::upload_ints(const std::vector<int32_t> &values) {
  if (static_cast<int64_t>(values.size()) != numel()) throw std::logic_error("upload_ints: size mismatch");
  buffer_.upload(values.data(), values.size() * 4);
}

void Tensor::poison() { poison_front(numel()); }

void Tensor::poison_front(int64_t count) {
  upload_front(std::vector<float>(static_cast<size_t>(count), std::numeric_limits<float>::quiet_NaN()));
}

void copy_on_device(Device device, void *dst, const void *src, size_t bytes) {
  if (device.cuda()) {
#ifdef BSPA_HAVE_CUDA
    cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy on device");
#else
    no_cuda();
#endif
  } else {
    std::memmove(dst, src, bytes);
  }
}

void synchronize(Device device) {
#ifdef BSPA_HAVE_CUDA
  if (device.cuda()) cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  (void)device;
#endif
}

}  // namespace demo
