// The sm90a block-sparse paged prefill kernel (wgmma, warp-specialized), instantiated per
// (element type, head dim) in prefill_sm90_<dtype>.cu. Same semantics and key-tile
// classification as the sm80 kernel (prefill_sm80.cuh); what changes is how the tensor
// cores are fed.
//
// e4m3 pages (KV = uint8_t): the producer lands each tile's bytes in staging slots and
// widens them into the ring's f16 stages; the operands are f16 (bf16 q is converted per
// warp), the per-head scales applied in fp32 (Config, the producer's `fetch`, convert_q_f16).
// At head dim 128 (kFp8Keys) only V is staged and widened: K lands in a ring of e4m3 rows
// that S = Q K^T reads on FP8 tensor cores, with q split into two e4m3 tiles (split_q_e4m3).
//
// Persistent: one CTA per SM walks the launch's (query head, 128-row query tile) items (the
// order is below, at `unit_of`); each item is one 128-row tile of one head. Three warpgroups:
//  - warpgroup 0, the producer, gives most of its registers away (setmaxnreg), lists the
//    visible 64-token key tiles (skipped / full / masked with the allowed bits of the tile's
//    at most three query blocks) and fetches K and V of each through the block table into
//    a ring of stages, stored as 128-byte-swizzled 64-column halves that wgmma reads
//    through descriptors (RingLayout; kFp8Keys: K's as e4m3 rows): a tile inside one page
//    by TMA (one 64 x 64 box per half, from descriptors of the pool made per launch:
//    kv_tensor_map.cpp), a tile over pages of 8..32 tokens by a TMA box of both halves per
//    page (kPageBoxes, a variant of
//    its own, whose ring holds 8-row groups of both halves; a box per 8-row group where
//    the pages' strides merge in no pair: kGroupBoxes), any
//    other (pages under 8 tokens, a sequence's partial last tile, zero-filled past its
//    end) by cp.async gathers. A stage carries its tile's list entry. Stages go in pairs (one consumer
//    step), each pair with four mbarriers: K landed (cp.async.mbarrier.arrive, or the TMA
//    bytes) with both entries written, V landed, K free (both consumers' S done), V free
//    (their PV done). Stages are filled one at a time, K then V: a pair's first K is
//    copied once the pair's K is free, before its V is (filling whole pairs, both K
//    first, measured slower on dense layouts: bench/NOTES.md, v14). It runs into
//    the next item (list, copies, an L2 prefetch of its Q) while the consumers finish.
//  - warpgroups 1 and 2, the consumers, own rows 0..63 and 64..127 and never see the list:
//    they take two stages per step (128 keys; an item with an odd tile count ends on a
//    padding stage, so steps start on even stages and a step's K and V are each one
//    128-row operand). S = Q K^T (wgmma N = 128, both from shared memory), online softmax
//    in exp2 units with a lazy rescale, O += P V (wgmma N = 128, P from registers, V
//    N-major). The S of step i+1 and the PV of step i are both in flight while step
//    i+1's softmax runs (FlashAttention-3's intra-warpgroup overlap); P is double-buffered.
// No CTA-wide barrier after the set-up: the consumers drift relative to each other, so
// one's softmax overlaps the other's GEMMs; at D 64 and over e4m3 pages they take turns
// issuing their GEMMs instead (ping-pong, kPingPong).
// Split tail (SplitPlan): when the last round would leave SMs idle, its items run as
// `ways` units each, unit c taking the c-th share of the item's visible key tiles. Every
// unit stores its unnormalised O, row max and row sum (fp32, in the accumulators' own
// register order, so no shuffle is needed) to the workspace and counts itself in on the
// item's counter; the last one in merges the others into its registers and runs the
// normal epilogue. No unit waits for another, so no co-residency is assumed.
// Layout block sizes must be multiples of 64 (checked on the host).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/fp8_tile.cuh"
#include "kernels/cuda/key_tile_list.cuh"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"
#include "kernels/cuda/query_tile.cuh"
#include "kernels/cuda/seq_tile_table.cuh"
#include "kernels/cuda/sm90_primitives.cuh"
#include "kernels/cuda/softmax.cuh"

namespace bspa::kernels::sm90 {

constexpr int kKeyTile = cuda::kKeyTileTokens;
static_assert(kTmaBoxTokens == kKeyTile && kTmaBoxColumns * 2 == 128,
              "a TMA box is one key tile's 128-byte half, or 8-row groups of both halves, as a stage stores it");
constexpr int kListCap = 512;       // key tiles classified per producer pass
constexpr int kLastTile = 1 << 27;  // stage entry flag: no tile of this query tile follows
constexpr int kNoTiles = -1;        // stage entry of a query tile that sees no key tile
constexpr int kTileIndexMask = kLastTile - 1;

template <int D, bool kE4m3 = false>
struct Config {
  static constexpr int BM = kTileRows;
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;  // 128 * 40 + 256 * 232 <= 64K registers
  static constexpr int NH = D / 64;          // 64-column halves (128-byte rows)
  static constexpr int kChunks = D / 8;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kTileBytes = kKeyTile * D * 2;
  // A consumer step holds four stages (PV of its two, S of the next two): six leave the
  // producer two tiles ahead. Six D128 stages and Q take all but 3 KB of the 227 KB.
  // e4m3 pages at D 64: the ring stays 16-bit (wgmma's operands) and the producer widens
  // each tile into it from a staging slot its bytes landed in (kStaging slots of K and V):
  // the slots keep the reads from memory ahead, and a widening (shared to shared) refills a
  // freed stage in well under a step.
  // e4m3 pages at D 128 (kFp8Keys): the S GEMM reads K's e4m3 bytes as they land (FP8
  // wgmma, q split into two e4m3 operands), so K's ring holds bytes and only V is staged
  // (six slots) and widened; six stages fit again. Widening both took the shared memory's
  // bandwidth from the GEMMs: a 4-stage ring of widened K and V with four slots of both ran
  // 2-10% slower but on short-prompt batches, which gained 1-6% (bench/NOTES.md, "Session
  // 27").
  static constexpr bool kFp8Keys = kE4m3 && D == 128;
  static constexpr int kStages = D == 128 ? 6 : 8;
  static constexpr int kStaging = kE4m3 ? (D == 128 ? 6 : 8) : 0;
  static constexpr int kStagingTileBytes = kKeyTile * D;  // one tensor's e4m3 tile
  static constexpr int kKStageBytes = kFp8Keys ? kStagingTileBytes : kTileBytes;
  // A staging slot: K then V, or (kFp8Keys) V alone.
  static constexpr int kSlotBytes = (kFp8Keys ? 1 : 2) * kStagingTileBytes;
  static constexpr int kSlotVOffset = kFp8Keys ? 0 : kStagingTileBytes;
  static constexpr int kProducers = 128;
  static constexpr int kPerThread = kListCap / kProducers;
  // Q, the K and V rings, the staging, the list and scan, the stage entries, the pair
  // barriers, then the staging slots' barriers and entries.
  static constexpr int kSmemBytes = kQBytes + kStages * (kKStageBytes + kTileBytes) + kStaging * kSlotBytes +
                                    kListCap * 4 + 32 + kStages * 4 + 2 * kStages * 8 + kStaging * 12;
  // A launch that lists its items (TileListing) also holds the table and its walk, last.
  static constexpr int kListingSmemBytes = kSmemBytes + cuda::kSeqTileTableCap * 4 + 32;
  static_assert(kListingSmemBytes <= 232448, "shared memory over the sm_90 opt-in limit");
};

// Byte offset of 16-byte chunk c (of D/16) of row r in an e4m3 staging tile: D bytes a row,
// as TMA lays a box out with the 128-byte (D 128) or 64-byte (D 64) swizzle, which the
// gathers follow. Eight consecutive rows at one chunk hit eight different bank groups, as
// the widening reads them.
template <int D>
__device__ __forceinline__ uint32_t e4m3_stage_off(int r, int c) {
  static_assert(D == 64 || D == 128, "e4m3 staging rows of 64 or 128 bytes");
  if constexpr (D == 128)
    return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
  else
    return static_cast<uint32_t>(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
}

// Byte offset of 16-byte chunk c (of D/8) of row r in a ROWS-row operand (the Q tile):
// 64-column halves of ROWS x 128 bytes each, chunks XOR-swizzled within 8-row atoms (the
// wgmma 128B mode).
template <int ROWS>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// The K or V ring of S stages of 64 rows, NH 64-column halves a row, each half of 8 rows
// one 1024-byte atom of 128-byte rows whose 16-byte chunks are XOR-swizzled by the row
// (the wgmma 128B mode). Half-major (kGrouped false): half h of every stage together, a
// stage's 64 rows of a half contiguous, so a tile inside one page is a 64-row box per
// half. Grouped: 8-row groups of both halves, the stages one after another, so one box
// writes whole groups of both halves: a 16-token page's part of a tile is one 4 KB box
// instead of two of 2 KB (a 16-token-page tile took 16 boxes a step, and the TMA unit's
// rate for such small boxes, not bytes, held the consumers back: bench/NOTES.md, "Pages
// under 64 tokens"). Either way a step's two stages (n even, n + 1) of K or V are one
// 128-row wgmma operand: rows 8 apart are kGroupBytes apart (SBO), a row's halves
// kHalfOffset (K's descriptor step, V's LBO).
template <int NH, int S, bool kGrouped>
struct RingLayout {
  static constexpr uint32_t kAtom = 1024;
  static constexpr uint32_t kGroupBytes = kGrouped ? NH * kAtom : kAtom;
  static constexpr uint32_t kHalfOffset = kGrouped ? kAtom : S * kKeyTile * 128;
  static constexpr uint32_t kStageStride = 8 * kGroupBytes;  // stage st at st x this
  // Byte offset of 16-byte chunk c (of NH * 8) of row r (of S * 64).
  static __device__ __forceinline__ uint32_t off(int r, int c) {
    if constexpr (kGrouped)
      return static_cast<uint32_t>((r >> 3) * kGroupBytes + (c >> 3) * kHalfOffset + (r & 7) * 128 +
                                   (((c & 7) ^ (r & 7)) << 4));
    else
      return swz<S * kKeyTile>(r, c);
  }
};

// The producer warpgroup's own barrier (it lists key tiles without the consumers).
struct ProducerBarrier {
  __device__ __forceinline__ void operator()() const { named_barrier(1, 128); }
};

// KV: T (16-bit pages) or uint8_t (e4m3 pages, p.k_scale / p.v_scale per KV head).
// kGroupBoxes (16-bit pages with kPageBoxes only): a tile comes as a box per 8-row group
// (maps.group_boxes a page), for pages whose strides merge in no pair (token-major pages
// with K and V of a page in one block). A variant of its own: a loop over a page's group
// boxes in the common page-box producer cost every launch 1-5% (bench/NOTES.md, "Pages
// under 64 tokens", session 20, call E).
template <class T, class KV, int D, bool kListsTiles, bool kPageBoxes, bool kGroupBoxes = false>
__global__ void __launch_bounds__(384, 1)
    prefill_sm90_kernel(const __grid_constant__ Params p, const __grid_constant__ KvTensorMaps maps, const dim3 work,
                        const SplitPlan grid_split, const TileListing listing, const int32_t *live_entries,
                        float4 *partials, int *counters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kE4m3 = std::is_same_v<KV, uint8_t>;
  static_assert(kE4m3 || std::is_same_v<KV, T>, "pages of q's type or e4m3");
  constexpr bool kFp8Keys = Config<D, kE4m3>::kFp8Keys;
  // The matrix operands' type: e4m3 pages compute in f16, which the hardware widens e4m3
  // pairs to in one instruction (the bit placement into bf16 took six a pair and left the
  // producer behind the consumers); bf16 q is converted per warp (convert_q_f16, below).
  // With kFp8Keys only O += P V does; S = Q K^T takes e4m3 operands.
  using MT = std::conditional_t<kE4m3, __half, T>;
  using C = Config<D, kE4m3>;
  constexpr int BM = C::BM, NH = C::NH, S = C::kStages;
  constexpr int L = C::kStaging > 0 ? C::kStaging : 1;  // staging slots (e4m3; none is laid out otherwise)
  // No alignment slack fits next to six stages: the dynamic shared memory of a kernel
  // without static shared memory starts 1 KiB-aligned (swizzle atoms need it); checked.
  extern __shared__ __align__(1024) char smem[];
  if (smem_addr(smem) & 1023) __trap();
  // A mixed launch's decode grid may start on the SMs this grid leaves idle (decode.hpp,
  // Overlap::previous); without a dependent launch this does nothing.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  char *sQ = smem;
  char *sK = sQ + C::kQBytes;
  char *sV = sK + S * C::kKStageBytes;
  char *sStaging = sV + S * C::kTileBytes;  // e4m3: slot j at j * kSlotBytes, its K (unless kFp8Keys) then V
  int32_t *sList = reinterpret_cast<int32_t *>(sStaging + C::kStaging * C::kSlotBytes);
  int32_t *sScan = sList + kListCap;
  int32_t *sLastIn = sScan + 4;  // per consumer warpgroup: its split unit was the item's last
  int32_t *sEntry = sScan + 8;   // the list entry of each stage's tile
  // Per pair of stages (a step): K landed (+ both entries), V landed; K free (its S is
  // done), V free (its PV is done). K is freed a step before V, so the producer can start
  // refilling a pair before its V is free. Pair q's barriers are at offset 8 * q.
  constexpr int kPairs = S / 2;
  const uint32_t full_k = smem_addr(sEntry + S + (S & 1));  // 8-byte aligned
  const uint32_t full_v = full_k + kPairs * 8;
  const uint32_t empty_k = full_v + kPairs * 8;
  const uint32_t empty_v = empty_k + kPairs * 8;
  // kListsTiles (TileListing): the sequences with tiles, after the barriers; then the walk:
  // its split (one planned here for the listed items, or the host's), its units and the
  // table's sequences (0: the whole grid is walked), read from shared memory where used
  // (registers are the producer's limit: 40). Without it, the walk is the parameters'.
  // e4m3: after the pair barriers, a barrier per staging slot (its K and V, or with
  // kFp8Keys its V, landed) and the list entry of the slot's tile.
  const uint32_t staged = empty_v + kPairs * 8;
  int32_t *sStagedEntry = sEntry + S + (S & 1) + 4 * kPairs * 2 + 2 * C::kStaging;
  uint32_t *sTable = reinterpret_cast<uint32_t *>(sStagedEntry + C::kStaging);
  volatile int32_t *sWalk = reinterpret_cast<int32_t *>(sTable + cuda::kSeqTileTableCap);
  enum { kWays, kFirst, kTail, kUnits, kListed };
  // The producer's stage count n: stage n % S, pair barrier at 8 * (stage / 2).
  auto pair_bar = [](uint32_t bars, int n) { return bars + 8 * ((n % S) >> 1); };
  // A consumer's ring position, kept as stage and phase rather than a stage count (n % S
  // and n / S cost five instructions each, several times per step). The producer keeps
  // its count: walking the ring with this measured 1% slower at 32k sparse (its divisions
  // are off the consumers' chain; bench/NOTES.md, sm90a log, v22 and its notes).
  struct Ring {
    int stage, phase;
    __device__ Ring advanced(int k) const {  // k <= S
      return stage + k >= S ? Ring{stage + k - S, phase ^ 1} : Ring{stage + k, phase};
    }
    __device__ uint32_t bar() const { return 8 * (stage >> 1); }  // its pair's barrier offset
  };
  // K and V of a stage (RingLayout): grouped where tiles come a page box at a time. With
  // kFp8Keys, K's ring is e4m3 rows instead (C::kKStageBytes a stage, e4m3_stage_off).
  using KvRing = RingLayout<NH, S, kPageBoxes>;
  constexpr uint32_t kGroupBytes = KvRing::kGroupBytes, kHalfOffset = KvRing::kHalfOffset;
  auto stage_off = [](int stage) { return static_cast<uint32_t>(stage) * KvRing::kStageStride; };
  // Chunk c of row r of stage 0: the ring's K (or V) is one swizzled operand of S * 64 rows.
  auto kv_off = [](int r, int c) { return KvRing::off(r, c); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int B = p.layout.block_size;

  // Persistent: the CTAs walk the logical grid `work` (x = head fastest, so the heaviest
  // tiles of every head come first) in rounds of gridDim.x items, in snake order (CTA b
  // takes position b of even rounds and gridDim.x - 1 - b of odd ones, which evens out
  // the cost that falls from item to item). The producer and the consumers walk it alike,
  // so the stages they exchange line up; the producer starts the next item's list and
  // copies while the consumers finish the current one. Everything the walk depends on is
  // uniform (a branch around wgmma code on a loaded value makes ptxas serialize them).
  // A launch that lists its items (TileListing) walks only the grid's tiles that have rows,
  // (x, the head, fastest; then the table's sequences, each one's late tiles first).
  // Units: the whole items before split.first, then chunk 0 of every split item, chunk 1, ...
  auto walk = [&](int field, int host_value) {
    if constexpr (kListsTiles)
      return static_cast<int>(sWalk[field]);
    else
      return host_value;
  };
  int items = static_cast<int>(work.x * work.y * work.z);
  if constexpr (kListsTiles) {
    const cuda::SeqTileTable table = cuda::build_seq_tile_table<BM, C::kThreads>(
        p, static_cast<int>(work.z), static_cast<int>(work.y), sTable, sList);
    const bool listed = table.count <= cuda::kSeqTileTableCap && table.tiles <= 0xffff;
    if (listed) items = static_cast<int>(work.x) * table.tiles;
    if (tid == 0) {
      const SplitPlan split =
          listed ? plan_split(items, static_cast<int>(gridDim.x), listing.split_capacity) : grid_split;
      sWalk[kWays] = split.ways, sWalk[kFirst] = split.first, sWalk[kTail] = split.tail;
      sWalk[kUnits] = static_cast<int>(split.units(items));
      sWalk[kListed] = listed ? table.count : 0;
    }
  }
  int units = static_cast<int>(grid_split.units(items));
  if constexpr (!kListsTiles) {
    // A fixed-shape batch's padded work list (live_entries: its entries with rows this
    // step, read here so that a captured graph replays for any plan): the padding is the
    // list's tail, so its items are the walk's last. Where none of the live items is split
    // (they all come before split.first), the walk ends with them instead of stepping
    // through the padding's items as empty steps (a captured decode step launches this grid
    // every layer with none: bench/NOTES.md, "Session 23", item 4).
    if (live_entries) {
      const int live = static_cast<int>(work.x) * *live_entries * (p.work_tile_rows / BM);
      if (live <= grid_split.first) units = min(units, live);
      // A CTA without a unit (the step has fewer items than the grid has CTAs, or none)
      // leaves before setting up its ring: a captured decode step launches this grid every
      // layer with no items at all.
      if (static_cast<int>(blockIdx.x) >= units) return;
    }
  }
  int rounds = (units + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  if (tid == 0) {
    for (int q = 0; q < kPairs; ++q) {
      // Each producer thread for both stages (its cp.async copies landed, or its arrival
      // beside a TMA box whose bytes thread 0 announced), + the entries for K.
      mbar_init(full_k + 8 * q, 2 * C::kProducers + 1);
      mbar_init(full_v + 8 * q, 2 * C::kProducers);
      mbar_init(empty_k + 8 * q, 8);  // one arrival per consumer warp
      mbar_init(empty_v + 8 * q, 8);
    }
    for (int j = 0; j < C::kStaging; ++j) mbar_init(staged + 8 * j, C::kProducers);  // each producer thread once
    fence_mbar_init();
  }
  __syncthreads();
  if constexpr (kListsTiles) {
    units = sWalk[kUnits];
    rounds = (units + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  }
  auto unit_of = [&](int round) {
    const int pos = (round & 1) ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    return round * static_cast<int>(gridDim.x) + pos;
  };
  struct Unit {
    int item, chunk, tail;  // tail: the item's index among the split ones (-1: whole)
  };
  auto unit_parts = [&](int u) {
    const int first = walk(kFirst, grid_split.first), tail = walk(kTail, grid_split.tail);
    if (u < first) return Unit{u, 0, -1};
    const int v = u - first;
    return Unit{first + v % tail, v / tail, v % tail};
  };
  int h = 0, seq = 0, qs = 0, q_len = 0, ctx = 0, t0 = 0, t1 = 0, p0 = 0, p1 = 0, qb0 = 0, qb1 = 0;
  // Sets the item's tile; false (and no rows: t0 = t1) when the item has none.
  auto locate = [&](int item) {
    const int yz = item / static_cast<int>(work.x);
    h = item % static_cast<int>(work.x);
    int y = yz % static_cast<int>(work.y), z = yz / static_cast<int>(work.y), grid_y = static_cast<int>(work.y);
    // Listed: the sequence's tiles as grid_y, so its late ones come first.
    if constexpr (kListsTiles)
      if (const int listed_seqs = sWalk[kListed]; listed_seqs > 0)
        cuda::find_listed_tile(sTable, listed_seqs, yz, z, y, grid_y);
    cuda::QueryTile tile;
    if (!cuda::locate_query_tile<BM>(p, y, z, grid_y, tile)) {
      seq = qs = q_len = ctx = t0 = t1 = p0 = p1 = qb0 = qb1 = 0;
      return false;
    }
    seq = tile.seq, qs = tile.qs, q_len = tile.q_len, ctx = tile.ctx;
    t0 = tile.t0, t1 = tile.t1, p0 = tile.p0, p1 = tile.p1, qb0 = tile.qb0, qb1 = tile.qb1;
    return true;
  };

  if (wg == 0) {
    // ---- producer: list, then gather K/V ------------------------------------------------
    regs_dealloc<C::kProducerRegs>();
    // Per item only ints live across the copies; pointers are rebuilt from the parameters
    // (constant bank) per tile, to fit the producer's 40 registers.
    int kv_len = 0, kvh = 0;
    const int page_mask = (1 << p.page_shift) - 1;
    // Thread tid copies 16-byte chunk tid % kChunks of rows tid / kChunks + i * kRowStep.
    constexpr int kRowStep = C::kProducers / C::kChunks;
    const int c = tid % C::kChunks, r0 = tid / C::kChunks;
    int filled = 0;  // stages filled so far (ring position and phase)
    // e4m3 pages: a tile's bytes land in staging slot `fetched % L` (fetch), and the oldest
    // two slots are widened into the next pair of ring stages (widen_pair) when every slot
    // is taken, the rest when the item ends; the ring's barriers count as for 16-bit pages.
    // kFp8Keys: K's bytes land in K's ring instead (land_k), the slots hold V alone.
    int fetched = 0;  // tiles whose bytes were requested
    // The e4m3 bytes of a tile's K (with_k) and V (with_v) at dst, K first, with one arrival
    // per producer thread on bar once they land (TMA's bytes announced by thread 0);
    // before_copies() runs once the block table's read is issued, so its wait hides it.
    auto land = [&](auto with_k, auto with_v, int entry, uint32_t dst, uint32_t bar, auto before_copies) {
      constexpr bool kK = decltype(with_k)::value, kV = decltype(with_v)::value;
      constexpr uint32_t kVOff = kK ? C::kSlotVOffset : 0;
      const int k0 = (entry & kTileIndexMask) * kKeyTile;
      const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
      const bool whole_tile = entry != kNoTiles && k0 + kKeyTile <= kv_len;
      const bool tma = maps.valid && whole_tile && (kPageBoxes || p.page_shift >= 6);
      const int boxes = kPageBoxes ? (kKeyTile >> p.page_shift) : 1;  // thread j: the tile's j-th page
      const int pg = tma && tid < boxes ? bt[(k0 >> p.page_shift) + tid] : 0;
      before_copies();
      if (tma) {
        if (tid == 0)
          mbar_arrive_expect_tx(bar, (int(kK) + int(kV)) * C::kStagingTileBytes);
        else
          mbar_arrive(bar);
        if (tid < boxes) {
          // One box of whole rows (D bytes) per tensor and tile, or per page at its row offset.
          const int tok = kPageBoxes ? 0 : k0 & page_mask;
          auto coord = [&](int dim) { return maps.dim_tok == dim ? tok : maps.dim_head == dim ? kvh : pg; };
          const uint32_t to = dst + (kPageBoxes ? (static_cast<uint32_t>(tid) << p.page_shift) * D : 0u);
          if constexpr (kK) tma_load_4d(to, &maps.k, 0, coord(1), coord(2), coord(3), bar);
          if constexpr (kV) tma_load_4d(to + kVOff, &maps.v, 0, coord(1), coord(2), coord(3), bar);
        }
      } else {
        if (entry != kNoTiles) {
          // Thread tid copies 16-byte chunk tid % kRowChunks of rows tid / kRowChunks + i *
          // kStep; the page ids of its rows are read once, for K and V.
          constexpr int kRowChunks = D / 16, kStep = C::kProducers / kRowChunks, kRows = kKeyTile / kStep;
          const int c = tid % kRowChunks, r0 = tid / kRowChunks;
          int32_t pgs[kRows];
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const int j = k0 + r0 + i * kStep;
            pgs[i] = j < kv_len ? bt[j >> p.page_shift] : 0;
          }
          auto gather = [&](uint32_t to, const void *base_v, int64_t head_stride, int64_t page_stride,
                            int64_t tok_stride) {
            const KV *base = static_cast<const KV *>(base_v) + static_cast<int64_t>(kvh) * head_stride;
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
              const int r = r0 + i * kStep, j = k0 + r;
              const bool valid = j < kv_len;  // rows past the sequence are zero-filled
              const KV *src = base + static_cast<int64_t>(pgs[i]) * page_stride +
                              static_cast<int64_t>(j & page_mask) * tok_stride + c * 16;
              cp_async_16(to + e4m3_stage_off<D>(r, c), valid ? src : base, valid);
            }
          };
          if constexpr (kK) gather(dst, p.k, p.k_head, p.k_page, p.k_tok);
          if constexpr (kV) gather(dst + kVOff, p.v, p.v_head, p.v_page, p.v_tok);
        }
        cp_async_arrive(bar);
      }
    };
    // A tile's bytes into staging slot `fetched % L`: K and V, or (kFp8Keys) V alone.
    auto fetch = [&](int entry) {
      const int slot = fetched % L;
      land(std::bool_constant<!kFp8Keys>{}, std::true_type{}, entry, smem_addr(sStaging) + slot * C::kSlotBytes,
           staged + 8 * slot, [&] {
             // Every producer thread has widened the slot's previous tile: its reads (generic)
             // come before the copies that overwrite it (TMA's through the async proxy).
             fence_proxy_async();
             named_barrier(1, 128);
             if (tid == 0) sStagedEntry[slot] = entry;
           });
      ++fetched;
    };
    // kFp8Keys: a tile's K bytes straight into the next stage of K's ring, which the S GEMM
    // reads as they are (the pair's barriers as for 16-bit pages: the copies' arrivals, the
    // entries with the second's).
    // K's stage is the tile's count, `fetched`: fill lands K before its fetch counts the tile.
    auto land_k = [&](int entry) {
      const int stage = fetched % S;
      const bool second = stage & 1;
      if (fetched >= S && !second) mbar_wait(pair_bar(empty_k, stage), ((fetched / S) - 1) & 1);
      land(std::true_type{}, std::false_type{}, entry, smem_addr(sK) + stage * C::kKStageBytes, pair_bar(full_k, stage),
           [] {});
      if (tid == 0) {
        sEntry[stage] = entry;
        if (second) mbar_arrive(pair_bar(full_k, stage));  // release: both entries are visible with the phase
      }
    };
    // Widens the next pair of stages (filled is even), both K first, then both V: a pair's
    // K is free a step before its V (the consumers' S runs ahead of their PV), so the
    // consumers' next S never waits for a V (widening per stage, K then V, stalled them).
    // kFp8Keys: V's alone.
    auto widen_pair = [&] {
      const int stage = filled % S, slot = filled % L;  // filled and S, L even: slot + 1 is the second's
      const uint32_t parity = ((filled / S) - 1) & 1, staged_parity = (filled / L) & 1;
      mbar_wait(staged + 8 * slot, staged_parity);
      mbar_wait(staged + 8 * (slot + 1), staged_parity);
      const int e0 = sStagedEntry[slot], e1 = sStagedEntry[slot + 1];
      const char *from = sStaging + slot * C::kSlotBytes;  // the second's at + kSlotBytes
      // Thread tid widens chunk c of rows r_low + 8 j, j = r_hi, r_hi + kGroups, ...: a
      // quarter warp takes eight consecutive rows at one chunk, so neither its reads nor its
      // writes (two 16-byte chunks of the swizzled ring) meet in a bank, and a thread's
      // rows share their swizzle phase: its addresses are constant offsets from the first.
      constexpr int kRowChunks = D / 16, kGroups = C::kProducers / (8 * kRowChunks);
      const int r_low = tid & 7, c = (tid >> 3) % kRowChunks, r_first = r_low + 8 * ((tid >> 3) / kRowChunks);
      auto widen_tile = [&](const char *src, char *dst) {
        src += e4m3_stage_off<D>(r_first, c);
        char *dst_b = dst + kv_off(r_first, 2 * c + 1);  // the swizzle may put it before dst's
        dst += kv_off(r_first, 2 * c);
#pragma unroll
        for (int i = 0; i < 8 / kGroups; ++i) {
          const uint4 w = *reinterpret_cast<const uint4 *>(src + i * 8 * kGroups * D);
          uint4 a, b;
          fp8::convert_e4m3x4_f16(w.x, a.x, a.y);
          fp8::convert_e4m3x4_f16(w.y, a.z, a.w);
          fp8::convert_e4m3x4_f16(w.z, b.x, b.y);
          fp8::convert_e4m3x4_f16(w.w, b.z, b.w);
          *reinterpret_cast<uint4 *>(dst + i * kGroups * kGroupBytes) = a;
          *reinterpret_cast<uint4 *>(dst_b + i * kGroups * kGroupBytes) = b;
        }
      };
      if constexpr (!kFp8Keys) {  // (kFp8Keys: K landed in its ring, land_k)
        if (filled >= S) mbar_wait(pair_bar(empty_k, stage), parity);
        if (e0 != kNoTiles) widen_tile(from, sK + stage_off(stage));
        if (e1 != kNoTiles) widen_tile(from + C::kSlotBytes, sK + stage_off(stage + 1));
        fence_proxy_async();                   // generic stores that wgmma reads through the async proxy
        mbar_arrive(pair_bar(full_k, stage));  // one arrival per stage, as the copies make
        mbar_arrive(pair_bar(full_k, stage));
        if (tid == 0) {
          sEntry[stage] = e0, sEntry[stage + 1] = e1;
          mbar_arrive(pair_bar(full_k, stage));  // release: both entries are visible with the phase
        }
      }
      if (filled >= S) mbar_wait(pair_bar(empty_v, stage), parity);
      if (e0 != kNoTiles) widen_tile(from + C::kSlotVOffset, sV + stage_off(stage));
      if (e1 != kNoTiles) widen_tile(from + C::kSlotBytes + C::kSlotVOffset, sV + stage_off(stage + 1));
      fence_proxy_async();
      mbar_arrive(pair_bar(full_v, stage));
      mbar_arrive(pair_bar(full_v, stage));
      filled += 2;
    };
    // The item's last tiles into the ring (fetched is even: items pad to whole pairs). The
    // barrier first: thread 0's entry of the latest slot is read by every thread (a
    // cp.async arrival does not publish it).
    auto drain = [&] {
      named_barrier(1, 128);
#pragma unroll 1
      while (filled < fetched) widen_pair();
    };
    // Hands one stage to the consumers: K once its K is free (then the entry), V once its
    // V is free; copies nothing for kNoTiles.
    auto fill = [&](int entry) {
      if constexpr (kE4m3) {
        if constexpr (kFp8Keys) land_k(entry);
        fetch(entry);  // into a free slot: at most L - 1 were waiting
        if (fetched - filled == L) widen_pair();
        return;
      }
      const int stage = filled % S;
      const uint32_t parity = ((filled / S) - 1) & 1;
      const int k0 = (entry & kTileIndexMask) * kKeyTile;
      const int32_t *bt = p.block_table + static_cast<int64_t>(seq) * p.bt_stride;
      // A whole tile in one page (tiles are 64-aligned) takes one block-table read, shared
      // by K and V and issued before the waits below, which hide its latency. kPageBoxes
      // (pages of 8..32 tokens, TMA descriptors made): a whole tile goes by TMA, a box per
      // page, thread j reading the tile's j-th page id (before the waits likewise);
      // kGroupBoxes: a box per 8-row group, thread j the j-th group's (its page's id), so no
      // thread issues more than one box a tile whatever the page size (a thread issuing its
      // page's boxes in turn ran 32-token pages 5% below 16-token ones: bench/NOTES.md,
      // "Session 23").
      const bool whole_tile = entry != kNoTiles && k0 + kKeyTile <= kv_len;
      const bool one_page = !kPageBoxes && whole_tile && p.page_shift >= 6;
      const bool tma = kPageBoxes ? whole_tile : one_page && maps.valid;
      const int64_t page = kGroupBoxes ? (whole_tile && tid < kKeyTile / 8 ? bt[(k0 + 8 * tid) >> p.page_shift] : 0)
                           : kPageBoxes
                               ? (whole_tile && tid < (kKeyTile >> p.page_shift) ? bt[(k0 >> p.page_shift) + tid] : 0)
                               : (one_page ? bt[k0 >> p.page_shift] : 0);
      // One tensor's tile: rows past the sequence are zero-filled.
      auto copy = [&](uint32_t dst, const void *base_v, int64_t head_stride, int64_t page_stride, int64_t tok_stride) {
        const T *base = static_cast<const T *>(base_v) + static_cast<int64_t>(kvh) * head_stride;
        if (one_page) {
          const T *src = base + page * page_stride + static_cast<int64_t>((k0 & page_mask) + r0) * tok_stride + c * 8;
          // Rows r0 + i * kRowStep share r0's swizzle phase, so each copy is a constant
          // offset from the first; with the pool's own layout (token rows of D elements)
          // the source is too, and a copy is one instruction.
          static_assert(kRowStep % 8 == 0, "rows of one thread must share the swizzle phase");
          const uint32_t d = dst + kv_off(r0, c);
          if (tok_stride == D) {
#pragma unroll
            for (int i = 0; i < kKeyTile / kRowStep; ++i)
              cp_async_16(d + i * (kRowStep / 8) * kGroupBytes, src + i * kRowStep * D);
          } else {
#pragma unroll
            for (int i = 0; i < kKeyTile / kRowStep; ++i)
              cp_async_16(d + i * (kRowStep / 8) * kGroupBytes, src + static_cast<int64_t>(i * kRowStep) * tok_stride);
          }
        } else {
          // Pages under 64 tokens (or a tile past the sequence's end): the page ids of a
          // burst of rows are read together, then their copies go out. Read per row just
          // before its copy (two rows at a time), each copy waited for its block-table load
          // and the producer fell behind the consumers: 16- and 32-token pages ran at under
          // half the speed of 64 (bench/NOTES.md, "Pages under 64 tokens"). Bursts of four
          // (two at D = 64, whose four rows a thread are one burst) fit the producer's
          // registers: ptxas spills no more than before.
          constexpr int kRows = kKeyTile / kRowStep, kBurst = D == 128 ? 4 : 2;
          static_assert(kRows % kBurst == 0, "a thread's rows are whole bursts");
#pragma unroll 1
          for (int b = 0; b < kRows; b += kBurst) {
            int32_t pg[kBurst];
#pragma unroll
            for (int i = 0; i < kBurst; ++i) {
              const int j = k0 + r0 + (b + i) * kRowStep;
              pg[i] = j < kv_len ? bt[j >> p.page_shift] : 0;
            }
#pragma unroll
            for (int i = 0; i < kBurst; ++i) {
              const int r = r0 + (b + i) * kRowStep;
              const int j = k0 + r;
              const bool valid = j < kv_len;
              const T *src = base + static_cast<int64_t>(pg[i]) * page_stride +
                             static_cast<int64_t>(j & page_mask) * tok_stride + c * 8;
              cp_async_16(dst + kv_off(r, c), valid ? src : base, valid);
            }
          }
        }
      };
      // A tile by TMA: thread 0 expects its bytes and issues a box per 64-column half, the
      // others only arrive (so each stage has the same arrivals). kPageBoxes: thread j
      // issues the box of the tile's j-th page, both halves of its page_size rows (whole
      // 8-row groups, kv_tensor_map.cpp), or with kGroupBoxes the box of its j-th 8-row
      // group, at its row offset, so the 128-byte swizzle, which TMA takes from the address,
      // lays the rows out as the grouped ring wants; the phase waits for thread 0's bytes and
      // arrival whenever the boxes land.
      static_assert(C::kTileBytes == NH * kTmaBoxTokens * kTmaBoxColumns * static_cast<int>(sizeof(T)),
                    "thread 0 expects a tile's bytes from NH boxes of 64 rows or its 8-row groups of both halves");
      auto load_boxes = [&](uint32_t dst, const CUtensorMap &map, uint32_t bar) {
        const int pg = static_cast<int>(page);
        if constexpr (kPageBoxes) {
          if (tid == 0)
            mbar_arrive_expect_tx(bar, C::kTileBytes);
          else
            mbar_arrive(bar);
          if constexpr (kGroupBoxes) {
            if (tid < kKeyTile / 8) {  // thread j: rows 8 j .. 8 j + 7, in its page from (8 j) % page_size
              const int c3 = kvh * maps.c3_h + pg * maps.c3_p, c4 = kvh * maps.c4_h + pg * maps.c4_p;
              tma_load_5d(dst + tid * kGroupBytes, &map, 0, (8 * tid) & page_mask, 0, c3, c4, bar);
            }
          } else if (tid < (kKeyTile >> p.page_shift)) {
            const uint32_t to = dst + (static_cast<uint32_t>(tid) << p.page_shift) * (kGroupBytes / 8);
            const int c3 = kvh * maps.c3_h + pg * maps.c3_p, c4 = kvh * maps.c4_h + pg * maps.c4_p;
            tma_load_5d(to, &map, 0, 0, 0, c3, c4, bar);
          }
        } else if (tid == 0) {
          mbar_arrive_expect_tx(bar, C::kTileBytes);
          auto coord = [&](int dim) { return maps.dim_tok == dim ? k0 & page_mask : maps.dim_head == dim ? kvh : pg; };
#pragma unroll
          for (int hh = 0; hh < NH; ++hh)
            tma_load_4d(dst + hh * kHalfOffset, &map, hh * 64, coord(1), coord(2), coord(3), bar);
        } else {
          mbar_arrive(bar);
        }
      };
      const bool second = stage & 1;  // of its pair: the pair's barriers were waited for
      // K then V, written out twice: folding the two into one lambda over (ring, map,
      // barrier, tensor) made ptxas spill (4 bytes at D64, more at D128).
      if (filled >= S && !second) mbar_wait(pair_bar(empty_k, stage), parity);
      if (tma) {
        load_boxes(smem_addr(sK) + stage_off(stage), maps.k, pair_bar(full_k, stage));
      } else {
        if (entry != kNoTiles) copy(smem_addr(sK) + stage_off(stage), p.k, p.k_head, p.k_page, p.k_tok);
        cp_async_arrive(pair_bar(full_k, stage));
      }
      if (tid == 0) {
        sEntry[stage] = entry;
        if (second) mbar_arrive(pair_bar(full_k, stage));  // release: both entries are visible with the phase
      }
      if (filled >= S && !second) mbar_wait(pair_bar(empty_v, stage), parity);
      if (tma) {
        load_boxes(smem_addr(sV) + stage_off(stage), maps.v, pair_bar(full_v, stage));
      } else {
        if (entry != kNoTiles) copy(smem_addr(sV) + stage_off(stage), p.v, p.v_head, p.v_page, p.v_tok);
        cp_async_arrive(pair_bar(full_v, stage));
      }
      ++filled;
    };
    for (int round = 0; round < rounds; ++round) {
      const int u = unit_of(round);
      if (u >= units) break;  // only in the last round
      const Unit unit = unit_parts(u);
      if (!locate(unit.item)) {  // the consumers take the item too: one empty step
        fill(kNoTiles);
        fill(kNoTiles);  // and its pair
        if constexpr (kE4m3) drain();
        continue;
      }
      kv_len = ctx + q_len;
      kvh = h / p.group;
      {                     // the consumers load this item's Q after the current item: bring it to L2 now
        const int r = tid;  // one row per thread, 128-byte lines
        if (r < t1 - t0) {
          const T *q = static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0 + r) * p.q_tok +
                       static_cast<int64_t>(h) * p.q_head;
#pragma unroll
          for (int hh = 0; hh < NH; ++hh) prefetch_l2(q + hh * 64);
        }
      }
      const int n_kt = p1 / kKeyTile + 1;
      auto list_pass = [&](int c0) {
        return cuda::list_key_tiles<C::kProducers, C::kPerThread>(
            p.layout, h, qb0, qb1, p0, B, c0, min(n_kt, c0 + kListCap), sList, sScan, ProducerBarrier{});
      };
      // The unit's share [lo, hi) of the item's visible tiles: all of them unless split,
      // which needs their count first (one pass usually lists them all: kept, not redone).
      int lo = 0, hi = kLastTile, kept = -1;
      if (unit.tail >= 0) {
        int n = 0;
        // No barrier between passes: list_key_tiles meets its callers before it rewrites
        // sList, and counting reads nothing of it.
        for (int c0 = 0; c0 < n_kt; c0 += kListCap) n += list_pass(c0);
        if (n_kt <= kListCap) kept = n;
        const int ways = walk(kWays, grid_split.ways);
        lo = unit.chunk * n / ways;
        hi = (unit.chunk + 1) * n / ways;
      }
      // One tile is held back per pass so the last one can carry kLastTile.
      int held = kNoTiles;
      for (int c0 = 0, g = 0; c0 < n_kt; c0 += kListCap) {
        const int total = kept >= 0 ? kept : list_pass(c0);
        for (int it = max(0, lo - g); it < min(total, hi - g); ++it) {
          if (held != kNoTiles) fill(held);
          held = sList[it];
        }
        g += total;
        named_barrier(1, 128);  // sList is rewritten by the next pass
      }
      fill(held == kNoTiles ? kNoTiles : held | kLastTile);
      if ((kE4m3 ? fetched : filled) & 1) fill(kNoTiles);  // steps start on even stages: pad the pair
      if constexpr (kE4m3) drain();
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumers ------------------------------------------------------------------------
  regs_alloc<C::kConsumerRegs>();
  const int cg = wg - 1;  // rows 64 * cg .. 64 * cg + 63 of the tile
  // D 64 and e4m3 pages: the two consumers take turns issuing their GEMMs
  // (FlashAttention-3's ping-pong, hardware barriers 4 and 5), so that one's softmax runs
  // under the other's GEMMs. At D 64 the softmax is twice the share of a step that it is
  // at D 128 (dense +4...+20%, sparse +1...+17%); over e4m3 pages at D 128 turns measured
  // -2...+11% (one round, 21 of 26 rows faster). 16-bit pages at D 128 drift freely
  // instead: turns cost their long dense cases 1-4% (bench/NOTES.md, session 26). Both
  // consumers run the same steps (the item's, from the same stages), so their turns pair
  // up; consumer 1 gives consumer 0 the first turn.
  constexpr bool kPingPong = D == 64 || kE4m3;
  auto gemm_turn_begin = [&] {
    if constexpr (kPingPong) named_barrier(4 + cg, 256);
  };
  auto gemm_turn_end = [&] {
    if constexpr (kPingPong) named_barrier_arrive(4 + (cg ^ 1), 256);
  };
  if (cg == 1) gemm_turn_end();
  auto load_q = [&] {  // this warpgroup's 64 Q rows -> shared (rows past the sequence are zero)
    const T *qbase =
        static_cast<const T *>(p.q) + static_cast<int64_t>(qs + t0) * p.q_tok + static_cast<int64_t>(h) * p.q_head;
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
  };

  // This warp's 16 rows of Q (the e4m3 paths' per-warp conversions): lane `lane` holds
  // 16-byte chunks lane + 32 i, i < kQChunksPerLane, of the rows' 16-bit elements.
  constexpr int kQChunksPerLane = 16 * C::kChunks / 32;
  auto warp_q_chunk = [&](int i) -> char * {
    const int idx = lane + 32 * i;
    return sQ + swz<BM>(cg * 64 + (warp & 3) * 16 + idx / C::kChunks, idx % C::kChunks);
  };

  // e4m3 pages with bf16 q: each warp converts its own 16 rows of Q to f16 in place, scaled
  // by the power of two that brings their largest |q| to the top of f16's range (exact for
  // every bf16 value within 2^24 of that largest one), and returns the shift, which the
  // logits' scale undoes; the warpgroup meets again before its wgmma reads them. f16 q: 0.
  auto convert_q_f16 = [&]() -> int {
    if constexpr (std::is_same_v<T, __half>) {
      return 0;
    } else {
      uint4 x[kQChunksPerLane];
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < kQChunksPerLane; ++i) {
        x[i] = *reinterpret_cast<const uint4 *>(warp_q_chunk(i));
        for (const uint32_t w : {x[i].x, x[i].y, x[i].z, x[i].w}) amax = fp8::max_abs_bf16x2(w, amax);
      }
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const int shift = fp8::q_row_shift(amax);
      const float scale = fp8::exp2i(shift);
#pragma unroll
      for (int i = 0; i < kQChunksPerLane; ++i) {
        *reinterpret_cast<uint4 *>(warp_q_chunk(i)) =
            make_uint4(fp8::bf16x2_to_f16x2(x[i].x, scale), fp8::bf16x2_to_f16x2(x[i].y, scale),
                       fp8::bf16x2_to_f16x2(x[i].z, scale), fp8::bf16x2_to_f16x2(x[i].w, scale));
      }
      fence_proxy_async();  // generic stores that wgmma reads through the async proxy
      named_barrier(2 + cg, 128);
      return shift;
    }
  };
  // kFp8Keys: each warp splits its own 16 rows of Q, scaled by the power of two that brings
  // their largest |q| into [2^7, 2^8), into two e4m3 tiles, hi and lo (fp8::split_e4m3x2), in
  // place: hi over the rows' first 128 bytes (the Q tile's first 64-column half), lo over
  // their second, each a row of D bytes in the 128-byte swizzle the S GEMM's descriptors
  // read. Returns the shift, which the logits' scale undoes.
  auto split_q_e4m3 = [&]() -> int {
    const int row0 = cg * 64 + (warp & 3) * 16;
    uint4 x[kQChunksPerLane];
    // The largest |q| of the warp's rows: non-negative 16-bit floats order as their bits.
    uint32_t amax_bits = 0;
#pragma unroll
    for (int i = 0; i < kQChunksPerLane; ++i) {
      x[i] = *reinterpret_cast<const uint4 *>(warp_q_chunk(i));
      for (const uint32_t w : {x[i].x, x[i].y, x[i].z, x[i].w}) amax_bits = __vmaxu2(amax_bits, w & 0x7fff7fffu);
    }
    amax_bits = __reduce_max_sync(0xffffffffu, max(amax_bits & 0xffffu, amax_bits >> 16));
    const uint16_t amax16 = static_cast<uint16_t>(amax_bits);
    float amax;
    if constexpr (std::is_same_v<T, __half>)
      amax = __half2float(__ushort_as_half(amax16));
    else
      amax = __bfloat162float(__ushort_as_bfloat16(amax16));
    const int shift = fp8::q_row_shift(amax, 7);
    const float scale = fp8::exp2i(shift);
    // The pair times 2^shift as f16: exact but for values under 2^-21 of the rows' largest.
    auto scaled_f16x2 = [&](uint32_t w) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>)
        f = __half22float2(*reinterpret_cast<const __half2 *>(&w));
      else
        f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w));
      const __half2 h = __floats2half2_rn(f.x * scale, f.y * scale);
      return *reinterpret_cast<const uint32_t *>(&h);
    };
    __syncwarp();  // every lane's reads of the warp's rows before any write over them
#pragma unroll
    for (int i = 0; i < kQChunksPerLane; ++i) {
      const int idx = lane + 32 * i;
      const int r = row0 + idx / C::kChunks, c = idx % C::kChunks;  // 16-bit chunk c: bytes 8c.. of the e4m3 row
      uint16_t hi[4], lo[4];
      fp8::split_e4m3x2(scaled_f16x2(x[i].x), hi[0], lo[0]);
      fp8::split_e4m3x2(scaled_f16x2(x[i].y), hi[1], lo[1]);
      fp8::split_e4m3x2(scaled_f16x2(x[i].z), hi[2], lo[2]);
      fp8::split_e4m3x2(scaled_f16x2(x[i].w), hi[3], lo[3]);
      // e4m3_stage_off<128>(r, c / 2) + 8 (c % 2), written out: the call compiles to another
      // schedule of the same instructions than the one measured and checked (session 27).
      const uint32_t off = static_cast<uint32_t>(r * 128 + ((((c >> 1) ^ (r & 7)) << 4) | ((c & 1) << 3)));
      *reinterpret_cast<uint2 *>(sQ + off) =
          make_uint2(hi[0] | (uint32_t{hi[1]} << 16), hi[2] | (uint32_t{hi[3]} << 16));
      *reinterpret_cast<uint2 *>(sQ + BM * 128 + off) =
          make_uint2(lo[0] | (uint32_t{lo[1]} << 16), lo[2] | (uint32_t{lo[3]} << 16));
    }
    fence_proxy_async();  // generic stores that wgmma reads through the async proxy
    named_barrier(2 + cg, 128);
    return shift;
  };
  // Accumulator element i of this thread: row wrow + (i/2 % 2) * 8, column 8*(i/4) + 2*(lane%4) + i%2.
  const int wrow = cg * 64 + (warp & 3) * 16 + (lane >> 2);
  // The query blocks of this thread's two rows, relative to the item's first (qb0), one
  // byte each: set per item, so the masked softmax divides by nothing.
  int row_blocks = 0;
  // e4m3 pages: the item's K scale folds into the logits' scale (the operands are the exact
  // e4m3 values), its V scale into the epilogue's normalisation.
  float k_scale_log2 = 0.f;
  auto scale_log2 = [&] {
    if constexpr (kE4m3)
      return k_scale_log2;
    else
      return p.scale_log2;
  };
  float o[NH][32];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float s[2][32];  // S of a step's two tiles; written only by wgmma
#pragma unroll
  for (int i = 0; i < 32; ++i) s[0][i] = s[1][i] = 0.f;
  uint32_t pa[8][4], pb[8][4];  // P of two consecutive steps as wgmma A fragments (8 k-steps of 16 keys)

  auto fence_o = [&] {
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) fence_regs(o[hh]);
  };
  auto fence_p = [&](uint32_t(&P)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) fence_regs(P[kk]);
  };
  auto fence_s = [&] {
    fence_regs(s[0]);
    fence_regs(s[1]);
  };
  // Base descriptors; every operand of a step is a constant or per-stage offset from one.
  const uint64_t q_desc = sw128_desc(smem_addr(sQ) + cg * 64 * 128, 1024);
  const uint64_t k_desc = sw128_desc(smem_addr(sK), kGroupBytes);
  const uint64_t v_desc = sw128_desc(smem_addr(sV), kGroupBytes, kHalfOffset);
  // kFp8Keys: Q's hi and lo e4m3 tiles (split_q_e4m3: hi where q_desc points) and K's ring
  // of e4m3 rows.
  const uint64_t q_lo_desc = desc_advance(q_desc, BM * 128);
  const uint64_t k8_desc = sw128_desc(smem_addr(sK), 1024);
  // S of the step at stages n, n + 1: one N = 128 operand (a pad's stale keys are masked).
  auto issue_s = [&](Ring n) {
    wgmma_fence();
    // kFp8Keys: S = hi K^T + lo K^T, 32 bytes of each row an instruction. The FP8 sum keeps
    // ~13 bits, but only over the head dim: the sums over the keys stay P V's (f16, fp32).
    if constexpr (kFp8Keys) {
      const uint64_t k_stage = desc_advance(k8_desc, n.stage * C::kKStageBytes);
#pragma unroll
      for (int kk = 0; kk < D / 32; ++kk)
        wgmma_ss128_e4m3(s[0], s[1], desc_advance(q_desc, kk * 32), desc_advance(k_stage, kk * 32), kk > 0);
#pragma unroll
      for (int kk = 0; kk < D / 32; ++kk)
        wgmma_ss128_e4m3(s[0], s[1], desc_advance(q_lo_desc, kk * 32), desc_advance(k_stage, kk * 32), 1);
      wgmma_commit();
      return;
    }
    const uint64_t k_stage = desc_advance(k_desc, stage_off(n.stage));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;  // 16 columns = 32 bytes into the 128-byte row
      wgmma_ss128<MT>(s[0], s[1], desc_advance(q_desc, (kk >> 2) * (BM * 128) + off),
                      desc_advance(k_stage, (kk >> 2) * kHalfOffset + off), kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](Ring n, bool two, const uint32_t(&P)[8][4]) {
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if (t == 1 && !two) break;
      const uint64_t v_stage = desc_advance(v_desc, stage_off(n.stage + t));  // steps start on even stages
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if constexpr (NH == 2)  // both 64-column halves of V at once (LBO apart)
          wgmma_rs_tb128<MT>(o[0], o[NH - 1], P[4 * t + kk], desc_advance(v_stage, kk * 2 * kGroupBytes));
        else
          wgmma_rs_tb<MT>(o[0], P[4 * t + kk], desc_advance(v_stage, kk * 2 * kGroupBytes));
      }
    }
    wgmma_commit();
  };
  // Softmax of a step (entries e0, e1; e1 = kNoTiles when the step has one tile): reads S
  // (never writes it: registers wgmma writes stay untouched between its groups), moves m
  // and l, writes P. Lazy rescale (as the sm80 kernel): m only moves in a step where some
  // row of the warp may have grown past m + kSlack (the test differs with speculation,
  // below); otherwise the exponentials use the stale m and stay below 2^kSlack, exact in
  // fp32 and representable in bf16/f16. Returns whether O must be scaled by alpha.
  auto softmax = [&](auto masked, auto speculate, int e0, int e1, uint32_t(&P)[8][4], float(&alpha)[2]) -> bool {
    constexpr bool kMasked = decltype(masked)::value;
    constexpr bool kSpeculate = decltype(speculate)::value;
    // [tile][row half]: the last key column (within the thread's columns, nt * 8 + e) the
    // row may see; -1 when the tile's block is not visible to the row at all.
    int lim[2][2] = {{0, 0}, {0, 0}};
    if constexpr (kMasked) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int e = t == 0 ? e0 : e1;
        const int k0 = (e & kTileIndexMask) * kKeyTile;
        const unsigned bits = static_cast<unsigned>(e) >> cuda::kKeyTileBlockShift;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const bool ok = e != kNoTiles && ((bits >> ((row_blocks >> (8 * rr)) & 0xff)) & 1u);
          lim[t][rr] = ok ? p0 + wrow + rr * 8 - k0 - 2 * (lane & 3) : -1;
        }
      }
    }
    auto logit = [&](int t, int rr, int nt, int e) {
      float v = s[t][nt * 4 + rr * 2 + e];
      if constexpr (kMasked) {
        if (nt * 8 + e > lim[t][rr]) v = -INFINITY;
      }
      return v;
    };
    // P and the row sums against row maxima -m (0 for a row that has seen nothing yet).
    auto exponentials = [&](const float(&m_use)[2], float(&sum)[2]) {
      const float neg_m[2] = {m_use[0] == -INFINITY ? 0.f : -m_use[0], m_use[1] == -INFINITY ? 0.f : -m_use[1]};
      sum[0] = sum[1] = 0.f;
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float x0 = fast_exp2(fmaf(logit(t, rr, nt, 0), scale_log2(), neg_m[rr]));
            const float x1 = fast_exp2(fmaf(logit(t, rr, nt, 1), scale_log2(), neg_m[rr]));
            sum[rr] += x0 + x1;
            // A fragment of k-step nt/2: registers (rows lane/4, +8) x (keys of n-tile nt).
            P[4 * t + nt / 2][(nt & 1) * 2 + rr] = pack2<MT>(x0, x1);
          }
    };
    // Speculation: the exponentials against the current m are issued before anything
    // else, and their row sums decide the lazy rescale: every value exp2(x - m) in a
    // thread's partial sum is at most that sum, so partial sums <= 2^kSlack mean no logit
    // passed m + kSlack. That test needs no max tree, shuffles or their latency (the max
    // is computed only when m moves: bench/NOTES.md, v21). A step that fails it (overflow
    // and NaN included, and a row that has seen nothing yet, whose m is -inf) computes the
    // maxima and the exponentials again. The sum test is looser than the max test, so m
    // may move in a few more steps; either way every value stays within 2^kSlack.
    constexpr float kSlack = cuda::kSoftmaxSlack, kSlackBound = 256.f;  // 2^kSlack
    static_assert(kSlackBound == float(1 << int(kSlack)), "kSlackBound is 2^kSlack");
    // The row maxima of this step's logits (quad-reduced, in exp2 units).
    auto row_max = [&](float(&mx)[2]) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float v[16];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) v[t * 8 + nt] = fmaxf(logit(t, rr, nt, 0), logit(t, rr, nt, 1));
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = fmaxf(v[i], v[i + 8]);
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = fmaxf(v[i], v[i + 4]);
        float x = fmaxf(fmaxf(v[0], v[2]), fmaxf(v[1], v[3]));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
        mx[rr] = x * scale_log2();
      }
    };
    // Moves m to max(m, mx) (every row of the warp) and scales l to match.
    auto move_max = [&](const float(&mx)[2]) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const float m_new = fmaxf(m[rr], mx[rr]);
        alpha[rr] = m_new == -INFINITY ? 1.f : fast_exp2(m[rr] - m_new);
        m[rr] = m_new;
        l[rr] *= alpha[rr];
      }
    };
    float sum[2], mx[2];
    bool rescale;
    if constexpr (kSpeculate) {
      exponentials(m, sum);
      rescale = __any_sync(
          0xffffffffu, !(sum[0] <= kSlackBound) || !(sum[1] <= kSlackBound) || m[0] == -INFINITY || m[1] == -INFINITY);
      if (rescale) {
        row_max(mx);
        move_max(mx);
        exponentials(m, sum);
      }
    } else {  // the lazy test on the maxima themselves
      row_max(mx);
      rescale = __any_sync(0xffffffffu, mx[0] > m[0] + kSlack || mx[1] > m[1] + kSlack);
      if (rescale) move_max(mx);
      exponentials(m, sum);
    }
    l[0] += sum[0];
    l[1] += sum[1];
    return rescale;
  };
  auto rescale_o = [&](bool rescale, const float(&alpha)[2]) {
    if (!rescale) return;
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[hh][i] *= alpha[(i >> 1) & 1];
  };
  auto wait_v = [&](Ring n) {  // V of the step at stages n, n + 1 landed
    mbar_wait(full_v + n.bar(), n.phase);
    fence_proxy_async();
  };
  // This warp is done with the K (or V) of the step at stages n, n + 1.
  auto release = [&](uint32_t empty, Ring n) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + n.bar());
  };
  auto any_masked = [](int e0, int e1) { return e1 == kNoTiles || ((e0 | e1) & cuda::kKeyTileMasked); };
  // The step at stages n, n + 1 once their K landed: its entries (e1 = kNoTiles when the
  // second stage is a pad).
  struct Step {
    Ring n;
    int e0, e1;
  };
  auto take_step = [&](Ring n) {
    mbar_wait(full_k + n.bar(), n.phase);
    fence_proxy_async();  // cp.async copies land through the generic proxy, wgmma reads through the async one (TMA's
                          // too)
    // Lane 0 reads the entries for its warp: it alone arrives on the empty barrier that
    // lets the producer rewrite them, so the reads are ordered before that arrival in its
    // own program order (compute-sanitizer racecheck reports the other lanes' reads otherwise).
    int e0 = 0, e1 = 0;
    if (lane == 0) e0 = sEntry[n.stage], e1 = sEntry[n.stage + 1];
    Step st{n, __shfl_sync(0xffffffffu, e0, 0), __shfl_sync(0xffffffffu, e1, 0)};
    if (st.e0 & kLastTile) st.e1 = kNoTiles;
    return st;
  };
  // speculate: see softmax. Not for an item's first step (it always moves m) nor for masked
  // steps: their masked copy of S does not fit beside the speculation (272 bytes of spill in
  // the key loop, 200 with the sum test; bench/NOTES.md, sm90a log, v19 and v21).
  auto run_softmax = [&](auto speculate, const Step &st, uint32_t(&P)[8][4], float(&alpha)[2]) {
    return any_masked(st.e0, st.e1) ? softmax(std::true_type{}, std::false_type{}, st.e0, st.e1, P, alpha)
                                    : softmax(std::false_type{}, speculate, st.e0, st.e1, P, alpha);
  };

  Ring used{0, 0};  // the ring position after the stages consumed so far
  for (int round = 0; round < rounds; ++round) {
    const int u = unit_of(round);
    if (u >= units) break;
    const Unit unit = unit_parts(u);
    const int item = unit.item;
    // No `continue` for items without rows: they arrive as one empty step and store
    // nothing. (A branch around the wgmma code on a loaded value makes ptxas serialize every
    // wgmma of the kernel: C7520.)
    locate(item);
    row_blocks = ((p0 + wrow) / B - qb0) | (((p0 + wrow + 8) / B - qb0) << 8);
    named_barrier(2 + cg, 128);  // the previous item's epilogue has read its rows of sQ back
    load_q();
    // Q landed: every thread waits for its own copies, then the warpgroup meets.
    cp_async_wait<0>();
    fence_proxy_async();
    named_barrier(2 + cg, 128);
    if constexpr (kE4m3) {
      int shift;
      if constexpr (kFp8Keys)
        shift = split_q_e4m3();
      else
        shift = convert_q_f16();
      k_scale_log2 = p.scale_log2 * p.k_scale[h / p.group] * fp8::exp2i(-shift);
    }
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;

    float alpha[2] = {1.f, 1.f};
    Step cur = take_step(used);
    if (cur.e0 == kNoTiles) {
      release(empty_k, used);  // no visible key: O = 0, lse = -inf
      release(empty_v, used);
      used = used.advanced(2);
      asm volatile("" : "+r"(used.stage), "+r"(used.phase));
    } else {
      gemm_turn_begin();
      issue_s(cur.n);
      gemm_turn_end();
      wgmma_wait<0>();
      fence_s();
      release(empty_k, cur.n);
      rescale_o(run_softmax(std::false_type{}, cur, pa, alpha), alpha);
      // One step: S(next) and PV(cur) in flight, softmax(next) into the other P buffer.
      // Returns false after the last step.
      auto body = [&](uint32_t(&Pcur)[8][4], uint32_t(&Pnext)[8][4]) -> bool {
        const bool two = cur.e1 != kNoTiles;
        const bool last = two ? (cur.e1 & kLastTile) : (cur.e0 & kLastTile);
        // Only an item's last step may have one tile, so this is n + 2 wherever it is waited
        // on. Written so, and with `used` opaque below: once the compiler can tell that every
        // step starts on an even stage, ptxas serializes every wgmma (C7520; not understood).
        const Ring n_next = cur.n.advanced(two ? 2 : 1);
        Step next{};
        if (!last) next = take_step(n_next);
        fence_o();
        fence_p(Pcur);
        gemm_turn_begin();
        if (!last) issue_s(n_next);
        wait_v(cur.n);
        issue_pv(cur.n, two, Pcur);
        gemm_turn_end();
        if (!last) {
          wgmma_wait<1>();
          fence_s();
          release(empty_k, n_next);
          const bool rescale = run_softmax(std::true_type{}, next, Pnext, alpha);
          wgmma_wait<0>();
          fence_o();
          fence_p(Pcur);
          release(empty_v, cur.n);
          rescale_o(rescale, alpha);
          cur = next;
          return true;
        }
        wgmma_wait<0>();
        fence_o();
        fence_p(Pcur);
        release(empty_v, cur.n);
        used = cur.n.advanced(2);
        asm volatile("" : "+r"(used.stage), "+r"(used.phase));
        return false;
      };
      // Unrolled by two by hand (the P buffers swap); no further unrolling (code size).
#pragma unroll 1
      while (body(pa, pb) && body(pb, pa)) {
      }
    }

    // The item's rows and head again, rather than keeping them in registers through the
    // key loop (consumer registers are the kernel's limit).
    locate(item);
    bool last_in = true;  // this unit holds the item's whole result and stores it
    if (unit.tail >= 0) {
      const int ctid = tid & 127;
      constexpr int kVecs = NH * 8 + 1;  // float4s per thread: O, then (m0, m1, l0, l1)
      auto slot = [&](int chunk) {
        return partials +
               (static_cast<int64_t>(chunk * walk(kTail, grid_split.tail) + unit.tail) * 2 + cg) * (kVecs * 128) + ctid;
      };
      float4 *mine = slot(unit.chunk);
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
#pragma unroll
        for (int q = 0; q < 8; ++q)
          mine[(hh * 8 + q) * 128] = make_float4(o[hh][4 * q], o[hh][4 * q + 1], o[hh][4 * q + 2], o[hh][4 * q + 3]);
      mine[NH * 8 * 128] = make_float4(m[0], m[1], l[0], l[1]);
      // Release (every thread's stores, then the warpgroup's one count) and, for the
      // last unit in, acquire: the pattern of CUDA's threadFenceReduction sample.
      __threadfence();
      named_barrier(2 + cg, 128);
      if (ctid == 0) sLastIn[cg] = atomicAdd(counters + 2 * unit.tail + cg, 1) == walk(kWays, grid_split.ways) - 1;
      named_barrier(2 + cg, 128);
      last_in = sLastIn[cg] != 0;
      if (last_in) {
        __threadfence();
        // The chunks fold in their own order, 0 first, whichever unit came last: its own
        // chunk is read back like the others rather than taken from its registers. Folded
        // from the last one in, the result's last bits depended on which unit that was
        // (the fold's products contract into fmas unevenly), so a graph replay's lse could
        // differ in its last bit from an eager launch of the same plan (bench_step --check).
        {
          const float4 *first = slot(0);
          const float4 st = __ldcg(first + NH * 8 * 128);
          m[0] = st.x, m[1] = st.y, l[0] = st.z, l[1] = st.w;
#pragma unroll
          for (int hh = 0; hh < NH; ++hh)
#pragma unroll
            for (int q = 0; q < 8; ++q) {
              const float4 x = __ldcg(first + (hh * 8 + q) * 128);
              o[hh][4 * q] = x.x, o[hh][4 * q + 1] = x.y, o[hh][4 * q + 2] = x.z, o[hh][4 * q + 3] = x.w;
            }
        }
        for (int c = 1; c < walk(kWays, grid_split.ways); ++c) {
          const float4 *other = slot(c);
          const float4 st = __ldcg(other + NH * 8 * 128);
          const float ms[2] = {st.x, st.y}, ls[2] = {st.z, st.w};
          float wa[2], wb[2];  // weights of the chunks folded so far and of chunk c
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float mm = fmaxf(m[rr], ms[rr]);
            wa[rr] = m[rr] == -INFINITY ? 0.f : fast_exp2(m[rr] - mm);
            wb[rr] = ms[rr] == -INFINITY ? 0.f : fast_exp2(ms[rr] - mm);
            m[rr] = mm;
            l[rr] = l[rr] * wa[rr] + ls[rr] * wb[rr];
          }
#pragma unroll
          for (int hh = 0; hh < NH; ++hh)
#pragma unroll
            for (int q = 0; q < 8; ++q) {
              const float4 x = __ldcg(other + (hh * 8 + q) * 128);
              const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int rr = ((4 * q + e) >> 1) & 1;
                o[hh][4 * q + e] = o[hh][4 * q + e] * wa[rr] + xs[e] * wb[rr];
              }
            }
        }
      }
    }
    if (last_in) {
      // Epilogue: normalise, stage this warp's 16 rows in its own part of sQ (its warpgroup's
      // wgmma reads of sQ are complete), store 16 bytes a lane.
      float inv[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float sum = l[rr];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if constexpr (kE4m3)
          inv[rr] = sum > 0.f ? p.v_scale[h / p.group] / sum : 0.f;
        else
          inv[rr] = sum > 0.f ? 1.f / sum : 0.f;
        const int t = t0 + wrow + rr * 8;
        if (p.lse && (lane & 3) == 0 && t < t1)
          p.lse[static_cast<int64_t>(h) * p.lse_head + qs + t] = cuda::row_lse(m[rr], sum);
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
    }  // last_in
  }    // units
#endif
}

// The launch of one instantiation (explicitly instantiated per dtype in prefill_sm90_<dtype>.cu).
template <class T, class KV, int D>
void launch(const Params &p, dim3 grid, const WalkBounds &walk, const SplitWorkspace &workspace, cudaStream_t stream) {
  using C = Config<D, std::is_same_v<KV, uint8_t>>;
  // Persistent: one CTA per SM (the kernel's registers and shared memory allow one) walks
  // the logical grid.
  const int64_t items = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  check(items <= (int64_t{1} << 30), Errc::NotSupported,
        "the sm90a prefill walks at most 2^30 (query tile, head) items (", items, " needed)");
  if (items == 0) return;
  // The CTAs the walk spreads over: one an SM, or fewer (walk.max_ctas).
  const int sms =
      walk.max_ctas > 0 ? std::min(walk.max_ctas, cuda::multiprocessor_count()) : cuda::multiprocessor_count();
  const size_t counter_bytes = split_counter_bytes(sms);
  const int64_t capacity = workspace.data && workspace.bytes > counter_bytes
                               ? static_cast<int64_t>((workspace.bytes - counter_bytes) / split_unit_bytes(D))
                               : 0;
  const SplitPlan split = plan_split(items, sms, capacity);
  // Without a work list over several sequences the kernel lists the tiles that have rows
  // (TileListing) and plans their split itself: every CTA is launched, and the counters of
  // any split it may plan are cleared.
  const bool list_tiles = tile_listing_allowed() && p.work == nullptr && grid.z > 1;
  TileListing listing;
  // It lists at least the heads times the tiles of the rows that no decode kernel takes
  // (sum of ceil(q / BM) >= sum of q / BM): with kSplitMaxRounds rounds of those it plans
  // no split, and its counters need no clearing (one launch fewer on the stream). A wrong
  // bound would cost speed only: with no capacity the kernel plans no split.
  const int64_t prefill_rows = std::max<int64_t>(0, walk.total_rows - int64_t{p.decode_max_query_len} * grid.z);
  const bool may_split = int64_t{grid.x} * (prefill_rows / C::BM) < kSplitMaxRounds * sms;
  if (list_tiles && may_split)
    listing.split_capacity = static_cast<int32_t>(std::min<int64_t>(capacity, 2 * int64_t{sms}));
  int *counters = nullptr;
  float4 *partials = nullptr;
  if (split.ways > 1 || listing.split_capacity > 0) {
    counters = static_cast<int *>(workspace.data);
    partials = reinterpret_cast<float4 *>(static_cast<char *>(workspace.data) + counter_bytes);
    const int64_t cleared = listing.split_capacity > 0 ? sms : split.tail;
    cuda::check_cuda(cudaMemsetAsync(counters, 0, sizeof(int) * 2 * cleared, stream), "clearing the split counters");
  }
  const int64_t units = split.units(items);
  const int ctas = list_tiles ? sms : static_cast<int>(std::min<int64_t>(units, sms));
  if (ctas == 0) return;
  const KvElement element = std::is_same_v<KV, uint8_t>        ? KvElement::E4m3
                            : std::is_same_v<T, __nv_bfloat16> ? KvElement::Bf16
                                                               : KvElement::F16;
  const KvTensorMaps maps = encode_kv_maps(p, element, D, static_cast<int>(grid.x) / p.group);
  // Pages of 8..32 tokens with descriptors take the kernel that assembles a key tile from
  // a TMA box per page; the others keep the one-box (or gather) producer, whose code the
  // per-page boxes made slower at 64-token pages (5-9% when one kernel did both:
  // bench/NOTES.md, "Pages under 64 tokens").
  const bool page_boxes = maps.valid && p.page_shift < 6;
  // 16-bit pages whose strides merge in no pair take the group-box variant (kGroupBoxes).
  const bool group_boxes = page_boxes && maps.group_boxes > 1;
  // The variant's shared memory is allowed once per device (allow_dynamic_smem caches it).
  auto run = [&](auto lists_tiles, auto boxes_pages, auto boxes_groups) {
    constexpr bool kLists = decltype(lists_tiles)::value, kBoxes = decltype(boxes_pages)::value,
                   kGroups = decltype(boxes_groups)::value;
    constexpr int bytes = kLists ? C::kListingSmemBytes : C::kSmemBytes;
    constexpr auto kernel = prefill_sm90_kernel<T, KV, D, kLists, kBoxes, kGroups>;
    cuda::allow_dynamic_smem<kernel>(bytes, "cudaFuncSetAttribute(prefill_sm90_kernel)");
    kernel<<<ctas, C::kThreads, bytes, stream>>>(p, maps, grid, split, listing, p.work ? walk.live_entries : nullptr,
                                                 partials, counters);
  };
  auto run_boxes = [&](auto lists_tiles) {
    if constexpr (std::is_same_v<KV, T>) {  // e4m3 page boxes are whole rows: never group boxes
      if (group_boxes) return run(lists_tiles, std::true_type{}, std::true_type{});
    }
    if (page_boxes) return run(lists_tiles, std::true_type{}, std::false_type{});
    run(lists_tiles, std::false_type{}, std::false_type{});
  };
  if (list_tiles)
    run_boxes(std::true_type{});
  else
    run_boxes(std::false_type{});
  cuda::check_launch("prefill_sm90_kernel", stream);
}

}  // namespace bspa::kernels::sm90
