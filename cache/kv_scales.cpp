// An FP8 pool's dequantization scales per (layer, KV head): validated once when set (a
// launch then only checks that its layer has them), kept on the host and, for a CUDA
// pool, mirrored in a small device allocation the kernels read.
#include <cmath>
#include <cstring>
#include <mutex>

#include "cache/pool.hpp"
#include "common/error.hpp"

namespace bspa::cache {

namespace {

void check_scales(const float *s, int32_t n, const char *name, int32_t layer) {
  for (int32_t h = 0; h < n; ++h)
    bspa::check(std::isfinite(s[h]) && s[h] > 0.0f, Errc::InvalidArgument, name, "[", h, "] = ", s[h], " for layer ",
                layer, " (KV head ", h, ") is not a finite positive scale");
}

}  // namespace

void Pool::set_kv_scales(int32_t layer, const float *k, const float *v, int32_t n) {
  bspa::check(config_.dtype == ElementType::FP8_E4M3, Errc::InvalidState,
              "the pool's dtype is not fp8_e4m3: its pages carry no scales");
  bspa::check(layer >= 0 && layer < config_.num_layers, Errc::OutOfRange, "layer = ", layer, " is not in [0, ",
              config_.num_layers, ")");
  bspa::check(k != nullptr, Errc::NullPointer, "k_scales is NULL");
  bspa::check(v != nullptr, Errc::NullPointer, "v_scales is NULL");
  bspa::check(n == config_.num_kv_heads, Errc::InvalidArgument, "n = ", n, " but the pool has ", config_.num_kv_heads,
              " KV heads (one scale per KV head)");
  check_scales(k, n, "k_scales", layer);
  check_scales(v, n, "v_scales", layer);
  const size_t hkv = static_cast<size_t>(n), offset = static_cast<size_t>(layer) * 2 * hkv;
  std::lock_guard<std::mutex> lock(mutex_);
  if (kv_scales_device_.bytes() > 0) {  // CUDA: upload first, so a failed copy changes nothing on the host
    float both[2 * 64];
    std::vector<float> big;
    float *staging = both;
    if (2 * hkv > sizeof(both) / sizeof(both[0])) {
      big.resize(2 * hkv);
      staging = big.data();
    }
    std::memcpy(staging, k, hkv * sizeof(float));
    std::memcpy(staging + hkv, v, hkv * sizeof(float));
    kv_scales_device_.write(offset * sizeof(float), staging, 2 * hkv * sizeof(float));
  }
  std::memcpy(kv_scales_.data() + offset, k, hkv * sizeof(float));
  std::memcpy(kv_scales_.data() + offset + hkv, v, hkv * sizeof(float));
  kv_scales_set_[static_cast<size_t>(layer)] = 1;
}

void Pool::get_kv_scales(int32_t layer, float *k, float *v, int32_t n) const {
  bspa::check(config_.dtype == ElementType::FP8_E4M3, Errc::InvalidState,
              "the pool's dtype is not fp8_e4m3: its pages carry no scales");
  bspa::check(layer >= 0 && layer < config_.num_layers, Errc::OutOfRange, "layer = ", layer, " is not in [0, ",
              config_.num_layers, ")");
  bspa::check(n == config_.num_kv_heads, Errc::InvalidArgument, "n = ", n, " but the pool has ", config_.num_kv_heads,
              " KV heads (one scale per KV head)");
  const size_t hkv = static_cast<size_t>(n), offset = static_cast<size_t>(layer) * 2 * hkv;
  std::lock_guard<std::mutex> lock(mutex_);
  bspa::check(kv_scales_set_[static_cast<size_t>(layer)] != 0, Errc::InvalidState, "layer ", layer,
              " of the fp8 pool has no KV scales yet (bspa_pool_set_kv_scales)");
  if (k) std::memcpy(k, kv_scales_.data() + offset, hkv * sizeof(float));
  if (v) std::memcpy(v, kv_scales_.data() + offset + hkv, hkv * sizeof(float));
}

int32_t Pool::kv_scales_layers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int32_t n = 0;
  for (uint8_t s : kv_scales_set_) n += s;
  return n;
}

Pool::LaunchScales Pool::launch_kv_scales(int32_t layer, float *k_host, float *v_host) const {
  // The launch checked the layer already (k_data); the dtype is the caller's condition.
  const size_t hkv = static_cast<size_t>(config_.num_kv_heads), offset = static_cast<size_t>(layer) * 2 * hkv;
  std::lock_guard<std::mutex> lock(mutex_);
  bspa::check(config_.dtype == ElementType::FP8_E4M3 && layer >= 0 && layer < config_.num_layers &&
                  kv_scales_set_[static_cast<size_t>(layer)] != 0,
              Errc::InvalidState, "layer ", layer,
              " of the fp8 pool has no KV scales: call bspa_pool_set_kv_scales before writing or reading it");
  LaunchScales s;
  if (kv_scales_device_.bytes() > 0) {
    const float *d = static_cast<const float *>(kv_scales_device_.data()) + offset;
    s.k = d;
    s.v = d + hkv;
  } else {
    std::memcpy(k_host, kv_scales_.data() + offset, hkv * sizeof(float));
    std::memcpy(v_host, kv_scales_.data() + offset + hkv, hkv * sizeof(float));
    s.k = k_host;
    s.v = v_host;
  }
  return s;
}

}  // namespace bspa::cache
