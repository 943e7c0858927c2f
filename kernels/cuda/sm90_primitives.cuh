// Thin wrappers over the sm90a instructions the Hopper prefill kernel is built from:
// wgmma.mma_async (m64n128k16 with A and B from shared memory, and m64n128k32 over e4m3
// bytes; m64n128k16 and m64n64k16 with A from registers and B N-major; fp32 accumulators),
// its fences and groups, shared-memory matrix descriptors for the 128-byte swizzle, the
// generic->async proxy fence, mbarriers, TMA tensor loads, register reallocation and named
// barriers; and the cluster barrier and distributed shared-memory loads of the decode
// kernel's split merge. Only meaningful when compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL;
// the cluster wrappers for sm_90); the kernels that use them compile to an empty body, or
// never take that branch, for other targets.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/sm80_primitives.cuh"

namespace bspa::kernels::sm90 {

// The instructions both kernels use (cp.async, pack2, ex2, shared addresses) are the sm80
// wrappers; only what is Hopper's own lives here.
using sm80::cp_async_16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::fast_exp2;
using sm80::pack2;
using sm80::smem_addr;

// cp.async and st.shared write through the generic proxy; wgmma reads through the async
// proxy. Each writer fences after its writes are complete, before the barrier that
// publishes them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Matrix descriptor, 128-byte swizzle. The operand is stored as rows of 128 bytes (64
// 16-bit elements or 128 e4m3 ones), 16-byte chunk c of row r at chunk c ^ (r & 7), 8-row
// atoms of 1024 bytes (1024-byte aligned base, so the hardware's address-bit swizzle
// matches ours). sbo: bytes between 8-row groups (K-major: along M/N; N-major B: along K).
// LBO is unused by every operand here (K-major: one instruction's 32 bytes of K fit in one
// row; N-major: the 64 columns of one instruction fit in one row).
// lbo: N-major operands wider than 64 columns: bytes between their 64-column halves.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t sbo, uint32_t lbo = 16) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}
// The descriptor of the operand `bytes` further on (a multiple of 16): the start address
// is the low field, so this is one 32-bit add (shared addresses stay below 2^18, no carry
// out of the field). Kernels build a base descriptor once and step it per instruction.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across a
// wgmma issue or wait (the asm outputs look complete to it at issue time).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define BSPA_WG_D32                                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define BSPA_WG_OUT32(d)                                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (64x64 per warpgroup; thread: rows 16*warp + lane/4 (+8), columns 8*(i/4) + 2*(lane%4))
// += A(64x16, registers) * B(16x64, N-major smem: 16 rows of K, 64 contiguous columns).
// A register fragment (4 x 2 elements) per warp: mma.sync m16n8k16's A layout.
template <class T>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b);
// The N = 128 forms, two 64-column accumulators (d0 columns 0..63, d1 64..127):
// d = (accumulate ? d : 0) + A(64x16, K-major smem) * B(16x128, K-major smem: 128 rows, SBO
// apart per 8), and d += A(64x16, registers) * B(16x128, N-major smem: two 64-column
// halves LBO apart).
template <class T>
__device__ __forceinline__ void wgmma_ss128(float (&d0)[32], float (&d1)[32], uint64_t a, uint64_t b, int accumulate);
template <class T>
__device__ __forceinline__ void wgmma_rs_tb128(float (&d0)[32], float (&d1)[32], const uint32_t (&a)[4], uint64_t b);

#define BSPA_WG_D64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define BSPA_WG_OUT64(d0, d1) BSPA_WG_OUT32(d0), BSPA_WG_OUT32(d1)
#define BSPA_WG_DEFINE(TYPE, PTX)                                                                                    \
  template <>                                                                                                        \
  __device__ __forceinline__ void wgmma_rs_tb<TYPE>(float(&d)[32], const uint32_t(&a)[4], uint64_t b) {              \
    asm volatile(                                                                                                    \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                 \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " " BSPA_WG_D32                                    \
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                              \
        : BSPA_WG_OUT32(d)                                                                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                               \
  }                                                                                                                  \
  template <>                                                                                                        \
  __device__ __forceinline__ void wgmma_ss128<TYPE>(float(&d0)[32], float(&d1)[32], uint64_t a, uint64_t b,          \
                                                    int accumulate) {                                                \
    asm volatile(                                                                                                    \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                 \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " BSPA_WG_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n" \
        : BSPA_WG_OUT64(d0, d1)                                                                                      \
        : "l"(a), "l"(b), "r"(accumulate));                                                                          \
  }                                                                                                                  \
  template <>                                                                                                        \
  __device__ __forceinline__ void wgmma_rs_tb128<TYPE>(float(&d0)[32], float(&d1)[32], const uint32_t(&a)[4],        \
                                                       uint64_t b) {                                                 \
    asm volatile(                                                                                                    \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                 \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " BSPA_WG_D64                                   \
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                              \
        : BSPA_WG_OUT64(d0, d1)                                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                               \
  }

BSPA_WG_DEFINE(__nv_bfloat16, "bf16")
BSPA_WG_DEFINE(__half, "f16")
#undef BSPA_WG_DEFINE

// d = (accumulate ? d : 0) + A(64x32, K-major smem) * B(32x128, K-major smem: 128 rows, SBO
// apart per 8), e4m3 operands (fp32 accumulators in wgmma_ss128's layout). FP8 wgmma has no
// transposed forms: both operands are rows of bytes along K. Its sum keeps about 13 bits
// below its largest term (bench/NOTES.md, "Session 18: the FP8 probe's answer").
__device__ __forceinline__ void wgmma_ss128_e4m3(float (&d0)[32], float (&d1)[32], uint64_t a, uint64_t b,
                                                 int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " BSPA_WG_D64 ", %64, %65, p, 1, 1;\n}\n"
      : BSPA_WG_OUT64(d0, d1)
      : "l"(a), "l"(b), "r"(accumulate));
}
#undef BSPA_WG_OUT64
#undef BSPA_WG_D64
#undef BSPA_WG_OUT32
#undef BSPA_WG_D32

// mbarriers (shared-memory transaction barriers) for the producer/consumer pipeline.
// A phase completes when `count` arrivals have happened and every byte of asynchronous
// (TMA) writes an arrival announced (expect_tx) has landed; waiters name the phase by its
// parity (0, 1, 0, ...).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the other threads (before the CTA barrier).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One arrival on `bar` that also expects `bytes` of TMA writes (complete_tx) in its
// current phase; issued before the copies it expects.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// TMA: the box of a 4-D tensor map at coordinates (c0..c3) into shared memory at `dst`,
// through the async proxy (wgmma reads it without a proxy fence); counts its bytes on
// `bar` when it lands. `map`: the generic address of a __grid_constant__ CUtensorMap.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void *map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// The same for a 5-D tensor map.
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const void *map, int c0, int c1, int c2, int c3, int c4,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
      "%6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar`, made when every cp.async this thread issued before it has landed
// (noinc: the arrival is one of the barrier's expected count).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Register reallocation between warpgroups (all warps of a warpgroup execute it).
template <int N>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Starts moving the 128-byte line at `ptr` into L2 (no register result, no wait).
__device__ __forceinline__ void prefetch_l2(const void *ptr) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr)); }

// Barrier among `threads` threads (whole warps) on hardware barrier `id` (1..15; 0 is
// __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Counts this warp toward the `threads` of hardware barrier `id` without waiting for the
// others (the warps that wait there call named_barrier with the same count).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Thread-block clusters (compute capability 9.0; the decode kernel's split merge). Every
// thread of every CTA of the cluster calls cluster_sync: the CTAs' earlier shared-memory
// writes are visible to the cluster's loads after it (release / acquire), and no CTA runs
// past it (or exits, freeing its shared memory) before all have reached it.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// The shared::cluster address of this CTA's shared address `local` in the CTA of cluster
// rank `rank` (distributed shared memory: that CTA's same offset).
__device__ __forceinline__ uint32_t cluster_peer_addr(uint32_t local, uint32_t rank) {
  uint32_t remote = local;
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
#endif
  return remote;
}
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t addr) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
#endif
  return v;
}
__device__ __forceinline__ float2 ld_cluster_f2(uint32_t addr) {
  float2 v = make_float2(0.f, 0.f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
#endif
  return v;
}

}  // namespace bspa::kernels::sm90
