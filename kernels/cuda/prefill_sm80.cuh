// The sm80 block-sparse paged prefill kernel (FlashAttention-2 style), instantiated per
// (element type, head dim, query tile rows) in prefill_sm80_<dtype>.cu.
//
// One CTA computes one query tile (BM rows of one sequence's new tokens) of one query
// head; each of the 4 warps owns BM/4 rows (one or two 16-row m-tiles). Per CTA:
//  1. the key tiles (64 tokens) the tile can see are listed in shared memory: a tile is
//     skipped when the layout allows none of its (query block, key block) pairs, marked
//     "full" when every row sees every key (no masking), else "masked" with the allowed
//     bits of the tile's (at most three) query blocks;
//  2. K and V of the listed tiles are gathered through the block table with cp.async
//     into a two-stage ring (16-byte chunks, XOR-swizzled so ldmatrix is conflict-free);
//  3. S = Q K^T and O += P V run on mma.sync m16n8k16 with fp32 accumulators; the
//     online softmax works in exp2 units of the scaled logits.
// Layout block sizes must be multiples of 64 (checked on the host), so a key tile lies in
// one key block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/cuda/sm80_primitives.cuh"

namespace bspa::kernels::sm80 {

constexpr int kKeyTile = 64;
constexpr int kListCap = 2048;  // key tiles classified per pass (128k tokens)

// Four warps; a warp owns MT = BM / 64 m-tiles of 16 rows, so with 128-row tiles each K
// and V fragment read from shared memory feeds two mma (half the shared traffic per flop).
template <int D, int BM>
struct Config {
  static constexpr int kWarps = 4;
  static constexpr int MT = BM / 64;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kQBytes = BM * kRowBytes;
  static constexpr int kTileBytes = kKeyTile * kRowBytes;
  static constexpr int kStages = 2;
  static constexpr int kPerThread = kListCap / kThreads;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kTileBytes + kListCap * 4 + 64;
};

// Byte offset of 16-byte chunk c of row r in a swizzled tile.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * D * 2 + ((c ^ (r & 7)) << 4));
}

template <class T, int D, int BM>
__global__ void __launch_bounds__(128, BM == 128 ? 2 : 3)
    prefill_sm80_kernel(const __grid_constant__ Params p) {
  using C = Config<D, BM>;
  extern __shared__ __align__(128) char smem[];
  char *sQ = smem;
  char *sK = sQ + C::kQBytes;
  char *sV = sK + C::kStages * C::kTileBytes;
  int32_t *sList = reinterpret_cast<int32_t *>(sV + C::kStages * C::kTileBytes);
  int32_t *sScan = sList + kListCap;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x;

  int seq, t0;
  if (p.work) {
    const int sub = p.work_tile_rows / BM;
    const WorkItem w = p.work[blockIdx.y / sub];
    seq = w.seq;
    t0 = w.q_begin + (sub - 1 - static_cast<int>(blockIdx.y % sub)) * BM;  // later rows first
    if (t0 >= w.q_end) return;
  } else {
    seq = blockIdx.z;
    t0 = (gridDim.y - 1 - blockIdx.y) * BM;  // late (heavy) tiles first
  }
  const int qs = p.query_starts[seq];
  const int q_len = p.query_starts[seq + 1] - qs;
  if (t0 >= q_len) return;
  const int t1 = min(q_len, t0 + BM);
  const int ctx = p.context_lens[seq];
  const int kv_len = ctx + q_len;
  const int p0 = ctx + t0, p1 = ctx + t1 - 1;
  const int B = p.layout.block_size;
  const int qb0 = p0 / B, qb1 = p1 / B;
  const int kvh = h / p.group;
  const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
  const T *kbase = static_cast<const T *>(p.k) + static_cast<int64_t>(kvh) * p.k_head;
  const T *vbase = static_cast<const T *>(p.v) + static_cast<int64_t>(kvh) * p.v_head;
  const int page_mask = (1 << p.page_shift) - 1;

  // Q tile -> shared (rows past the sequence are zero).
  {
    const T *qbase = static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0) * p.q_tok +
                     static_cast<int64_t>(h) * p.q_head;
#pragma unroll
    for (int i = 0; i < BM * C::kChunks / C::kThreads; ++i) {
      const int idx = tid + i * C::kThreads;
      const int r = idx / C::kChunks, c = idx % C::kChunks;
      const bool valid = t0 + r < t1;
      const T *src = valid ? qbase + static_cast<int64_t>(r) * p.q_tok + c * 8 : qbase;
      cp_async_16(smem_addr(sQ) + swz<D>(r, c), src, valid);
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
      cp_async_16(dk + swz<D>(r, c), valid ? ks : kbase, valid);
      cp_async_16(dv + swz<D>(r, c), valid ? vs : vbase, valid);
    }
  };

  constexpr int MT = C::MT;
  float o[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;

  // This thread's rows in the tile: warp_row0 + mt * 16 + (lane >> 2) + rr * 8.
  const int warp_row0 = warp * 16 * MT;
  const int n_kt = p1 / kKeyTile + 1;

  for (int c0 = 0; c0 < n_kt; c0 += kListCap) {
    // 1. classify key tiles [c0, c1) and compact the visible ones into sList.
    const int c1 = min(n_kt, c0 + kListCap);
    int entries[C::kPerThread];
    int count = 0;
#pragma unroll
    for (int i = 0; i < C::kPerThread; ++i) {
      const int kt = c0 + tid * C::kPerThread + i;
      entries[i] = -1;
      if (kt < c1) {
        const int k0 = kt * kKeyTile;
        const int kb = k0 / B;
        unsigned bits = 0;
        bool all = true;
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          const int qb = qb0 + j;
          if (qb <= qb1) {
            const bool a = p.layout.allowed(h, qb, kb);
            bits |= static_cast<unsigned>(a) << j;
            all = all && a;
          }
        }
        if (bits) {
          const bool full = all && k0 + kKeyTile - 1 <= p0;
          entries[i] = kt | (full ? 0 : (1 << 28)) | static_cast<int>(bits << 29);
          ++count;
        }
      }
    }
    int incl = count;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    if (lane == 31) sScan[warp] = incl;
    __syncthreads();
    int base = 0, total = 0;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) {
      const int s = sScan[w];
      base += w < warp ? s : 0;
      total += s;
    }
    int pos = base + incl - count;
#pragma unroll
    for (int i = 0; i < C::kPerThread; ++i)
      if (entries[i] != -1) sList[pos++] = entries[i];
    __syncthreads();

    // 2-3. the pipeline over the listed tiles.
    if (total > 0) load_kv(sList[0], 0);
    cp_async_commit();
    for (int it = 0; it < total; ++it) {
      cp_async_wait<0>();
      __syncthreads();
      const int entry = sList[it];
      if (it + 1 < total) load_kv(sList[it + 1], (it + 1) & 1);
      cp_async_commit();
      const int stage = it & 1;
      const char *tK = sK + stage * C::kTileBytes;
      const char *tV = sV + stage * C::kTileBytes;

      float s[MT][8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int r = warp_row0 + mt * 16 + (lane & 15);
          ldmatrix_x4(smem_addr(sQ) + swz<D>(r, kk * 2 + (lane >> 4)), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          const int key = np * 16 + ((lane >> 4) << 3) + (lane & 7);
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(smem_addr(tK) + swz<D>(key, kk * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<T>(s[mt][2 * np], a[mt], b0, b1);
            mma_16816<T>(s[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }

      // Logits stay unscaled: scale > 0 (checked on the host) commutes with max, and the
      // exp2 below applies it in one FFMA.
      if (entry & (1 << 28)) {  // masked tile: token rule per element
        const int k0 = (entry & 0x0FFFFFFF) * kKeyTile;
        const unsigned bits = static_cast<unsigned>(entry) >> 29;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const int pr = p0 + warp_row0 + mt * 16 + (lane >> 2) + rr * 8;
            const bool ok = (bits >> (pr / B - qb0)) & 1u;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int j = k0 + nt * 8 + 2 * (lane & 3) + e;
                if (!ok || j > pr) s[mt][nt][2 * rr + e] = -INFINITY;
              }
          }
      }

#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          // Tree reductions: with two warps per scheduler, 16-long dependent chains stall.
          float t[8];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) t[nt] = fmaxf(s[mt][nt][2 * rr], s[mt][nt][2 * rr + 1]);
#pragma unroll
          for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
            for (int i = 0; i < w; ++i) t[i] = fmaxf(t[i], t[i + w]);
          float mx = t[0];
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m[mt][rr], mx * p.scale_log2);  // m: scaled, log2 units
          const float m_use = m_new == -INFINITY ? 0.f : m_new;
          const float alpha = fast_exp2(m[mt][rr] - m_use);
          m[mt][rr] = m_new;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              s[mt][nt][2 * rr + e] = fast_exp2(fmaf(s[mt][nt][2 * rr + e], p.scale_log2, -m_use));
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) t[nt] = s[mt][nt][2 * rr] + s[mt][nt][2 * rr + 1];
#pragma unroll
          for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
            for (int i = 0; i < w; ++i) t[i] += t[i + w];
          l[mt][rr] = l[mt][rr] * alpha + t[0];
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) {
            o[mt][dt][2 * rr] *= alpha;
            o[mt][dt][2 * rr + 1] *= alpha;
          }
        }

#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          const int key = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(smem_addr(tV) + swz<D>(key, dp * 2 + (lane >> 4)), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<T>(o[mt][2 * dp], a[mt], b0, b1);
            mma_16816<T>(o[mt][2 * dp + 1], a[mt], b2, b3);
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // sList and the stages are rewritten by the next pass
  }

  // Epilogue: normalise, stage this warp's rows in its own part of sQ, store 16 bytes a lane.
  constexpr float kLn2 = 0.69314718055994530942f;
  float inv[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float sum = l[mt][rr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[mt][rr] = sum > 0.f ? 1.f / sum : 0.f;
      const int t = t0 + warp_row0 + mt * 16 + (lane >> 2) + rr * 8;
      if (p.lse && (lane & 3) == 0 && t < t1)
        p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = sum > 0.f ? m[mt][rr] * kLn2 + logf(sum) : -INFINITY;
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = warp_row0 + mt * 16 + (lane >> 2) + rr * 8;
        const int col = dt * 8 + 2 * (lane & 3);
        *reinterpret_cast<uint32_t *>(sQ + swz<D>(r, col >> 3) + (col & 7) * 2) =
            pack2<T>(o[mt][dt][2 * rr] * inv[mt][rr], o[mt][dt][2 * rr + 1] * inv[mt][rr]);
      }
  __syncwarp();
  T *obase = static_cast<T *>(p.out) + static_cast<int64_t>(qs + t0) * p.o_tok + static_cast<int64_t>(h) * p.o_head;
#pragma unroll
  for (int i = 0; i < 16 * MT * C::kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = warp_row0 + idx / C::kChunks, c = idx % C::kChunks;
    if (t0 + r < t1)
      *reinterpret_cast<uint4 *>(obase + static_cast<int64_t>(r) * p.o_tok + c * 8) =
          *reinterpret_cast<const uint4 *>(sQ + swz<D>(r, c));
  }
}

}  // namespace bspa::kernels::sm80
