// How fast does a decode tile loop over e4m3 K/V run on wgmma? Issue 20's batch-1 e4m3
// decode is bound by each warp's instruction chain (~430 instructions a warp a 64-key tile,
// ~2 us a tile a quad on an H100: bench/NOTES.md, "CUDA decode", session 21), most of them
// the e4m3 -> f16 widening and its addressing. This probe runs the loop a wgmma tile would
// run (bench/probes/wgmma_e4m3_decode_tile.cu checks its layouts): K as the A descriptor
// over the ring's bytes, q split hi + lo as B, V^T by ldmatrix.trans and byte permutes, P
// split hi + lo through shared memory, the tile's max exchanged across the warpgroup's four
// warps, O accumulated in fp32 a tile at a time (two levels: wgmma e4m3 keeps ~13 bits).
//
// Shape: batch 1 of Phi-3-small (8 KV heads, GQA 4: one new token's 4 rows a KV head),
// D 128, 32768 keys in contiguous e4m3 rows (no pages, no mask, no split merge: the loop
// alone), a cp.async ring of 4 stages a warpgroup. Grids: `splits` CTAs a head, each of
// WG warpgroups that take alternate tiles (each its own ring and its own partial state,
// written as a unit; the host combines the units).
//
// Prints each grid's time (CUDA events, median of 100 launches over two rotated K/V
// copies) and the units' combination against float64 attention over the dequantized K/V
// with q unsplit (issue 20's contract, rel L2 <= 1e-2). The number to compare is the
// library's batch-1 e4m3 decode in the same call (bench_decode 1 x 32767 dense, 64-token
// pages): ~0.029 ms on an H200, ~0.034 ms on an H100 (session 21).
//
// Build (sm_90a, from the repository root), run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o probe_wgmma_e4m3_loop bench/probes/wgmma_e4m3_decode_loop.cu
//   ./probe_wgmma_e4m3_loop
// Not part of the library; the CUDA build compiles it (bench/CMakeLists.txt) so that it keeps
// compiling, and nothing runs it but a person on the GPU machine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/probes/e4m3_probe_common.cuh"

namespace {

using namespace e4m3_probe;

constexpr int kD = 128, kTileKeys = 64, kHeads = 8, kRows = 4, kN = 2 * kRows, kStages = 4;
constexpr int kKeys = 32768;
constexpr int kStageBytes = 2 * kTileKeys * 128;  // K then V, 8 KB each

// Shared memory of one CTA (1024-aligned): Q^T [kN][128], then per warpgroup its P^T
// [kN][128], its ring, and its max-exchange slots.
template <int WG>
struct Layout {
  static constexpr int kQ = 0, kP = 1024, kRing = kP + WG * 1024, kRed = kRing + WG * kStages * kStageBytes;
  static constexpr int kBytes = kRed + WG * 2 * 4 * kRows * 4 + 1024;
};

// grid (splits, heads), WG x 128 threads. Unit u = (head, split, wg): o[u][row][d]
// unnormalised, ml[u][row] = (max in log2 units, sum).
template <int WG>
__global__ void __launch_bounds__(WG * 128)
    loop(const uint8_t *k, const uint8_t *v, const uint8_t *q_op, const float *q_unscale, float k_scale, int keys,
         float *o, float2 *ml) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<WG>;
  extern __shared__ uint8_t raw[];
  uint8_t *sm = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x, splits = gridDim.x, head = blockIdx.y;
  uint8_t *sQ = sm + L::kQ, *sP = sm + L::kP + wg * 1024, *ring = sm + L::kRing + wg * kStages * kStageBytes;
  float *red = reinterpret_cast<float *>(sm + L::kRed) + wg * 2 * 4 * kRows;  // [2 (max, sum)][warp][row]
  if (tid < kN * 8) {
    const int row = tid >> 3, c = tid & 7;
    *reinterpret_cast<uint4 *>(sQ + swz128(row, 16 * c)) =
        *reinterpret_cast<const uint4 *>(q_op + (head * kN + row) * kD + 16 * c);
  }
  // This CTA's tiles, and this warpgroup's: tiles wg, wg + WG, ... of them.
  const int n_tiles = keys / kTileKeys;
  const int t0 = split * n_tiles / splits, t1 = (split + 1) * n_tiles / splits;
  const int mine = (t1 - t0 - wg + WG - 1) / WG;
  const uint8_t *kh = k + static_cast<int64_t>(head) * keys * kD, *vh = v + static_cast<int64_t>(head) * keys * kD;
  auto load = [&](int i) {  // this warpgroup's i-th tile into stage i % kStages
    const int key0 = (t0 + wg + WG * i) * kTileKeys;
    const uint32_t st = smem_addr(ring + (i % kStages) * kStageBytes);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int idx = wtid + 128 * j, row = idx >> 3, c = idx & 7;
      const int64_t src = static_cast<int64_t>(key0 + row) * kD + 16 * c;
      cp_async_16(st + swz128(row, 16 * c), kh + src);
      cp_async_16(st + 8192 + swz128(row, 16 * c), vh + src);
    }
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < mine) load(i);
    cp_async_commit();
  }
  fence_proxy_async();
  __syncthreads();  // Q
  const float scale_log2 = q_unscale[head] * k_scale * 1.4426950408889634f * 0.08838834764831845f;
  const uint64_t qdesc = desc(smem_addr(sQ)), pdesc = desc(smem_addr(sP));
  // V^T ldmatrix addresses of this lane: key 32 st + lane, chunk 4 mb + warp.
  uint32_t v_lane[2][2];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb)
#pragma unroll
    for (int st = 0; st < 2; ++st) v_lane[mb][st] = 8192 + swz128(32 * st + lane, 16 * (4 * mb + warp));
  // P^T byte offsets of this thread's two keys (16 warp + g, + 8), rows 2t (hi) and 2t + 1 (lo).
  const int key_a = 16 * warp + g, key_b = key_a + 8;
  const int col_a = logical_key_column(key_a), col_b = logical_key_column(key_b);
  const int p_hi_a = swz128(2 * t, col_a), p_lo_a = swz128(2 * t + 1, col_a);
  const int p_hi_b = swz128(2 * t, col_b), p_lo_b = swz128(2 * t + 1, col_b);

  float m = -INFINITY, l = 0.f, acc[2][2] = {};  // row t; acc[mb][e]: d 16 (4 mb + warp) + 2g + e
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    named_barrier(1 + wg, 128);  // tile i landed; every warp is done with the stage refilled below
    if (i + kStages - 1 < mine) load(i + kStages - 1);
    cp_async_commit();
    const uint32_t st = smem_addr(ring + (i % kStages) * kStageBytes);
    // S^T (64 keys x [hi0 lo0 hi1 lo1 ...]): thread keys key_a (s[0] hi, s[1] lo) and key_b (s[2], s[3]), row t.
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    const uint64_t kdesc = desc(st);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) mma_ss(s, kdesc + 2 * kk, qdesc + 2 * kk, kk > 0);
    commit_wait(s);
    const float xa = (s[0] + s[1]) * scale_log2, xb = (s[2] + s[3]) * scale_log2;
    float mx = fmaxf(xa, xb);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    float *slot = red + (i & 1) * 4 * kRows;  // alternate slots: a fast warp's next write waits one tile
    if (g == 0) slot[warp * kRows + t] = mx;
    named_barrier(1 + wg, 128);
    mx = fmaxf(fmaxf(slot[t], slot[kRows + t]), fmaxf(slot[2 * kRows + t], slot[3 * kRows + t]));
    const float m_new = fmaxf(m, mx);
    const float alpha = fast_exp2(m - m_new);
    m = m_new;
    const float pa = fast_exp2(xa - m_new), pb = fast_exp2(xb - m_new);
    l = l * alpha + pa + pb;
    {
      split_e4m3(pa * 256.f, sP[p_hi_a], sP[p_lo_a]);
      split_e4m3(pb * 256.f, sP[p_hi_b], sP[p_lo_b]);
    }
    uint32_t a[2][2][4];
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        v_fragment(st + v_lane[mb][ks], a[mb][ks]);
        fence_regs(a[mb][ks]);  // complete before the fence (a permute past it serialises the wgmma)
      }
    fence_proxy_async();
    named_barrier(1 + wg, 128);  // P^T written
    float pv[2][4] = {};
    wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) mma_rs(pv[mb], a[mb][ks], pdesc + 2 * ks, ks > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(pv[0]);
    fence_regs(pv[1]);
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      acc[mb][0] = fmaf(acc[mb][0], alpha, pv[mb][0] + pv[mb][1]);
      acc[mb][1] = fmaf(acc[mb][1], alpha, pv[mb][2] + pv[mb][3]);
    }
  }
  // The unit: l over the warpgroup's keys, O as each thread holds it.
  l += __shfl_xor_sync(0xffffffffu, l, 4);
  l += __shfl_xor_sync(0xffffffffu, l, 8);
  l += __shfl_xor_sync(0xffffffffu, l, 16);
  float *sums = red + 2 * 4 * kRows - 4 * kRows;  // reuse: after the loop's last barrier, slot 1 ...
  named_barrier(1 + wg, 128);
  if (g == 0) sums[warp * kRows + t] = l;
  named_barrier(1 + wg, 128);
  const int64_t unit = (static_cast<int64_t>(head) * splits + split) * WG + wg;
  if (wtid < kRows)
    ml[unit * kRows + wtid] =
        make_float2(m, sums[wtid] + sums[kRows + wtid] + sums[2 * kRows + wtid] + sums[3 * kRows + wtid]);
  float *ou = o + unit * kRows * kD + t * kD;
#pragma unroll
  for (int mb = 0; mb < 2; ++mb) {
    const int d = 16 * (4 * mb + warp) + 2 * g;
    *reinterpret_cast<float2 *>(ou + d) = make_float2(acc[mb][0], acc[mb][1]);
  }
#else
  if (threadIdx.x == 0) __trap();
#endif
}

struct Run {
  int wg, splits;
};

}  // namespace

int main() {
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float k_scale = 1.f / 32, v_scale = 1.f / 32;
  const size_t kv_bytes = static_cast<size_t>(kHeads) * kKeys * kD;
  std::vector<uint8_t> k(kv_bytes), v(kv_bytes), q_op(kHeads * kN * kD);
  for (auto &b : k) b = e4m3_code(normal(rng) / k_scale);
  for (auto &b : v) b = e4m3_code(normal(rng) / v_scale);
  std::vector<float> q(kHeads * kRows * kD), q_unscale(kHeads);
  for (auto &x : q) x = normal(rng);
  for (int h = 0; h < kHeads; ++h) {
    float amax = 0, shift = 1;
    for (int i = 0; i < kRows * kD; ++i) amax = std::fmax(amax, std::fabs(q[h * kRows * kD + i]));
    while (amax * shift < 128.f) shift *= 2;
    while (amax * shift >= 256.f) shift /= 2;
    q_unscale[h] = 1.f / shift;
    for (int r = 0; r < kRows; ++r)
      for (int d = 0; d < kD; ++d) {
        split_e4m3(q[(h * kRows + r) * kD + d] * shift, q_op[(h * kN + 2 * r) * kD + d],
                   q_op[(h * kN + 2 * r + 1) * kD + d]);
      }
  }
  // Two copies of K / V, alternated between launches (the L2 holds less than one).
  uint8_t *dk[2], *dv[2], *dq;
  float *dqs, *dout;
  float2 *dml;
  const int max_units = kHeads * 64 * 2;
  for (int c = 0; c < 2; ++c) {
    CUDA_OK(cudaMalloc(&dk[c], kv_bytes));
    CUDA_OK(cudaMalloc(&dv[c], kv_bytes));
    CUDA_OK(cudaMemcpy(dk[c], k.data(), kv_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv[c], v.data(), kv_bytes, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMalloc(&dq, q_op.size()));
  CUDA_OK(cudaMalloc(&dqs, sizeof(float) * kHeads));
  CUDA_OK(cudaMalloc(&dout, sizeof(float) * max_units * kRows * kD));
  CUDA_OK(cudaMalloc(&dml, sizeof(float2) * max_units * kRows));
  CUDA_OK(cudaMemcpy(dq, q_op.data(), q_op.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dqs, q_unscale.data(), sizeof(float) * kHeads, cudaMemcpyHostToDevice));
  CUDA_OK(cudaFuncSetAttribute(loop<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout<1>::kBytes));
  CUDA_OK(cudaFuncSetAttribute(loop<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout<2>::kBytes));

  // float64 reference of every head's 4 rows over all keys (dequantized K / V, q unsplit).
  std::vector<double> want(kHeads * kRows * kD);
  std::vector<double> lut(256);
  for (int c = 0; c < 256; ++c) lut[c] = e4m3_value(static_cast<uint8_t>(c));
  for (int h = 0; h < kHeads; ++h)
    for (int r = 0; r < kRows; ++r) {
      std::vector<double> logit(kKeys);
      double mx = -1e300, sum = 0;
      const float *qr = &q[(h * kRows + r) * kD];
      for (int j = 0; j < kKeys; ++j) {
        const uint8_t *kr = &k[(static_cast<size_t>(h) * kKeys + j) * kD];
        double dot = 0;
        for (int d = 0; d < kD; ++d) dot += double{qr[d]} * lut[kr[d]];
        logit[j] = dot * k_scale / std::sqrt(double{kD});
        mx = std::max(mx, logit[j]);
      }
      for (auto &x : logit) sum += (x = std::exp(x - mx));
      double *w = &want[(h * kRows + r) * kD];
      for (int j = 0; j < kKeys; ++j) {
        const uint8_t *vr = &v[(static_cast<size_t>(h) * kKeys + j) * kD];
        const double pj = logit[j] / sum;
        for (int d = 0; d < kD; ++d) w[d] += pj * lut[vr[d]] * v_scale;
      }
    }

  const Run runs[] = {{1, 16}, {2, 16}, {1, 32}, {2, 8}, {1, 64}};
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  bool ok = true;
  std::printf("%-26s %10s %10s %12s %10s\n", "grid", "median us", "GB/s", "rel L2", "check");
  for (const Run &run : runs) {
    const int units = kHeads * run.splits * run.wg;
    auto launch = [&](int c) {
      const dim3 grid(run.splits, kHeads);
      if (run.wg == 1)
        loop<1><<<grid, 128, Layout<1>::kBytes>>>(dk[c], dv[c], dq, dqs, k_scale, kKeys, dout, dml);
      else
        loop<2><<<grid, 256, Layout<2>::kBytes>>>(dk[c], dv[c], dq, dqs, k_scale, kKeys, dout, dml);
    };
    CUDA_OK(cudaMemset(dout, 0xFF, sizeof(float) * max_units * kRows * kD));
    launch(0);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> o(units * kRows * kD);
    std::vector<float2> ml(units * kRows);
    CUDA_OK(cudaMemcpy(o.data(), dout, sizeof(float) * o.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ml.data(), dml, sizeof(float2) * ml.size(), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    const int per_head = run.splits * run.wg;
    for (int h = 0; h < kHeads; ++h)
      for (int r = 0; r < kRows; ++r) {
        double mx = -1e300, l = 0;
        for (int u = 0; u < per_head; ++u) mx = std::max(mx, double{ml[(h * per_head + u) * kRows + r].x});
        std::vector<double> acc(kD, 0.0);
        for (int u = 0; u < per_head; ++u) {
          const float2 s = ml[(h * per_head + u) * kRows + r];
          const double w = std::exp2(s.x - mx);
          l += w * s.y;
          for (int d = 0; d < kD; ++d) acc[d] += w * o[((h * per_head + u) * kRows + r) * kD + d];
        }
        for (int d = 0; d < kD; ++d) {
          const double got = acc[d] / l * v_scale / 256.0, ref = want[(h * kRows + r) * kD + d];
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
      }
    const double rel = std::sqrt(num / den);
    const bool pass = std::isfinite(rel) && rel <= 1e-2;
    ok &= pass;
    std::vector<float> times;
    for (int i = 0; i < 120; ++i) {
      CUDA_OK(cudaEventRecord(e0));
      launch(i & 1);
      CUDA_OK(cudaEventRecord(e1));
      CUDA_OK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 20) times.push_back(ms * 1000.f);
    }
    std::sort(times.begin(), times.end());
    const double us = times[times.size() / 2];
    char name[64];
    std::snprintf(name, sizeof name, "%d splits x %d warpgroup%s", run.splits, run.wg, run.wg > 1 ? "s" : "");
    std::printf("%-26s %10.2f %10.0f %12.3e %10s\n", name, us, 2.0 * kv_bytes / (us * 1e3), rel,
                pass ? "PASS" : "FAIL");
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
