// CPU prefill: one task per (query tile, KV head), heaviest tiles first, each an
// online-softmax pass over the key blocks the rows of the group's query heads may see,
// keys gathered through the block table one chunk of at most kKeyChunk tokens at a time
// and converted to fp32 once for every query head of the group (a decode row of a 32/8
// GQA model converted each key four times when a task was one query head). Key blocks
// that no row of any head of the group may see are skipped without being read; a head's
// rows compute exactly what they computed alone (same operations in the same order).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/backend.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/fp8_e4m3.hpp"

namespace bspa::kernels {

namespace {

constexpr int kKeyChunk = 64;

// A task's buffers, sized once per launch for the largest tile times the group's heads:
// row gr = g * rows + r is row r of the group's g-th query head.
struct Scratch {
  std::vector<float> q, k, kt, v, acc, m, l, s;
  std::vector<uint8_t> allow;
  // group_rows: a GQA group's query heads times a tile's rows, in 64 bits (the group is
  // any Hq / Hkv the caller's layout allows).
  void size_for(int64_t group_rows, int d) {
    q.resize(static_cast<size_t>(group_rows) * d);
    acc.resize(static_cast<size_t>(group_rows) * d);
    k.resize(static_cast<size_t>(kKeyChunk) * d);
    kt.resize(static_cast<size_t>(kKeyChunk) * d);
    v.resize(static_cast<size_t>(kKeyChunk) * d);
    m.resize(static_cast<size_t>(group_rows));
    l.resize(static_cast<size_t>(group_rows));
    s.resize(kKeyChunk);
  }
};

const char *element(const void *base, DType t, int64_t offset) {
  return static_cast<const char *>(base) + offset * dtype_bytes(t);
}

// One K or V row of the pages into fp32: e4m3 times the head's scale for FP8 pages (the
// oracle dequantizes in fp32, without rounding to 16 bits), else the problem's dtype.
// All 256 e4m3 values (fp8_e4m3_to_f32), so a row dequantizes by table lookups.
const float *fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

void load_kv_row(const PrefillProblem &p, const void *pages, const float *scales, int32_t kvh, int64_t offset,
                 float *dst) {
  if (p.kv.kv_dtype == DType::FP8_E4M3) {
    const uint8_t *src = static_cast<const uint8_t *>(pages) + offset;
    const float s = scales[kvh], *table = fp8_table();
    for (int i = 0; i < p.head_dim; ++i) dst[i] = table[src[i]] * s;
  } else {
    cpu::load_f32(p.dtype, element(pages, p.dtype, offset), dst, p.head_dim);
  }
}

// Which key blocks each query block of the tile may see under head h:
// allow[(qb - qb0) * nkb + kb], (qb1 - qb0 + 1) * nkb entries (nkb = qb1 + 1), all written.
void fill_allowed(const Layout &L, int32_t h, int64_t qb0, int64_t qb1, uint8_t *allow) {
  const int64_t nkb = qb1 + 1;
  std::fill(allow, allow + (qb1 - qb0 + 1) * nkb, uint8_t{0});
  for (int64_t qb = qb0; qb <= qb1; ++qb) {
    uint8_t *row = allow + (qb - qb0) * nkb;
    if (L.kind == Layout::Kind::Csr) {  // walk the row instead of searching it per block
      const int32_t *cr = L.crow.data() + static_cast<int64_t>(h) * (L.num_block_rows + 1) + qb;
      for (int32_t e = cr[0]; e < cr[1]; ++e) row[L.col[e]] = 1;
    } else {
      for (int64_t kb = 0; kb <= qb; ++kb) row[kb] = L.allowed(h, qb, kb) ? 1 : 0;
    }
  }
}

// kt[i * kKeyChunk + c] = k[c * d + i] for keys c < nc: 8 x 8 blocks by shuffles (vector
// extensions that GCC and Clang both have: AVX2 in the x86-64-v3 clone, SSE pairs in the
// default one), the edges one value at a time. Scalar, the transpose was a quarter of a
// decode row's time (8192 strided stores a chunk for four rows' 16k multiply-adds). Values
// only move.
using F8 = float __attribute__((vector_size(32)));
inline __attribute__((always_inline)) void transpose_chunk(const float *k, float *kt, int nc, int d) {
  const int c8 = nc & ~7, i8 = d & ~7;
  for (int c0 = 0; c0 < c8; c0 += 8)
    for (int i0 = 0; i0 < i8; i0 += 8) {
      F8 r[8], t[8], u[8];
      for (int j = 0; j < 8; ++j) std::memcpy(&r[j], k + static_cast<size_t>(c0 + j) * d + i0, sizeof(F8));
      for (int j = 0; j < 4; ++j) {  // pairs of keys interleaved
        t[2 * j] = __builtin_shufflevector(r[2 * j], r[2 * j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[2 * j + 1] = __builtin_shufflevector(r[2 * j], r[2 * j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      for (int j = 0; j < 2; ++j) {  // keys 4j .. 4j + 3, columns (0, 4), (1, 5), (2, 6), (3, 7)
        u[4 * j + 0] = __builtin_shufflevector(t[4 * j], t[4 * j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[4 * j + 1] = __builtin_shufflevector(t[4 * j], t[4 * j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[4 * j + 2] = __builtin_shufflevector(t[4 * j + 1], t[4 * j + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[4 * j + 3] = __builtin_shufflevector(t[4 * j + 1], t[4 * j + 3], 2, 3, 10, 11, 6, 7, 14, 15);
      }
      for (int m = 0; m < 4; ++m) {  // columns m and m + 4: the low and high halves of keys 0-3 and 4-7
        const F8 col_m = __builtin_shufflevector(u[m], u[4 + m], 0, 1, 2, 3, 8, 9, 10, 11);
        const F8 col_m4 = __builtin_shufflevector(u[m], u[4 + m], 4, 5, 6, 7, 12, 13, 14, 15);
        std::memcpy(kt + static_cast<size_t>(i0 + m) * kKeyChunk + c0, &col_m, sizeof(F8));
        std::memcpy(kt + static_cast<size_t>(i0 + m + 4) * kKeyChunk + c0, &col_m4, sizeof(F8));
      }
    }
  for (int c = 0; c < nc; ++c)
    for (int i = (c < c8 ? i8 : 0); i < d; ++i)
      kt[static_cast<size_t>(i) * kKeyChunk + c] = k[static_cast<size_t>(c) * d + i];
}

// acc[0 .. kSlice) += sum over keys c < ncr of p[c] * v[c * d + 0 .. kSlice), keys in order,
// the slice held in registers across the keys.
template <int kSlice>
inline __attribute__((always_inline)) void pv_slice(float *acc, const float *v, int d, const float *p, int ncr) {
  float a[kSlice];
  for (int i = 0; i < kSlice; ++i) a[i] = acc[i];
  for (int c = 0; c < ncr; ++c) {
    const float e = p[c];
    const float *vc = v + static_cast<size_t>(c) * d;
#pragma omp simd
    for (int i = 0; i < kSlice; ++i) a[i] += e * vc[i];
  }
  for (int i = 0; i < kSlice; ++i) acc[i] = a[i];
}

// Vector width matters more than anything else here: an AVX2 clone is picked at load time
// where the CPU has it (the library itself is built for baseline x86-64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void run_group(const PrefillProblem &p, const WorkItem &w, int32_t kvh, Scratch &sc) {
  const Layout &L = *p.layout;
  const int d = p.head_dim;
  const int64_t B = L.block_size;
  const int32_t ctx = p.context_lens[w.seq];
  const int64_t row0 = static_cast<int64_t>(p.query_starts[w.seq]) + w.q_begin;
  const int nr = w.q_end - w.q_begin;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int32_t h0 = kvh * group;  // the group's first query head
  const int64_t p_first = static_cast<int64_t>(ctx) + w.q_begin, p_last = p_first + nr - 1;
  const int64_t qb0 = p_first / B, qb1 = p_last / B, nkb = qb1 + 1;
  const int64_t allow_per_head = (qb1 - qb0 + 1) * nkb;
  const int32_t *table = p.block_table + w.seq * p.block_table_stride;

  sc.allow.resize(static_cast<size_t>(group) * static_cast<size_t>(allow_per_head));
  for (int g = 0; g < group; ++g) {
    const int32_t h = h0 + g;
    fill_allowed(L, h, qb0, qb1, sc.allow.data() + g * allow_per_head);
    for (int r = 0; r < nr; ++r) {
      const int64_t gr = int64_t{g} * nr + r;
      float *qr = sc.q.data() + static_cast<size_t>(gr) * d;
      cpu::load_f32(p.dtype, element(p.q, p.dtype, (row0 + r) * p.q_token_stride + h * p.q_head_stride), qr, d);
      for (int i = 0; i < d; ++i) qr[i] *= p.scale;
      sc.m[gr] = -std::numeric_limits<float>::infinity();
      sc.l[gr] = 0.0f;
    }
  }
  std::fill(sc.acc.begin(), sc.acc.begin() + static_cast<size_t>(group) * nr * d, 0.0f);

  for (int64_t kb = 0; kb <= qb1; ++kb) {
    bool any = false;
    for (int g = 0; g < group && !any; ++g)
      for (int64_t qb = qb0; qb <= qb1 && !any; ++qb) any = sc.allow[g * allow_per_head + (qb - qb0) * nkb + kb] != 0;
    if (!any) continue;
    const int64_t k_end = std::min((kb + 1) * B, p_last + 1);
    for (int64_t c0 = kb * B; c0 < k_end; c0 += kKeyChunk) {
      const int nc = static_cast<int>(std::min<int64_t>(kKeyChunk, k_end - c0));
      for (int c = 0; c < nc; ++c) {
        const int64_t j = c0 + c;
        const int64_t page = table[j / p.page_size], slot = j % p.page_size;
        load_kv_row(p, p.kv.k, p.kv.k_scale, kvh,
                    page * p.kv.k_page_stride + kvh * p.kv.k_head_stride + slot * p.kv.k_token_stride,
                    sc.k.data() + static_cast<size_t>(c) * d);
        load_kv_row(p, p.kv.v, p.kv.v_scale, kvh,
                    page * p.kv.v_page_stride + kvh * p.kv.v_head_stride + slot * p.kv.v_token_stride,
                    sc.v.data() + static_cast<size_t>(c) * d);
      }
      // K transposed ([d][kKeyChunk]) so a query row's logits are one vector loop over keys
      // per dimension (no horizontal reductions); columns past nc hold stale values, never read.
      transpose_chunk(sc.k.data(), sc.kt.data(), nc, d);
      for (int g = 0; g < group; ++g) {
        const uint8_t *allow = sc.allow.data() + g * allow_per_head;
        for (int r = 0; r < nr; ++r) {
          const int64_t pos = p_first + r;
          if (c0 > pos || !allow[(pos / B - qb0) * nkb + kb]) continue;
          const int64_t gr = int64_t{g} * nr + r;
          const int ncr = static_cast<int>(std::min<int64_t>(nc, pos - c0 + 1));  // causal within the chunk
          const float *qr = sc.q.data() + static_cast<size_t>(gr) * d;
          float *logits = sc.s.data();
          std::fill(logits, logits + kKeyChunk, 0.0f);
          for (int i = 0; i < d; ++i) {
            const float qi = qr[i];
            const float *kti = sc.kt.data() + static_cast<size_t>(i) * kKeyChunk;
#pragma omp simd
            for (int c = 0; c < kKeyChunk; ++c) logits[c] += qi * kti[c];
          }
          float mx = sc.m[gr];
          for (int c = 0; c < ncr; ++c) mx = std::max(mx, logits[c]);
          float *acc = sc.acc.data() + static_cast<size_t>(gr) * d;
          if (mx > sc.m[gr]) {
            const float corr = std::exp(sc.m[gr] - mx);  // exp(-inf) = 0 on the first chunk
            sc.l[gr] *= corr;
            for (int i = 0; i < d; ++i) acc[i] *= corr;
            sc.m[gr] = mx;
          }
          float sum = 0.0f;
          for (int c = 0; c < ncr; ++c) {
            logits[c] = std::exp(logits[c] - mx);
            sum += logits[c];
          }
          // P·V with a slice of the accumulator row held in registers across all keys of the
          // chunk: one load and store of acc per slice instead of one per key. 64 columns
          // (eight AVX2 accumulators) keep two FMAs in flight a cycle, where 32 columns left
          // each key's four FMAs waiting on the previous key's; every element still adds its
          // keys in order, so the slicing never changes a bit.
          int i0 = 0;
          for (; i0 + 64 <= d; i0 += 64) pv_slice<64>(acc + i0, sc.v.data() + i0, d, logits, ncr);
          for (; i0 + 32 <= d; i0 += 32) pv_slice<32>(acc + i0, sc.v.data() + i0, d, logits, ncr);
          for (int c = 0; c < ncr && i0 < d; ++c) {
            const float e = logits[c];
            const float *vc = sc.v.data() + static_cast<size_t>(c) * d;
            for (int i = i0; i < d; ++i) acc[i] += e * vc[i];
          }
          sc.l[gr] += sum;
        }
      }
    }
  }

  for (int g = 0; g < group; ++g) {
    const int32_t h = h0 + g;
    for (int r = 0; r < nr; ++r) {
      const int64_t gr = int64_t{g} * nr + r;
      float *acc = sc.acc.data() + static_cast<size_t>(gr) * d;
      const float inv = 1.0f / sc.l[gr];
      for (int i = 0; i < d; ++i) acc[i] *= inv;
      cpu::store_from_f32(
          p.dtype, acc,
          static_cast<char *>(p.out) + ((row0 + r) * p.out_token_stride + h * p.out_head_stride) * dtype_bytes(p.dtype),
          d);
      if (p.lse) p.lse[h * p.lse_head_stride + row0 + r] = sc.m[gr] + std::log(sc.l[gr]);
    }
  }
}

}  // namespace

void prefill_cpu(const PrefillProblem &p) {
  std::vector<WorkItem> own;
  const WorkItem *work = p.work;
  int64_t num_work = p.num_work;
  if (!work) {
    own = plan_work(p.num_seqs, p.query_starts, p.context_lens, kCpuTileRows);
    work = own.data();
    num_work = static_cast<int64_t>(own.size());
  }
  const int group = p.num_q_heads / p.num_kv_heads;
  int max_rows = 1;
  size_t max_allow = 1;
  const int64_t B = p.layout->block_size;
  for (int64_t i = 0; i < num_work; ++i) {
    const WorkItem &w = work[i];
    max_rows = std::max(max_rows, w.q_end - w.q_begin);
    const int64_t first = (static_cast<int64_t>(p.context_lens[w.seq]) + w.q_begin) / B;
    const int64_t last = (static_cast<int64_t>(p.context_lens[w.seq]) + w.q_end - 1) / B;
    if (w.q_end > w.q_begin)
      max_allow = std::max(max_allow, static_cast<size_t>(group * (last - first + 1) * (last + 1)));
  }

  // Scratch is allocated here, outside the parallel region, so no allocation can throw inside it.
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  std::vector<Scratch> scratch(threads);
  for (auto &s : scratch) {
    s.size_for(int64_t{group} * max_rows, p.head_dim);
    s.allow.reserve(max_allow);
  }
  const int64_t hkv = p.num_kv_heads, tasks = num_work * hkv;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
#endif
    run_group(p, work[t / hkv], static_cast<int32_t>(t % hkv), scratch[tid]);
  }
}

namespace {

// FP8 pages: each element of a 16-bit row quantized as e4m3(x / scale), round to nearest
// even with saturation (kernels/fp8_e4m3.hpp; the CUDA kv write stores the same bytes).
void quantize_row(DType src_dtype, const void *src, uint8_t *dst, int n, float scale) {
  const uint16_t *s = static_cast<const uint16_t *>(src);
  for (int i = 0; i < n; ++i) {
    const float x = src_dtype == DType::BF16 ? cpu::bf16_to_f32(s[i]) : cpu::f16_to_f32(s[i]);
    dst[i] = quantize_e4m3(x, scale);
  }
}

}  // namespace

void kv_write_cpu(const KvWriteProblem &p) {
  const bool fp8 = p.kv_dtype == DType::FP8_E4M3;
  const int64_t bytes = dtype_bytes(p.dtype), row = static_cast<int64_t>(p.head_dim) * bytes;
  const int64_t page_bytes = fp8 ? 1 : bytes;  // of a page element
  const int64_t head_stride = static_cast<int64_t>(p.page_size) * p.head_dim;
  const int64_t page_stride = p.num_kv_heads * head_stride;
  // Copies are memory-bound: waking the thread team costs more than it saves below a few MiB.
  const bool parallel = int64_t{2} * p.total_q * p.num_kv_heads * row >= (int64_t{4} << 20);
#pragma omp parallel for schedule(static) if (parallel)
  for (int32_t t = 0; t < p.total_q; ++t) {
    const int32_t s =
        static_cast<int32_t>(std::upper_bound(p.query_starts, p.query_starts + p.num_seqs + 1, t) - p.query_starts - 1);
    const int32_t *table = p.block_table + s * p.block_table_stride;
    const int64_t j = static_cast<int64_t>(p.context_lens[s]) + (t - p.query_starts[s]);
    const int64_t base = table[j / p.page_size] * page_stride + (j % p.page_size) * p.head_dim;
    for (int32_t h = 0; h < p.num_kv_heads; ++h) {
      if (fp8) {
        quantize_row(
            p.dtype, static_cast<const char *>(p.k_new) + (t * p.k_new_token_stride + h * p.k_new_head_stride) * bytes,
            static_cast<uint8_t *>(p.k_pages) + (base + h * head_stride) * page_bytes, p.head_dim, p.k_scale[h]);
        quantize_row(
            p.dtype, static_cast<const char *>(p.v_new) + (t * p.v_new_token_stride + h * p.v_new_head_stride) * bytes,
            static_cast<uint8_t *>(p.v_pages) + (base + h * head_stride) * page_bytes, p.head_dim, p.v_scale[h]);
        continue;
      }
      std::memcpy(static_cast<char *>(p.k_pages) + (base + h * head_stride) * bytes,
                  static_cast<const char *>(p.k_new) + (t * p.k_new_token_stride + h * p.k_new_head_stride) * bytes,
                  row);
      std::memcpy(static_cast<char *>(p.v_pages) + (base + h * head_stride) * bytes,
                  static_cast<const char *>(p.v_new) + (t * p.v_new_token_stride + h * p.v_new_head_stride) * bytes,
                  row);
    }
  }
}

}  // namespace bspa::kernels
