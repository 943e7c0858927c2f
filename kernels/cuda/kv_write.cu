// kv_write_cuda: new tokens' K and V into their pages in one pass. Each thread moves one
// vector (16 bytes when pointers, strides and rows allow it, else the widest that fits)
// of K and the same of V; the thread's sequence is found by binary search over
// query_starts, so the launch needs no host-side metadata.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/launch_check.hpp"

namespace bspa::kernels {
namespace {

struct KvParams {
  const char *k_new, *v_new;
  int64_t k_tok, k_head, v_tok, v_head;  // bytes
  char *k_pages, *v_pages;
  const int32_t *query_starts, *context_lens, *block_table;
  int64_t bt_stride;
  int32_t num_seqs, num_kv_heads, page_size;
  int64_t row_bytes;      // head_dim * element size
  int32_t vecs_per_row;   // row_bytes / sizeof(V)
  int64_t total;          // total_q * num_kv_heads * vecs_per_row
};

template <class V>
__global__ void kv_write_kernel(const __grid_constant__ KvParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t vec = static_cast<int32_t>(i % p.vecs_per_row);
    const int64_t th = i / p.vecs_per_row;
    const int32_t head = static_cast<int32_t>(th % p.num_kv_heads);
    const int32_t row = static_cast<int32_t>(th / p.num_kv_heads);
    int32_t lo = 0, hi = p.num_seqs - 1;  // last sequence with query_starts[s] <= row
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) >> 1;
      if (p.query_starts[mid] <= row) lo = mid; else hi = mid - 1;
    }
    const int64_t pos = static_cast<int64_t>(p.context_lens[lo]) + (row - p.query_starts[lo]);
    const int64_t page = p.block_table[lo * p.bt_stride + pos / p.page_size];
    const int64_t slot = pos % p.page_size;
    const int64_t dst = ((page * p.num_kv_heads + head) * p.page_size + slot) * p.row_bytes + vec * sizeof(V);
    const V kv = *reinterpret_cast<const V *>(p.k_new + row * p.k_tok + head * p.k_head + vec * sizeof(V));
    const V vv = *reinterpret_cast<const V *>(p.v_new + row * p.v_tok + head * p.v_head + vec * sizeof(V));
    *reinterpret_cast<V *>(p.k_pages + dst) = kv;
    *reinterpret_cast<V *>(p.v_pages + dst) = vv;
  }
}

template <class V>
void launch(const KvParams &p, cudaStream_t stream) {
  const int threads = 256;
  const int64_t blocks = (p.total + threads - 1) / threads;
  kv_write_kernel<V><<<static_cast<unsigned>(blocks < 65536 * 8 ? blocks : 65536 * 8), threads, 0, stream>>>(p);
  cuda::check_launch("kv_write_kernel", stream);
}

}  // namespace

void kv_write_cuda(const KvWriteProblem &p, void *stream_ptr) {
  if (p.total_q <= 0 || p.num_seqs <= 0) return;
  check(p.page_size >= 1 && p.num_kv_heads >= 1 && p.head_dim >= 1, Errc::InvalidArgument,
        "kv write: page_size = ", p.page_size, ", num_kv_heads = ", p.num_kv_heads, ", head_dim = ", p.head_dim);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  cuda::PointerDeviceGuard device(p.k_pages);
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
