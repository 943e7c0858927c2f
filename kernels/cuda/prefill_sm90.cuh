// The sm90a block-sparse paged prefill kernel (wgmma), instantiated per (element type,
// head dim) in prefill_sm90_<dtype>.cu. Same semantics and key-tile classification as the
// sm80 kernel (prefill_sm80.cuh); what changes is how the tensor cores are fed.
//
// One CTA = two warpgroups = one 128-row query tile of one query head; warpgroup g owns
// rows 64g..64g+63. Per CTA:
//  1. the visible key tiles (64 tokens) are listed in shared memory: skipped / full /
//     masked with the allowed bits of the tile's (at most three) query blocks;
//  2. all 256 threads gather K and V of listed tiles through the block table with
//     cp.async into a 4-stage ring (three tiles in flight), stored as 128-byte-swizzled
//     64-column halves so wgmma reads them through descriptors;
//  3. per tile, warpgroup-wide: S = Q K^T (wgmma, Q and K from shared memory), online
//     softmax in exp2 units, O += P V (wgmma, P from registers, V N-major from shared
//     memory). Pipelined within each warpgroup: the S of tile i+1 and the PV of tile i are
//     both in flight while tile i+1's softmax runs (FlashAttention-3's intra-warpgroup
//     overlap), and the two warpgroups overlap each other.
// Layout block sizes must be multiples of 64 (checked on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/key_tile_list.cuh"
#include "kernels/cuda/query_tile.cuh"
#include "kernels/cuda/prefill_sm90.hpp"
#include "kernels/cuda/sm90_primitives.cuh"

namespace bspa::kernels::sm90 {

constexpr int kKeyTile = cuda::kKeyTileTokens;
constexpr int kListCap = 2048;  // key tiles classified per pass (128k tokens)

template <int D>
struct Config {
  static constexpr int BM = kTileRows;
  static constexpr int kThreads = 256;
  static constexpr int NH = D / 64;  // 64-column halves (128-byte rows)
  static constexpr int kChunks = D / 8;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kTileBytes = kKeyTile * D * 2;
  static constexpr int kStages = 4;
  static constexpr int kPerThread = kListCap / kThreads;
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kListCap * 4 + 64;
};

// Byte offset of 16-byte chunk c (of D/8) of row r in a ROWS-row operand: 64-column halves
// of ROWS x 128 bytes each, chunks XOR-swizzled within 8-row atoms (the wgmma 128B mode).
template <int ROWS>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

template <class T, int D>
__global__ void __launch_bounds__(256, 1) prefill_sm90_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Config<D>;
  constexpr int BM = C::BM, NH = C::NH, S = C::kStages;
  extern __shared__ __align__(1024) char smem_raw[];
  char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // swizzle atoms need 1 KiB alignment
  char *sQ = smem;
  char *sK = sQ + C::kQBytes;
  char *sV = sK + S * C::kTileBytes;
  int32_t *sList = reinterpret_cast<int32_t *>(sV + S * C::kTileBytes);
  int32_t *sScan = sList + kListCap;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int h = blockIdx.x;

  cuda::QueryTile tile;
  if (!cuda::locate_query_tile<BM>(p, tile)) return;
  const int seq = tile.seq, qs = tile.qs, q_len = tile.q_len, ctx = tile.ctx;
  const int t0 = tile.t0, t1 = tile.t1, p0 = tile.p0, p1 = tile.p1, qb0 = tile.qb0, qb1 = tile.qb1;
  const int kv_len = ctx + q_len;
  const int B = p.layout.block_size;
  const int kvh = h / p.group;
  const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
  const T *kbase = static_cast<const T *>(p.k) + static_cast<int64_t>(kvh) * p.k_head;
  const T *vbase = static_cast<const T *>(p.v) + static_cast<int64_t>(kvh) * p.v_head;
  const int page_mask = (1 << p.page_shift) - 1;

  {  // Q tile -> shared (rows past the sequence are zero)
    const T *qbase = static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0) * p.q_tok +
                     static_cast<int64_t>(h) * p.q_head;
#pragma unroll
    for (int i = 0; i < BM * C::kChunks / C::kThreads; ++i) {
      const int idx = tid + i * C::kThreads;
      const int r = idx / C::kChunks, c = idx % C::kChunks;
      const bool valid = t0 + r < t1;
      cp_async_16(smem_addr(sQ) + swz<BM>(r, c), valid ? qbase + static_cast<int64_t>(r) * p.q_tok + c * 8 : qbase,
                  valid);
    }
    cp_async_commit();
  }

  auto load_kv = [&](int entry, int stage) {
    const int k0 = (entry & 0x0FFFFFFF) * kKeyTile;
    const uint32_t dk = smem_addr(sK + stage * C::kTileBytes);
    const uint32_t dv = smem_addr(sV + stage * C::kTileBytes);
#pragma unroll
    for (int i = 0; i < kKeyTile * C::kChunks / C::kThreads; ++i) {
      const int idx = tid + i * C::kThreads;
      const int r = idx / C::kChunks, c = idx % C::kChunks;
      const int j = k0 + r;
      const bool valid = j < kv_len;
      const int64_t page = valid ? bt[j >> p.page_shift] : 0;
      const int slot = j & page_mask;
      const T *ks = kbase + page * p.k_page + static_cast<int64_t>(slot) * p.k_tok + c * 8;
      const T *vs = vbase + page * p.v_page + static_cast<int64_t>(slot) * p.v_tok + c * 8;
      cp_async_16(dk + swz<kKeyTile>(r, c), valid ? ks : kbase, valid);
      cp_async_16(dv + swz<kKeyTile>(r, c), valid ? vs : vbase, valid);
    }
  };

  // Accumulator element i of this thread: row wrow + (i/2 % 2) * 8, column 8*(i/4) + 2*(lane%4) + i%2.
  const int wrow = wg * 64 + (warp & 3) * 16 + (lane >> 2);
  float o[NH][32];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.f;
  float x[32];       // softmax works on a copy: S's registers are only written by wgmma
  uint32_t pa[4][4];  // P of the current tile as wgmma A fragments (4 k-steps of 16 keys)

  auto fence_o = [&] {
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) fence_regs(o[hh]);
  };
  auto fence_pa = [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) fence_regs(pa[kk]);
  };
  // Q as wgmma A fragments in registers, loaded once: S then reads only K from shared
  // memory (an SS wgmma with N = 64 would need the whole 128 B/clock of shared bandwidth).
  uint32_t qa[D / 16][4];
  auto load_q_frags = [&] {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldmatrix_x4(smem_addr(sQ) + swz<BM>(wg * 64 + (warp & 3) * 16 + (lane & 15), kk * 2 + (lane >> 4)), qa[kk]);
  };
  auto issue_s = [&](int stage) {
    const uint32_t k_addr = smem_addr(sK + stage * C::kTileBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;  // 16 columns = 32 bytes into the 128-byte row
      wgmma_rs<T>(s, qa[kk], sw128_desc(k_addr + (kk >> 2) * (kKeyTile * 128) + off, 1024), kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int stage) {
    const uint32_t v_addr = smem_addr(sV + stage * C::kTileBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
        wgmma_rs_tb<T>(o[hh], pa[kk], sw128_desc(v_addr + hh * (kKeyTile * 128) + kk * 16 * 128, 1024));
    wgmma_commit();
  };
  // Masks S of `entry`, updates m and l, leaves exp2 of the scaled logits in s; returns
  // the factor the previous O must be scaled by, per row half.
  auto softmax = [&](int entry, float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) x[i] = s[i];
    if (entry & cuda::kKeyTileMasked) {  // masked tile: token rule per element
      const int k0 = (entry & 0x0FFFFFFF) * kKeyTile;
      const unsigned bits = static_cast<unsigned>(entry) >> cuda::kKeyTileBlockShift;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int pr = p0 + wrow + rr * 8;
        const bool ok = (bits >> (pr / B - qb0)) & 1u;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = k0 + nt * 8 + 2 * (lane & 3) + e;
            if (!ok || j > pr) x[nt * 4 + rr * 2 + e] = -INFINITY;
          }
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float t[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t[nt] = fmaxf(x[nt * 4 + rr * 2], x[nt * 4 + rr * 2 + 1]);
#pragma unroll
      for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; ++i) t[i] = fmaxf(t[i], t[i + w]);
      float mx = t[0];
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[rr], mx * p.scale_log2);  // m: scaled, log2 units
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[rr] = fast_exp2(m[rr] - m_use);
      m[rr] = m_new;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          x[nt * 4 + rr * 2 + e] = fast_exp2(fmaf(x[nt * 4 + rr * 2 + e], p.scale_log2, -m_use));
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t[nt] = x[nt * 4 + rr * 2] + x[nt * 4 + rr * 2 + 1];
#pragma unroll
      for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; ++i) t[i] += t[i + w];
      l[rr] = l[rr] * alpha[rr] + t[0];
    }
  };
  auto rescale_and_pack = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[hh][i] *= alpha[(i >> 1) & 1];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = pack2<T>(x[8 * kk + 0], x[8 * kk + 1]);
      pa[kk][1] = pack2<T>(x[8 * kk + 2], x[8 * kk + 3]);
      pa[kk][2] = pack2<T>(x[8 * kk + 4], x[8 * kk + 5]);
      pa[kk][3] = pack2<T>(x[8 * kk + 6], x[8 * kk + 7]);
    }
  };

  const int n_kt = p1 / kKeyTile + 1;
  for (int c0 = 0; c0 < n_kt; c0 += kListCap) {
    // 1. classify key tiles [c0, c1) and compact the visible ones into sList.
    const int c1 = min(n_kt, c0 + kListCap);
    const int total = cuda::list_key_tiles<C::kThreads, C::kPerThread>(p.layout, h, qb0, qb1, p0, B, c0, c1, sList, sScan);
    if (total == 0) continue;

    // 2-3. tiles 0..S-2 in flight; S and softmax of tile 0; then per tile it: S(it+1) and
    // PV(it) issued, softmax(it+1) while both run.
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i < total) load_kv(sList[i], i);
      cp_async_commit();
    }
    cp_async_wait<S - 2>();
    fence_proxy_async();
    __syncthreads();
    float alpha[2];
    if (c0 == 0) load_q_frags();  // Q landed with tile 0 (its group is older)
    issue_s(0);
    wgmma_wait<0>();
    fence_regs(s);
    softmax(sList[0], alpha);
    rescale_and_pack(alpha);
    for (int it = 0; it < total; ++it) {
      const bool next = it + 1 < total;
      // Tile it+1 landed (group it+1 of S-1 outstanding ones); tile it-1's stage is free
      // (every thread waited for its PV before this barrier).
      cp_async_wait<S - 3>();
      fence_proxy_async();
      __syncthreads();
      if (it + S - 1 < total) load_kv(sList[it + S - 1], (it + S - 1) % S);
      cp_async_commit();
      fence_o();
      fence_pa();
      if (next) issue_s((it + 1) % S);
      issue_pv(it % S);
      if (next) {
        wgmma_wait<1>();
        fence_regs(s);
        softmax(sList[it + 1], alpha);
        wgmma_wait<0>();
        fence_o();
        fence_pa();
        rescale_and_pack(alpha);
      } else {
        wgmma_wait<0>();
        fence_o();
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // sList and the stages are rewritten by the next pass
  }

  // Epilogue: normalise, stage this warp's 16 rows in its own part of sQ (its warpgroup's
  // wgmma reads of sQ are complete), store 16 bytes a lane.
  constexpr float kLn2 = 0.69314718055994530942f;
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = l[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[rr] = sum > 0.f ? 1.f / sum : 0.f;
    const int t = t0 + wrow + rr * 8;
    if (p.lse && (lane & 3) == 0 && t < t1)
      p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = sum > 0.f ? m[rr] * kLn2 + logf(sum) : -INFINITY;
  }
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int rr = (i >> 1) & 1;
      const int r = wrow + rr * 8;
      const int col = hh * 64 + (i >> 2) * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t *>(sQ + swz<BM>(r, col >> 3) + (col & 7) * 2) =
          pack2<T>(o[hh][i] * inv[rr], o[hh][i + 1] * inv[rr]);
    }
  __syncwarp();
  T *obase = static_cast<T *>(p.out) + static_cast<int64_t>(qs + t0) * p.o_tok + static_cast<int64_t>(h) * p.o_head;
  const int row0 = wg * 64 + (warp & 3) * 16;
#pragma unroll
  for (int i = 0; i < 16 * C::kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = row0 + idx / C::kChunks, c = idx % C::kChunks;
    if (t0 + r < t1)
      *reinterpret_cast<uint4 *>(obase + static_cast<int64_t>(r) * p.o_tok + c * 8) =
          *reinterpret_cast<const uint4 *>(sQ + swz<BM>(r, c));
  }
#endif
}

}  // namespace bspa::kernels::sm90
