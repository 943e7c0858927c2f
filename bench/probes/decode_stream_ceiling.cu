// How fast can a batch-1 decode grid stream its K/V at all? Issue 20's batch-1 e4m3 decode
// (1 x 32767, Phi-3-small: 8 KV heads, D 128, 67 MB of e4m3 K/V) runs ~28 us on an H200
// (~2.4 TB/s with the launch), and a wgmma tile with half the instructions ran no faster
// (bench/NOTES.md, "Session 25", item 2): the levers left are on the memory side of a grid
// of one CTA an SM. This probe streams the same bytes with no attention math, only a
// 16-byte read a thread a tile (xor-folded, checked on the host so no copy can be skipped),
// through the copy engines a decode kernel could use:
//  - cp.async: each thread 16-byte copies of a ring of S stages (the decode kernel's way:
//    S = 4 a quad, two quads a CTA at batch 1);
//  - bulk: cp.async.bulk (the TMA's 1-D copy), one thread a warpgroup issues a tile's K
//    and V (8 KB each) into a stage, an mbarrier counts their bytes.
// Grids: `splits` CTAs an item, each of WG warpgroups with their own rings taking alternate
// tiles; batch 1 = 8 items of 32768 keys; a large case (512 items of 8192) for the rate a
// full machine reaches. K/V rotate over 16 copies so the L2 holds none of a launch's bytes.
// "paged" runs read each 64-key tile from a random 8 KB page of the whole 537 MB tensor
// (a page table, as bench_decode's pages are drawn from its pool) instead of consecutively.
//
// Prints each run's median (CUDA events around one launch, 100 launches) beside an empty
// kernel of the same grid, and the rate with and without that floor.
//
// Build (sm_90a, from the repository root), run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o probe_decode_stream_ceiling bench/probes/decode_stream_ceiling.cu
//   ./probe_decode_stream_ceiling
// Not part of the library; the CUDA build compiles it (bench/CMakeLists.txt).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/probes/e4m3_probe_common.cuh"

namespace {

using namespace e4m3_probe;
using bspa::kernels::sm90::fence_mbar_init;
using bspa::kernels::sm90::mbar_arrive_expect_tx;
using bspa::kernels::sm90::mbar_init;
using bspa::kernels::sm90::mbar_wait;

constexpr int kTileBytes = 64 * 128;         // 64 keys of K (or V), D 128, e4m3
constexpr int kStageBytes = 2 * kTileBytes;  // K then V

// One thread's 16 bytes of a stage's K and of its V, folded into `acc`.
__device__ __forceinline__ void consume(const uint8_t *stage, int wtid, uint4 &acc) {
  const uint4 a = *reinterpret_cast<const uint4 *>(stage + 16 * wtid);
  const uint4 b = *reinterpret_cast<const uint4 *>(stage + kTileBytes + 16 * wtid);
  acc.x ^= a.x ^ b.x, acc.y ^= a.y ^ b.y, acc.z ^= a.z ^ b.z, acc.w ^= a.w ^ b.w;
}

// The byte offset of item `item`'s tile t: consecutive, or its page's (pages != nullptr).
__device__ __forceinline__ int64_t tile_offset(const int32_t *pages, int keys, int item, int t) {
  const int64_t i = static_cast<int64_t>(item) * (keys / 64) + t;
  return (pages ? pages[i] : i) * kTileBytes;
}

// This CTA's tile range of its item, and warpgroup wg's count of it (tiles wg, wg + WG, ...).
struct Range {
  int t0, mine;
};
__device__ __forceinline__ Range cta_range(int keys, int wg, int WG) {
  const int n = keys / 64, split = blockIdx.x, splits = gridDim.x;
  const int t0 = static_cast<int>(int64_t{split} * n / splits), t1 = static_cast<int>(int64_t{split + 1} * n / splits);
  return {t0, (t1 - t0 - wg + WG - 1) / WG};
}

__device__ __forceinline__ void fold_out(uint32_t *out, int wtid, const uint4 &acc) {
  uint32_t *o = out + (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * 128 * 4 + wtid * 4;
  atomicXor(o, acc.x), atomicXor(o + 1, acc.y), atomicXor(o + 2, acc.z), atomicXor(o + 3, acc.w);
}

// grid (splits, items), WG x 128 threads; item i's K rows at k + i * keys * 128.
template <int S, int WG>
__global__ void __launch_bounds__(WG * 128)
    stream_cp_async(const uint8_t *k, const uint8_t *v, const int32_t *pages, int keys, uint32_t *out) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int wg = threadIdx.x >> 7, wtid = threadIdx.x & 127;
  uint8_t *ring = smem + wg * S * kStageBytes;
  const Range r = cta_range(keys, wg, WG);
  auto load = [&](int i) {
    const int64_t src = tile_offset(pages, keys, blockIdx.y, r.t0 + wg + WG * i);
    const uint32_t st = smem_addr(ring + (i % S) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kTileBytes / 16 / 128; ++j) {
      const int off = 16 * (wtid + 128 * j);
      cp_async_16(st + off, k + src + off);
      cp_async_16(st + kTileBytes + off, v + src + off);
    }
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < r.mine) load(i);
    cp_async_commit();
  }
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int i = 0; i < r.mine; ++i) {
    cp_async_wait<S - 2>();
    named_barrier(1 + wg, 128);  // tile i landed for all; stage (i - 1) % S is free
    if (i + S - 1 < r.mine) load(i + S - 1);
    cp_async_commit();
    consume(ring + (i % S) * kStageBytes, wtid, acc);
  }
  fold_out(out, wtid, acc);
}

__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

template <int S, int WG>
__global__ void __launch_bounds__(WG * 128)
    stream_bulk(const uint8_t *k, const uint8_t *v, const int32_t *pages, int keys, uint32_t *out) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[WG][S];
  const int wg = threadIdx.x >> 7, wtid = threadIdx.x & 127;
  uint8_t *ring = smem + wg * S * kStageBytes;
  const Range r = cta_range(keys, wg, WG);
  if (wtid == 0) {
    for (int s = 0; s < S; ++s) mbar_init(smem_addr(&full[wg][s]), 1);
    fence_mbar_init();
  }
  __syncthreads();
  auto load = [&](int i) {  // one thread: tile i's K and V into stage i % S
    const int64_t src = tile_offset(pages, keys, blockIdx.y, r.t0 + wg + WG * i);
    const uint32_t st = smem_addr(ring + (i % S) * kStageBytes), bar = smem_addr(&full[wg][i % S]);
    mbar_arrive_expect_tx(bar, kStageBytes);
    bulk_copy(st, k + src, kTileBytes, bar);
    bulk_copy(st + kTileBytes, v + src, kTileBytes, bar);
  };
  if (wtid == 0)
    for (int i = 0; i < S && i < r.mine; ++i) load(i);
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int i = 0; i < r.mine; ++i) {
    mbar_wait(smem_addr(&full[wg][i % S]), (i / S) & 1);
    consume(ring + (i % S) * kStageBytes, wtid, acc);
    named_barrier(1 + wg, 128);  // every thread is done with stage i % S
    if (wtid == 0 && i + S < r.mine) load(i + S);
  }
  fold_out(out, wtid, acc);
}

__global__ void empty_kernel(const uint8_t *, const uint8_t *, const int32_t *, int, uint32_t *) {}

using Kernel = void (*)(const uint8_t *, const uint8_t *, const int32_t *, int, uint32_t *);

struct Run {
  const char *name;
  Kernel kernel;
  int stages, wg;  // stages 0: the empty kernel
  bool bulk;
  int items, keys, splits;
  bool paged = false;
};

template <int S, int WG>
Run cp_async_run(int items, int keys, int splits, bool paged = false) {
  return {paged ? "cp.async/p" : "cp.async", stream_cp_async<S, WG>, S, WG, false, items, keys, splits, paged};
}
template <int S, int WG>
Run bulk_run(int items, int keys, int splits, bool paged = false) {
  return {paged ? "bulk/p" : "bulk", stream_bulk<S, WG>, S, WG, true, items, keys, splits, paged};
}

}  // namespace

int main() {
  constexpr int kCopies = 16;
  const int64_t batch1_bytes = int64_t{8} * 32768 * 128;  // of K (and of V)
  const int64_t large_bytes = int64_t{512} * 8192 * 128;
  const int64_t tensor_bytes = std::max(batch1_bytes * kCopies, large_bytes);
  std::vector<uint8_t> hk(tensor_bytes), hv(tensor_bytes);  // random bytes
  uint32_t x = 12345;
  for (auto *h : {&hk, &hv})
    for (auto &b : *h) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  uint8_t *dk, *dv;
  CUDA_OK(cudaMalloc(&dk, tensor_bytes));
  CUDA_OK(cudaMalloc(&dv, tensor_bytes));
  CUDA_OK(cudaMemcpy(dk, hk.data(), tensor_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, hv.data(), tensor_bytes, cudaMemcpyHostToDevice));
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_ctas = 512 * 2;
  // A random page of the whole tensor for each of batch 1's tiles (paged runs): kCopies
  // tables, disjoint, rotated between launches as the copies are.
  const int64_t n_pages = tensor_bytes / kTileBytes, batch1_tiles = 8 * 32768 / 64;
  std::vector<int32_t> perm(n_pages);
  for (int64_t i = 0; i < n_pages; ++i) perm[i] = static_cast<int32_t>(i);
  for (int64_t i = n_pages - 1; i > 0; --i) std::swap(perm[i], perm[(x = x * 1664525u + 1013904223u) % (i + 1)]);
  int32_t *dpages;
  CUDA_OK(cudaMalloc(&dpages, sizeof(int32_t) * n_pages));
  CUDA_OK(cudaMemcpy(dpages, perm.data(), sizeof(int32_t) * n_pages, cudaMemcpyHostToDevice));
  uint32_t *dout;
  CUDA_OK(cudaMalloc(&dout, sizeof(uint32_t) * max_ctas * 128 * 4));

  const Run runs[] = {
      {"empty", empty_kernel, 0, 1, false, 8, 32768, 16},
      cp_async_run<4, 2>(8, 32768, 16),  // the decode kernel's batch-1 grid
      cp_async_run<4, 1>(8, 32768, 16),
      cp_async_run<8, 1>(8, 32768, 16),
      cp_async_run<6, 2>(8, 32768, 16),
      cp_async_run<4, 1>(8, 32768, 32),
      bulk_run<4, 1>(8, 32768, 16),
      bulk_run<8, 1>(8, 32768, 16),
      bulk_run<12, 1>(8, 32768, 16),
      bulk_run<6, 2>(8, 32768, 16),
      bulk_run<4, 1>(8, 32768, 32),
      bulk_run<8, 1>(8, 32768, 8),
      cp_async_run<4, 2>(8, 32768, 16, true),
      bulk_run<8, 1>(8, 32768, 16, true),
      {"empty", empty_kernel, 0, 1, false, 512, 8192, 1},
      cp_async_run<4, 1>(512, 8192, 1),
      bulk_run<4, 1>(512, 8192, 1),
      bulk_run<8, 1>(512, 8192, 1),
  };
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  std::printf("%d SMs\n%-10s %6s %3s %6s %6s %7s %10s %9s %12s %6s\n", sms, "copy", "stages", "wg", "items", "keys",
              "splits", "median us", "TB/s", "TB/s-empty", "check");
  bool ok = true;
  double empty_us = 0;
  for (const Run &run : runs) {
    const int64_t item_bytes = int64_t{run.keys} * 128, launch_bytes = run.items * item_bytes;
    const int copies = run.paged ? static_cast<int>(std::min<int64_t>(kCopies, n_pages / batch1_tiles))
                                 : static_cast<int>(std::min<int64_t>(kCopies, tensor_bytes / launch_bytes));
    const int smem = run.stages * run.wg * kStageBytes;
    if (smem > 0) CUDA_OK(cudaFuncSetAttribute(run.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(run.splits, run.items);
    auto launch = [&](int c) {
      if (run.paged)
        run.kernel<<<grid, run.wg * 128, smem>>>(dk, dv, dpages + c * batch1_tiles, run.keys, dout);
      else
        run.kernel<<<grid, run.wg * 128, smem>>>(dk + c * launch_bytes, dv + c * launch_bytes, nullptr, run.keys, dout);
    };
    bool pass = true;
    if (run.stages > 0) {  // the folded bytes, against the host's fold of copy 0
      CUDA_OK(cudaMemset(dout, 0, sizeof(uint32_t) * max_ctas * 128 * 4));
      launch(0);
      CUDA_OK(cudaGetLastError());
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint32_t> got(static_cast<size_t>(run.items) * run.splits * 128 * 4);
      CUDA_OK(cudaMemcpy(got.data(), dout, sizeof(uint32_t) * got.size(), cudaMemcpyDeviceToHost));
      const int n = run.keys / 64;
      for (int it = 0; it < run.items && pass; ++it)
        for (int sp = 0; sp < run.splits && pass; ++sp) {
          const int t0 = static_cast<int>(int64_t{sp} * n / run.splits);
          const int t1 = static_cast<int>(int64_t{sp + 1} * n / run.splits);
          for (int w = 0; w < 128 * 4 && pass; ++w) {
            uint32_t want = 0;
            for (int t = t0; t < t1; ++t) {
              const int64_t tile = run.paged ? perm[int64_t{it} * n + t] : int64_t{it} * n + t;
              const int64_t off = tile * kTileBytes + 4 * w;
              uint32_t a, b;
              std::memcpy(&a, &hk[off], 4);
              std::memcpy(&b, &hv[off], 4);
              want ^= a ^ b;
            }
            pass = got[(static_cast<size_t>(it) * run.splits + sp) * 512 + w] == want;
          }
        }
      ok &= pass;
    }
    std::vector<float> times;
    for (int i = 0; i < 120; ++i) {
      CUDA_OK(cudaEventRecord(e0));
      launch(i % copies);
      CUDA_OK(cudaEventRecord(e1));
      CUDA_OK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 20) times.push_back(ms * 1000.f);
    }
    CUDA_OK(cudaGetLastError());
    std::sort(times.begin(), times.end());
    const double us = times[times.size() / 2];
    if (run.stages == 0) empty_us = us;
    const double bytes = 2.0 * launch_bytes;
    std::printf("%-10s %6d %3d %6d %6d %7d %10.2f %9.2f %12.2f %6s\n", run.name, run.stages, run.wg, run.items,
                run.keys, run.splits, us, bytes / (us * 1e6), run.stages > 0 ? bytes / ((us - empty_us) * 1e6) : 0.0,
                run.stages > 0 ? (pass ? "PASS" : "FAIL") : "-");
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
