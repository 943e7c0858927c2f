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

#include "kernels/cuda/fp8_tile.cuh"
#include "kernels/cuda/key_tile_list.cuh"
#include "kernels/cuda/kv_tile_copy.cuh"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/query_tile.cuh"
#include "kernels/cuda/prefill_sm80.hpp"
#include "kernels/cuda/sm80_primitives.cuh"
#include "kernels/cuda/softmax.cuh"

namespace bspa::kernels::sm80 {

constexpr int kKeyTile = cuda::kKeyTileTokens;
constexpr int kListCap = 2048;  // key tiles classified per pass (128k tokens)

// Four warps; a warp owns MT = BM / 64 m-tiles of 16 rows, so with 128-row tiles each K
// and V fragment read from shared memory feeds two mma (half the shared traffic per flop).
// KV: the page element type, T or uint8_t for e4m3 (fp8_tile.cuh: staged as bytes, widened
// in shared memory into the 16-bit tile the matrix code reads).
template <int D, int BM, class KV>
struct Config {
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kWarps = 4;
  static constexpr int MT = BM / 64;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row of Q and of 16-bit tiles
  static constexpr int kRowBytes = D * 2;
  static constexpr int kQBytes = BM * kRowBytes;
  static constexpr int kTileBytes = kKeyTile * kRowBytes;
  static constexpr int kPageRowBytes = D * static_cast<int>(sizeof(KV));  // a K/V row in the pages
  static constexpr int kKvChunks = kPageRowBytes / 16;                    // its 16-byte copies
  static constexpr int kStageBytes = kKeyTile * kPageRowBytes;
  static constexpr int kWidenBytes = kFp8 ? 2 * kTileBytes : 0;  // the widened K and V tiles
  static constexpr int kStages = 2;
  static constexpr int kPerThread = kListCap / kThreads;
  // + 1024: the base is rounded up to 1024 bytes so swizzled ldmatrix addresses are
  // base ^ constant (the chunk bits of every tile base are zero).
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kStageBytes + kWidenBytes + kListCap * 4 + 64 + 1024;
  static constexpr int kRowsPerPass = kThreads / kKvChunks;  // K/V rows one cp.async pass covers
  static_assert(kRowsPerPass % 8 == 0, "a pass covers whole swizzle groups");
};

template <class T, class KV, int D, int BM>
__global__ void __launch_bounds__(128, BM == 128 ? 2 : 3) prefill_sm80_kernel(const __grid_constant__ Params p) {
  using C = Config<D, BM, KV>;
#if __CUDA_ARCH__ >= 900
  // As in prefill_sm90_kernel: a mixed launch's decode grid may start on idle SMs.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  constexpr int SB = C::kStageBytes;
  extern __shared__ __align__(128) char smem_raw[];
  char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  char *sQ = smem;
  char *sK = sQ + C::kQBytes;
  char *sV = sK + C::kStages * SB;
  char *sKw = sV + C::kStages * SB;  // e4m3 pages: the widened tiles (kWidenBytes)
  char *sVw = sKw + C::kTileBytes;
  int32_t *sList = reinterpret_cast<int32_t *>(sV + C::kStages * SB + C::kWidenBytes);
  int32_t *sScan = sList + kListCap;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x;

  cuda::QueryTile tile;
  if (!cuda::locate_query_tile<BM>(p, tile)) return;
  const int seq = tile.seq, qs = tile.qs, q_len = tile.q_len, ctx = tile.ctx;
  const int t0 = tile.t0, t1 = tile.t1, p0 = tile.p0, p1 = tile.p1, qb0 = tile.qb0, qb1 = tile.qb1;
  const int kv_len = ctx + q_len;
  const int B = p.layout.block_size;
  const int kvh = h / p.group;
  const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
  const KV *kbase = static_cast<const KV *>(p.k) + static_cast<int64_t>(kvh) * p.k_head;
  const KV *vbase = static_cast<const KV *>(p.v) + static_cast<int64_t>(kvh) * p.v_head;
  // e4m3 pages: K's scale folds into the softmax scale, V's into the output (fp8_tile.cuh).
  const float scale_log2 = C::kFp8 ? p.scale_log2 * p.k_scale[kvh] : p.scale_log2;
  const float v_scale = C::kFp8 ? p.v_scale[kvh] : 1.f;
  const int page_mask = (1 << p.page_shift) - 1;

  // Q tile -> shared (rows past the sequence are zero).
  {
    const T *qbase =
        static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0) * p.q_tok + static_cast<int64_t>(h) * p.q_head;
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

  // K/V loads: this thread copies chunk kc of rows kr0 + i * kRowsPerPass of a tile; the
  // swizzle of those rows is the same (kRowsPerPass is a multiple of 8), so the shared
  // destinations are one offset plus immediates, and with pages of >= 64 tokens a tile
  // lies in one page: one block-table read per tile, sources one pointer plus a stride.
  // (e4m3: rows of D bytes, unswizzled: the widening reads them linearly.)
  constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KV));
  constexpr int kPassBytes = C::kRowsPerPass * C::kPageRowBytes;
  const int kr0 = tid / C::kKvChunks, kc = tid % C::kKvChunks;
  const uint32_t kv_dst0 = C::kFp8 ? static_cast<uint32_t>(kr0 * C::kPageRowBytes + kc * 16) : swz<D>(kr0, kc);
  const int64_t k_thr = static_cast<int64_t>(kr0) * p.k_tok + kc * kChunkElems;
  const int64_t v_thr = static_cast<int64_t>(kr0) * p.v_tok + kc * kChunkElems;
  const int64_t k_step = static_cast<int64_t>(C::kRowsPerPass) * p.k_tok;
  const int64_t v_step = static_cast<int64_t>(C::kRowsPerPass) * p.v_tok;
  const bool tile_in_page = p.page_shift >= 6;
  auto load_kv = [&](int entry, int stage) {
    const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile;
    const uint32_t dk = smem_addr(sK + stage * SB) + kv_dst0;
    const uint32_t dv = smem_addr(sV + stage * SB) + kv_dst0;
    constexpr int kPasses = kKeyTile / C::kRowsPerPass;
    if (tile_in_page) {
      const int64_t page = bt[k0 >> p.page_shift];
      const int slot0 = k0 & page_mask;
      const KV *ks = kbase + page * p.k_page + static_cast<int64_t>(slot0) * p.k_tok + k_thr;
      const KV *vs = vbase + page * p.v_page + static_cast<int64_t>(slot0) * p.v_tok + v_thr;
      cuda::copy_tile_in_page<kPasses, C::kRowsPerPass, kPassBytes>(dk, dv, ks, vs, k_step, v_step, k0, kr0, kv_len);
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int j = k0 + kr0 + i * C::kRowsPerPass;
        const bool valid = j < kv_len;
        const int64_t page = valid ? bt[j >> p.page_shift] : 0;
        const int64_t slot = j & page_mask;
        const KV *ks = kbase + page * p.k_page + slot * p.k_tok + kc * kChunkElems;
        const KV *vs = vbase + page * p.v_page + slot * p.v_tok + kc * kChunkElems;
        cp_async_16(dk + i * kPassBytes, valid ? ks : kbase, valid);
        cp_async_16(dv + i * kPassBytes, valid ? vs : vbase, valid);
      }
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

  // ldmatrix offsets. Row r's chunk c sits at r * kRowBytes + ((c ^ (r & 7)) << 4); every
  // row read here has r & 7 = lane & 7 and c = 2 * kk + x (x = 0 or 1), so the offset is
  // the kk = 0 offset ^ (kk * 32): four XOR variants (kk & 3) plus 128 bytes per 4 kk.
  constexpr int RB = C::kRowBytes;
  const uint32_t q_off = smem_addr(sQ) + (warp_row0 + (lane & 15)) * RB + (((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t k_off = (((lane >> 4) << 3) + (lane & 7)) * RB + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  const uint32_t v_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * RB + (((lane >> 4) ^ (lane & 7)) << 4);
  auto xo = [](uint32_t off, int kk) { return (off ^ static_cast<uint32_t>((kk & 3) * 32)) + (kk >> 2) * 128; };

  // Masked tiles: this thread's rows pr and which of the tile's query blocks they are in
  // (a division, so once per CTA rather than per masked tile).
  int row_lim[MT][2], row_qsel[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int pr = p0 + warp_row0 + mt * 16 + (lane >> 2) + rr * 8;
      row_lim[mt][rr] = pr - 2 * (lane & 3);  // key k0 + n is visible iff n <= row_lim - k0
      row_qsel[mt][rr] = pr / B - qb0;
    }

  for (int c0 = 0; c0 < n_kt; c0 += kListCap) {
    // 1. classify key tiles [c0, c1) and compact the visible ones into sList.
    const int c1 = min(n_kt, c0 + kListCap);
    const int total =
        cuda::list_key_tiles<C::kThreads, C::kPerThread>(p.layout, h, qb0, qb1, p0, B, c0, c1, sList, sScan);

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
      uint32_t tK = smem_addr(sK + stage * SB), tV = smem_addr(sV + stage * SB);
      if constexpr (C::kFp8) {
        // Every warp is past the previous tile's reads of the widened tiles (the barrier above).
        fp8::widen_e4m3_tile<T, D, kKeyTile, C::kThreads>(sK + stage * SB, sKw, tid);
        fp8::widen_e4m3_tile<T, D, kKeyTile, C::kThreads>(sV + stage * SB, sVw, tid);
        __syncthreads();
        tK = smem_addr(sKw);
        tV = smem_addr(sVw);
      }

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
          ldmatrix_x4(xo(q_off, kk) + mt * 16 * RB, a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(tK + xo(k_off, kk) + np * 16 * RB, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<T>(s[mt][2 * np], a[mt], b0, b1);
            mma_16816<T>(s[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }

      // Logits stay unscaled: scale > 0 (checked on the host) commutes with max, and the
      // exp2 below applies it in one FFMA.
      if (entry & cuda::kKeyTileMasked) {  // masked tile: token rule per element
        const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile;
        const unsigned bits = static_cast<unsigned>(entry) >> cuda::kKeyTileBlockShift;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            // A row outside the allowed query blocks sees nothing: limit -1.
            const int lim = ((bits >> row_qsel[mt][rr]) & 1u) ? row_lim[mt][rr] - k0 : -1;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (nt * 8 + e > lim) s[mt][nt][2 * rr + e] = -INFINITY;
          }
      }

      // Row maxima (tree reductions: with two warps per scheduler, 16-long dependent
      // chains stall), in scaled log2 units.
      float mx[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float t[8];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) t[nt] = fmaxf(s[mt][nt][2 * rr], s[mt][nt][2 * rr + 1]);
#pragma unroll
          for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
            for (int i = 0; i < w; ++i) t[i] = fmaxf(t[i], t[i + w]);
          float x = t[0];
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
          mx[mt][rr] = x * scale_log2;
        }
      // Lazy rescale (softmax.cuh).
      constexpr float kSlack = cuda::kSoftmaxSlack;
      bool grow = false;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) grow |= mx[mt][rr] > m[mt][rr] + kSlack;
      if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float m_new = fmaxf(m[mt][rr], mx[mt][rr]);
            const float alpha = m_new == -INFINITY ? 1.f : fast_exp2(m[mt][rr] - m_new);
            m[mt][rr] = m_new;
            l[mt][rr] *= alpha;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
              o[mt][dt][2 * rr] *= alpha;
              o[mt][dt][2 * rr + 1] *= alpha;
            }
          }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const float m_use = m[mt][rr] == -INFINITY ? 0.f : m[mt][rr];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              s[mt][nt][2 * rr + e] = fast_exp2(fmaf(s[mt][nt][2 * rr + e], scale_log2, -m_use));
          float t[8];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) t[nt] = s[mt][nt][2 * rr] + s[mt][nt][2 * rr + 1];
#pragma unroll
          for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
            for (int i = 0; i < w; ++i) t[i] += t[i + w];
          l[mt][rr] += t[0];
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
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(tV + xo(v_off, dp) + kk * 16 * RB, b0, b1, b2, b3);
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
  float inv[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float sum = l[mt][rr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[mt][rr] = sum > 0.f ? v_scale / sum : 0.f;
      const int t = t0 + warp_row0 + mt * 16 + (lane >> 2) + rr * 8;
      if (p.lse && (lane & 3) == 0 && t < t1)
        p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = cuda::row_lse(m[mt][rr], sum);
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

// The launch of one instantiation (explicitly instantiated per dtype in prefill_sm80_<dtype>.cu).
template <class T, class KV, int D, int BM>
void launch(const Params &p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = Config<D, BM, KV>::kSmemBytes;
  // The opt-in above 48 KiB is per device: once per device.
  cuda::allow_dynamic_smem<prefill_sm80_kernel<T, KV, D, BM>>(smem, "cudaFuncSetAttribute(prefill_sm80_kernel)");
  prefill_sm80_kernel<T, KV, D, BM><<<grid, Config<D, BM, KV>::kThreads, smem, stream>>>(p);
  cuda::check_launch("prefill_sm80_kernel", stream);
}

}  // namespace bspa::kernels::sm80
