// encode_kv_maps: the TMA descriptors of the K and V pages for the sm90a producer, made
// by the driver's cuTensorMapEncodeTiled (looked up at run time, so the library does not
// link libcuda). Host only, once per launch (a pool's pointers and strides may change
// from one call to the next); no stream work, so graph capture records nothing of it.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels::sm90 {
namespace {

// The driver's encoder, or nullptr. Only a success is kept: a lookup refused once (say,
// during a stream capture that forbids it) is tried again by the next launch.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> cached{nullptr};
  PFN_cuTensorMapEncodeTiled_v12000 fn = cached.load(std::memory_order_acquire);
  if (fn) return fn;
  void *f = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || f == nullptr) {
    if (e != cudaSuccess) (void)cudaGetLastError();  // this lookup's own error: the launch goes on without TMA
    return nullptr;
  }
  fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  cached.store(fn, std::memory_order_release);
  return fn;
}

// BSPA_CUDA_TMA=0 turns TMA off (every tile by cp.async gathers): to time or test them.
bool tma_allowed() {
  static const bool allowed = [] {  // read once per process
    const char *e = std::getenv("BSPA_CUDA_TMA");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return allowed;
}

}  // namespace

KvTensorMaps encode_kv_maps(const Params &p, bool bf16, int head_dim, int num_kv_heads) {
  KvTensorMaps m{};
  const int page_size = 1 << p.page_shift;
  if (page_size < kTmaBoxTokens || p.num_pages <= 0 || !tma_allowed()) return m;
  PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) return m;
  const CUtensorMapDataType type = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  int order[3] = {1, 2, 3};  // dimension of token, head, page
  auto one = [&](CUtensorMap &map, const void *base, int64_t tok, int64_t head, int64_t page) {
    struct Dim {
      int64_t stride;  // elements
      uint64_t extent;
      uint32_t box;
      int which;  // 0 token, 1 head, 2 page
    };
    // A page id past num_pages reads zeros through TMA (such ids are the caller's error on
    // CUDA, as for the cp.async path, which reads whatever lies there).
    std::array<Dim, 3> d = {Dim{tok, static_cast<uint64_t>(page_size), kTmaBoxTokens, 0},
                            Dim{head, static_cast<uint64_t>(num_kv_heads), 1, 1},
                            Dim{page, static_cast<uint64_t>(p.num_pages), 1, 2}};
    std::stable_sort(d.begin(), d.end(), [](const Dim &a, const Dim &b) { return a.stride < b.stride; });
    cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), d[0].extent, d[1].extent, d[2].extent};
    cuuint64_t strides[3] = {static_cast<cuuint64_t>(d[0].stride) * 2, static_cast<cuuint64_t>(d[1].stride) * 2,
                             static_cast<cuuint64_t>(d[2].stride) * 2};
    cuuint32_t box[4] = {kTmaBoxColumns, d[0].box, d[1].box, d[2].box};
    cuuint32_t step[4] = {1, 1, 1, 1};
    for (int i = 0; i < 3; ++i) order[d[i].which] = 1 + i;
    return encode(&map, type, 4, const_cast<void *>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  const bool ok_k = one(m.k, p.k, p.k_tok, p.k_head, p.k_page);
  const int k_order[3] = {order[0], order[1], order[2]};
  const bool ok_v = one(m.v, p.v, p.v_tok, p.v_head, p.v_page);
  // The kernel builds one coordinate list for both: their dimensions must be in one order.
  m.valid = ok_k && ok_v && std::equal(k_order, k_order + 3, order);
  m.dim_tok = order[0], m.dim_head = order[1], m.dim_page = order[2];
  return m;
}

}  // namespace bspa::kernels::sm90
