// kv_write_cuda: new tokens' K and V into their pages in one pass. Each thread moves one
// vector (16 bytes when pointers, strides and rows allow it, else the widest that fits)
// of K and the same of V; the thread's sequence is found by binary search over
// query_starts, so the launch needs no host-side metadata. FP8 pages: each thread
// quantizes up to 16 consecutive elements (two 16-byte loads of bf16/f16, one 16-byte
// store of e4m3), by the hardware converter on compute capability 8.9+ and elsewhere by
// the shared encoder of kernels/fp8_e4m3.hpp; the bytes equal the CPU's either way.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/fp8_e4m3.hpp"

namespace bspa::kernels {
namespace {

struct KvParams {
  const char *k_new, *v_new;
  int64_t k_tok, k_head, v_tok, v_head;  // bytes
  char *k_pages, *v_pages;
  const int32_t *query_starts, *context_lens, *block_table;
  int64_t bt_stride;
  int32_t num_seqs, num_kv_heads, page_size;
  int64_t row_bytes;               // head_dim * element size
  int32_t vecs_per_row;            // row_bytes / sizeof(V)
  int64_t total;                   // total_q * num_kv_heads * vecs_per_row (the grid's bound)
  const float *k_scale, *v_scale;  // FP8 pages: [num_kv_heads] on the device
};

// The vectors to write: the grid covers `total`, but a fixed-shape launch (a CUDA graph
// replayed across steps) sizes it for the batch's limits, so the step's own row count is
// read from the device (query_starts[num_seqs]); rows past it are not touched.
__device__ inline int64_t vectors_to_write(const KvParams &p) {
  const int64_t rows = p.query_starts[p.num_seqs];
  return min(p.total, rows * p.num_kv_heads * p.vecs_per_row);
}

// Finds the page byte offset of (row, head) and the source row: shared by both kernels.
struct RowTarget {
  int32_t row, head, vec;
  int64_t dst;  // byte offset of the vector in the pages
};

__device__ inline RowTarget locate(const KvParams &p, int64_t i, int64_t vec_bytes_out) {
  RowTarget r;
  r.vec = static_cast<int32_t>(i % p.vecs_per_row);
  const int64_t th = i / p.vecs_per_row;
  r.head = static_cast<int32_t>(th % p.num_kv_heads);
  r.row = static_cast<int32_t>(th / p.num_kv_heads);
  int32_t lo = 0, hi = p.num_seqs - 1;  // last sequence with query_starts[s] <= row
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) >> 1;
    if (p.query_starts[mid] <= r.row)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t pos = static_cast<int64_t>(p.context_lens[lo]) + (r.row - p.query_starts[lo]);
  const int64_t page = p.block_table[lo * p.bt_stride + pos / p.page_size];
  const int64_t slot = pos % p.page_size;
  r.dst = ((page * p.num_kv_heads + r.head) * p.page_size + slot) * p.row_bytes + r.vec * vec_bytes_out;
  return r;
}

// G elements per thread: the load of G 16-bit values and the store of G bytes.
template <int G>
struct Fp8Vec;
// Two 16-byte loads of a tensor, one 16-byte store: a thread writes as many page bytes as
// a thread of the 16-bit copy, so the per-thread locate (a binary search of dependent
// loads) is paid once per 16 bytes written, not per 8 (8 elements a thread: 60% of the
// copy bandwidth, bench/NOTES.md "FP8 KV (CUDA)").
struct alignas(16) Uint4x2 {
  uint4 lo, hi;
};
template <>
struct Fp8Vec<16> {
  using In = Uint4x2;
  using Out = uint4;
};
template <>
struct Fp8Vec<8> {
  using In = uint4;
  using Out = uint2;
};
template <>
struct Fp8Vec<4> {
  using In = uint2;
  using Out = uint32_t;
};
template <>
struct Fp8Vec<2> {
  using In = uint32_t;
  using Out = uint16_t;
};
template <>
struct Fp8Vec<1> {
  using In = uint16_t;
  using Out = uint8_t;
};

// A 16-bit NaN's e4m3 code from its own bits (its sign kept, as quantize_e4m3 keeps it;
// cvt.f32.f16 and the hardware converter return the canonical, positive NaN).
template <bool kBf16>
__device__ inline bool nan16(uint16_t h) {
  return kBf16 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}
__device__ inline uint8_t nan_code(uint16_t h) { return static_cast<uint8_t>(0x7fu | ((h >> 8) & 0x80u)); }

template <int G, bool kBf16>
__device__ inline void quantize_vec(const typename Fp8Vec<G>::In &in, char *dst, const ScaleDivider &divide) {
  uint16_t h[G];
  memcpy(h, &in, sizeof(h));
  uint8_t q[G];
  auto x = [&](int j) {
    return kBf16 ? __uint_as_float(static_cast<uint32_t>(h[j]) << 16) : __half2float(__ushort_as_half(h[j]));
  };
#if __CUDA_ARCH__ >= 890
  if constexpr (G >= 2) {
    // The hardware converter, two values an instruction: round to nearest even, finite
    // values past 448 and infinities saturated, subnormals; the bytes f32_to_fp8_e4m3
    // gives for every quotient that is not NaN (bench_fp8_check compares them with the
    // CPU's for every 16-bit input), of the correctly rounded quotient (ScaleDivider). The
    // scalar encoder per element made this write 39% of the copy bandwidth.
#pragma unroll
    for (int j = 0; j < G; j += 2) {
      // A pair at a time (a whole vector's quotients held at once cost 16 registers). In
      // range, neither value is NaN: the NaN tests are paid only by pairs out of range.
      float y[2];
      const auto xs = [&](int i) { return x(j + i); };
      const bool in_range = divide.divide<2>(xs, y);
      const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_SATFINITE, __NV_E4M3);
      q[j] = static_cast<uint8_t>(pair & 0xffu), q[j + 1] = static_cast<uint8_t>(pair >> 8);
      if (!in_range) {
        if (nan16<kBf16>(h[j])) q[j] = nan_code(h[j]);
        if (nan16<kBf16>(h[j + 1])) q[j + 1] = nan_code(h[j + 1]);
      }
    }
  } else
#endif
  {
#pragma unroll
    for (int j = 0; j < G; ++j)
      q[j] = nan16<kBf16>(h[j]) ? nan_code(h[j]) : quantize_e4m3(x(j), divide.scale);  // IEEE division, as the CPU's
  }
  typename Fp8Vec<G>::Out out;
  memcpy(&out, q, sizeof(q));
  *reinterpret_cast<typename Fp8Vec<G>::Out *>(dst) = out;
}

template <int G, bool kBf16>
__global__ void kv_write_fp8_kernel(const __grid_constant__ KvParams p) {
  const int64_t total = vectors_to_write(p);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RowTarget r = locate(p, i, G);
    const int64_t src = static_cast<int64_t>(r.vec) * G * 2;
    // Every load before the first store: the pages are char pointers the compiler cannot
    // tell apart from the sources, so a V load after K's store waited for it (two memory
    // round trips per vector instead of one).
    using In = typename Fp8Vec<G>::In;
    const In k = *reinterpret_cast<const In *>(p.k_new + r.row * p.k_tok + r.head * p.k_head + src);
    const In v = *reinterpret_cast<const In *>(p.v_new + r.row * p.v_tok + r.head * p.v_head + src);
    quantize_vec<G, kBf16>(k, p.k_pages + r.dst, ScaleDivider(p.k_scale[r.head]));
    quantize_vec<G, kBf16>(v, p.v_pages + r.dst, ScaleDivider(p.v_scale[r.head]));
  }
}

template <class V>
__global__ void kv_write_kernel(const __grid_constant__ KvParams p) {
  const int64_t total = vectors_to_write(p);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RowTarget r = locate(p, i, sizeof(V));
    const int64_t src = static_cast<int64_t>(r.vec) * sizeof(V);
    const V kv = *reinterpret_cast<const V *>(p.k_new + r.row * p.k_tok + r.head * p.k_head + src);
    const V vv = *reinterpret_cast<const V *>(p.v_new + r.row * p.v_tok + r.head * p.v_head + src);
    *reinterpret_cast<V *>(p.k_pages + r.dst) = kv;
    *reinterpret_cast<V *>(p.v_pages + r.dst) = vv;
  }
}

unsigned grid_for(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 * 8 ? blocks : 65536 * 8);
}

template <class V>
void launch(const KvParams &p, cudaStream_t stream) {
  kv_write_kernel<V><<<grid_for(p.total, 256), 256, 0, stream>>>(p);
  cuda::check_launch("kv_write_kernel", stream);
}

template <int G>
void launch_fp8(const KvParams &p, bool bf16, cudaStream_t stream) {
  if (bf16)
    kv_write_fp8_kernel<G, true><<<grid_for(p.total, 256), 256, 0, stream>>>(p);
  else
    kv_write_fp8_kernel<G, false><<<grid_for(p.total, 256), 256, 0, stream>>>(p);
  cuda::check_launch("kv_write_fp8_kernel", stream);
}

// FP8 pages: k/v_new 16-bit (es = 2), pages one byte per element.
void kv_write_fp8(KvParams k, const KvWriteProblem &p, cudaStream_t stream) {
  check(p.k_scale != nullptr && p.v_scale != nullptr, Errc::Internal, "kv write: fp8 pages without scales");
  check(p.dtype == DType::BF16 || p.dtype == DType::F16, Errc::NotSupported, "kv write: fp8 pages from ",
        dtype_name(p.dtype), " (bf16 or f16 only)");
  k.k_scale = p.k_scale;
  k.v_scale = p.v_scale;
  k.row_bytes = p.head_dim;
  // The most elements per thread that every load (2 bytes each, at most 16-byte
  // accesses) and store (1 byte) allows.
  const uint64_t in_bits = reinterpret_cast<uintptr_t>(k.k_new) | reinterpret_cast<uintptr_t>(k.v_new) |
                           static_cast<uint64_t>(k.k_tok) | static_cast<uint64_t>(k.k_head) |
                           static_cast<uint64_t>(k.v_tok) | static_cast<uint64_t>(k.v_head);
  const uint64_t out_bits = reinterpret_cast<uintptr_t>(k.k_pages) | reinterpret_cast<uintptr_t>(k.v_pages) |
                            static_cast<uint64_t>(p.head_dim);
  int g = 16;
  while (g > 1 && (in_bits % std::min(2 * g, 16) != 0 || out_bits % g != 0)) g /= 2;
  k.vecs_per_row = p.head_dim / g;
  k.total = static_cast<int64_t>(p.total_q) * p.num_kv_heads * k.vecs_per_row;
  const bool bf16 = p.dtype == DType::BF16;
  switch (g) {
    case 16: launch_fp8<16>(k, bf16, stream); break;
    case 8: launch_fp8<8>(k, bf16, stream); break;
    case 4: launch_fp8<4>(k, bf16, stream); break;
    case 2: launch_fp8<2>(k, bf16, stream); break;
    default: launch_fp8<1>(k, bf16, stream); break;
  }
}

}  // namespace

void kv_write_cuda(const KvWriteProblem &p, void *stream_ptr) {
  if (p.total_q <= 0 || p.num_seqs <= 0) return;
  check(p.page_size >= 1 && p.num_kv_heads >= 1 && p.head_dim >= 1, Errc::InvalidArgument,
        "kv write: page_size = ", p.page_size, ", num_kv_heads = ", p.num_kv_heads, ", head_dim = ", p.head_dim);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  cuda::PointerDeviceGuard device(p.k_pages, p.device);
  const int64_t es = dtype_bytes(p.dtype);
  KvParams k{};
  k.k_new = static_cast<const char *>(p.k_new);
  k.v_new = static_cast<const char *>(p.v_new);
  k.k_tok = p.k_new_token_stride * es;
  k.k_head = p.k_new_head_stride * es;
  k.v_tok = p.v_new_token_stride * es;
  k.v_head = p.v_new_head_stride * es;
  k.k_pages = static_cast<char *>(p.k_pages);
  k.v_pages = static_cast<char *>(p.v_pages);
  k.query_starts = p.query_starts;
  k.context_lens = p.context_lens;
  k.block_table = p.block_table;
  k.bt_stride = p.block_table_stride;
  k.num_seqs = p.num_seqs;
  k.num_kv_heads = p.num_kv_heads;
  k.page_size = p.page_size;
  if (p.kv_dtype == DType::FP8_E4M3) {
    kv_write_fp8(k, p, stream);
    return;
  }
  k.row_bytes = p.head_dim * es;
  // The widest access every address is aligned to.
  const uint64_t bits = reinterpret_cast<uintptr_t>(k.k_new) | reinterpret_cast<uintptr_t>(k.v_new) |
                        reinterpret_cast<uintptr_t>(k.k_pages) | reinterpret_cast<uintptr_t>(k.v_pages) |
                        static_cast<uint64_t>(k.k_tok) | static_cast<uint64_t>(k.k_head) |
                        static_cast<uint64_t>(k.v_tok) | static_cast<uint64_t>(k.v_head) |
                        static_cast<uint64_t>(k.row_bytes);
  const int width = bits % 16 == 0 ? 16 : bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : 2;
  k.vecs_per_row = static_cast<int32_t>(k.row_bytes / width);
  k.total = static_cast<int64_t>(p.total_q) * p.num_kv_heads * k.vecs_per_row;
  switch (width) {
    case 16: launch<uint4>(k, stream); break;
    case 8: launch<uint2>(k, stream); break;
    case 4: launch<uint32_t>(k, stream); break;
    default: launch<uint16_t>(k, stream); break;
  }
}

}  // namespace bspa::kernels
