// The decode kernel: attention of the few new tokens of a sequence (q <= 8) over its paged
// K/V, with the query rows of a whole KV group in one tile (decode.hpp). Instantiated per
// (element type, head dim) in decode_<dtype>.cu; runs on every sm80+ GPU (mma.sync).
//
// One CTA = 4 warps (or 2 or 3 quads of 4: Config's kQuads) computes item (sequence, KV
// head), key split s (blockIdx x, y, z = split, KV head, sequence). Its rows are
// r = t * group + g (new token t, head g of the group), padded to 16 x WR rows; the warps
// form WR row groups of 16 rows times 4 / WR key groups, each key group computing its
// share of every 64-token key tile, so all four warps work even for a single row. Per CTA:
//  1. the key tiles of its split are listed: a tile is skipped when no head of the group
//     may see its block from the rows' query blocks (the union over the group), "full" when
//     every row sees every key, else masked per row (token rule and the row's head);
//  2. K and V of the listed tiles stream through a ring of kStages cp.async stages (deep
//     enough to keep the loads of two CTAs per SM in flight: the kernel is memory bound);
//     e4m3 pages stay bytes in shared memory and are widened in registers as the matrix
//     fragments are loaded (below: "e4m3 fragments");
//  3. S = Q K^T and O += P V on mma.sync m16n8k16 with each warp's own online softmax (or,
//     for launches of at most 8 rows, the transposed S^T = K Q^T and O^T += V^T P^T, whose
//     8-column N side holds the rows without padding: decode_item's kNarrow);
//  4. the key groups' partial states are merged in shared memory; with one split the rows
//     are normalised and stored (and their lse), otherwise the CTA stores its unit and the
//     item's last CTA to finish combines the item's units (merge_units), or, where the
//     item's splits are one thread-block cluster (Split::cluster), the cluster's CTAs
//     combine them from each other's shared memory.
// The same layout block-size rule as the prefill kernels holds (multiples of 64, checked on
// the host), so a key tile lies in one key block; q <= 8 rows span at most two query blocks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/decode.hpp"
#include "kernels/cuda/fp8_tile.cuh"
#include "kernels/cuda/key_tile_list.cuh"
#include "kernels/cuda/kv_tile_copy.cuh"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/sm80_primitives.cuh"
#include "kernels/cuda/sm90_primitives.cuh"
#include "kernels/cuda/softmax.cuh"

namespace bspa::kernels::decode {

using sm80::cp_async_16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::fast_exp2;
using sm80::ldmatrix_x4;
using sm80::ldmatrix_x4_trans;
using sm80::mma_16816;
using sm80::movmatrix_trans;
using sm80::pack2;
using sm80::smem_addr;
using sm80::swz;

constexpr int kKeyTile = cuda::kKeyTileTokens;

// KV: the page element type, T or uint8_t for e4m3 (fp8_tile.cuh: staged as bytes, widened
// in shared memory into the 16-bit tile the matrix code reads).
// kQuads: groups of four warps in the CTA, each with its own ring, quad q taking listed
// tiles q, q + kQuads, ... in step with the others (the key groups of every quad are merged
// at the end). Several for launches of one CTA an SM (Split::quads): alone on its SM, one
// quad's four warps (one a scheduler) issue a tile's ~400 dependent instructions at about
// one every six cycles, so a tile took ~1 us whatever the memory did (ncu, bench/NOTES.md
// "CUDA decode", session 12); a second quad fills those cycles. Three (e4m3 pages, at most 8
// rows) for grids whose one-quad CTAs would leave their last wave mostly idle: the warps of
// three one-quad CTAs in one slot (decode_split_plan.hpp, plan_decode_shape).
template <int D, int WR, class KV, int kQuads = 1>
struct Config {
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kQuadThreads = 128;
  static constexpr int kThreads = kQuadThreads * kQuads;
  static constexpr int kKeyWarps = 4 / WR;  // key groups of a quad
  static constexpr int kKeyGroups = kKeyWarps * kQuads;
  static constexpr int kRows = 16 * WR;
  static constexpr int kWarpKeys = kKeyTile / kKeyWarps;  // keys of a tile one warp computes
  static constexpr int kRowBytes = D * 2;                 // of Q and of the 16-bit K/V tiles
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kTileBytes = kKeyTile * kRowBytes;
  static constexpr int kPageRowBytes = D * static_cast<int>(sizeof(KV));  // a K/V row in the pages
  static constexpr int kChunks = kPageRowBytes / 16;                      // its 16-byte copies
  static constexpr int kStageBytes = kKeyTile * kPageRowBytes;
  // Two CTAs per SM keep 2 x (kStages - 1) tiles of K and V in flight: 128 KB at D = 128;
  // e4m3 stages are half the bytes and (with no 16-bit tile to widen into) three CTAs fit
  // an SM: 3 x 3 tiles of 16 KB.
  static constexpr int kStages = kFp8 ? (D == 128 ? 4 : 6) : (D == 128 ? 3 : 4);
  // The launch bounds' CTAs an SM (decode_variant.hpp).
  static constexpr int kCtasPerSm = kQuads > 1 ? 1 : ctas_per_sm(kFp8, 16 * WR);
  static constexpr int kListCap = 1024;  // key tiles classified per pass (64k tokens)
  // Rounded up: 384 threads (three quads) do not divide kListCap, and compact_key_tiles
  // needs kThreads * kPerThread >= the tiles of a pass.
  static constexpr int kPerThread = (kListCap + kThreads - 1) / kThreads;
  // A chunk column's threads of a quad: a tile's rows over them are kKeyTile / kRowsPerPass
  // consecutive rows a thread (decode_item's kPasses).
  static constexpr int kRowsPerPass = kQuadThreads / kChunks;
  static constexpr int kRingBytes = 2 * kStages * kStageBytes;  // a quad's K and V stages
  // The key groups' partial states after the loop, in the (then idle) stage rings.
  static constexpr int kReduceBytes = kKeyGroups * kRows * (D + 2) * 4;
  // (+ kRows ints: the e4m3 path's per-row Q exponent shifts, after the listing's scratch.)
  static constexpr int kSmemBytes = kQBytes + kQuads * kRingBytes + kListCap * 4 + 64 + kRows * 4 + 1024;
  static_assert(kReduceBytes <= kQuads * kRingBytes, "the reduction must fit in the stage rings");
  static_assert(kThreads / 32 <= 16, "the listing's scratch holds a count per warp");
  static_assert(kWarpKeys % 16 == 0, "a warp's keys are whole k-steps of the PV product");
  static_assert(kKeyTile % kRowsPerPass == 0, "a tile's rows divide evenly over a chunk column's threads");
};

// Combines the split units of one item (sequence, KV head): its splits' units, every one
// written for all `rows` rows (an empty split stores zeros and a zero sum); load_unit(u, r,
// col, st, v) reads unit u's statistics of row r and its columns col..col + 3. Latency bound
// (a few KB an item) and on the launch's critical path (the last CTA of the last item
// merges after everything else), so a thread takes four columns of a row and loads the
// statistics and outputs of 16 units at once, folding its row's statistics itself: one
// round trip per 16 units, no pass for the statistics and no barrier. The (row, four
// columns) slots first, first + step, ... are this thread's: the item's last CTA takes
// them all (first = threadIdx.x, step = blockDim.x); a cluster's CTAs share them.
template <class T, int D, class LoadUnit>
__device__ __forceinline__ void merge_units(const cuda::AttentionParams &p, const Split &split, int rows, int G, int qs,
                                            int kvh, int first, int step, LoadUnit &&load_unit) {
  constexpr int kBatch = 16;
  const int S = split.splits;
  for (int idx = first; idx < rows * (D / 4); idx += step) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    // merge_row_stats' rule (softmax.cuh), folded online kBatch units a step: with S <= kBatch
    // one step, the max over the units that saw keys and their rescaled sums.
    float m = -INFINITY, l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int u0 = 0; u0 < S; u0 += kBatch) {
      float2 st[kBatch];
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int u = u0 + j;
        st[j] = make_float2(-INFINITY, 0.f);
        v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (u < S) load_unit(u, r, col, st[j], v[j]);
      }
      float m_new = m;
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (st[j].y > 0.f) m_new = fmaxf(m_new, st[j].x);
      if (m_new != m && m != -INFINITY) {  // rescale what the earlier units gave
        const float a = exp2f(m - m_new);
        l *= a, acc.x *= a, acc.y *= a, acc.z *= a, acc.w *= a;
      }
      m = m_new;
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (st[j].y > 0.f) {
          const float w = exp2f(st[j].x - m);
          l = fmaf(st[j].y, w, l);
          acc.x = fmaf(v[j].x, w, acc.x);
          acc.y = fmaf(v[j].y, w, acc.y);
          acc.z = fmaf(v[j].z, w, acc.z);
          acc.w = fmaf(v[j].w, w, acc.w);
        }
    }
    const int t = r / G, h = kvh * G + (r - t * G);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    T *dst =
        static_cast<T *>(p.out) + static_cast<int64_t>(qs + t) * p.o_tok + static_cast<int64_t>(h) * p.o_head + col;
    *reinterpret_cast<uint2 *>(dst) =
        make_uint2(pack2<T>(acc.x * inv, acc.y * inv), pack2<T>(acc.z * inv, acc.w * inv));
    if (p.lse && col == 0) p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = cuda::row_lse(m, l);
  }
}

// griddepcontrol.wait (compute capability 9.0+; nothing to wait for before it).
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether some head (bit 0) and every head (bit 1) of h0 .. h0 + G - 1 may see key block kb
// from query blocks qb_lo .. qb_hi, by each head's rule: for the layouts without a folded
// group form (CSR, strides over 32). Not inlined: the listing classifies several tiles a
// thread, unrolled, and this loop inlined into each made the kernel's start twice as long.
static __device__ __noinline__ unsigned group_sees_block(const cuda::DeviceLayout &layout, int h0, int G, int qb_lo,
                                                         int qb_hi, int kb) {
  bool any = false, all = true;
  for (int g = 0; g < G; ++g)
    for (int qb = qb_lo; qb <= qb_hi; ++qb) {
      const bool a = layout.allowed(h0 + g, qb, kb);
      any = any || a;
      all = all && a;
    }
  return (any ? 1u : 0u) | (all ? 2u : 0u);
}

// One CTA's (sequence, KV head, key split) item; returns early for CTAs with no rows.
// kConsecutiveRows: how a thread's copies spread over a key tile under pages of fewer than
// 64 tokens (the K/V loads below).
// kNarrow: launches of at most 8 rows (one new token at GQA up to 8, the common decode)
// compute the tile transposed, S^T = K Q^T and O^T = V^T P^T: the warp's 16 keys and 16
// output columns are the mma's M rows and the query rows its 8 N columns, so no mma works
// on the 8 padding rows the 16-row M side carried (half the mma instructions, half the
// softmax and half the output registers); P^T's accumulator pairs become the B fragments
// of the second product by one movmatrix each.
template <class T, class KV, int D, int WR, int kQuads, bool kConsecutiveRows, bool kNarrow>
__device__ __forceinline__ void decode_item(const cuda::AttentionParams &p, const Split &split) {
  using C = Config<D, WR, KV, kQuads>;
  static_assert(!kNarrow || (WR == 1 && C::kWarpKeys == 16), "a narrow warp's keys are one 16-row M tile");
  constexpr int S = C::kStages, KW = C::kWarpKeys, RB = C::kRowBytes, SB = C::kStageBytes;
  extern __shared__ __align__(128) char smem_raw[];
  char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // This thread's quad and its place in it (with one quad, known to the compiler).
  const int quad = kQuads == 1 ? 0 : warp >> 2, qtid = kQuads == 1 ? tid : tid & (C::kQuadThreads - 1);
  char *sQ = smem;
  char *sRings = sQ + C::kQBytes;
  char *sK = sRings + quad * C::kRingBytes;  // this quad's ring
  char *sV = sK + S * SB;
  int32_t *sList = reinterpret_cast<int32_t *>(sRings + kQuads * C::kRingBytes);
  int32_t *sScan = sList + C::kListCap;
  int32_t *sRowShift = sScan + 16;  // [kRows]: Q's exponent shift per row (e4m3 path with f16 operands)

  const int quad_warp = kQuads == 1 ? warp : warp & 3;
  const int wr = quad_warp % WR, wk = quad_warp / WR;  // this warp's row group and key group in its quad
  const int split_idx = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  // The three metadata loads at once: the context is part of the exit test (a negative one
  // is no sequence either), evaluated without short-circuit, so the compiler cannot sink its
  // load below the test: one round trip to memory at the CTA's start instead of two.
  const int qs = p.query_starts[seq];
  const int q_end = p.query_starts[seq + 1];
  const int ctx = p.context_lens[seq];
  const int q_len = q_end - qs;
  if ((q_len == 0) | (q_len > p.decode_max_query_len) | (ctx < 0)) return;  // no rows, or the prefill kernel's
  const int kv_len = ctx + q_len;
  const int G = p.group;
  const int rows = q_len * G;
  // The host picks WR from the launch's largest rows; a sequence past it (max_query_len
  // understated by the caller) is left unwritten rather than overrunning the tile.
  if (rows > split.rows) return;
  const int B = p.layout.block_size;
  const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
  const KV *kbase = static_cast<const KV *>(p.k) + static_cast<int64_t>(kvh) * p.k_head;
  const KV *vbase = static_cast<const KV *>(p.v) + static_cast<int64_t>(kvh) * p.v_head;
  // e4m3 pages: K's scale folds into the softmax scale, V's into the output (fp8_tile.cuh).
  const float scale_log2 = C::kFp8 ? p.scale_log2 * p.k_scale[kvh] : p.scale_log2;
  // The mma type. e4m3 pages on compute capability 8.9+ compute in f16 whatever q's type:
  // the hardware converts e4m3 pairs to f16 pairs in one instruction (widening to bf16
  // took about five, and was most of the fp8 kernel's instructions). K and V are exact in
  // f16; P in [0, 1] keeps more bits than in bf16; bf16 Q rows are scaled by a power of two
  // into f16's range first (exact: bf16 has fewer significant bits), the shift undone in
  // the row's softmax scale.
#if __CUDA_ARCH__ >= 890
  constexpr bool kHwWiden = C::kFp8;
#else
  constexpr bool kHwWiden = false;
#endif
  using MT = std::conditional_t<kHwWiden, __half, T>;
  constexpr bool kQToF16 = kHwWiden && !std::is_same_v<T, __half>;
  // Four e4m3 values (byte 0 first) -> two registers of two MT operands.
  auto widen = [](uint32_t w, uint32_t &lo, uint32_t &hi) {
    if constexpr (kHwWiden)
      fp8::convert_e4m3x4_f16(w, lo, hi);
    else
      fp8::widen_e4m3x4<T>(w, lo, hi);
  };
  const float v_scale = C::kFp8 ? p.v_scale[kvh] : 1.f;
  const int page_mask = (1 << p.page_shift) - 1;

  // Q rows -> shared (padding rows zero).
  // e4m3 pages: Q is read into registers, converted and stored by every thread (a generic
  // lambda: only e4m3 kernels instantiate it). Where Q's fragments then stay in registers
  // (kLateQ), the first pass stores Q after issuing its first K/V copies, so the copies'
  // page-table reads and their memory latency no longer wait behind Q's own round trip.
  constexpr bool kLateQ = C::kFp8 && (kQuads > 1 || kNarrow);
  auto write_q_e4m3 = [&](auto) {
    // e4m3 fragments (below) give each thread K's head-dim elements in the order they lie in
    // a 128-bit load, not in mma's k order, so Q is stored with its columns permuted to
    // match: thread (row, m, c) moves columns 64m + 16c .. + 15 as eight pairs; pair 2w of
    // them becomes u32 slot c of k-step 4m + w's first 8-column chunk, pair 2w + 1 slot c of
    // its second (mma k = 2c, 2c + 1 and 2c + 8, 2c + 9 of that step).
    const T *q = static_cast<const T *>(p.q);
    constexpr int kPerRow = D / 16;  // (m, c) pairs
                                     // (D = 64 with 16 rows: 64 (row, m, c) triples, half the threads.)
#pragma unroll
    for (int idx = tid; idx < C::kRows * kPerRow; idx += C::kThreads) {
      const int r = idx / kPerRow, m = (idx % kPerRow) >> 2, c = idx & 3;
      uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
      if (r < rows) {
        const int t = r / G, g = r - t * G;
        const T *src =
            q + static_cast<int64_t>(qs + t) * p.q_tok + static_cast<int64_t>(kvh * G + g) * p.q_head + 64 * m + 16 * c;
        lo = *reinterpret_cast<const uint4 *>(src);
        hi = *reinterpret_cast<const uint4 *>(src + 8);
      }
      uint32_t pairs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      if constexpr (kQToF16) {
        // The row's largest |q| (its kPerRow threads are consecutive lanes of one warp, and
        // whole warps run this loop) sets the shift that brings it into [2^14, 2^15).
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&pairs[i]));
          amax = fmaxf(amax, fmaxf(fabsf(x.x), fabsf(x.y)));
        }
#pragma unroll
        for (int off = 1; off < kPerRow; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const int shift = fp8::q_row_shift(amax);
        const float f = __uint_as_float(static_cast<uint32_t>(shift + 127) << 23);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&pairs[i]));
          const __half2 h = __floats2half2_rn(x.x * f, x.y * f);
          pairs[i] = *reinterpret_cast<const uint32_t *>(&h);
        }
        if (idx % kPerRow == 0) sRowShift[r] = shift;
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int kk = 4 * m + w;
        *reinterpret_cast<uint32_t *>(sQ + swz<D>(r, 2 * kk) + 4 * c) = pairs[2 * w];
        *reinterpret_cast<uint32_t *>(sQ + swz<D>(r, 2 * kk + 1) + 4 * c) = pairs[2 * w + 1];
      }
    }
  };
  if constexpr (C::kFp8) {
    if constexpr (!kLateQ) write_q_e4m3(0);
    cp_async_commit();  // an empty group: the ring's wait counts stay those of the 16-bit path
  } else {
    const T *q = static_cast<const T *>(p.q);
#pragma unroll
    for (int i = 0; i < (C::kRows * (D / 8) + C::kThreads - 1) / C::kThreads; ++i) {
      const int idx = tid + i * C::kThreads;
      if (C::kRows * (D / 8) % C::kThreads != 0 && idx >= C::kRows * (D / 8)) break;
      const int r = idx / (D / 8), c = idx % (D / 8);
      const bool valid = r < rows;
      const int t = r / G, g = r - t * G;
      const T *src =
          valid ? q + static_cast<int64_t>(qs + t) * p.q_tok + static_cast<int64_t>(kvh * G + g) * p.q_head + c * 8 : q;
      cp_async_16(smem_addr(sQ) + swz<D>(r, c), src, valid);
    }
    cp_async_commit();
  }

  // K/V loads of one key tile into a stage, two ways (kConsecutiveRows picks one at compile
  // time; both are the same under pages of 64 tokens or more, a tile inside one page):
  //  - strided (fetch_pages_strided / load_kv_strided): thread (kr0, kc) copies chunk kc of
  //    rows kr0 + i * kRowsPerPass, i < kPasses, the passes a constant offset apart in the
  //    swizzled tile (a pass is 16 or 32 rows, whole periods of both swizzles); under pages
  //    of fewer than 64 tokens each pass finds its own page.
  //  - consecutive (fetch_pages_consecutive / load_kv_consecutive): under pages of fewer
  //    than 64 tokens the thread copies consecutive rows kr0 * kPasses + i, so with pages of
  //    at least kPasses tokens (8 at D 128 over 16-bit pages, 4 or 2 over e4m3 pages) it
  //    reads one block-table entry and builds one 64-bit address a tile instead of one a pass
  //    (eight at 16-token pages); pages under kPasses tokens read an entry a row.
  // 16-bit pages always take the consecutive way. e4m3 pages take it under pages of fewer
  // than 64 tokens only (launch): there it sped them up 2-8%, but compiled into the kernel of
  // 64-token pages it slowed those 0.5-7%, the one-quad e4m3 kernel sitting at its
  // 170-register bound (bench/NOTES.md, "CUDA decode", session 12). Each way's code is the
  // one measured in session 12 (f71bf01's strided e4m3 kernels, 1091588's consecutive ones).
  // The entries are read a tile ahead of the copies (fetch_pages), so the table's latency
  // hides behind a tile of work.
  constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KV));
  const int kr0 = qtid / C::kChunks, kc = qtid % C::kChunks;
  // A row's swizzled destination: sm80::swz rows, or fp8::e4m3_swz for e4m3 bytes.
  auto swizzled = [&](int r) -> uint32_t {
    if constexpr (C::kFp8)
      return fp8::e4m3_swz<D>(r, kc);
    else
      return swz<D>(r, kc);
  };
  const uint32_t kv_dst0 = swizzled(kr0);
  constexpr int kPassBytes = C::kRowsPerPass * C::kPageRowBytes;
  const int64_t k_thr = static_cast<int64_t>(kr0) * p.k_tok + kc * kChunkElems;
  const int64_t v_thr = static_cast<int64_t>(kr0) * p.v_tok + kc * kChunkElems;
  const int64_t k_step = static_cast<int64_t>(C::kRowsPerPass) * p.k_tok;
  const int64_t v_step = static_cast<int64_t>(C::kRowsPerPass) * p.v_tok;
  // e4m3 pages take a kernel per page class (launch_rows): the strided one only under pages
  // of 64 tokens or more, the consecutive one only under smaller pages, so theirs is known
  // here and the other class's copies are not compiled into their loops.
  const bool tile_in_page = C::kFp8 ? !kConsecutiveRows : p.page_shift >= 6;
  constexpr int kPasses = kKeyTile / C::kRowsPerPass;
  // A tile inside one page (pages of 64 tokens or more), either way: rows kr0 + i *
  // kRowsPerPass from `page` into the stage at dk / dv (this thread's first destinations).
  auto load_whole_tile = [&](int k0, uint32_t dk, uint32_t dv, int64_t page) {
    const int slot0 = k0 & page_mask;
    const KV *ks = kbase + page * p.k_page + static_cast<int64_t>(slot0) * p.k_tok + k_thr;
    const KV *vs = vbase + page * p.v_page + static_cast<int64_t>(slot0) * p.v_tok + v_thr;
    cuda::copy_tile_in_page<kPasses, C::kRowsPerPass, kPassBytes>(dk, dv, ks, vs, k_step, v_step, k0, kr0, kv_len);
  };
  auto fetch_pages_strided = [&](int entry, int(&pages)[kPasses]) {
    const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile;
    if (tile_in_page) {
      pages[0] = bt[k0 >> p.page_shift];
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int j = k0 + kr0 + i * C::kRowsPerPass;
        pages[i] = j < kv_len ? bt[j >> p.page_shift] : 0;
      }
    }
  };
  auto load_kv_strided = [&](int entry, int stage, const int(&pages)[kPasses]) {
    const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile;
    const uint32_t dk = smem_addr(sK + stage * SB) + kv_dst0;
    const uint32_t dv = smem_addr(sV + stage * SB) + kv_dst0;
    if (tile_in_page) {
      load_whole_tile(k0, dk, dv, pages[0]);
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int j = k0 + kr0 + i * C::kRowsPerPass;
        const bool valid = j < kv_len;
        const int64_t page = pages[i];
        const int64_t slot = j & page_mask;
        const KV *ks = kbase + page * p.k_page + slot * p.k_tok + kc * kChunkElems;
        const KV *vs = vbase + page * p.v_page + slot * p.v_tok + kc * kChunkElems;
        cp_async_16(dk + i * kPassBytes, valid ? ks : kbase, valid);
        cp_async_16(dv + i * kPassBytes, valid ? vs : vbase, valid);
      }
    }
  };

  // Consecutive rows under pages of fewer than 64 tokens: rows row0 + i.
  const int row0 = kr0 * kPasses;
  const bool one_page = (1 << p.page_shift) >= kPasses;
  auto fetch_pages_consecutive = [&](int entry, int(&pages)[kPasses]) {
    const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile, j0 = k0 + row0;
    if (tile_in_page) {
      pages[0] = bt[k0 >> p.page_shift];
    } else if (one_page) {
      pages[0] = j0 < kv_len ? bt[j0 >> p.page_shift] : 0;
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) pages[i] = j0 + i < kv_len ? bt[(j0 + i) >> p.page_shift] : 0;
    }
  };
  auto load_kv_consecutive = [&](int entry, int stage, const int(&pages)[kPasses]) {
    const int k0 = (entry & cuda::kKeyTileIndexMask) * kKeyTile, j0 = k0 + row0;
    const uint32_t sk = smem_addr(sK + stage * SB), sv = smem_addr(sV + stage * SB);
    if (tile_in_page) {
      load_whole_tile(k0, sk + kv_dst0, sv + kv_dst0, pages[0]);
    } else if (one_page) {
      const int64_t page = pages[0], slot0 = j0 & page_mask;
      const KV *ks = kbase + page * p.k_page + slot0 * p.k_tok + kc * kChunkElems;
      const KV *vs = vbase + page * p.v_page + slot0 * p.v_tok + kc * kChunkElems;
#pragma unroll
      for (int i = 0; i < kPasses; ++i, ks += p.k_tok, vs += p.v_tok) {
        const bool valid = j0 + i < kv_len;  // zero-filled past the end
        cp_async_16(sk + swizzled(row0 + i), valid ? ks : kbase, valid);
        cp_async_16(sv + swizzled(row0 + i), valid ? vs : vbase, valid);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const bool valid = j0 + i < kv_len;
        const int64_t page = pages[i], slot = (j0 + i) & page_mask;
        const KV *ks = kbase + page * p.k_page + slot * p.k_tok + kc * kChunkElems;
        const KV *vs = vbase + page * p.v_page + slot * p.v_tok + kc * kChunkElems;
        cp_async_16(sk + swizzled(row0 + i), valid ? ks : kbase, valid);
        cp_async_16(sv + swizzled(row0 + i), valid ? vs : vbase, valid);
      }
    }
  };

  auto fetch_pages = [&](int entry, int(&pages)[kPasses]) {
    if constexpr (kConsecutiveRows)
      fetch_pages_consecutive(entry, pages);
    else
      fetch_pages_strided(entry, pages);
  };
  auto load_kv = [&](int entry, int stage, const int(&pages)[kPasses]) {
    if constexpr (kConsecutiveRows)
      load_kv_consecutive(entry, stage, pages);
    else
      load_kv_strided(entry, stage, pages);
  };

  // This thread's two rows: mma fragment rows lane / 4 and lane / 4 + 8 of its row group,
  // or (kNarrow) fragment columns 2 (lane % 4) and + 1.
  auto fragment_row = [&](int rr) { return kNarrow ? 2 * (lane & 3) + rr : wr * 16 + (lane >> 2) + rr * 8; };
  // Their position, head and query block; padding rows see nothing.
  int row_pos[2], row_head[2], row_qb[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = fragment_row(rr);
    const int t = r / G;
    row_pos[rr] = r < rows ? ctx + t : -1;
    row_head[rr] = kvh * G + (r - t * G);
    row_qb[rr] = r < rows ? row_pos[rr] / B : 0;
  }
  // A key tile is listed when some head of the group may see its block from the query
  // block of the first or the last new token (q <= 8 <= B: at most two blocks).
  const int qb_lo = ctx / B, qb_hi = (kv_len - 1) / B;
  const bool dense = p.layout.kind == static_cast<int32_t>(Layout::Kind::Dense);
  // Strided layouts: the group's residues once, so a tile costs one division, not one a head.
  const StridedGroupResidues residues = p.layout.kind == static_cast<int32_t>(Layout::Kind::Strided)
                                            ? strided_group_residues(p.layout, kvh * G, G)
                                            : StridedGroupResidues{};
  // The listing's two divisions a tile, made cheap (a batch-1 split lists a sequence's whole
  // range before its first load): key tiles per layout block as a shift where that is a power
  // of two (every power-of-two block size), and kb % vert_stride (<= 32 where the residues
  // fold) as a multiply-high by ceil(2^32 / vert_stride), exact while kb * vert_stride < 2^32
  // (kb < 2^25: contexts are int32).
  const int tiles_per_block = B / kKeyTile;
  const int tpb_shift = (tiles_per_block & (tiles_per_block - 1)) == 0 ? __ffs(tiles_per_block) - 1 : -1;
  const uint32_t vs = static_cast<uint32_t>(max(p.layout.vert_stride, 1));
  const uint32_t vs_magic = vs == 1 ? 0u : 0xFFFFFFFFu / vs + 1u;
  auto stride_residue = [&](int kb) {
    const uint32_t q = vs == 1 ? static_cast<uint32_t>(kb) : __umulhi(static_cast<uint32_t>(kb), vs_magic);
    return static_cast<uint32_t>(kb) - q * vs;
  };
  // The masked tiles' rule per row, where the residues fold: row rr's head sees block kb by
  // its stride iff kb % vert_stride == row_residue[rr] (strided_head_residue, solved once),
  // so a masked tile costs a shift and a multiply-high instead of two divisions a row. Unlike
  // block_allowed this is true for kb > qb too; such a tile starts past every row's
  // position, so its elements are masked by the token rule below all the same.
  uint32_t row_residue[2] = {0u, 0u};
  if (residues.fits()) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
      row_residue[rr] = static_cast<uint32_t>(strided_head_residue(p.layout, row_head[rr]));
  }
  // The layout block of key tile kt.
  auto block_of_tile = [&](int kt) { return tpb_shift >= 0 ? kt >> tpb_shift : kt / tiles_per_block; };
  // Sparse layouts only (compacted into sList); a dense layout's entries are dense_entry's.
  auto classify = [&](int kt) {
    const int k0 = kt * kKeyTile;
    const int kb = block_of_tile(kt);
    bool any = false, all = true;
    if (residues.fits()) {  // the rows' query blocks: qb_lo and, when the rows cross a block, qb_hi
      const uint32_t kb_bit = 1u << stride_residue(kb);
      strided_group_allowed(p.layout, residues, qb_lo, kb, kb_bit, any, all);
      if (qb_hi != qb_lo) {
        bool a_any, a_all;
        strided_group_allowed(p.layout, residues, qb_hi, kb, kb_bit, a_any, a_all);
        any = any || a_any;
        all = all && a_all;
      }
    } else {
      const unsigned sees = group_sees_block(p.layout, kvh * G, G, qb_lo, qb_hi, kb);
      any = sees & 1u;
      all = sees & 2u;
    }
    if (!any) return -1;
    const bool full = all && k0 + kKeyTile - 1 <= ctx;  // ctx: the first row's position
    return kt | (full ? 0 : cuda::kKeyTileMasked);
  };
  // A dense layout lists every tile, masked only past the first row's position.
  auto dense_entry = [&](int kt) { return kt | (kt * kKeyTile + kKeyTile - 1 <= ctx ? 0 : cuda::kKeyTileMasked); };

  // The output accumulators: D / 8 tiles of (rows, 8 columns), or (kNarrow) D / 16 of
  // (16 columns, rows).
  constexpr int kOTiles = kNarrow ? D / 16 : D / 8;
  float o[kOTiles][4];
#pragma unroll
  for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  // ldmatrix offsets (the sm80 prefill's, with this warp's row group and key share).
  const uint32_t q_off = smem_addr(sQ) + (wr * 16 + (lane & 15)) * RB + (((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t k_off = (wk * KW + ((lane >> 4) << 3) + (lane & 7)) * RB + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  const uint32_t v_off = (wk * KW + (lane & 7) + (((lane >> 3) & 1) << 3)) * RB + (((lane >> 4) ^ (lane & 7)) << 4);
  auto xo = [](uint32_t off, int kk) { return (off ^ static_cast<uint32_t>((kk & 3) * 32)) + (kk >> 2) * 128; };
  // Word w (byte 4w first) of a 16-byte e4m3 load.
  auto word_of = [](const uint4 &v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; };
  // e4m3 V fragments of k-step kk of the stage at vt: b0[b] / b1[b] pair two
  // keys (rows 2c, 2c + 1 / 2c + 8, 2c + 9 of the warp's step, c = lane % 4) at output
  // column 32 ca + 4 g + b. The thread of g = lane / 4 loads 4 bytes of each of the four
  // rows at columns 32 ca + 4g .. + 3 and interleaves them: one widened pair per column.
  // Column block ca is chunk (g / 4) ^ 2 ca of a row, so a row's offset there is its offset
  // at ca = 0 (a lane constant) XOR 32 ca, and a step 16 rows on adds 16 D
  // (e4m3_swz_is_xor_within_rows; a stage starts on a 128-byte line): one XOR an address
  // instead of the swizzle's arithmetic.
  static_assert(C::kQBytes % 128 == 0 && C::kStageBytes % 128 == 0, "stages start on 128-byte lines");
  auto load_v_e4m3 = [&](const char *vt, int kk, int ca, uint32_t(&b0)[4], uint32_t(&b1)[4]) {
    const int key0 = wk * KW + 2 * (lane & 3), g = lane >> 2;
    const uint32_t col = static_cast<uint32_t>(ca) << 5, step = kk * 16 * D;
    auto word = [&](int row) {  // row of the step: 0, 1, 8 or 9
      const uint32_t lane_off = fp8::e4m3_swz<D>(key0 + row, g >> 2) + (g & 3) * 4;
      return *reinterpret_cast<const uint32_t *>(vt + ((lane_off ^ col) + step));
    };
    const uint32_t r0 = word(0), r1 = word(1), r2 = word(8), r3 = word(9);
    widen(__byte_perm(r0, r1, 0x5140), b0[0], b0[1]);
    widen(__byte_perm(r0, r1, 0x7362), b0[2], b0[3]);
    widen(__byte_perm(r2, r3, 0x5140), b1[0], b1[1]);
    widen(__byte_perm(r2, r3, 0x7362), b1[2], b1[3]);
  };
  // e4m3 K fragments: the 16 bytes of key row 8 n + lane / 4 of the warp's keys at columns
  // 64m + 16 (lane % 4) .. + 15, from the stage at kt.
  auto load_k_e4m3 = [&](const char *kt, int n, int m) {
    return *reinterpret_cast<const uint4 *>(kt + fp8::e4m3_swz<D>(wk * KW + n * 8 + (lane >> 2), 4 * m + (lane & 3)));
  };
  // Element j (0, 1) of this thread's row rr in an accumulator tile: (rr, 8 columns) pairs,
  // or (kNarrow) rows as the tile's columns, j the second half of its 16 M rows.
  auto row_element = [](int rr, int j) { return kNarrow ? rr + 2 * j : 2 * rr + j; };
  // The online softmax's step for a tile whose rows' scaled maxima are mx: where a row's
  // maximum grew past the slack, its running max moves and its sum and outputs rescale.
  auto raise_row_maxima = [&](const float(&mx)[2]) {
    if (!__any_sync(0xffffffffu, mx[0] > m[0] + cuda::kSoftmaxSlack || mx[1] > m[1] + cuda::kSoftmaxSlack)) return;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float m_new = fmaxf(m[rr], mx[rr]);
      const float alpha = m_new == -INFINITY ? 1.f : fast_exp2(m[rr] - m_new);
      m[rr] = m_new;
      l[rr] *= alpha;
#pragma unroll
      for (int t = 0; t < kOTiles; ++t) {
        o[t][row_element(rr, 0)] *= alpha;
        o[t][row_element(rr, 1)] *= alpha;
      }
    }
  };
  // Whether this thread's row rr sees key block kb by its head's rule (kb_residue:
  // stride_residue(kb) where the residues fold).
  auto row_sees = [&](int rr, int kb, uint32_t kb_residue) {
    return row_pos[rr] >= 0 &&
           (residues.fits() ? row_qb[rr] - kb < p.layout.local_blocks || kb_residue == row_residue[rr]
                            : p.layout.allowed(row_head[rr], row_qb[rr], kb));
  };

  // This split's key tiles. A dense layout splits the key range evenly. A sparse one
  // splits the tiles it lists: a split of the range would leave the local window's tiles
  // (every head sees them) on the last split, which then runs half as long again as the
  // others (1 x 32k strided: 24 listed tiles against 16). Each split takes its share
  // [want_lo, want_hi) of the listed tiles.
  const int n_kt = (kv_len + kKeyTile - 1) / kKeyTile;
  const bool by_listed = !dense && split.splits > 1;
  auto share = [&](int listed, int s) { return static_cast<int>(static_cast<int64_t>(s) * listed / split.splits); };
  // A strided group's listed tiles have a closed form (strided_group_listing), so its
  // splits find their share without listing the range before it (a batch-1 split listed
  // all 512 tiles of a 32k context before its first load): the tiles of the listed blocks
  // below the local window, then every tile from the window's first block on.
  const bool closed = by_listed && residues.fits();
  const StridedGroupListing listing = closed ? strided_group_listing(p.layout, residues, qb_lo) : StridedGroupListing{};
  const int residue_tiles = listing.residue_blocks * tiles_per_block, window_tile = listing.window * tiles_per_block;
  auto closed_tile = [&](int i) {  // listed index -> key tile
    if (i >= residue_tiles) return window_tile + (i - residue_tiles);
    const int j = tpb_shift >= 0 ? i >> tpb_shift : i / tiles_per_block;
    return listing.residue_block(j) * tiles_per_block + (i - j * tiles_per_block);
  };
  // Other sparse layouts list the whole range (one pass up to kListCap tiles; longer ranges
  // count first) and take their share of what they listed.
  const bool scan_listed = by_listed && !closed;
  int c_begin = scan_listed ? 0 : static_cast<int>(static_cast<int64_t>(split_idx) * n_kt / split.splits);
  int c_end = scan_listed ? n_kt : static_cast<int>(static_cast<int64_t>(split_idx + 1) * n_kt / split.splits);
  int want_lo = 0, want_hi = 0, listed_before = 0;
  if (closed) {  // [c_begin, c_end) are listed indices
    const int listed = residue_tiles + (n_kt - window_tile);
    c_begin = share(listed, split_idx);
    c_end = share(listed, split_idx + 1);
  }
  if (scan_listed && n_kt > C::kListCap) {
    const int listed = cuda::count_key_tiles<C::kThreads>(classify, 0, n_kt, sScan);
    want_lo = share(listed, split_idx);
    want_hi = share(listed, split_idx + 1);
  }

  for (int c0 = c_begin; c0 < c_end && !(scan_listed && n_kt > C::kListCap && listed_before >= want_hi);
       c0 += C::kListCap) {
    const int c1 = min(c_end, c0 + C::kListCap);
    // A dense layout lists every tile and the closed form knows which: their entries are
    // written, not classified and compacted.
    int listed = c1 - c0;
    if (dense || closed) {
      for (int i = tid; i < listed; i += C::kThreads)
        sList[i] = dense ? dense_entry(c0 + i) : classify(closed_tile(c0 + i));
      __syncthreads();
    } else {
      listed = cuda::compact_key_tiles<C::kThreads, C::kPerThread>(classify, c0, c1, sList, sScan);
    }
    int first = 0, total = listed;  // this split's entries of the pass: [first, first + total)
    if (scan_listed) {
      if (n_kt <= C::kListCap) {
        want_lo = share(listed, split_idx);
        want_hi = share(listed, split_idx + 1);
      }
      first = min(max(want_lo - listed_before, 0), listed);
      total = min(max(want_hi - listed_before, 0), listed) - first;
      listed_before += listed;
    }
    // One tile loop for every layout (a loop per kind doubled the kernel's code). Quad q
    // takes entries q, q + kQuads, ... of the split's; the quads step together (`steps`
    // iterations, the CTA's barrier each), a quad without a tile of its own in the last one
    // only keeping the barrier. (Quads on their own named barriers had Q, which all read and
    // only some threads copy, unordered with the other quads' reads; session 21 tried them
    // again with Q in registers: no faster, and racecheck reported hazards.)
    const int steps = (total + kQuads - 1) / kQuads;
    if constexpr (kQuads > 1) total = total > quad ? (total - quad + kQuads - 1) / kQuads : 0;
    auto entry_at = [&](int i) { return sList[first + quad + kQuads * i]; };
    int pages[kPasses];
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i < total) {
        fetch_pages(entry_at(i), pages);
        load_kv(entry_at(i), i, pages);
      }
      cp_async_commit();
    }
    if (S - 1 < total) fetch_pages(entry_at(S - 1), pages);  // the pages of the next tile to copy
    if constexpr (kLateQ)
      if (c0 == c_begin) write_q_e4m3(0);
    // Several quads, or narrow tiles (whose Q fragments are half the registers): the warp's Q
    // fragments stay in registers through the pass rather than being read from shared
    // memory at every tile (eight ldmatrix a tile at D 128, on the chain of a warp whose
    // tile is issue-latency bound). Q's copy group is the oldest: all but the S - 1 tile
    // groups after it complete, then the CTA's barrier makes every thread's copy visible.
    // Narrow: Q^T is the B operand, whose fragments (d 2c, 2c + 1 and 2c + 8, 2c + 9 of
    // row lane / 4) are the A fragment's registers 0 and 2 (registers 1 and 3, rows 8-15,
    // are never read).
    constexpr bool kQInRegisters = kQuads > 1 || kNarrow;
    uint32_t q_frag[kQInRegisters ? D / 16 : 1][4];
    if constexpr (kQInRegisters) {
      cp_async_wait<S - 1>();
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(xo(q_off, kk), q_frag[kk][0], q_frag[kk][1], q_frag[kk][2], q_frag[kk][3]);
    }
    // The rows' softmax scales: the e4m3 path's Q shifts undone (their shared array was
    // written with Q: before the listing's barrier, or with kLateQ before the one above).
    float row_scale[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      row_scale[rr] = scale_log2;
      if constexpr (kQToF16)
        row_scale[rr] = scale_log2 * __uint_as_float(static_cast<uint32_t>(127 - sRowShift[fragment_row(rr)]) << 23);
    }
    auto q_fragment = [&](int kk, uint32_t(&a)[4]) {
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = q_frag[kk][i];
      } else {
        ldmatrix_x4(xo(q_off, kk), a[0], a[1], a[2], a[3]);
      }
    };
    for (int it = 0; it < steps; ++it) {
      cp_async_wait<S - 2>();
      __syncthreads();  // tile `it` landed; every warp is done with the stage refilled below
      if (it + S - 1 < total) {
        load_kv(entry_at(it + S - 1), (it + S - 1) % S, pages);
        if (it + S < total) fetch_pages(entry_at(it + S), pages);  // used next iteration
      }
      cp_async_commit();
      if constexpr (kQuads > 1)
        if (it >= total) continue;  // this quad's tiles are done; another's last one is not
      const int entry = entry_at(it);
      const int stage = it % S;
      [[maybe_unused]] const uint32_t tK = smem_addr(sK + stage * SB), tV = smem_addr(sV + stage * SB);

      if constexpr (kNarrow) {
        // S^T = K Q^T: A = the warp's 16 keys (rows lane / 4 and + 8), B = Q^T. The
        // accumulator holds keys lane / 4 (s[0], s[1]) and + 8 (s[2], s[3]) of query rows
        // fragment_row(0) and (1). Odd k-steps accumulate apart (s_odd): two chains of
        // D / 32 dependent mma instead of one of D / 16, on a tile whose softmax waits for them.
        float s[4] = {0.f, 0.f, 0.f, 0.f}, s_odd[4] = {0.f, 0.f, 0.f, 0.f};
        if constexpr (C::kFp8) {
          // The 16-row tile's e4m3 K fragments (below), keys lane / 4 and + 8 as the two A
          // rows: word w of a key's 16 bytes widens into registers 0 and 2 (or 1 and 3).
          const char *kt = sK + stage * SB;
#pragma unroll
          for (int m = 0; m < D / 64; ++m) {
            uint4 kw[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) kw[h] = load_k_e4m3(kt, h, m);
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              uint32_t a[4];
              widen(word_of(kw[0], w), a[0], a[2]);
              widen(word_of(kw[1], w), a[1], a[3]);
              mma_16816<MT>(w & 1 ? s_odd : s, a, q_frag[4 * m + w][0], q_frag[4 * m + w][2]);
            }
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t a[4];  // ldmatrix's (keys 0-7, 8-15) x (d 0-7, 8-15) as A's 0, 2, 1, 3
            ldmatrix_x4(tK + xo(k_off, kk), a[0], a[2], a[1], a[3]);
            mma_16816<MT>(kk & 1 ? s_odd : s, a, q_frag[kk][0], q_frag[kk][2]);
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i] += s_odd[i];
        if (entry & cuda::kKeyTileMasked) {
          const int kt = entry & cuda::kKeyTileIndexMask, kb = block_of_tile(kt);
          const int key0 = kt * kKeyTile + wk * KW + (lane >> 2);  // of s[0], s[1]; s[2], s[3]: + 8
          const uint32_t kb_residue = residues.fits() ? stride_residue(kb) : 0u;
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const int lim = row_sees(rr, kb, kb_residue) ? row_pos[rr] - key0 : -1;
            if (lim < 0) s[rr] = -INFINITY;
            if (lim < 8) s[2 + rr] = -INFINITY;
          }
        }
        // Online softmax per query row (a column: its 16 keys over the lanes of one lane % 4).
        float mx[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float x = fmaxf(s[rr], s[2 + rr]);
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
          mx[rr] = x * row_scale[rr];
        }
        raise_row_maxima(mx);
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const float m_use = m[rr] == -INFINITY ? 0.f : m[rr];
          s[rr] = fast_exp2(fmaf(s[rr], row_scale[rr], -m_use));
          s[2 + rr] = fast_exp2(fmaf(s[2 + rr], row_scale[rr], -m_use));
          l[rr] += s[rr] + s[2 + rr];
        }
        // O^T += V^T P^T. P^T's B fragments (keys 2c, 2c + 1 and + 8 of query row lane / 4)
        // are the transposes of the accumulator's two 8 x 8 halves.
        const uint32_t p0 = movmatrix_trans(pack2<MT>(s[0], s[1]));
        const uint32_t p1 = movmatrix_trans(pack2<MT>(s[2], s[3]));
        if constexpr (C::kFp8) {
          // load_v_e4m3's fragments: b0[b] / b1[b] pair keys 2c, 2c + 1 /
          // + 8 at output column 32a + 4 (lane / 4) + b; as A (M = columns), tile 2a + bb
          // takes b = bb for its rows 0-7 and b = bb + 2 for rows 8-15.
#pragma unroll
          for (int ca = 0; ca < D / 32; ++ca) {
            uint32_t b0[4], b1[4];
            load_v_e4m3(sV + stage * SB, 0, ca, b0, b1);
#pragma unroll
            for (int bb = 0; bb < 2; ++bb) {
              const uint32_t a[4] = {b0[bb], b0[bb + 2], b1[bb], b1[bb + 2]};
              mma_16816<MT>(o[2 * ca + bb], a, p0, p1);
            }
          }
        } else {
#pragma unroll
          for (int dp = 0; dp < D / 16; ++dp) {
            uint32_t a[4];  // ldmatrix.trans's (keys 0-7, 8-15) x (d 0-7, 8-15) as A's 0, 2, 1, 3
            ldmatrix_x4_trans(tV + xo(v_off, dp), a[0], a[2], a[1], a[3]);
            mma_16816<MT>(o[dp], a, p0, p1);
          }
        }
      } else {
        float s[KW / 8][4];
#pragma unroll
        for (int i = 0; i < KW / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
        if constexpr (C::kFp8) {
          // e4m3 fragments, K: the thread of B column n (lane / 4) loads 16 bytes of its key
          // row, columns 64m + 16c .. + 15 (c = lane % 4); word w of them, widened, is
          // (b0, b1) of k-step 4m + w (Q's columns are permuted to match, above).
          const char *kt = sK + stage * SB;
#pragma unroll
          for (int m = 0; m < D / 64; ++m) {
            uint4 kw[KW / 8];
#pragma unroll
            for (int nt = 0; nt < KW / 8; ++nt) kw[nt] = load_k_e4m3(kt, nt, m);
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              const int kk = 4 * m + w;
              uint32_t a[4];
              q_fragment(kk, a);
#pragma unroll
              for (int nt = 0; nt < KW / 8; ++nt) {
                const uint32_t word = word_of(kw[nt], w);
                uint32_t b0, b1;
                widen(word, b0, b1);
                mma_16816<MT>(s[nt], a, b0, b1);
              }
            }
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t a[4];
            q_fragment(kk, a);
#pragma unroll
            for (int np = 0; np < KW / 16; ++np) {
              uint32_t b0, b1, b2, b3;
              ldmatrix_x4(tK + xo(k_off, kk) + np * 16 * RB, b0, b1, b2, b3);
              mma_16816<MT>(s[2 * np], a, b0, b1);
              mma_16816<MT>(s[2 * np + 1], a, b2, b3);
            }
          }
        }

        if (entry & cuda::kKeyTileMasked) {  // token rule and the row's own head, per element
          const int kt = entry & cuda::kKeyTileIndexMask, k0 = kt * kKeyTile;
          const int kb = block_of_tile(kt);
          const int kw0 = k0 + wk * KW + 2 * (lane & 3);  // key of this thread's element (nt, e) = 0
          const uint32_t kb_residue = residues.fits() ? stride_residue(kb) : 0u;
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const int lim =
                row_sees(rr, kb, kb_residue) ? row_pos[rr] - kw0 : -1;  // element (nt, e) visible iff nt * 8 + e <= lim
#pragma unroll
            for (int nt = 0; nt < KW / 8; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (nt * 8 + e > lim) s[nt][2 * rr + e] = -INFINITY;
          }
        }

        float mx[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float x = s[0][2 * rr];
#pragma unroll
          for (int nt = 0; nt < KW / 8; ++nt) x = fmaxf(x, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
          x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
          mx[rr] = x * row_scale[rr];
        }
        raise_row_maxima(mx);
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const float m_use = m[rr] == -INFINITY ? 0.f : m[rr];
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < KW / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              s[nt][2 * rr + e] = fast_exp2(fmaf(s[nt][2 * rr + e], row_scale[rr], -m_use));
              sum += s[nt][2 * rr + e];
            }
          l[rr] += sum;
        }

#pragma unroll
        for (int kk = 0; kk < KW / 16; ++kk) {
          uint32_t a[4];
          a[0] = pack2<MT>(s[2 * kk][0], s[2 * kk][1]);
          a[1] = pack2<MT>(s[2 * kk][2], s[2 * kk][3]);
          a[2] = pack2<MT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
          a[3] = pack2<MT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
          if constexpr (C::kFp8) {
            // e4m3 fragments, V (load_v_e4m3): the thread of B column g = lane / 4 gets the
            // fragments of n-tiles 4a .. 4a + 3, so n-tile j = 4a + b, column n holds output
            // column 32a + 4n + b (the reduction below stores them there).
#pragma unroll
            for (int ca = 0; ca < D / 32; ++ca) {
              uint32_t b0[4], b1[4];
              load_v_e4m3(sV + stage * SB, kk, ca, b0, b1);
#pragma unroll
              for (int b = 0; b < 4; ++b) mma_16816<MT>(o[4 * ca + b], a, b0[b], b1[b]);
            }
          } else {
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
              uint32_t b0, b1, b2, b3;
              ldmatrix_x4_trans(tV + xo(v_off, dp) + kk * 16 * RB, b0, b1, b2, b3);
              mma_16816<MT>(o[2 * dp], a, b0, b1);
              mma_16816<MT>(o[2 * dp + 1], a, b2, b3);
            }
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // sList and the stages are rewritten by the next pass (or the reduction)
  }

  cp_async_wait<0>();  // the Q copy of a split without key tiles
  // Merge the key groups (of every quad): each warp's (m, l, O) for its rows into the idle
  // rings (the last pass ended with a barrier of the whole CTA), then each thread combines
  // four columns of a row across the key groups.
  float *red_o = reinterpret_cast<float *>(sRings);                                   // [kKeyGroups][kRows][D]
  float2 *red_ml = reinterpret_cast<float2 *>(red_o + C::kKeyGroups * C::kRows * D);  // [kKeyGroups][kRows]
  const int key_group = quad * C::kKeyWarps + wk;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    // The row's sum over the lanes that hold its other keys.
    float sum = l[rr];
    if constexpr (kNarrow) {
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      sum += __shfl_xor_sync(0xffffffffu, sum, 8);
      sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    } else {
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    }
    const int r = fragment_row(rr);
    if ((kNarrow ? lane >> 2 : lane & 3) == 0) red_ml[key_group * C::kRows + r] = make_float2(m[rr], sum);
    float *dst = red_o + (key_group * C::kRows + r) * D;
#pragma unroll
    for (int dt = 0; dt < kOTiles; ++dt) {
      if constexpr (kNarrow) {
        // M tile dt: rows lane / 4 and + 8 are output columns 16 dt + lane / 4 and + 8, or for
        // e4m3 (V above) 32a + 4 (lane / 4) + bb and + 2, dt = 2a + bb.
        const int col = C::kFp8 ? 32 * (dt >> 1) + 4 * (lane >> 2) + (dt & 1) : 16 * dt + (lane >> 2);
        const int col_hi = col + (C::kFp8 ? 2 : 8);
        dst[col] = o[dt][rr] * v_scale;
        dst[col_hi] = o[dt][2 + rr] * v_scale;
      } else if constexpr (C::kFp8) {  // n-tile dt = 4a + b, column n: output column 32a + 4n + b (V above)
        const int col = 32 * (dt >> 2) + 8 * (lane & 3) + (dt & 3);
        dst[col] = o[dt][2 * rr] * v_scale;
        dst[col + 4] = o[dt][2 * rr + 1] * v_scale;
      } else {
        *reinterpret_cast<float2 *>(dst + dt * 8 + 2 * (lane & 3)) = make_float2(o[dt][2 * rr], o[dt][2 * rr + 1]);
      }
    }
  }
  __syncthreads();
  const bool whole = split.splits == 1;
  // Split::cluster (two-quad CTAs only: one CTA an SM, the item's splits a cluster): the
  // unit stays in this CTA's shared memory, after the key groups' states, and the cluster
  // merges its units through distributed shared memory below.
#if __CUDA_ARCH__ >= 900
  constexpr bool kClusterMerge = kQuads == 2;
#else
  constexpr bool kClusterMerge = false;  // no clusters: the host never sets Split::cluster here
#endif
  static_assert(!kClusterMerge || C::kReduceBytes + unit_floats(C::kRows, D) * 4 <= kQuads * C::kRingBytes,
                "a cluster unit must fit in the rings after the key groups' states");
  const bool in_cluster = kClusterMerge && split.cluster;
  float *cluster_unit = reinterpret_cast<float *>(red_ml + C::kKeyGroups * C::kRows);
  float *unit = whole ? nullptr
                : in_cluster
                    ? cluster_unit
                    : split.partials + ((static_cast<int64_t>(seq) * gridDim.y + kvh) * split.splits + split_idx) *
                                           unit_floats(split.rows, D);
  // Four columns of a row a thread (4 x 128 rows x columns: one pass at GQA 4).
  for (int idx = tid; idx < rows * (D / 4); idx += C::kThreads) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    const cuda::MergedRow mr = cuda::merge_row_stats(C::kKeyGroups, [&](int w) { return red_ml[w * C::kRows + r]; });
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < C::kKeyGroups; ++w) {
      const float wt = cuda::merge_weight(mr, red_ml[w * C::kRows + r]);
      if (wt != 0.f) {
        const float4 v = *reinterpret_cast<const float4 *>(red_o + (w * C::kRows + r) * D + col);
        acc.x = fmaf(v.x, wt, acc.x);
        acc.y = fmaf(v.y, wt, acc.y);
        acc.z = fmaf(v.z, wt, acc.z);
        acc.w = fmaf(v.w, wt, acc.w);
      }
    }
    if (whole) {
      const int t = r / G, h = kvh * G + (r - t * G);
      const float inv = mr.l > 0.f ? 1.f / mr.l : 0.f;
      T *dst =
          static_cast<T *>(p.out) + static_cast<int64_t>(qs + t) * p.o_tok + static_cast<int64_t>(h) * p.o_head + col;
      *reinterpret_cast<uint2 *>(dst) =
          make_uint2(pack2<T>(acc.x * inv, acc.y * inv), pack2<T>(acc.z * inv, acc.w * inv));
      if (p.lse && col == 0) p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = cuda::row_lse(mr.m, mr.l);
    } else {
      *reinterpret_cast<float4 *>(unit + r * D + col) = acc;
      if (col == 0) reinterpret_cast<float2 *>(unit + split.rows * D)[r] = make_float2(mr.m, mr.l);
    }
  }
  if (whole) return;
  if constexpr (kClusterMerge) {
    if (in_cluster) {
      // Every unit of the item is in its CTA's shared memory after the cluster barrier;
      // the CTAs share the merge (this CTA's slots: split_idx, + splits, ...: one row's
      // four columns a thread), reading each unit at its CTA's cluster rank (= split_idx:
      // the cluster spans the grid's x), and none leaves before all are done reading.
      sm90::cluster_sync();
      const uint32_t local = smem_addr(cluster_unit);
      merge_units<T, D>(p, split, rows, G, qs, kvh, tid * split.splits + split_idx, C::kThreads * split.splits,
                        [&](int u, int r, int col, float2 &st, float4 &v) {
                          const uint32_t peer = sm90::cluster_peer_addr(local, static_cast<uint32_t>(u));
                          st = sm90::ld_cluster_f2(peer + static_cast<uint32_t>(split.rows * D + 2 * r) * 4u);
                          v = sm90::ld_cluster_f4(peer + static_cast<uint32_t>(r * D + col) * 4u);
                        });
      sm90::cluster_sync();
      return;
    }
  }
  // The item's last CTA to store its unit merges them all: each CTA's stores are made
  // visible device-wide before it counts itself (the counters are zero: Split::counters;
  // when the grid before this one clears them, it waits for that grid first).
  if (split.count_after_previous) wait_for_previous_grid();
  __threadfence();
  __syncthreads();
  const int64_t item = static_cast<int64_t>(seq) * gridDim.y + kvh;
  if (tid == 0) sScan[0] = atomicAdd(split.counters + item, 1) == split.splits - 1;
  __syncthreads();
  if (!sScan[0]) return;
  __threadfence();
  // Every other CTA of the item has counted: left zero for the next launch (a batch's own
  // workspace is cleared only when it is made: SplitWorkspace::kept_clear_counters).
  if (tid == 0) split.counters[item] = 0;
  const float *units = split.partials + item * split.splits * unit_floats(split.rows, D);
  const int64_t stride = unit_floats(split.rows, D);  // a multiple of 4 floats: the float4 loads stay aligned
  merge_units<T, D>(p, split, rows, G, qs, kvh, tid, C::kThreads, [&](int u, int r, int col, float2 &st, float4 &v) {
    st = __ldcg(reinterpret_cast<const float2 *>(units + u * stride + split.rows * D) + r);
    v = __ldcg(reinterpret_cast<const float4 *>(units + u * stride + r * D + col));
  });
}

template <class T, class KV, int D, int WR, int kQuads, bool kConsecutiveRows, bool kNarrow>
__global__ void __launch_bounds__(Config<D, WR, KV, kQuads>::kThreads, (Config<D, WR, KV, kQuads>::kCtasPerSm))
    decode_kernel(const __grid_constant__ cuda::AttentionParams p, const Split split) {
  decode_item<T, KV, D, WR, kQuads, kConsecutiveRows, kNarrow>(p, split);
  // A mixed launch starts this grid while its prefill grid runs its last CTAs
  // (Overlap::previous). The grid completes only when its last CTA leaves, so one CTA that
  // waits for that grid keeps everything after this launch on the stream behind both
  // grids: the last one, which the SMs take up last. Had every CTA waited, each SM the
  // prefill freed would hold its first decode CTAs idle until the prefill's end and run
  // no more of them (bench/NOTES.md, "Engine step", session 10). Launched any other way,
  // the grid has no prerequisite and the wait returns at once.
  if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1)
    wait_for_previous_grid();
}

template <class T, class KV, int D, int WR, int kQuads, bool kConsecutiveRows, bool kNarrow>
void launch_kernel(const cuda::AttentionParams &p, int32_t num_seqs, int32_t num_kv_heads, const Split &split,
                   const Overlap &overlap, cudaStream_t stream) {
  using C = Config<D, WR, KV, kQuads>;
  constexpr auto kernel = decode_kernel<T, KV, D, WR, kQuads, kConsecutiveRows, kNarrow>;
  cuda::allow_dynamic_smem<kernel>(C::kSmemBytes, "cudaFuncSetAttribute(decode_kernel)");
  // A cluster of more than 8 CTAs (batch 1's 16 splits) is a size the kernel must opt in to.
  if (split.cluster && split.splits > 8)
    cuda::allow_nonportable_clusters<kernel>("cudaFuncSetAttribute(decode_kernel)");
  cuda::launch_ex(kernel, dim3(split.splits, num_kv_heads, num_seqs), dim3(C::kThreads), C::kSmemBytes, stream,
                  overlap.previous, split.cluster ? split.splits : 1, "decode_kernel", p, split);
}

// The copy way (decode_item's K/V loads): consecutive rows for 16-bit pages; for e4m3
// pages only under pages of fewer than 64 tokens, each page class its own kernel.
template <class T, class KV, int D, int WR, int kQuads = 1, bool kNarrow = false>
void launch_rows(const cuda::AttentionParams &p, int32_t num_seqs, int32_t num_kv_heads, const Split &split,
                 const Overlap &overlap, cudaStream_t stream) {
  if constexpr (sizeof(KV) == 1) {
    if (p.page_shift >= 6) {
      launch_kernel<T, KV, D, WR, kQuads, false, kNarrow>(p, num_seqs, num_kv_heads, split, overlap, stream);
      return;
    }
  }
  launch_kernel<T, KV, D, WR, kQuads, true, kNarrow>(p, num_seqs, num_kv_heads, split, overlap, stream);
}

// Calls f(row_groups, quads, narrow) with the compile-time form (std::integral_constant,
// std::bool_constant) of decode_variant's choice for a launch of `max_rows` rows with
// `quads` quads a CTA. The launch and its shared-memory size both dispatch here, so the
// kernel launched is the one that was sized; each branch instantiates one variant (three
// quads for e4m3 pages only: three rings of 16-bit stages would not fit an SM).
template <class KV, class F>
decltype(auto) with_variant(int32_t max_rows, int32_t quads, F &&f) {
  constexpr bool kFp8 = sizeof(KV) == 1;
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  const DecodeVariant v = decode_variant(kFp8, max_rows, quads);
  if (v.narrow) {
    if constexpr (kFp8)
      if (v.quads == 3) return f(One{}, std::integral_constant<int, 3>{}, std::true_type{});
    return v.quads == 2 ? f(One{}, Two{}, std::true_type{}) : f(One{}, One{}, std::true_type{});
  }
  if (v.row_groups == 1) return v.quads == 2 ? f(One{}, Two{}, std::false_type{}) : f(One{}, One{}, std::false_type{});
  return v.row_groups == 2 ? f(Two{}, One{}, std::false_type{})
                           : f(std::integral_constant<int, 4>{}, One{}, std::false_type{});
}

template <class T, class KV, int D>
void launch(const cuda::AttentionParams &p, int32_t num_seqs, int32_t num_kv_heads, int32_t max_rows,
            const Split &split, const Overlap &overlap, cudaStream_t stream) {
  with_variant<KV>(max_rows, split.quads, [&](auto row_groups, auto quads, auto narrow) {
    launch_rows<T, KV, D, decltype(row_groups)::value, decltype(quads)::value, decltype(narrow)::value>(
        p, num_seqs, num_kv_heads, split, overlap, stream);
  });
}

// Whether a launch whose grid holds `clusters` items can run each as one thread-block
// cluster of its `splits` CTAs, every cluster at once (Split::cluster): two-quad CTAs (one
// an SM), 2..16 splits, and the current device holds that many such clusters (a cluster's
// CTAs share a GPC, so whole GPCs' SMs count, not the CTA slots).
template <class T, class KV, int D>
bool cluster_merge_fits(int32_t max_rows, int32_t quads, int32_t splits, int64_t clusters) {
  if (quads != 2 || splits < 2 || splits > 16 || clusters < 1) return false;
  return with_variant<KV>(max_rows, quads, [&](auto row_groups, auto quads_, auto narrow) {
    constexpr int WR = decltype(row_groups)::value, Q = decltype(quads_)::value;
    if constexpr (Q != 2) {
      return false;
    } else {
      using C = Config<D, WR, KV, Q>;
      // The consecutive-rows form stands for both copy ways: it is instantiated for every
      // page class, with the same threads, shared memory and launch bounds as the other.
      constexpr auto kernel = decode_kernel<T, KV, D, WR, Q, true, decltype(narrow)::value>;
      return cuda::max_active_clusters<kernel>(splits, C::kThreads, C::kSmemBytes) >= clusters;
    }
  });
}

template <int D, class KV>
size_t shared_bytes_for(int32_t max_rows, int32_t quads) {
  return with_variant<KV>(max_rows, quads, [](auto row_groups, auto quads_, auto) {
    return static_cast<size_t>(Config<D, decltype(row_groups)::value, KV, decltype(quads_)::value>::kSmemBytes);
  });
}

}  // namespace bspa::kernels::decode
