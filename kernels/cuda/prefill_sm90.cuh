// The sm90a block-sparse paged prefill kernel (wgmma, warp-specialized), instantiated per
// (element type, head dim) in prefill_sm90_<dtype>.cu. Same semantics and key-tile
// classification as the sm80 kernel (prefill_sm80.cuh); what changes is how the tensor
// cores are fed.
//
// One CTA = one 128-row query tile of one query head, three warpgroups:
//  - all 384 threads list the visible key tiles (64 tokens) in shared memory: skipped /
//    full / masked with the allowed bits of the tile's (at most three) query blocks;
//  - warpgroup 0, the producer, gives most of its registers away (setmaxnreg) and gathers
//    K and V of the listed tiles through the block table with cp.async into a ring of
//    stages, stored as 128-byte-swizzled 64-column halves that wgmma reads through
//    descriptors; a stage's "full" mbarrier completes when its copies land
//    (cp.async.mbarrier.arrive), its "empty" mbarrier when both consumers are done with it;
//  - warpgroups 1 and 2, the consumers, own rows 0..63 and 64..127: S = Q K^T (wgmma, both
//    from shared memory), online softmax in exp2 units with a lazy rescale, O += P V
//    (wgmma, P from registers, V N-major). The S of tile i+1 and the PV of tile i are both
//    in flight while tile i+1's softmax runs (FlashAttention-3's intra-warpgroup overlap).
// No CTA-wide barrier inside the key loop: the consumers drift relative to each other, so
// one's softmax overlaps the other's GEMMs.
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
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;  // 128 * 40 + 256 * 232 <= 64K registers
  static constexpr int NH = D / 64;          // 64-column halves (128-byte rows)
  static constexpr int kChunks = D / 8;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kTileBytes = kKeyTile * D * 2;
  static constexpr int kStages = D == 128 ? 5 : 8;
  static constexpr int kPerThread = (kListCap + kThreads - 1) / kThreads;
  static constexpr int kSmemBytes =
      1024 + kQBytes + 2 * kStages * kTileBytes + kListCap * 4 + kThreads / 32 * 4 + 2 * kStages * 8;
};

// Byte offset of 16-byte chunk c (of D/8) of row r in a ROWS-row operand: 64-column halves
// of ROWS x 128 bytes each, chunks XOR-swizzled within 8-row atoms (the wgmma 128B mode).
template <int ROWS>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

template <class T, int D>
__global__ void __launch_bounds__(384, 1) prefill_sm90_kernel(const __grid_constant__ Params p) {
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
  const uint32_t full_bar = smem_addr(sScan + C::kThreads / 32);  // 8-byte aligned: kListCap is even
  const uint32_t empty_bar = full_bar + S * 8;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int h = blockIdx.x;

  cuda::QueryTile tile;
  if (!cuda::locate_query_tile<BM>(p, tile)) return;
  const int seq = tile.seq, qs = tile.qs, q_len = tile.q_len, ctx = tile.ctx;
  const int t0 = tile.t0, t1 = tile.t1, p0 = tile.p0, p1 = tile.p1, qb0 = tile.qb0, qb1 = tile.qb1;
  const int B = p.layout.block_size;
  const int n_kt = p1 / kKeyTile + 1;

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full_bar + 8 * s, 128);  // one cp.async arrival per producer thread
      mbar_init(empty_bar + 8 * s, 8);   // one arrival per consumer warp
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer: K/V gathers --------------------------------------------------------
    regs_dealloc<C::kProducerRegs>();
    const int kv_len = ctx + q_len;
    const int kvh = h / p.group;
    const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
    const T *kbase = static_cast<const T *>(p.k) + static_cast<int64_t>(kvh) * p.k_head;
    const T *vbase = static_cast<const T *>(p.v) + static_cast<int64_t>(kvh) * p.v_head;
    const int page_mask = (1 << p.page_shift) - 1;
    // Thread tid copies 16-byte chunk tid % kChunks of rows tid / kChunks + i * kRowStep.
    constexpr int kRowStep = 128 / C::kChunks;
    const int c = tid % C::kChunks, r0 = tid / C::kChunks;
    int filled = 0;  // tiles issued over all passes (ring position and phase)
    for (int c0 = 0; c0 < n_kt; c0 += kListCap) {
      const int c1 = min(n_kt, c0 + kListCap);
      const int total =
          cuda::list_key_tiles<C::kThreads, C::kPerThread>(p.layout, h, qb0, qb1, p0, B, c0, c1, sList, sScan);
      for (int it = 0; it < total; ++it, ++filled) {
        const int stage = filled % S;
        if (filled >= S) mbar_wait(empty_bar + 8 * stage, ((filled / S) - 1) & 1);
        const int k0 = (sList[it] & 0x0FFFFFFF) * kKeyTile;
        const uint32_t dk = smem_addr(sK + stage * C::kTileBytes);
        const uint32_t dv = smem_addr(sV + stage * C::kTileBytes);
        if (p.page_shift >= 6 && k0 + kKeyTile <= kv_len) {
          // The whole tile lies in one page (tiles are 64-aligned): one block-table read.
          const int64_t page = bt[k0 >> p.page_shift];
          const int slot0 = k0 & page_mask;
          const T *ks = kbase + page * p.k_page + static_cast<int64_t>(slot0 + r0) * p.k_tok + c * 8;
          const T *vs = vbase + page * p.v_page + static_cast<int64_t>(slot0 + r0) * p.v_tok + c * 8;
#pragma unroll
          for (int i = 0; i < kKeyTile / kRowStep; ++i) {
            const int r = r0 + i * kRowStep;
            cp_async_16(dk + swz<kKeyTile>(r, c), ks + static_cast<int64_t>(i * kRowStep) * p.k_tok, true);
            cp_async_16(dv + swz<kKeyTile>(r, c), vs + static_cast<int64_t>(i * kRowStep) * p.v_tok, true);
          }
        } else {
#pragma unroll 2
          for (int i = 0; i < kKeyTile / kRowStep; ++i) {
            const int r = r0 + i * kRowStep;
            const int j = k0 + r;
            const bool valid = j < kv_len;  // rows past the sequence are zero-filled
            const int64_t page = valid ? bt[j >> p.page_shift] : 0;
            const int slot = j & page_mask;
            const T *ks = kbase + page * p.k_page + static_cast<int64_t>(slot) * p.k_tok + c * 8;
            const T *vs = vbase + page * p.v_page + static_cast<int64_t>(slot) * p.v_tok + c * 8;
            cp_async_16(dk + swz<kKeyTile>(r, c), valid ? ks : kbase, valid);
            cp_async_16(dv + swz<kKeyTile>(r, c), valid ? vs : vbase, valid);
          }
        }
        cp_async_arrive(full_bar + 8 * stage);
      }
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumers ------------------------------------------------------------------------
  regs_alloc<C::kConsumerRegs>();
  const int cg = wg - 1;  // rows 64 * cg .. 64 * cg + 63 of the tile
  {  // this warpgroup's 64 Q rows -> shared (rows past the sequence are zero)
    const T *qbase = static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0) * p.q_tok +
                     static_cast<int64_t>(h) * p.q_head;
    const int ctid = tid & 127;
#pragma unroll
    for (int i = 0; i < 64 * C::kChunks / 128; ++i) {
      const int idx = ctid + i * 128;
      const int r = cg * 64 + idx / C::kChunks, c = idx % C::kChunks;
      const bool valid = t0 + r < t1;
      cp_async_16(smem_addr(sQ) + swz<BM>(r, c), valid ? qbase + static_cast<int64_t>(r) * p.q_tok + c * 8 : qbase,
                  valid);
    }
    cp_async_commit();
  }

  // Accumulator element i of this thread: row wrow + (i/2 % 2) * 8, column 8*(i/4) + 2*(lane%4) + i%2.
  const int wrow = cg * 64 + (warp & 3) * 16 + (lane >> 2);
  float o[NH][32];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.f;
  float x[32];        // softmax works on a copy: S's registers are only written by wgmma
  uint32_t pa[4][4];  // P of the current tile as wgmma A fragments (4 k-steps of 16 keys)

  auto fence_o = [&] {
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) fence_regs(o[hh]);
  };
  auto fence_pa = [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) fence_regs(pa[kk]);
  };
  const uint32_t q_addr = smem_addr(sQ) + cg * 64 * 128;
  auto issue_s = [&](int stage) {
    const uint32_t k_addr = smem_addr(sK + stage * C::kTileBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;  // 16 columns = 32 bytes into the 128-byte row
      wgmma_ss<T>(s, sw128_desc(q_addr + (kk >> 2) * (BM * 128) + off, 1024),
                  sw128_desc(k_addr + (kk >> 2) * (kKeyTile * 128) + off, 1024), kk > 0);
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
  // Masks S of `entry` into x, moves m and l, leaves exp2 of the scaled logits in x.
  // Lazy rescale (as the sm80 kernel): m only moves when some row of the warp grew past
  // m + kSlack; otherwise the exponentials use the stale m and stay below 2^kSlack, exact
  // in fp32 and representable in bf16/f16. Returns whether O must be scaled by alpha.
  auto softmax = [&](int entry, float (&alpha)[2]) -> bool {
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
    float mx[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float t[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t[nt] = fmaxf(x[nt * 4 + rr * 2], x[nt * 4 + rr * 2 + 1]);
#pragma unroll
      for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; ++i) t[i] = fmaxf(t[i], t[i + w]);
      float v = t[0];
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      mx[rr] = v * p.scale_log2;
    }
    constexpr float kSlack = 8.f;
    const bool rescale = __any_sync(0xffffffffu, mx[0] > m[0] + kSlack || mx[1] > m[1] + kSlack);
    if (rescale) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const float m_new = fmaxf(m[rr], mx[rr]);
        alpha[rr] = m_new == -INFINITY ? 1.f : fast_exp2(m[rr] - m_new);
        m[rr] = m_new;
        l[rr] *= alpha[rr];
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float m_use = m[rr] == -INFINITY ? 0.f : m[rr];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          x[nt * 4 + rr * 2 + e] = fast_exp2(fmaf(x[nt * 4 + rr * 2 + e], p.scale_log2, -m_use));
      float t[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t[nt] = x[nt * 4 + rr * 2] + x[nt * 4 + rr * 2 + 1];
#pragma unroll
      for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; ++i) t[i] += t[i + w];
      l[rr] += t[0];
    }
    return rescale;
  };
  auto rescale_and_pack = [&](bool rescale, const float (&alpha)[2]) {
    if (rescale) {
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[hh][i] *= alpha[(i >> 1) & 1];
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = pack2<T>(x[8 * kk + 0], x[8 * kk + 1]);
      pa[kk][1] = pack2<T>(x[8 * kk + 2], x[8 * kk + 3]);
      pa[kk][2] = pack2<T>(x[8 * kk + 4], x[8 * kk + 5]);
      pa[kk][3] = pack2<T>(x[8 * kk + 6], x[8 * kk + 7]);
    }
  };
  auto wait_full = [&](int n) {
    mbar_wait(full_bar + 8 * (n % S), (n / S) & 1);
    fence_proxy_async();  // the copies landed through the generic proxy; wgmma reads through the async one
  };
  auto release = [&](int n) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar + 8 * (n % S));
  };

  // Q landed: every thread waits for its own copies, then the warpgroup meets.
  cp_async_wait<0>();
  fence_proxy_async();
  named_barrier(1 + cg, 128);

  int used = 0;  // tiles consumed over all passes (ring position and phase)
  for (int c0 = 0; c0 < n_kt; c0 += kListCap) {
    const int c1 = min(n_kt, c0 + kListCap);
    const int total = cuda::list_key_tiles<C::kThreads, C::kPerThread>(p.layout, h, qb0, qb1, p0, B, c0, c1, sList, sScan);
    if (total == 0) continue;

    float alpha[2] = {1.f, 1.f};
    wait_full(used);
    issue_s(used % S);
    wgmma_wait<0>();
    fence_regs(s);
    bool rescale = softmax(sList[0], alpha);
    rescale_and_pack(rescale, alpha);
    for (int it = 0; it < total; ++it) {
      const int n = used + it;
      const bool next = it + 1 < total;
      if (next) wait_full(n + 1);
      fence_o();
      fence_pa();
      if (next) issue_s((n + 1) % S);
      issue_pv(n % S);
      if (next) {
        wgmma_wait<1>();
        fence_regs(s);
        rescale = softmax(sList[it + 1], alpha);
        wgmma_wait<0>();
        release(n);
        fence_o();
        fence_pa();
        rescale_and_pack(rescale, alpha);
      } else {
        wgmma_wait<0>();
        release(n);
        fence_o();
      }
    }
    used += total;
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
  const int row0 = cg * 64 + (warp & 3) * 16;
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
