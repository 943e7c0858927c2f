// Can one warpgroup compute a decode tile over e4m3 K/V pages with wgmma, K and V used as
// their bytes lie in the cp.async ring (no conversion to f16)? The layouts a wgmma decode
// tile would rest on, checked against a float64 reference before anything is built into
// kernels/cuda/decode.cuh (bench/NOTES.md, "FP8 KV (CUDA)", "Session 24" and "Session 25"):
//
//   S^T (64 keys x 16) = K (64 x 128, K-major: the page's rows as they lie, 128-byte swizzle)
//                        . [q_hi ; q_lo]^T   (8 query rows hi, then the same 8 rows lo, e4m3)
//     four wgmma m64n16k32, A and B from shared-memory descriptors.
//   O^T (128 x 16)      = V^T (128 x 64, from registers) . [P_hi ; P_lo]^T (shared memory)
//     wgmma e4m3 has no transposed operands, so V^T's A fragments come from V's rows with
//     ldmatrix.trans (b16) and two byte permutes a register. The fragment a permute gives
//     holds, for row g, keys {2t, 2t+1, 8+2t, 9+2t} of each 16 rather than {4t..4t+3}, and
//     rows g and g+8 are d 2g and 2g+1 of the warp's 16 bytes: a fixed permutation of the
//     keys (applied to P^T's columns when P is written) and of O's rows (undone when O is
//     read). Nothing is shuffled between lanes.
//   the tile's softmax over the S^T accumulator (each query row's max across the four
//     warps' keys through shared memory), P scaled by 2^8 and split hi + lo.
//
// Cases: (1) S^T alone against sum_d K[key][d] * q_op[c][d] over the e4m3 values given;
// (2) O^T alone with given P operands, which checks the key and row permutations; (3) the
// whole tile (softmax included) against float64 attention over the dequantized K/V with q
// unsplit (issue 20's contract: rel L2 <= 1e-2; the session-17 study expects ~6e-4).
// Prints each case's max abs error and rel L2 and PASS / FAIL.
//
// Build (sm_90a, from the repository root), run on the GPU machine:
//   nvcc -O2 -std=c++17 -arch=sm_90a -I. -o probe_wgmma_e4m3_decode bench/probes/wgmma_e4m3_decode_tile.cu
//   ./probe_wgmma_e4m3_decode
// Not part of the library; the CUDA build compiles it (bench/CMakeLists.txt) so that it keeps
// compiling, and nothing runs it but a person on the GPU machine: a question asked of the hardware, kept so that the
// answer can be checked again.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/probes/e4m3_probe_common.cuh"

namespace {

using namespace e4m3_probe;

constexpr int kD = 128;        // head dim: one 128-byte swizzle row an e4m3 key
constexpr int kKeys = 64;      // keys a tile (wgmma M of S^T)
constexpr int kRows = 8;       // query rows (a GQA group x new tokens)
constexpr int kN = 2 * kRows;  // B's rows: hi then lo

struct Smem {
  alignas(1024) uint8_t k[kKeys * 128];
  alignas(1024) uint8_t v[kKeys * 128];
  alignas(1024) uint8_t q[kN * 128];
  alignas(1024) uint8_t p[kN * 128];  // P^T: row c, logical keys 0..63 (two k32 steps) in its first 64 bytes
  float col_max[4][kN];
  float col_sum[4][kN];
};

// V^T's A fragments for this warp's 16 rows of M-block mb (d 64 mb + 16 warp .. +15, one
// 16-byte chunk of every key) and k32 step s (keys 32 s .. 32 s + 31).
__device__ inline void v_fragment_of(const uint8_t *v, int mb, int s, uint32_t (&a)[4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v_fragment(smem_addr(v + swz128(32 * s + lane, 16 * (4 * mb + warp))), a);
}

enum Mode { kScoresOnly = 0, kPvOnly = 1, kWholeTile = 2 };

// in_k, in_v: e4m3 bytes [key][d]; in_q: [kN][d] e4m3 (hi rows, then lo rows); in_p: [kN][key]
// e4m3 (mode 1 only). out_s: [key][kN] (mode 0); out_o: [kRows][d] (modes 1, 2: hi + lo
// columns summed; mode 2 normalised and scaled back).
// q_unscale: 1 / the power of two q was scaled by; kv_scale: the pages' scale (K and V).
__global__ void tile(int mode, const uint8_t *in_k, const uint8_t *in_v, const uint8_t *in_q, const uint8_t *in_p,
                     float q_unscale, float k_scale, float v_scale, float *out_s, float *out_o) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t raw[];
  Smem &sm = *reinterpret_cast<Smem *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // The ring as cp.async would land it: row = key, 16-byte chunks swizzled.
  for (int i = tid; i < kKeys * 8; i += 128) {
    const int row = i >> 3, c = i & 7;
    *reinterpret_cast<uint4 *>(sm.k + swz128(row, 16 * c)) = *reinterpret_cast<const uint4 *>(in_k + row * kD + 16 * c);
    *reinterpret_cast<uint4 *>(sm.v + swz128(row, 16 * c)) = *reinterpret_cast<const uint4 *>(in_v + row * kD + 16 * c);
  }
  for (int i = tid; i < kN * 8; i += 128) {
    const int row = i >> 3, c = i & 7;
    *reinterpret_cast<uint4 *>(sm.q + swz128(row, 16 * c)) = *reinterpret_cast<const uint4 *>(in_q + row * kD + 16 * c);
  }
  if (mode == kPvOnly)
    for (int i = tid; i < kN * kKeys; i += 128) {
      const int c = i / kKeys, k = i % kKeys;  // P^T logical column k holds key 32 (k / 32) + key_of_column(k % 32)
      sm.p[swz128(c, k)] = in_p[c * kKeys + key_of_column(k)];
    }
  fence_proxy_async();
  __syncthreads();

  // S^T: warp w's accumulator rows are keys 16 w + g (+8), columns 2t, 2t+1 (+8: the lo rows).
  float s[8] = {};
  if (mode != kPvOnly) {
    const uint64_t ka = desc(smem_addr(sm.k)), qb = desc(smem_addr(sm.q));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) mma_ss(s, ka + 2 * kk, qb + 2 * kk, kk > 0);  // +32 bytes a step
    commit_wait(s);
  }
  if (mode == kScoresOnly) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int key = 16 * warp + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
      out_s[key * kN + col] = s[i];
    }
    return;
  }
  if (mode == kWholeTile) {
    // Scores of query row 2t (+1): hi + lo columns, unscaled (softmax scale 1/sqrt(D) in log2).
    const float scale_log2 = q_unscale * k_scale * 1.4426950408889634f / sqrtf(static_cast<float>(kD));
    float x[4];  // keys 16w+g, 16w+g+8 x rows 2t, 2t+1
    x[0] = (s[0] + s[4]) * scale_log2, x[1] = (s[1] + s[5]) * scale_log2;
    x[2] = (s[2] + s[6]) * scale_log2, x[3] = (s[3] + s[7]) * scale_log2;
    float m0 = fmaxf(x[0], x[2]), m1 = fmaxf(x[1], x[3]);
    for (int o = 4; o < 32; o <<= 1) {
      m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
      m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
    }
    if (g == 0) sm.col_max[warp][2 * t] = m0, sm.col_max[warp][2 * t + 1] = m1;
    __syncthreads();
    m0 = fmaxf(fmaxf(sm.col_max[0][2 * t], sm.col_max[1][2 * t]), fmaxf(sm.col_max[2][2 * t], sm.col_max[3][2 * t]));
    m1 = fmaxf(fmaxf(sm.col_max[0][2 * t + 1], sm.col_max[1][2 * t + 1]),
               fmaxf(sm.col_max[2][2 * t + 1], sm.col_max[3][2 * t + 1]));
    float p[4] = {exp2f(x[0] - m0), exp2f(x[1] - m1), exp2f(x[2] - m0), exp2f(x[3] - m1)};
    float l0 = p[0] + p[2], l1 = p[1] + p[3];
    for (int o = 4; o < 32; o <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, o);
      l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    if (g == 0) sm.col_sum[warp][2 * t] = l0, sm.col_sum[warp][2 * t + 1] = l1;
      // P x 2^8 split hi + lo into P^T at the logical columns of keys 16 w + g (+8).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = 16 * warp + g + 8 * (i >> 1), row = 2 * t + (i & 1);
      const float v = p[i] * 256.f;
      const int col = logical_key_column(key);
      split_e4m3(v, sm.p[swz128(row, col)], sm.p[swz128(kRows + row, col)]);
    }
    fence_proxy_async();
    __syncthreads();
  }
  // O^T, two M-blocks of 64 d: thread rows d = 16 (4 mb + w) + 2g (+1), columns 2t, 2t+1 (+8 lo).
  float o[2][8] = {};
  const uint64_t pb = desc(smem_addr(sm.p));
  uint32_t a[2][2][4];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int st = 0; st < 2; ++st) {
      v_fragment_of(sm.v, mb, st, a[mb][st]);
      fence_regs(a[mb][st]);  // complete before the fence (a permute past it serialises the wgmma)
    }
  wgmma_fence();
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int st = 0; st < 2; ++st) mma_rs(o[mb], a[mb][st], pb + 2 * st, st > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(o[0]);
  fence_regs(o[1]);
  float norm0 = 1.f, norm1 = 1.f;
  if (mode == kWholeTile) {
    const float l0 = sm.col_sum[0][2 * t] + sm.col_sum[1][2 * t] + sm.col_sum[2][2 * t] + sm.col_sum[3][2 * t];
    const float l1 =
        sm.col_sum[0][2 * t + 1] + sm.col_sum[1][2 * t + 1] + sm.col_sum[2][2 * t + 1] + sm.col_sum[3][2 * t + 1];
    norm0 = v_scale / (256.f * l0), norm1 = v_scale / (256.f * l1);
  }
#pragma unroll
  for (int mb = 0; mb < 2; ++mb) {
    const int d0 = 16 * (4 * mb + warp) + 2 * g;
    // o[mb][i]: row d0 + ((i >> 1) & 1), query row 2t + (i & 1), hi (i < 4) or lo.
    out_o[(2 * t) * kD + d0] = (o[mb][0] + o[mb][4]) * norm0;
    out_o[(2 * t + 1) * kD + d0] = (o[mb][1] + o[mb][5]) * norm1;
    out_o[(2 * t) * kD + d0 + 1] = (o[mb][2] + o[mb][6]) * norm0;
    out_o[(2 * t + 1) * kD + d0 + 1] = (o[mb][3] + o[mb][7]) * norm1;
  }
#else
  if (threadIdx.x == 0) __trap();
#endif
}

struct Error {
  double max_abs = 0, num = 0, den = 0;
  void add(double got, double want) {
    max_abs = std::fmax(max_abs, std::fabs(got - want));
    num += (got - want) * (got - want);
    den += want * want;
  }
  double rel_l2() const { return std::sqrt(num / (den > 0 ? den : 1)); }
};

bool report(const char *name, const Error &e, double bound) {
  const bool ok = e.rel_l2() <= bound && std::isfinite(e.rel_l2());
  std::printf("%-44s max abs %.3e  rel L2 %.3e  (bound %.0e)  %s\n", name, e.max_abs, e.rel_l2(), bound,
              ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(2025);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float k_scale = 1.f / 32, v_scale = 1.f / 32;  // pages hold N(0,1) x 32 in e4m3
  std::vector<uint8_t> k(kKeys * kD), v(kKeys * kD), q_op(kN * kD), p_op(kN * kKeys);
  for (auto &b : k) b = e4m3_code(normal(rng) / k_scale);
  for (auto &b : v) b = e4m3_code(normal(rng) / v_scale);
  // q: N(0,1) rows, each scaled by a power of two into [2^7, 2^8) at its largest, split hi + lo.
  std::vector<float> q(kRows * kD);
  for (auto &x : q) x = normal(rng);
  float q_shift = 1.f;
  {
    float amax = 0;
    for (float x : q) amax = std::fmax(amax, std::fabs(x));
    while (amax * q_shift < 128.f) q_shift *= 2;
    while (amax * q_shift >= 256.f) q_shift /= 2;
  }
  for (int r = 0; r < kRows; ++r)
    for (int d = 0; d < kD; ++d) {
      split_e4m3(q[r * kD + d] * q_shift, q_op[r * kD + d], q_op[(kRows + r) * kD + d]);
    }
  for (auto &b : p_op) b = e4m3_code(std::fabs(normal(rng)) * 64.f);

  uint8_t *dk, *dv, *dq, *dp;
  float *ds, *dout;
  CUDA_OK(cudaMalloc(&dk, k.size()));
  CUDA_OK(cudaMalloc(&dv, v.size()));
  CUDA_OK(cudaMalloc(&dq, q_op.size()));
  CUDA_OK(cudaMalloc(&dp, p_op.size()));
  CUDA_OK(cudaMalloc(&ds, sizeof(float) * kKeys * kN));
  CUDA_OK(cudaMalloc(&dout, sizeof(float) * kRows * kD));
  CUDA_OK(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, v.data(), v.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dq, q_op.data(), q_op.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dp, p_op.data(), p_op.size(), cudaMemcpyHostToDevice));
  const int smem = sizeof(Smem) + 1024;
  CUDA_OK(cudaFuncSetAttribute(tile, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<float> s(kKeys * kN), out(kRows * kD);
  auto run = [&](int mode) {
    CUDA_OK(cudaMemset(ds, 0xFF, sizeof(float) * kKeys * kN));  // poisoned: NaN where nothing is written
    CUDA_OK(cudaMemset(dout, 0xFF, sizeof(float) * kRows * kD));
    tile<<<1, 128, smem>>>(mode, dk, dv, dq, dp, 1.f / q_shift, k_scale, v_scale, ds, dout);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(s.data(), ds, sizeof(float) * s.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out.data(), dout, sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
  };
  bool ok = true;

  // (1) S^T = K . q_op^T over the e4m3 values (exact products; wgmma's accumulation ~13 bits).
  run(kScoresOnly);
  Error e1;
  for (int key = 0; key < kKeys; ++key)
    for (int c = 0; c < kN; ++c) {
      double want = 0;
      for (int d = 0; d < kD; ++d) want += double{e4m3_value(k[key * kD + d])} * e4m3_value(q_op[c * kD + d]);
      e1.add(s[key * kN + c], want);
    }
  ok &= report("(1) S^T = K q^T (descriptors, 128B swizzle)", e1, 1e-3);

  // (2) O = P V with given P operands, hi + lo columns summed (the permutations).
  run(kPvOnly);
  Error e2;
  for (int r = 0; r < kRows; ++r)
    for (int d = 0; d < kD; ++d) {
      double want = 0;
      for (int key = 0; key < kKeys; ++key)
        want += (double{e4m3_value(p_op[r * kKeys + key])} + e4m3_value(p_op[(kRows + r) * kKeys + key])) *
                e4m3_value(v[key * kD + d]);
      e2.add(out[r * kD + d], want);
    }
  ok &= report("(2) O^T = V^T P^T (ldmatrix.trans + prmt)", e2, 1e-3);

  // (3) The whole tile against float64 attention over the dequantized K / V, q unsplit.
  run(kWholeTile);
  Error e3;
  for (int r = 0; r < kRows; ++r) {
    std::vector<double> logit(kKeys);
    double mx = -1e300, sum = 0;
    for (int key = 0; key < kKeys; ++key) {
      double dot = 0;
      for (int d = 0; d < kD; ++d) dot += double{q[r * kD + d]} * e4m3_value(k[key * kD + d]) * k_scale;
      logit[key] = dot / std::sqrt(double{kD});
      mx = std::fmax(mx, logit[key]);
    }
    for (auto &x : logit) sum += (x = std::exp(x - mx));
    for (int d = 0; d < kD; ++d) {
      double want = 0;
      for (int key = 0; key < kKeys; ++key) want += logit[key] / sum * e4m3_value(v[key * kD + d]) * v_scale;
      e3.add(out[r * kD + d], want);
    }
  }
  ok &= report("(3) whole tile vs fp64 attention (contract)", e3, 1e-2);
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
