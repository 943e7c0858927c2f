// FP8 (e4m3) KV on the GPU without Criterion (the GPU machine has none), the twin of
// tests/c/test_gpu_fp8.c: the same inputs through a CPU fp8 pool (the oracle) and a CUDA
// fp8 pool, through the public header.
//  - kv write: every bf16 and f16 bit pattern, compact and odd-strided sources: the CUDA
//    pages must hold exactly the CPU's bytes;
//  - attention: three steps (chunked prefill at unaligned positions, a mixed step with
//    decode rows, decode rows) of two sequences, dense and strided, bf16 and f16, head dims
//    64/128, pages 16..128: bspa_prefill on the CUDA pool and bspa_prefill_paged over its
//    pages with device scale tensors against the CPU pool, rel L2 <= 1e-2, outputs poisoned;
//  - timing (--time): bspa_kv_write of T tokens into an fp8 pool and into a bf16 pool (a
//    copy), CUDA-event medians, GB/s of the bytes each moves (fp8: 2 bytes read + 1 written
//    per element; bf16: 2 + 2).
// Exit status: 0 all passed, 1 a case failed, 2 setup error; "SKIP" and 0 without a GPU.
#include <bspa/bspa.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifndef BSPA_HAVE_CUDA
int main() {
  std::printf("SKIP: bspa was built without CUDA\n");
  return 0;
}
#else
#include <algorithm>
#include <cmath>

#include "gpu_common.hpp"

using gpu::Rng;
using gpu::Tensor;

namespace {

int g_failures = 0;

void report(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

bspa_pool *make_pool(bool cuda, bspa_dtype dt, int hkv, int d, int ps, int64_t pages) {
  bspa_pool_options o;
  BSPA_OK_OR_DIE(bspa_pool_options_init(&o));
  o.device_type = cuda ? kDLCUDA : kDLCPU;
  o.dtype = dt;
  o.num_layers = 2;
  o.num_kv_heads = hkv;
  o.head_dim = d;
  o.page_size = ps;
  o.num_pages = pages;
  bspa_pool *p = nullptr;
  BSPA_OK_OR_DIE(bspa_pool_create(&p, &o));
  return p;
}

bspa_seq *seq_of(bspa_pool *p, const std::vector<int32_t> &tokens) {
  bspa_seq *s = nullptr;
  BSPA_OK_OR_DIE(bspa_seq_create(&s, p, nullptr));
  BSPA_OK_OR_DIE(bspa_seq_append(s, tokens.data(), static_cast<int64_t>(tokens.size())));
  return s;
}

std::vector<int32_t> pages_of(bspa_seq *s) {
  int64_t n = 0;
  bspa_seq_pages(s, nullptr, 0, &n);
  std::vector<int32_t> p(static_cast<size_t>(n));
  BSPA_OK_OR_DIE(bspa_seq_pages(s, p.data(), n, &n));
  return p;
}

// Rows (token, head) of layer 1 that differ between the CPU and the CUDA pool, first n tokens.
size_t differing_rows(bspa_pool *cpu, bspa_pool *gpu, bspa_seq *sc, bspa_seq *sg, int64_t n, int hkv, int ps, int d) {
  DLTensor kc, vc, kg, vg;
  BSPA_OK_OR_DIE(bspa_pool_kv(cpu, 1, &kc, &vc));
  BSPA_OK_OR_DIE(bspa_pool_kv(gpu, 1, &kg, &vg));
  const size_t bytes = static_cast<size_t>(kc.shape[0]) * hkv * ps * d;
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> hk = gpu::download(static_cast<const uint8_t *>(kg.data), bytes);
  const std::vector<uint8_t> hv = gpu::download(static_cast<const uint8_t *>(vg.data), bytes);
  const std::vector<int32_t> pc = pages_of(sc), pg = pages_of(sg);
  size_t bad = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < hkv; ++h) {
      const size_t oc = ((static_cast<size_t>(pc[t / ps]) * hkv + h) * ps + t % ps) * d;
      const size_t og = ((static_cast<size_t>(pg[t / ps]) * hkv + h) * ps + t % ps) * d;
      bad += std::memcmp(static_cast<const uint8_t *>(kc.data) + oc, hk.data() + og, d) != 0;
      bad += std::memcmp(static_cast<const uint8_t *>(vc.data) + oc, hv.data() + og, d) != 0;
    }
  return bad;
}

void kv_write_case(bspa_dtype dt, bool odd) {
  const int hkv = 2, d = 128, ps = 16, T = 256;  // 65536 values: every bit pattern
  const int64_t row = odd ? hkv * d + 1 : hkv * d;
  const int64_t pages = T / ps + 2;
  std::vector<uint16_t> src(static_cast<size_t>(T * row), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < hkv * d; ++j) src[static_cast<size_t>(t * row + j)] = static_cast<uint16_t>(t * hkv * d + j);
  uint16_t *dsrc = gpu::upload(src);
  const float ks[2] = {1.0f, 0.037f}, vs[2] = {3.0f, 1.0f / 448.0f};
  bspa_pool *pools[2];
  bspa_seq *seqs[2];
  std::vector<int32_t> tokens(T);
  for (int i = 0; i < T; ++i) tokens[static_cast<size_t>(i)] = i;
  for (int g = 0; g < 2; ++g) {
    pools[g] = make_pool(g, BSPA_DTYPE_FP8_E4M3, hkv, d, ps, pages);
    BSPA_OK_OR_DIE(bspa_pool_set_kv_scales(pools[g], 1, ks, vs, hkv));
    seqs[g] = seq_of(pools[g], tokens);
    const int32_t q = T;
    bspa_batch *b = nullptr;
    BSPA_OK_OR_DIE(bspa_batch_create(&b, pools[g], &seqs[g], &q, 1, nullptr));
    const DLDataType ht{static_cast<uint8_t>(dt == BSPA_DTYPE_BF16 ? kDLBfloat : kDLFloat), 16, 1};
    Tensor t(g ? static_cast<void *>(dsrc) : src.data(), DLDevice{g ? kDLCUDA : kDLCPU, 0}, ht, {T, hkv, d},
             {row, d, 1});
    const bspa_status none = gpu::kv_write(pools[g], b, 0, t.dl(), t.dl());
    report(none == BSPA_ERR_INVALID_STATE, std::string("kv write on a layer without scales refused (") +
                                               (g ? "cuda" : "cpu") + "): " + bspa_status_string(none));
    BSPA_OK_OR_DIE(gpu::kv_write(pools[g], b, 1, t.dl(), t.dl()));
    bspa_batch_destroy(b);
  }
  const size_t bad = differing_rows(pools[0], pools[1], seqs[0], seqs[1], T, hkv, ps, d);
  char what[160];
  std::snprintf(what, sizeof what, "kv write %s %s: %zu of %d K/V rows differ from the CPU's bytes",
                dt == BSPA_DTYPE_BF16 ? "bf16" : "f16", odd ? "odd stride" : "compact", bad, 2 * T * hkv);
  report(bad == 0, what);
  CUDA_OK(cudaFree(dsrc));
  for (int g = 0; g < 2; ++g) bspa_pool_destroy(pools[g]);
}

struct Case {
  bspa_dtype dt;
  int d, hq, hkv, ps;
  bool sparse;
};

void attention_case(const Case &c, Rng &rng) {
  const int NS = 2;
  const int32_t qlens[3][2] = {{700, 1061}, {333, 1}, {1, 4}};
  int64_t ctx[2] = {0, 0};
  const int64_t pages = 256;
  bspa_pool *pools[2] = {make_pool(false, BSPA_DTYPE_FP8_E4M3, c.hkv, c.d, c.ps, pages),
                         make_pool(true, BSPA_DTYPE_FP8_E4M3, c.hkv, c.d, c.ps, pages)};
  std::vector<float> ks(static_cast<size_t>(c.hkv)), vs(ks.size());
  for (int h = 0; h < c.hkv; ++h) {
    ks[static_cast<size_t>(h)] = static_cast<float>(4.5 / 448.0 * (1 + 0.1 * h));
    vs[static_cast<size_t>(h)] = static_cast<float>(4.5 / 448.0 * (1 - 0.05 * h));
  }
  bspa_layout *layout = nullptr;
  if (c.sparse) {
    bspa_layout_strided_options o;
    BSPA_OK_OR_DIE(bspa_layout_strided_options_init(&o));
    o.local_blocks = 4, o.vert_stride = 4, o.num_heads = c.hq, o.num_heads_total = c.hq;
    BSPA_OK_OR_DIE(bspa_layout_create_strided(&layout, &o));
  } else {
    BSPA_OK_OR_DIE(bspa_layout_create_dense(&layout, c.hq));
  }
  bspa_seq *seqs[2][2];
  for (int g = 0; g < 2; ++g) {
    BSPA_OK_OR_DIE(bspa_pool_set_kv_scales(pools[g], 1, ks.data(), vs.data(), c.hkv));
    for (int i = 0; i < NS; ++i) {
      std::vector<int32_t> tokens(1100);
      for (size_t j = 0; j < tokens.size(); ++j) tokens[j] = static_cast<int32_t>(100 * i + j);
      seqs[g][i] = seq_of(pools[g], tokens);
    }
  }
  float *dks = gpu::upload(ks), *dvs = gpu::upload(vs);
  const DLDataType ht{static_cast<uint8_t>(c.dt == BSPA_DTYPE_BF16 ? kDLBfloat : kDLFloat), 16, 1};
  char name[128];
  std::snprintf(name, sizeof name, "%s d %d hq %d hkv %d ps %d %s", c.dt == BSPA_DTYPE_BF16 ? "bf16" : "f16", c.d, c.hq,
                c.hkv, c.ps, c.sparse ? "sparse" : "dense");
  for (int st = 0; st < 3; ++st) {
    const int32_t *ql = qlens[st];
    const int T = ql[0] + ql[1];
    const size_t kv_n = static_cast<size_t>(T) * c.hkv * c.d, q_n = static_cast<size_t>(T) * c.hq * c.d;
    std::vector<uint16_t> kn(kv_n), vn(kv_n), q(q_n);
    for (auto &x : kn) x = gpu::to_half(c.dt, rng.normal());
    for (auto &x : vn) x = gpu::to_half(c.dt, rng.normal());
    for (auto &x : q) x = gpu::to_half(c.dt, rng.normal());
    std::vector<uint16_t> poison(q_n, 0xffff), out_cpu = poison;
    uint16_t *dk = gpu::upload(kn), *dv = gpu::upload(vn), *dq = gpu::upload(q);
    uint16_t *dout = gpu::upload(poison), *dpout = gpu::upload(poison);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    for (int g = 0; g < 2; ++g) {
      const DLDevice dev{g ? kDLCUDA : kDLCPU, 0};
      Tensor tk(g ? static_cast<void *>(dk) : kn.data(), dev, ht, {T, c.hkv, c.d});
      Tensor tv(g ? static_cast<void *>(dv) : vn.data(), dev, ht, {T, c.hkv, c.d});
      Tensor tq(g ? static_cast<void *>(dq) : q.data(), dev, ht, {T, c.hq, c.d});
      Tensor to(g ? static_cast<void *>(dout) : out_cpu.data(), dev, ht, {T, c.hq, c.d});
      bspa_batch *b = nullptr;
      BSPA_OK_OR_DIE(bspa_batch_create(&b, pools[g], seqs[g], ql, NS, nullptr));
      BSPA_OK_OR_DIE(gpu::kv_write(pools[g], b, 1, tk.dl(), tv.dl()));
      const bspa_status s = gpu::prefill(pools[g], b, 1, layout, tq.dl(), to.dl(), scale, nullptr);
      bspa_batch_destroy(b);
      if (s != BSPA_OK) {
        report(false, std::string(name) + ": bspa_prefill: " + bspa_status_string(s) + ": " + bspa_last_error());
        continue;
      }
      if (!g) continue;
      // bspa_prefill_paged over the CUDA pool's own pages, with device scale tensors.
      std::vector<int32_t> bt(static_cast<size_t>(NS) * 256, 0), qs = {0, ql[0], T};
      std::vector<int32_t> cl = {static_cast<int32_t>(ctx[0]), static_cast<int32_t>(ctx[1])};
      for (int i = 0; i < NS; ++i) {
        const std::vector<int32_t> p = pages_of(seqs[g][i]);
        std::copy(p.begin(), p.end(), bt.begin() + 256 * i);
      }
      int32_t *dbt = gpu::upload(bt), *dqs = gpu::upload(qs), *dcl = gpu::upload(cl);
      DLTensor kview, vview;
      BSPA_OK_OR_DIE(bspa_pool_kv(pools[g], 1, &kview, &vview));
      Tensor tbt(dbt, dev, gpu::dl_i32(), {NS, 256}), tqs(dqs, dev, gpu::dl_i32(), {NS + 1});
      Tensor tcl(dcl, dev, gpu::dl_i32(), {NS}), tks(dks, dev, gpu::dl_f32(), {c.hkv}),
          tvs(dvs, dev, gpu::dl_f32(), {c.hkv});
      Tensor tpo(dpout, dev, ht, {T, c.hq, c.d});
      bspa_paged_args a;
      BSPA_OK_OR_DIE(bspa_paged_args_init(&a));
      a.q = tq.dl(), a.out = tpo.dl(), a.k_pages = &kview, a.v_pages = &vview, a.block_table = tbt.dl();
      a.query_starts = tqs.dl(), a.context_lens = tcl.dl(), a.max_query_len = std::max(ql[0], ql[1]);
      a.layout = layout, a.scale = scale, a.k_scale = tks.dl(), a.v_scale = tvs.dl();
      const bspa_status sp = bspa_prefill_paged(&a, nullptr);
      if (sp != BSPA_OK)
        report(false, std::string(name) + ": bspa_prefill_paged: " + bspa_status_string(sp) + ": " + bspa_last_error());
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaFree(dbt));
      CUDA_OK(cudaFree(dqs));
      CUDA_OK(cudaFree(dcl));
    }
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got[2] = {gpu::download(dout, q_n), gpu::download(dpout, q_n)};
    for (int which = 0; which < 2; ++which) {
      double num = 0, den = 0;
      bool finite = true;
      for (size_t i = 0; i < q_n; ++i) {
        const double a = gpu::from_half(c.dt, out_cpu[i]), b = gpu::from_half(c.dt, got[which][i]);
        finite = finite && std::isfinite(b);
        num += (a - b) * (a - b), den += a * a;
      }
      const double rel = std::sqrt(num / den);
      char what[224];
      std::snprintf(what, sizeof what, "%s step %d %s: rel L2 %.3e vs the CPU fp8 pool%s", name, st,
                    which ? "paged" : "pool", rel, finite ? "" : " (non-finite output)");
      report(finite && rel <= 1e-2, what);
    }
    for (int i = 0; i < NS; ++i) {
      const size_t bad = differing_rows(pools[0], pools[1], seqs[0][i], seqs[1][i], ctx[i] + ql[i], c.hkv, c.ps, c.d);
      if (bad) report(false, std::string(name) + ": " + std::to_string(bad) + " K/V rows differ from the CPU's");
    }
    for (int g = 0; g < 2; ++g)
      for (int i = 0; i < NS; ++i) BSPA_OK_OR_DIE(bspa_seq_commit(seqs[g][i], ctx[i] + ql[i]));
    for (int i = 0; i < NS; ++i) ctx[i] += ql[i];
    for (uint16_t *p : {dk, dv, dq, dout, dpout}) CUDA_OK(cudaFree(p));
  }
  CUDA_OK(cudaFree(dks));
  CUDA_OK(cudaFree(dvs));
  bspa_layout_destroy(layout);
  for (int g = 0; g < 2; ++g) bspa_pool_destroy(pools[g]);
}

// kv write of T new tokens (Phi-3-small: Hkv 8, D 128) into an fp8 and a bf16 CUDA pool.
void time_kv_write(int T) {
  const int hkv = 8, d = 128, ps = 64;
  const int64_t pages = T / ps + 1;
  std::vector<uint16_t> host(static_cast<size_t>(T) * hkv * d);
  Rng rng(7);
  for (auto &x : host) x = gpu::f32_to_bf16(rng.normal());
  uint16_t *dk = gpu::upload(host), *dv = gpu::upload(host);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) tokens[static_cast<size_t>(i)] = i;
  // fp8 twice: a calibrated scale (4.5 / 448: the correctly rounded division) and a power
  // of two (2^-6: a multiply by its exact reciprocal, as vLLM's default scale of 1 takes).
  const struct {
    bspa_dtype dt;
    float scale;
    const char *name;
  } configs[] = {{BSPA_DTYPE_BF16, 0.0f, "bf16 (copy)"},
                 {BSPA_DTYPE_FP8_E4M3, 4.5f / 448.0f, "fp8 (quantize, scale 4.5/448)"},
                 {BSPA_DTYPE_FP8_E4M3, 0x1p-6f, "fp8 (quantize, scale 2^-6)"}};
  for (const auto &config : configs) {
    const bspa_dtype dt = config.dt;
    bspa_pool *p = make_pool(true, dt, hkv, d, ps, pages);
    if (dt == BSPA_DTYPE_FP8_E4M3) {
      const std::vector<float> s(hkv, config.scale);
      BSPA_OK_OR_DIE(bspa_pool_set_kv_scales(p, 0, s.data(), s.data(), hkv));
    }
    bspa_seq *s = seq_of(p, tokens);
    const int32_t q = T;
    bspa_batch *b = nullptr;
    BSPA_OK_OR_DIE(bspa_batch_create(&b, p, &s, &q, 1, nullptr));
    Tensor tk(dk, DLDevice{kDLCUDA, 0}, gpu::dl_dtype(BSPA_DTYPE_BF16), {T, hkv, d});
    Tensor tv(dv, DLDevice{kDLCUDA, 0}, gpu::dl_dtype(BSPA_DTYPE_BF16), {T, hkv, d});
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 25; ++r) {
      CUDA_OK(cudaEventRecord(e0));
      BSPA_OK_OR_DIE(gpu::kv_write(p, b, 0, tk.dl(), tv.dl()));
      CUDA_OK(cudaEventRecord(e1));
      CUDA_OK(cudaEventSynchronize(e1));
      float t = 0;
      CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
      if (r >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double elems = 2.0 * T * hkv * d, bytes = elems * (2 + (dt == BSPA_DTYPE_BF16 ? 2 : 1));
    std::printf("TIME kv_write %s T %d: %.4f ms, %.1f GB/s of the %.1f MB it moves\n", config.name, T, med,
                bytes / med / 1e6, bytes / 1e6);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    bspa_batch_destroy(b);
    bspa_pool_destroy(p);
  }
  CUDA_OK(cudaFree(dk));
  CUDA_OK(cudaFree(dv));
}

}  // namespace

int main(int argc, char **argv) {
  bool timing = false;
  uint64_t seed = 1;
  CLI::App app("GPU FP8 (e4m3) KV check: CUDA fp8 pools against a CPU fp8 pool");
  app.option_defaults()->always_capture_default();
  app.add_flag("--time", timing, "also time kv write into fp8 and bf16 pools");
  // Any base, as strtoull(.., 0) read it before: 0x.. hex, a leading 0 octal.
  app.add_option("--seed", seed, "the random seed (reproduces a run)");
  if (const int rc = gpu::parse_flags(app, argc, argv); rc >= 0) return rc;
  int32_t n = 0;
  BSPA_OK_OR_DIE(bspa_device_count(kDLCUDA, &n));
  if (n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::printf("%s\nseed %llu\n", bspa_build_info(), static_cast<unsigned long long>(seed));
  for (bspa_dtype dt : {BSPA_DTYPE_BF16, BSPA_DTYPE_F16})
    for (bool odd : {false, true}) kv_write_case(dt, odd);
  Rng rng(seed);
  const Case cases[] = {{BSPA_DTYPE_BF16, 128, 32, 8, 64, true},
                        {BSPA_DTYPE_BF16, 128, 32, 8, 64, false},
                        {BSPA_DTYPE_F16, 64, 8, 2, 16, true},
                        {BSPA_DTYPE_F16, 128, 8, 1, 32, false},
                        {BSPA_DTYPE_BF16, 64, 4, 4, 128, true}};
  for (const Case &c : cases) attention_case(c, rng);
  if (timing)
    for (int T : {4096, 65536}) time_kv_write(T);
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
#endif
