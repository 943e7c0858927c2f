// The GPU correctness sweep without Criterion (the GPU machine has none): every case runs
// the same inputs through the CPU backend (the oracle) and the CUDA backend via the public
// header and compares them (relative L2 <= 1e-2, no NaN in poisoned outputs, lse).
//   bench_gpu_check            full sweep (paged args + pool/batch engine flow)
//   bench_gpu_check --quick    the fixed cases only
//   bench_gpu_check --tiny     a few small cases (for compute-sanitizer)
//   bench_gpu_check --seed N   reproduce a run (decimal)
//   bench_gpu_check --help     the flags (CLI11); an unknown flag is refused with exit status 2
// Exit status: 0 all passed, 1 a case failed, 2 setup error, 77 with "SKIP" without a GPU (or
// without CUDA): CTest's test gpu_check (label gpu) counts that as skipped.
#include <bspa/bspa.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifndef BSPA_HAVE_CUDA
int main() {
  std::printf("SKIP: bspa was built without CUDA\n");
  return 77;
}
#else
#include <algorithm>
#include <cmath>

#include "gpu_common.hpp"

using gpu::Rng;
using gpu::Tensor;

namespace {

struct Case {
  bspa_dtype dt = BSPA_DTYPE_BF16;
  int D = 128, hq = 4, hkv = 1, ps = 64;
  int layout = 1;  // 0 dense, 1 strided hetero, 2 strided homo, 3 strided TP offset, 4 CSR, 5 strided B=128
  std::vector<std::pair<int, int> > seqs;  // (context, query)
  bool lse = true;
  bool token_major = false;  // K/V pages as [pages, page_size, Hkv, D] (strided view)
  float scale = 0.0f;        // 0 = 1/sqrt(D)
  bool workspace = true;     // pass a split workspace (poisoned: it needs no initialisation)
  // The prefix identity: the CPU oracle runs the full prefill of each sequence's ctx + q
  // tokens from position 0 and the last q rows are compared with the GPU's rows (decode
  // rows equal the last rows of the full prefill). One sequence.
  bool identity = false;
  // e4m3 pages with per-head scales (q and out of dt): the CPU oracle and the GPU read the
  // same bytes, quantized here from N(0,1) values.
  bool fp8 = false;
  // max_query_len of the launch: 0 the longest query; more a loose bound (as a CUDA graph
  // captured for a bucket passes its limit).
  int max_query_len = 0;
  // bspa_paged_args.max_decode_query_len: routes sequences of 1..min(this, 8) new tokens to
  // the decode kernel and longer ones to the prefill kernel (0: the default bound, 8).
  int max_decode_query_len = 0;
  // Page ids: 0 shuffled; 1 in order (a tile's pages under 64 tokens are one run of
  // consecutive ids, as a fresh pool hands them out); 2 in order but for a swap every five
  // pages (runs broken inside tiles). bench/NOTES.md, "Pages under 64 tokens", session 15.
  int page_order = 0;
  // Each page's K (and V) followed by a page-sized gap of NaN, as where K and V of a page
  // share one block ([pages, 2, ...], FlashInfer's layouts): the page stride twice a page.
  bool interleaved = false;
};

const DLDevice kCpu{kDLCPU, 0};
const DLDevice kGpu{kDLCUDA, 0};

std::string describe(const Case &c) {
  static const char *names[] = {"dense", "strided", "homo", "tp", "csr", "strided-b128"};
  std::string s = std::string(c.dt == BSPA_DTYPE_BF16 ? "bf16" : "f16") + " D" + std::to_string(c.D) + " H" +
                  std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " ps" + std::to_string(c.ps) + " " +
                  names[c.layout] + (c.token_major ? " tokmajor" : "") + (c.lse ? " lse" : "") +
                  (c.workspace ? " ws" : "") + (c.identity ? " identity" : "") + (c.fp8 ? " fp8" : "") +
                  (c.max_decode_query_len ? " dq<=" + std::to_string(c.max_decode_query_len) : "") +
                  (c.page_order == 1   ? " page-runs"
                   : c.page_order == 2 ? " broken-runs"
                                       : "") +
                  (c.interleaved ? " interleaved" : "") + " seqs";
  for (auto &sq : c.seqs) s += " " + std::to_string(sq.first) + "+" + std::to_string(sq.second);
  return s;
}

bspa_layout *make_layout(const Case &c, int max_tokens, Rng &rng) {
  bspa_layout *l = nullptr;
  if (c.layout == 0) {
    BSPA_OK_OR_DIE(bspa_layout_create_dense(&l, c.hq));
  } else if (c.layout == 4) {
    const int rows = max_tokens / 64 + 1;
    std::vector<int32_t> crow, col;
    for (int h = 0; h < c.hq; ++h) {
      crow.push_back(static_cast<int32_t>(col.size()));  // [heads][rows + 1], offsets absolute
      for (int qb = 0; qb < rows; ++qb) {
        for (int kb = 0; kb <= qb; ++kb)
          if (kb == qb || rng.uniform() < 0.35) col.push_back(kb);
        crow.push_back(static_cast<int32_t>(col.size()));
      }
    }
    BSPA_OK_OR_DIE(bspa_layout_create_csr(&l, c.hq, 64, rows, crow.data(), col.data()));
  } else {
    bspa_layout_strided_options o;
    bspa_layout_strided_options_init(&o);
    o.block_size = c.layout == 5 ? 128 : 64;
    o.local_blocks = c.layout == 5 ? 3 : 4;  // small so the stripes show at test sizes
    o.vert_stride = c.layout == 5 ? 3 : 4;
    o.homo_head = c.layout == 2;
    o.num_heads = c.hq;
    o.num_heads_total = c.layout == 3 ? 2 * c.hq : c.hq;
    o.head_begin = c.layout == 3 ? c.hq : 0;
    BSPA_OK_OR_DIE(bspa_layout_create_strided(&l, &o));
  }
  return l;
}

struct Compare {
  double rel = 0, max_abs = 0, lse_err = 0;
  bool nan = false;
};

Compare compare(bspa_dtype dt, const std::vector<uint16_t> &ref, const std::vector<uint16_t> &got,
                const std::vector<float> &lref, const std::vector<float> &lgot) {
  Compare r;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = gpu::from_half(dt, ref[i]), b = gpu::from_half(dt, got[i]);
    if (!std::isfinite(b)) r.nan = true;
    num += (a - b) * (a - b);
    den += a * a;
    r.max_abs = std::max(r.max_abs, std::fabs(a - b));
  }
  r.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (size_t i = 0; i < lref.size(); ++i) {
    if (!std::isfinite(lgot[i]) && lgot[i] != lref[i]) r.nan = true;
    if (std::isfinite(lref[i]))
      r.lse_err = std::max(r.lse_err, std::fabs(double(lref[i]) - lgot[i]) / std::max(1.0, std::fabs(double(lref[i]))));
  }
  return r;
}

int failures = 0, passed = 0;

void report(const std::string &what, const Compare &r) {
  const bool ok = !r.nan && r.rel <= 1e-2 && r.lse_err <= 2e-3;
  if (ok)
    ++passed;
  else
    ++failures;
  std::printf("%s  rel_l2=%.2e max_abs=%.2e lse=%.1e%s  %s\n", ok ? "ok  " : "FAIL", r.rel, r.max_abs, r.lse_err,
              r.nan ? " NaN" : "", what.c_str());
  std::fflush(stdout);
}

// Caller-owned pages through bspa_prefill_paged on the CPU and on the GPU.
void run_paged(const Case &c, uint64_t seed) {
  Rng rng(seed);
  const int ns = static_cast<int>(c.seqs.size());
  std::vector<int32_t> qs(ns + 1, 0), cl(ns);
  int max_pages = 1, total_pages = 3, max_tokens = 1, max_q = 0;
  for (int i = 0; i < ns; ++i) {
    cl[i] = c.seqs[i].first;
    qs[i + 1] = qs[i] + c.seqs[i].second;
    const int kv = c.seqs[i].first + c.seqs[i].second;
    max_pages = std::max(max_pages, (kv + c.ps - 1) / c.ps);
    total_pages += (kv + c.ps - 1) / c.ps;
    max_tokens = std::max(max_tokens, kv);
    max_q = std::max(max_q, c.seqs[i].second);
  }
  const int T = qs[ns];
  std::vector<int32_t> perm(total_pages);
  for (int i = 0; i < total_pages; ++i) perm[i] = i;
  if (c.page_order == 0)
    for (int i = total_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.range(0, i)]);
  else if (c.page_order == 2)
    for (int i = 2; i + 1 < total_pages; i += 5) std::swap(perm[i], perm[i + 1]);
  std::vector<int32_t> bt(static_cast<size_t>(ns) * max_pages, -1);
  const uint16_t nan16 = 0xffff;
  const size_t page_elems = static_cast<size_t>(c.hkv) * c.ps * c.D;
  const size_t page_stride = c.interleaved ? 2 * page_elems : page_elems;
  std::vector<uint16_t> k(c.fp8 ? 0 : page_stride * total_pages, nan16), v(k.size(), nan16);
  // fp8: pages of bytes (unwritten slots hold the NaN code), scales per KV head near amax / 448.
  std::vector<uint8_t> k8(c.fp8 ? page_stride * total_pages : 0, 0x7f), v8(k8.size(), 0x7f);
  std::vector<float> kv_scales(2 * c.hkv);
  for (int h = 0; h < c.hkv; ++h) kv_scales[h] = 0.009f + 0.002f * h, kv_scales[c.hkv + h] = 0.011f - 0.001f * (h % 4);
  // element (page, head, slot, d)
  auto at = [&](int page, int h, int slot, int d) -> size_t {
    return page * page_stride + (c.token_major ? (static_cast<size_t>(slot) * c.hkv + h) * c.D + d
                                               : (static_cast<size_t>(h) * c.ps + slot) * c.D + d);
  };
  int next = 0;
  for (int i = 0; i < ns; ++i) {
    const int kv = c.seqs[i].first + c.seqs[i].second;
    for (int pg = 0; pg * c.ps < kv; ++pg) {
      const int page = perm[next++];
      bt[static_cast<size_t>(i) * max_pages + pg] = page;
      for (int slot = 0; slot < c.ps && pg * c.ps + slot < kv; ++slot)
        for (int h = 0; h < c.hkv; ++h)
          for (int d = 0; d < c.D; ++d) {
            if (c.fp8) {
              k8[at(page, h, slot, d)] = gpu::f32_to_e4m3(rng.normal() / kv_scales[h]);
              v8[at(page, h, slot, d)] = gpu::f32_to_e4m3(rng.normal() / kv_scales[c.hkv + h]);
            } else {
              k[at(page, h, slot, d)] = gpu::to_half(c.dt, rng.normal());
              v[at(page, h, slot, d)] = gpu::to_half(c.dt, rng.normal());
            }
          }
    }
  }
  std::vector<uint16_t> q(static_cast<size_t>(T) * c.hq * c.D);
  for (auto &x : q) x = gpu::to_half(c.dt, rng.normal());
  bspa_layout *layout = make_layout(c, max_tokens, rng);
  const float scale = c.scale != 0 ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.D));

  const std::vector<int64_t> pshape = {total_pages, c.hkv, c.ps, c.D};
  std::vector<int64_t> pstrides;
  if (c.token_major)
    pstrides = {static_cast<int64_t>(page_stride), c.D, static_cast<int64_t>(c.hkv) * c.D, 1};
  else if (c.interleaved)
    pstrides = {static_cast<int64_t>(page_stride), static_cast<int64_t>(c.ps) * c.D, c.D, 1};
  const DLDataType hdt = gpu::dl_dtype(c.dt);
  const DLDataType pdt = c.fp8 ? DLDataType{kDLUInt, 8, 1} : hdt;
  void *k_host = c.fp8 ? static_cast<void *>(k8.data()) : k.data(),
       *v_host = c.fp8 ? static_cast<void *>(v8.data()) : v.data();
  const size_t page_bytes_total = c.fp8 ? k8.size() : k.size() * 2;
  float *d_scales = c.fp8 ? gpu::upload(kv_scales) : nullptr;

  size_t ws_bytes = 0;
  void *ws = nullptr;
  if (c.workspace) {
    BSPA_OK_OR_DIE(bspa_prefill_workspace_bytes(kDLCUDA, 0, c.D, &ws_bytes));
    if (ws_bytes) {
      ws = gpu::dmalloc(ws_bytes);
      CUDA_OK(cudaMemset(ws, 0x7f, ws_bytes));
    }
  }
  auto launch = [&](DLDevice dev, void *kp, void *vp, void *qp, void *op, void *lp, void *btp, void *qsp, void *clp) {
    Tensor tk(kp, dev, pdt, pshape, pstrides), tv(vp, dev, pdt, pshape, pstrides);
    Tensor tq(qp, dev, hdt, {T, c.hq, c.D}), to(op, dev, hdt, {T, c.hq, c.D});
    float *sc = dev.device_type == kDLCUDA ? d_scales : kv_scales.data();
    Tensor tks(sc, dev, gpu::dl_f32(), {c.hkv}), tvs(sc + c.hkv, dev, gpu::dl_f32(), {c.hkv});
    Tensor tl(lp, dev, gpu::dl_f32(), {c.hq, T});
    Tensor tbt(btp, dev, gpu::dl_i32(), {ns, max_pages}), tqs(qsp, dev, gpu::dl_i32(), {ns + 1}),
        tcl(clp, dev, gpu::dl_i32(), {ns});
    bspa_paged_args a;
    bspa_paged_args_init(&a);
    a.q = tq.dl();
    a.out = to.dl();
    a.lse = c.lse ? tl.dl() : nullptr;
    a.k_pages = tk.dl();
    a.v_pages = tv.dl();
    a.block_table = tbt.dl();
    a.query_starts = tqs.dl();
    a.context_lens = tcl.dl();
    a.max_query_len = c.max_query_len > 0 ? c.max_query_len : max_q;
    a.layout = layout;
    a.scale = scale;
    Tensor tws(ws, dev, DLDataType{kDLUInt, 8, 1}, {static_cast<int64_t>(ws_bytes)});
    if (ws && dev.device_type == kDLCUDA) a.workspace = tws.dl();
    if (c.fp8) a.k_scale = tks.dl(), a.v_scale = tvs.dl();
    a.max_decode_query_len = c.max_decode_query_len;
    BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr));
  };

  std::vector<uint16_t> out_cpu(q.size(), nan16);
  std::vector<float> lse_cpu(static_cast<size_t>(c.hq) * T, NAN);
  if (c.identity) {
    // Full prefill of ctx + q tokens on the CPU (earlier rows random), then its last q rows.
    const int ctx = cl[0], full = ctx + T;
    std::vector<uint16_t> qf(static_cast<size_t>(full) * c.hq * c.D), of(qf.size(), nan16);
    for (auto &x : qf) x = gpu::to_half(c.dt, rng.normal());
    std::copy(q.begin(), q.end(), qf.begin() + static_cast<size_t>(ctx) * c.hq * c.D);
    std::vector<float> lf(static_cast<size_t>(c.hq) * full, NAN);
    std::vector<int32_t> qs_full = {0, full}, cl_full = {0};
    Tensor tk(k_host, kCpu, pdt, pshape, pstrides), tv(v_host, kCpu, pdt, pshape, pstrides);
    Tensor tq(qf.data(), kCpu, hdt, {full, c.hq, c.D}), to(of.data(), kCpu, hdt, {full, c.hq, c.D});
    Tensor tks(kv_scales.data(), kCpu, gpu::dl_f32(), {c.hkv}),
        tvs(kv_scales.data() + c.hkv, kCpu, gpu::dl_f32(), {c.hkv});
    Tensor tl(lf.data(), kCpu, gpu::dl_f32(), {c.hq, full});
    Tensor tbt(bt.data(), kCpu, gpu::dl_i32(), {ns, max_pages}), tqs(qs_full.data(), kCpu, gpu::dl_i32(), {2}),
        tcl(cl_full.data(), kCpu, gpu::dl_i32(), {1});
    bspa_paged_args a;
    bspa_paged_args_init(&a);
    a.q = tq.dl(), a.out = to.dl(), a.lse = tl.dl(), a.k_pages = tk.dl(), a.v_pages = tv.dl();
    a.block_table = tbt.dl(), a.query_starts = tqs.dl(), a.context_lens = tcl.dl();
    a.max_query_len = full, a.layout = layout, a.scale = scale;
    if (c.fp8) a.k_scale = tks.dl(), a.v_scale = tvs.dl();
    BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr));
    std::copy(of.begin() + static_cast<size_t>(ctx) * c.hq * c.D, of.end(), out_cpu.begin());
    for (int h = 0; h < c.hq; ++h)
      for (int t = 0; t < T; ++t) lse_cpu[static_cast<size_t>(h) * T + t] = lf[static_cast<size_t>(h) * full + ctx + t];
  } else {
    launch(kCpu, k_host, v_host, q.data(), out_cpu.data(), lse_cpu.data(), bt.data(), qs.data(), cl.data());
  }

  void *dk = gpu::dmalloc(page_bytes_total), *dv = gpu::dmalloc(page_bytes_total);
  CUDA_OK(cudaMemcpy(dk, k_host, page_bytes_total, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, v_host, page_bytes_total, cudaMemcpyHostToDevice));
  uint16_t *dq = gpu::upload(q);
  uint16_t *dout = static_cast<uint16_t *>(gpu::dmalloc(q.size() * 2));
  float *dlse = static_cast<float *>(gpu::dmalloc(lse_cpu.size() * 4));
  CUDA_OK(cudaMemset(dout, 0xff, q.size() * 2));
  CUDA_OK(cudaMemset(dlse, 0xff, lse_cpu.size() * 4));
  int32_t *dbt = gpu::upload(bt), *dqs = gpu::upload(qs), *dcl = gpu::upload(cl);
  launch(kGpu, dk, dv, dq, dout, dlse, dbt, dqs, dcl);
  CUDA_OK(cudaDeviceSynchronize());
  const auto out_gpu = gpu::download(dout, q.size());
  auto lse_gpu = gpu::download(dlse, lse_cpu.size());
  if (!c.lse) lse_cpu.clear(), lse_gpu.clear();
  report("paged " + describe(c), compare(c.dt, out_cpu, out_gpu, lse_cpu, lse_gpu));
  for (void *p : {(void *)dk, (void *)dv, (void *)dq, (void *)dout, (void *)dlse, (void *)dbt, (void *)dqs, (void *)dcl,
                  ws, (void *)d_scales})
    cudaFree(p);
  bspa_layout_destroy(layout);
}

// The engine flow on a CPU pool and a CUDA pool side by side: fresh prompt, prefix hit
// plus a fresh sequence in one batch, then a decode step. K/V of a token depend only on
// (token, position), so cached pages equal what a recompute would write.
// fp8: pools of e4m3 pages (q, out and the new K/V of dt), the same scales on both.
// After every step the K/V bytes kv_write stored for the step's tokens must be equal on
// both pools (a copy for 16-bit pages; for fp8 the two quantizers agree bit for bit).
void run_pool(bspa_dtype dt, int D, int hq, int hkv, int ps, int layout_kind, uint64_t seed, bool fp8 = false) {
  Rng rng(seed);
  bspa_pool *pools[2];
  const int kPoolPages = 512, elem_bytes = fp8 ? 1 : 2;
  std::vector<float> ks(hkv), vs(hkv);
  for (int h = 0; h < hkv; ++h) ks[h] = 0.0095f + 0.001f * h, vs[h] = 0.0105f - 0.0005f * h;
  for (int g = 0; g < 2; ++g) {
    bspa_pool_options o;
    bspa_pool_options_init(&o);
    o.device_type = g ? kDLCUDA : kDLCPU;
    o.dtype = fp8 ? BSPA_DTYPE_FP8_E4M3 : dt;
    o.num_layers = 2;
    o.num_kv_heads = hkv;
    o.head_dim = D;
    o.page_size = ps;
    o.num_pages = kPoolPages;
    BSPA_OK_OR_DIE(bspa_pool_create(&pools[g], &o));
    if (fp8)
      for (int layer = 0; layer < 2; ++layer)
        BSPA_OK_OR_DIE(bspa_pool_set_kv_scales(pools[g], layer, ks.data(), vs.data(), hkv));
  }
  // Sequences [seqs of `which`]: the K and V bytes of tokens [starts[i], ends[i]) in every
  // layer, equal on both pools? (Other bytes of a page are never written.)
  std::vector<bspa_seq *> seqs[2];
  auto check_kv_bytes = [&](const std::vector<int> &which, const std::vector<int> &starts, const std::vector<int> &ends,
                            const std::string &what) {
    // Only the bytes kv_write wrote are read (per page and head, the slots of the step's
    // tokens): the rest of a page is uninitialised, and compute-sanitizer's initcheck says so.
    const void *base[2][2][2];  // [pool][layer][K, V]
    for (int g = 0; g < 2; ++g)
      for (int layer = 0; layer < 2; ++layer) {
        DLTensor k, v;
        BSPA_OK_OR_DIE(bspa_pool_kv(pools[g], layer, &k, &v));
        base[g][layer][0] = k.data, base[g][layer][1] = v.data;
      }
    int64_t differ = 0, compared = 0;
    std::vector<uint8_t> got[2];
    for (size_t i = 0; i < which.size(); ++i) {
      std::vector<int32_t> pages[2];
      for (int g = 0; g < 2; ++g) {
        int64_t np = 0;
        BSPA_OK_OR_DIE(bspa_seq_pages(seqs[g][which[i]], nullptr, 0, &np));
        pages[g].resize(np);
        BSPA_OK_OR_DIE(bspa_seq_pages(seqs[g][which[i]], pages[g].data(), np, &np));
      }
      if (pages[0] != pages[1]) {
        ++differ;  // the two pools' allocators made different choices: report it as a difference
        continue;
      }
      for (int p0 = starts[i]; p0 < ends[i];) {
        const int slot0 = p0 % ps, slots = std::min(ps - slot0, ends[i] - p0);
        const size_t page = static_cast<size_t>(pages[0][p0 / ps]);
        for (int layer = 0; layer < 2; ++layer)
          for (int w = 0; w < 2; ++w)
            for (int h = 0; h < hkv; ++h) {
              const size_t off = ((page * hkv + h) * ps + slot0) * D * elem_bytes,
                           n = static_cast<size_t>(slots) * D * elem_bytes;
              for (int g = 0; g < 2; ++g) {
                got[g].resize(n);
                const uint8_t *src = static_cast<const uint8_t *>(base[g][layer][w]) + off;
                if (g)
                  CUDA_OK(cudaMemcpy(got[g].data(), src, n, cudaMemcpyDeviceToHost));
                else
                  std::memcpy(got[g].data(), src, n);
              }
              for (int t = 0; t < slots; ++t) {
                compared += D;
                differ += std::memcmp(got[0].data() + t * D * elem_bytes, got[1].data() + t * D * elem_bytes,
                                      D * elem_bytes) != 0;
              }
            }
        p0 += slots;
      }
    }
    const bool ok = differ == 0;
    if (ok)
      ++passed;
    else
      ++failures;
    std::printf("%s  kv_write bytes equal on CPU and CUDA (%lld elements, %lld rows differ)  %s\n",
                ok ? "ok  " : "FAIL", (long long)compared, (long long)differ, what.c_str());
  };
  Case lc;
  lc.hq = hq;
  lc.layout = layout_kind;
  bspa_layout *layout = make_layout(lc, 8192, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto kv_value = [&](int token, int pos, int h, int d, int which) {
    uint64_t x = (static_cast<uint64_t>(token) * 1000003u + pos) * 131u + h * 7919u + d * 3u + which;
    Rng r(x);
    return gpu::to_half(dt, r.normal());
  };
  std::vector<int32_t> p0(1500), p1(1500), p2(77);
  for (auto &t : p0) t = rng.range(0, 50000);
  for (int i = 0; i < 1500; ++i) p1[i] = i < 1300 ? p0[i] : rng.range(0, 50000);
  for (auto &t : p2) t = rng.range(0, 50000);

  // One step on both pools: (sequence index, tokens of the whole prompt so far, new count).
  auto step = [&](const std::vector<int> &which, const std::vector<const std::vector<int32_t> *> &prompts,
                  const std::vector<int> &starts, const std::string &what) {
    const int n = static_cast<int>(which.size());
    std::vector<int32_t> qlen(n);
    int T = 0;
    for (int i = 0; i < n; ++i) T += qlen[i] = static_cast<int>(prompts[i]->size()) - starts[i];
    std::vector<uint16_t> kn(static_cast<size_t>(T) * hkv * D), vn(kn.size()), q(static_cast<size_t>(T) * hq * D);
    size_t row = 0;
    for (int i = 0; i < n; ++i)
      for (int pos = starts[i]; pos < static_cast<int>(prompts[i]->size()); ++pos, ++row)
        for (int h = 0; h < hkv; ++h)
          for (int d = 0; d < D; ++d) {
            kn[(row * hkv + h) * D + d] = kv_value((*prompts[i])[pos], pos, h, d, 0);
            vn[(row * hkv + h) * D + d] = kv_value((*prompts[i])[pos], pos, h, d, 1);
          }
    for (auto &x : q) x = gpu::to_half(dt, rng.normal());
    std::vector<uint16_t> outs[2];
    std::vector<float> lses[2];
    std::vector<int> ends;
    for (int i = 0; i < n; ++i) ends.push_back(static_cast<int>(prompts[i]->size()));
    for (int g = 0; g < 2; ++g) {
      std::vector<bspa_seq *> bs;
      for (int i : which) bs.push_back(seqs[g][i]);
      bspa_batch *batch = nullptr;
      BSPA_OK_OR_DIE(bspa_batch_create(&batch, pools[g], bs.data(), qlen.data(), n, nullptr));
      const DLDevice dev = g ? kGpu : kCpu;
      void *dkn = kn.data(), *dvn = vn.data(), *dq = q.data(), *dout, *dlse;
      outs[g].assign(q.size(), 0xffff);
      lses[g].assign(static_cast<size_t>(hq) * T, NAN);
      if (g) {
        dkn = gpu::upload(kn), dvn = gpu::upload(vn), dq = gpu::upload(q);
        dout = gpu::dmalloc(q.size() * 2), dlse = gpu::dmalloc(lses[g].size() * 4);
        CUDA_OK(cudaMemset(dout, 0xff, q.size() * 2));
        CUDA_OK(cudaMemset(dlse, 0xff, lses[g].size() * 4));
      } else {
        dout = outs[g].data(), dlse = lses[g].data();
      }
      const DLDataType hdt = gpu::dl_dtype(dt);
      Tensor tk(dkn, dev, hdt, {T, hkv, D}), tv(dvn, dev, hdt, {T, hkv, D}), tq(dq, dev, hdt, {T, hq, D}),
          to(dout, dev, hdt, {T, hq, D}), tl(dlse, dev, gpu::dl_f32(), {hq, T});
      for (int layer = 0; layer < 2; ++layer) {
        BSPA_OK_OR_DIE(gpu::kv_write(pools[g], batch, layer, tk.dl(), tv.dl()));
        if (layer == 1) BSPA_OK_OR_DIE(gpu::prefill(pools[g], batch, layer, layout, tq.dl(), to.dl(), scale, tl.dl()));
      }
      if (g) {
        CUDA_OK(cudaDeviceSynchronize());
        outs[g] = gpu::download(static_cast<uint16_t *>(dout), q.size());
        lses[g] = gpu::download(static_cast<float *>(dlse), lses[g].size());
        for (void *p : {dkn, dvn, dq, dout, dlse}) cudaFree(p);
      }
      bspa_batch_destroy(batch);
      for (int i = 0; i < n; ++i)
        BSPA_OK_OR_DIE(bspa_seq_commit(seqs[g][which[i]], static_cast<int64_t>(prompts[i]->size())));
    }
    report("pool  " + what, compare(dt, outs[0], outs[1], lses[0], lses[1]));
    check_kv_bytes(which, starts, ends, what);
  };

  int64_t cached[2] = {0, 0};
  // Step 1: a fresh prompt.
  for (int g = 0; g < 2; ++g) {
    seqs[g].resize(3);
    for (auto &s : seqs[g]) BSPA_OK_OR_DIE(bspa_seq_create(&s, pools[g], nullptr));
    BSPA_OK_OR_DIE(bspa_seq_match(seqs[g][0], p0.data(), 1500, &cached[g]));
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][0], p0.data() + cached[g], 1500 - cached[g]));
  }
  const std::string tag = std::string(dt == BSPA_DTYPE_BF16 ? "bf16" : "f16") + (fp8 ? " fp8 pages" : "") + " D" +
                          std::to_string(D) + " H" + std::to_string(hq) + "/" + std::to_string(hkv) + " ps" +
                          std::to_string(ps) + " layout" + std::to_string(layout_kind);
  step({0}, {&p0}, {static_cast<int>(cached[1])}, tag + " fresh 1500");
  // Step 2: a prefix hit (1300 shared tokens) and a fresh 77-token prompt in one batch.
  int64_t c1[2], c2[2];
  for (int g = 0; g < 2; ++g) {
    BSPA_OK_OR_DIE(bspa_seq_match(seqs[g][1], p1.data(), 1500, &c1[g]));
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][1], p1.data() + c1[g], 1500 - c1[g]));
    BSPA_OK_OR_DIE(bspa_seq_match(seqs[g][2], p2.data(), 77, &c2[g]));
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][2], p2.data() + c2[g], 77 - c2[g]));
  }
  if (c1[0] != c1[1] || c1[1] == 0) {
    ++failures;
    std::printf("FAIL  pool %s: cached %lld (cpu) vs %lld (cuda)\n", tag.c_str(), (long long)c1[0], (long long)c1[1]);
  }
  step({1, 2}, {&p1, &p2}, {static_cast<int>(c1[1]), static_cast<int>(c2[1])},
       tag + " hit " + std::to_string(c1[1]) + "+" + std::to_string(1500 - c1[1]) + " & fresh 77");
  // Step 3: one decode row for each.
  p1.push_back(rng.range(0, 50000));
  p2.push_back(rng.range(0, 50000));
  for (int g = 0; g < 2; ++g) {
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][1], &p1.back(), 1));
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][2], &p2.back(), 1));
  }
  step({1, 2}, {&p1, &p2}, {1500, 77}, tag + " decode 1501 & 78");
  // Step 4: nine fresh prompts and, last in the batch, a decode row of sequence 1: a pool
  // batch whose decode rows come after prefill rows (units indexed by batch position), its
  // key range split.
  std::vector<std::vector<int32_t> > fresh(9, std::vector<int32_t>(100));
  for (auto &f : fresh)
    for (auto &t : f) t = rng.range(0, 50000);
  p1.push_back(rng.range(0, 50000));
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < 9; ++i) {
      bspa_seq *s = nullptr;
      int64_t c = 0;
      BSPA_OK_OR_DIE(bspa_seq_create(&s, pools[g], nullptr));
      BSPA_OK_OR_DIE(bspa_seq_match(s, fresh[i].data(), 100, &c));
      BSPA_OK_OR_DIE(bspa_seq_append(s, fresh[i].data() + c, 100 - c));
      seqs[g].push_back(s);
    }
    BSPA_OK_OR_DIE(bspa_seq_append(seqs[g][1], &p1.back(), 1));
  }
  {
    std::vector<int> which;
    std::vector<const std::vector<int32_t> *> prompts;
    std::vector<int> starts;
    for (int i = 0; i < 9; ++i) which.push_back(3 + i), prompts.push_back(&fresh[i]), starts.push_back(0);
    which.push_back(1), prompts.push_back(&p1), starts.push_back(1501);
    step(which, prompts, starts, tag + " 9 fresh x 100 & decode 1502 last");
  }
  for (int g = 0; g < 2; ++g) {
    for (auto *s : seqs[g]) bspa_seq_destroy(s);
    if (bspa_pool_check(pools[g]) != BSPA_OK) {
      ++failures;
      std::printf("FAIL  pool check: %s\n", bspa_last_error());
    }
    bspa_pool_destroy(pools[g]);
  }
  bspa_layout_destroy(layout);
}

// Every e4m3 code through the kernels' widening, exactly: 256 sequences of one head (D 128)
// share two pages whose slot 0 holds K and V rows of all 256 codes (page 0 codes 0..127,
// page 1 codes 128..255). Sequence s has ctx 0 and q_len new tokens (1: the decode kernel;
// 9: the sm80 prefill kernel), its first row one-hot at d = s % 128, so that row sees only
// key 0: its output is v_scale * V row (exact in bf16 and f16 for a power-of-two scale) and
// its lse is the one logit, scale * k_scale * e4m3(code s). The NaN codes 0x7f and 0xff are
// left out (zero in the pages): kv_write never writes them, and one in a K row would make
// every logit over that row NaN (the decode kernel converts them to NaN on compute
// capability 8.9+, as the CPU oracle does).
void run_fp8_codes(bspa_dtype dt, int q_len) {
  constexpr int D = 128, kSeqs = 256, kPs = 16;
  const float k_scale = 0.5f, v_scale = 0.25f, scale = 0.125f;
  std::vector<uint8_t> kv(2 * kPs * D, 0);  // [page][slot][d]: slot 0 the codes, slots 1.. zero
  for (int code = 0; code < 256; ++code)
    if ((code & 0x7f) != 0x7f) kv[(code / D) * kPs * D + code % D] = static_cast<uint8_t>(code);
  // A sequence's first page holds its codes; queries over one page (the checked row 0 sees
  // key 0 only) continue on page 1.
  const int cols = (q_len + kPs - 1) / kPs;
  std::vector<int32_t> bt(static_cast<size_t>(kSeqs) * cols, 1), qs(kSeqs + 1), cl(kSeqs, 0);
  for (int s = 0; s < kSeqs; ++s) bt[static_cast<size_t>(s) * cols] = s / D, qs[s] = s * q_len;
  qs[kSeqs] = kSeqs * q_len;
  const int T = kSeqs * q_len;
  std::vector<uint16_t> q(static_cast<size_t>(T) * D, 0);
  for (int s = 0; s < kSeqs; ++s) q[static_cast<size_t>(s) * q_len * D + s % D] = gpu::to_half(dt, 1.0f);
  const std::vector<float> scales = {k_scale, v_scale};
  uint8_t *dkv = gpu::upload(kv);
  int32_t *dbt = gpu::upload(bt), *dqs = gpu::upload(qs), *dcl = gpu::upload(cl);
  uint16_t *dq = gpu::upload(q), *dout = static_cast<uint16_t *>(gpu::dmalloc(q.size() * 2));
  float *dlse = static_cast<float *>(gpu::dmalloc(static_cast<size_t>(T) * 4)), *dsc = gpu::upload(scales);
  CUDA_OK(cudaMemset(dout, 0xff, q.size() * 2));
  bspa_layout *l = nullptr;
  BSPA_OK_OR_DIE(bspa_layout_create_dense(&l, 1));
  const DLDataType hdt = gpu::dl_dtype(dt), bytes{kDLUInt, 8, 1};
  Tensor tk(dkv, kGpu, bytes, {2, 1, kPs, D}), tq(dq, kGpu, hdt, {T, 1, D}), to(dout, kGpu, hdt, {T, 1, D});
  Tensor tl(dlse, kGpu, gpu::dl_f32(), {1, T}), tks(dsc, kGpu, gpu::dl_f32(), {1}),
      tvs(dsc + 1, kGpu, gpu::dl_f32(), {1});
  Tensor tbt(dbt, kGpu, gpu::dl_i32(), {kSeqs, cols}), tqs(dqs, kGpu, gpu::dl_i32(), {kSeqs + 1}),
      tcl(dcl, kGpu, gpu::dl_i32(), {kSeqs});
  bspa_paged_args a;
  bspa_paged_args_init(&a);
  a.q = tq.dl(), a.out = to.dl(), a.lse = tl.dl(), a.k_pages = tk.dl(), a.v_pages = tk.dl();
  a.block_table = tbt.dl(), a.query_starts = tqs.dl(), a.context_lens = tcl.dl();
  a.max_query_len = q_len, a.layout = l, a.scale = scale, a.k_scale = tks.dl(), a.v_scale = tvs.dl();
  BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto out = gpu::download(dout, q.size());
  const auto lse = gpu::download(dlse, static_cast<size_t>(T));
  int bad_out = 0, bad_lse = 0;
  for (int s = 0; s < kSeqs; ++s) {
    const size_t row = static_cast<size_t>(s) * q_len;
    for (int d = 0; d < D; ++d) {  // the V row of page s / 128: codes (s / 128) * 128 + d
      const int code = (s / D) * D + d;
      if ((code & 0x7f) == 0x7f) continue;
      bad_out += gpu::from_half(dt, out[row * D + d]) != v_scale * gpu::e4m3_to_f32(static_cast<uint8_t>(code));
    }
    if ((s & 0x7f) == 0x7f) continue;
    const double want = double(scale) * k_scale * gpu::e4m3_to_f32(static_cast<uint8_t>(s));
    bad_lse += std::fabs(lse[row] - want) > 1e-6 * std::max(1.0, std::fabs(want));
  }
  const bool ok = bad_out == 0 && bad_lse == 0;
  if (ok)
    ++passed;
  else
    ++failures;
  std::printf("%s  e4m3 codes exact through the %s kernel, %s q: %d outputs and %d lse differ\n", ok ? "ok  " : "FAIL",
              q_len <= 8    ? "decode"
              : q_len <= 64 ? "sm80 prefill"
                            : "prefill (sm90a on cc 9.0)",
              dt == BSPA_DTYPE_BF16 ? "bf16" : "f16", bad_out, bad_lse);
  for (void *p :
       {(void *)dkv, (void *)dbt, (void *)dqs, (void *)dcl, (void *)dq, (void *)dout, (void *)dlse, (void *)dsc})
    cudaFree(p);
  bspa_layout_destroy(l);
}

// Statuses that must come back for what the kernel lacks: never a wrong answer.
void run_not_supported() {
  bspa_pool_options o;
  bspa_pool_options_init(&o);
  o.device_type = kDLCUDA;
  o.dtype = BSPA_DTYPE_BF16;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 96;
  o.page_size = 64;
  o.num_pages = 4;
  bspa_pool *pool = nullptr;
  BSPA_OK_OR_DIE(bspa_pool_create(&pool, &o));
  bspa_seq *s = nullptr;
  BSPA_OK_OR_DIE(bspa_seq_create(&s, pool, nullptr));
  int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t cached = 0;
  BSPA_OK_OR_DIE(bspa_seq_match(s, toks, 8, &cached));
  BSPA_OK_OR_DIE(bspa_seq_append(s, toks, 8));
  int32_t ql = 8;
  bspa_batch *b = nullptr;
  BSPA_OK_OR_DIE(bspa_batch_create(&b, pool, &s, &ql, 1, nullptr));
  bspa_layout *l = nullptr;
  BSPA_OK_OR_DIE(bspa_layout_create_dense(&l, 1));
  void *dq = gpu::dmalloc(8 * 96 * 2), *dout = gpu::dmalloc(8 * 96 * 2);
  Tensor tq(dq, kGpu, gpu::dl_dtype(BSPA_DTYPE_BF16), {8, 1, 96}),
      to(dout, kGpu, gpu::dl_dtype(BSPA_DTYPE_BF16), {8, 1, 96});
  const bspa_status st = gpu::prefill(pool, b, 0, l, tq.dl(), to.dl(), 0.1f, nullptr);
  const bool ok = st == BSPA_ERR_NOT_SUPPORTED;
  if (ok)
    ++passed;
  else
    ++failures;
  std::printf("%s  head_dim 96 on CUDA -> %s: %s\n", ok ? "ok  " : "FAIL", bspa_status_string(st), bspa_last_error());
  cudaFree(dq);
  cudaFree(dout);
  bspa_layout_destroy(l);
  bspa_batch_destroy(b);
  bspa_seq_destroy(s);
  bspa_pool_destroy(pool);
}

// The shape of the i-th varied decode-row case (bf16 and e4m3 pages alike): q dtype, head
// dim 64/128, GQA 1/4/8 over 1-2 KV heads, pages 16-256, every layout, lse or not,
// token-major q now and then, split workspace or not, each cycling with its own period.
Case varied_shape(int i) {
  static const int groups[] = {1, 4, 8};
  Case c;
  c.dt = i % 2 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
  c.D = (i / 2) % 2 ? 64 : 128;
  const int g = groups[i % 3];
  c.hkv = 1 + (i / 3) % 2;
  c.hq = c.hkv * g;
  c.ps = 16 << (i % 5);
  c.layout = (i / 5) % 6;
  c.lse = i % 7 != 3;
  c.token_major = i % 11 == 5;
  c.workspace = i % 4 != 1;
  return c;
}

}  // namespace

int main(int argc, char **argv) {
  bool quick = false, tiny = false;
  uint64_t seed = 12345;
  CLI::App app("GPU correctness sweep: every CUDA path against the CPU backend (the oracle)");
  app.option_defaults()->always_capture_default();
  app.add_flag("--quick", quick, "the fixed cases only");
  app.add_flag("--tiny", tiny, "a few small cases (for compute-sanitizer); implies --quick");
  app.add_option("--seed", seed, "the random seed (reproduces a run)")->transform(gpu::decimal());
  if (const int rc = gpu::parse_flags(app, argc, argv); rc >= 0) return rc;
  quick = quick || tiny;
  int32_t n = 0;
  if (bspa_device_count(kDLCUDA, &n) != BSPA_OK || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  std::vector<Case> cases;
  // Fixed cases: the identity at unaligned contexts, decode, mixed batches.
  const int mods[] = {0, 1, 2, 16, 32, 36, 48, 63};
  for (int i = 0; i < 8; ++i) {
    Case c;
    c.seqs = {{1024 + mods[i] - 64 * (i % 3), 64 - mods[i] + (i % 2 ? 70 : 0)}};
    c.dt = i % 2 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
    c.D = i % 4 < 2 ? 128 : 64;
    c.ps = 16 << (i % 4);
    c.hq = 8;
    c.hkv = i % 3 == 0 ? 8 : i % 3 == 1 ? 2 : 1;
    c.layout = i % 6;
    c.token_major = i % 5 == 3;
    c.workspace = i % 2 == 0;
    cases.push_back(c);
  }
  {
    Case c;  // mixed batch: full prefill, hits, decode rows, an empty query
    c.hq = 8, c.hkv = 2, c.ps = 32;
    c.seqs = {{0, 700}, {1000, 1}, {63, 200}, {1500, 0}, {2047, 1}, {500, 129}, {0, 1}};
    cases.push_back(c);
    c.layout = 4, c.dt = BSPA_DTYPE_F16, c.D = 64;
    cases.push_back(c);
    c.layout = 0, c.ps = 128;
    cases.push_back(c);
  }
  {
    Case c;  // Phi-3-small heads at a modest length
    c.hq = 32, c.hkv = 8, c.ps = 64, c.scale = 1.0f / 128;
    c.seqs = {{1100, 1000}};
    cases.push_back(c);
  }
  {
    // Wide logits (scale far above 1/sqrt(D)): row maxima keep growing from step to step,
    // so the sm90a softmax's speculative exponentials fail their test (sums past 2^8,
    // overflow to inf at scale 4) and its exact path runs, in unmasked and masked steps.
    Case c;
    c.hq = 32, c.hkv = 8, c.ps = 64, c.scale = 1.0f;
    c.seqs = {{1537, 1200}};
    cases.push_back(c);
    c.hq = 8, c.hkv = 2, c.layout = 0, c.dt = BSPA_DTYPE_F16, c.scale = 4.0f;
    c.seqs = {{300, 900}, {0, 257}};
    cases.push_back(c);
  }
  {
    Case c;  // a split tail whose key tiles take two listing passes (over 512 tiles of 64)
    c.hq = 4, c.hkv = 1, c.ps = 64;
    c.seqs = {{33000, 300}};
    cases.push_back(c);
    c.layout = 0, c.seqs = {{32800, 200}, {0, 130}};
    cases.push_back(c);
  }
  {
    // The shape of 32k with C = 30k at a shorter prefix: 512 items, so a persistent launch
    // on 132 SMs walks three whole rounds and a partial one.
    Case c;
    c.hq = 32, c.hkv = 8, c.ps = 64, c.scale = 1.0f / 128;
    c.seqs = {{600, 2048}};
    cases.push_back(c);
  }
  {
    // Decode rows (the decode kernel): q = 1..8, GQA 1/4/8 (rows q x group up to 64), every
    // residue of the context mod 64 and mod the page size, contexts across the test layouts'
    // local window (256 tokens) and 1024, every layout, split (workspace) and not.
    for (int i = 0; i < (quick ? 12 : 64); ++i) {
      Case c = varied_shape(i);
      const int q = 1 + i % 8;
      const int ns = 1 + (i / 4) % 3;
      for (int s = 0; s < ns; ++s) {
        const int ctx = (quick ? 64 * rng.range(0, 20) : 64 * rng.range(0, 70)) + mods[(i + s) % 8] +
                        (s == 0 && i % 5 == 0 ? 3 : 0);
        c.seqs.push_back({ctx, s == 1 && i % 6 == 0 ? 0 : q});  // an empty row now and then
      }
      cases.push_back(c);
    }
    // Long contexts: many splits, and unsplit key ranges past one listing pass (1024 tiles).
    Case c;
    c.hq = 32, c.hkv = 8, c.scale = 1.0f / 128;
    c.seqs = {{40000, 1}};
    cases.push_back(c);
    c.hq = 8, c.hkv = 1, c.layout = 0, c.workspace = false, c.seqs = {{70001, 3}};
    cases.push_back(c);
    c.workspace = true, c.layout = 1;
    cases.push_back(c);
    // Decode rows next to prefill rows in one launch (both kernels), with and without a split.
    c = Case{};
    c.hq = 16, c.hkv = 2, c.ps = 64, c.seqs = {{5000, 1}, {300, 700}, {63, 8}, {2047, 200}, {9000, 2}};
    cases.push_back(c);
    c.workspace = false, c.layout = 0, c.dt = BSPA_DTYPE_F16, c.ps = 16;
    cases.push_back(c);
    // Groups the decode kernel cannot take whole: 16 query heads per KV head (q <= 4 decode,
    // q 5..8 on the prefill kernels) and 72 (every row on the prefill kernels).
    c = Case{};
    c.hq = 32, c.hkv = 2, c.ps = 32, c.seqs = {{1000, 1}, {500, 6}, {2100, 4}, {63, 300}, {3000, 8}};
    cases.push_back(c);
    c.layout = 0, c.seqs = {{1000, 1}, {2000, 3}};
    cases.push_back(c);
    c.hq = 72, c.hkv = 1, c.D = 64, c.seqs = {{1000, 1}, {129, 5}, {700, 64}};
    cases.push_back(c);
    // 16-bit pages of 8..32 tokens whose ids are runs or runs broken inside tiles: D 128 and 64, token-major pages,
    // unaligned contexts, several sequences, the prefix identity.
    for (int i = 0; i < 8; ++i) {
      Case r;
      r.dt = i % 2 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
      r.D = i % 4 == 3 ? 64 : 128;
      r.hq = 8, r.hkv = 2;
      r.ps = 8 << (i % 3);
      r.layout = i % 5;
      r.page_order = 1 + i % 2;
      r.token_major = i == 5;
      r.seqs = i < 6 ? std::vector<std::pair<int, int> >{{i * 100 + 37, 700 + 61 * i}, {0, 300}, {1000, 129}}
                     : std::vector<std::pair<int, int> >{{2000 + 13 * i, 500}};
      r.identity = i >= 6;
      cases.push_back(r);
    }
    // The prefix identity for decode rows: the last rows of the full prefill.
    const int id_ctx[] = {1, 63, 64, 255, 256, 1000, 1023, 1024, 1025, 3000};
    for (int i = 0; i < 10; ++i) {
      Case d;
      d.hq = i % 2 ? 8 : 4, d.hkv = i % 3 == 0 ? 1 : 2 - (i % 2 == 0);
      d.hq = d.hkv * (i % 2 ? 4 : 8);
      d.D = i % 4 == 3 ? 64 : 128;
      d.ps = 16 << (i % 4);
      d.layout = i % 6;
      d.identity = true;
      d.seqs = {{id_ctx[i], 1 + (i * 3) % 8}};
      cases.push_back(d);
    }
  }
  {
    // e4m3 pages (decode kernel for q <= 8, the prefill kernels otherwise): both q dtypes, D 64/128, GQA 1/4/8, pages
    // 16-256, every layout, decode and prefill rows in one launch, split and not, unaligned contexts, and the prefix
    // identity.
    for (int i = 0; i < (quick ? 8 : 24); ++i) {
      Case c = varied_shape(i);
      c.fp8 = true;
      const int ctx = 64 * rng.range(0, 40) + mods[i % 8];
      if (i % 3 == 2)
        c.seqs = {{ctx, 300 + i}, {ctx / 2 + 1, 1 + i % 8}};  // prefill rows and a decode row
      else
        c.seqs = {{ctx, 1 + i % 8}, {ctx + 77, 1}};
      c.identity = i % 6 == 4;
      if (c.identity) c.seqs.resize(1);
      cases.push_back(c);
    }
    Case c;  // a long split decode over e4m3 pages
    c.fp8 = true, c.hq = 32, c.hkv = 8, c.scale = 1.0f / 128, c.seqs = {{40000, 1}};
    cases.push_back(c);
    // 512 decode items over e4m3 pages, sparse: on 132 SMs one-quad CTAs (three an SM) would
    // leave a thin second wave, so the grid is one three-quad CTA an SM (plan_decode_shape);
    // both page classes, both q dtypes, unaligned contexts; the third at head dim 64 with one
    // sequence of over 65536 keys (its CTA lists its tiles in two passes of 1024).
    for (int v = 0; v < 3; ++v) {
      Case w;
      w.fp8 = true, w.hq = 32, w.hkv = 8, w.scale = 1.0f / 128;
      w.ps = v == 0 ? 64 : v == 1 ? 16 : 32;
      w.D = v == 2 ? 64 : 128;
      w.dt = v == 1 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
      for (int s = 0; s < 64; ++s) w.seqs.push_back({1000 + rng.range(0, 2000), 1});
      if (v == 2) w.seqs[5].first = 70001;
      cases.push_back(w);
    }
  }
  std::vector<Case> fp8_prefill;
  {
    // e4m3 prefill rows of several query tiles (the sm90a kernel on compute capability 9.0,
    // whose producer widens each tile into its ring, V's alone at head dim 128): every page
    // size from 4 (gathers) over 8..32 (a TMA box per page) to 256 (one box a tile), tiles
    // past a sequence's end (gathered), one sequence and several (kernel-listed tiles),
    // split last rounds, the prefix identity.
    static const int page_sizes[] = {4, 8, 16, 32, 64, 128, 256};
    for (int i = 0; i < (quick ? 7 : 21); ++i) {
      Case c = varied_shape(i + 5);
      c.fp8 = true;
      c.ps = page_sizes[i % 7];
      const int ctx = 64 * rng.range(0, 30) + mods[i % 8];
      if (i % 3 == 0)
        c.seqs = {{ctx, 129 + 97 * (i % 5)}, {ctx / 3 + 5, 1}, {ctx + 131, 700 + i}};
      else
        c.seqs = {{ctx, 1000 + 61 * i}};
      c.identity = i % 4 == 2;
      if (c.identity) c.seqs.resize(1);
      cases.push_back(c);
      fp8_prefill.push_back(c);
    }
    // A long e4m3 prefill at head dim 128, where the S GEMM runs on FP8 tensor cores (their
    // sum keeps ~13 bits): it sums over the head dim alone, so the error must not grow with
    // the keys; Phi-3-small's heads, a 512-row chunk over an unaligned 30001-token prefix.
    Case c;
    c.fp8 = true, c.hq = 32, c.hkv = 8, c.scale = 1.0f / 128, c.seqs = {{30001, 512}};
    cases.push_back(c);
    fp8_prefill.push_back(c);
  }
  // Device metadata over several sequences: the sm90a kernel lists the tiles with rows
  // itself (seq_tile_table.cuh) and plans their split. Few tiles (a split planned on the
  // device, with and without a workspace), a chunk among many decode rows, and more
  // sequences with tiles than its table holds (the whole grid walked).
  std::vector<Case> listed;
  {
    Case c;
    c.hq = 8, c.hkv = 2, c.ps = 32, c.seqs = {{100, 130}, {0, 1}, {77, 200}, {5, 0}};
    listed.push_back(c);
    c.workspace = false, c.layout = 0, c.dt = BSPA_DTYPE_F16, c.D = 64;
    listed.push_back(c);
    c = Case{};
    c.hq = 8, c.hkv = 2, c.ps = 64, c.layout = 3, c.seqs = {{3001, 300}};
    for (int s = 0; s < 40; ++s) c.seqs.push_back({500 + 37 * s, 1 + s % 3});
    listed.push_back(c);
    c = Case{};  // exactly the 128 sequences with tiles the table holds
    c.hq = 4, c.hkv = 1, c.ps = 16, c.layout = 2;
    for (int s = 0; s < 128; ++s) c.seqs.push_back({(s * 41) % 250, 65 + (s * 13) % 100});
    listed.push_back(c);
    c = Case{};  // a loose max_query_len: 600 sequences x 128 tiles of grid (listed: 100 x 1-2)
    c.hq = 4, c.hkv = 1, c.ps = 32, c.max_query_len = 16384;
    for (int s = 0; s < 600; ++s)
      c.seqs.push_back(s % 6 == 0 ? std::pair<int, int>{s, 65 + s % 66} : std::pair<int, int>{100 + s, 1});
    listed.push_back(c);
    for (int over : {0, 1}) {  // 129 or 140 sequences with tiles (the table holds 128)
      c = Case{};
      c.hq = 4, c.hkv = 1, c.ps = 16, c.layout = over ? 4 : 1, c.workspace = over == 0;
      for (int s = 0; s < (over ? 140 : 129); ++s) {
        c.seqs.push_back({(s * 53) % 300, 65 + (s * 29) % 150});
        if (over && s % 10 == 0) c.seqs.push_back({200 + s, 1});  // and decode rows between them
      }
      listed.push_back(c);
    }
  }
  cases.insert(cases.end(), listed.begin(), listed.end());
  // The caller's decode bound (max_decode_query_len): rows of 1, 2 and 5 new tokens beside a
  // chunk and alone, bounds that send some of them to the prefill kernel (1, 2, 4), the
  // default's (8) and one past it (100); 16-bit and e4m3 pages (both e4m3 page classes);
  // last, one sequence of 5 rows over bound 2 (the prefill kernel alone).
  {
    const int bounds[] = {1, 2, 4, 8, 100};
    for (int i = 0; i < (quick ? 3 : 10); ++i) {
      Case c;
      c.hq = 8, c.hkv = 2, c.ps = i % 2 ? 16 : 64, c.layout = i % 3;
      c.fp8 = i % 3 == 2;
      c.max_decode_query_len = bounds[i % 5];
      c.seqs = {{700 + 13 * i, 1}, {90, 2}, {1500 + i, 5}, {33, 1}};
      if (i < 5) c.seqs.push_back({2000 + 7 * i, 300});  // a chunk: both kernels
      if (i == 9) c.seqs = {{1500, 5}}, c.max_decode_query_len = 2;
      cases.push_back(c);
    }
  }
  // Pages under 64 tokens on the sm90a kernel: whole key tiles by TMA, a box per page (8
  // at 8-token pages), sequence ends by gathers; 4-token pages by gathers only (under the
  // swizzle's 8 rows); token-major pages merge the TMA dimensions differently
  // (kernels/tma_box_dims.hpp). Interleaved pages (K and V of a page in one block):
  // head-major ones merge groups into heads, token-major ones do not merge and are
  // gathered; in order and shuffled, D 128 and 64.
  std::vector<Case> small_pages;
  for (int ps : {8, 4, 16}) {
    Case c;
    c.hq = 8, c.hkv = 2, c.ps = ps, c.layout = ps == 16 ? 3 : 1, c.token_major = ps == 16;
    c.seqs = {{777, 300}, {64, 129}, {0, 70}};
    small_pages.push_back(c);
  }
  for (int i = 0; i < 6; ++i) {
    Case c;
    c.dt = i % 2 ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
    c.D = i % 3 == 2 ? 64 : 128;
    c.hq = 8, c.hkv = 2, c.ps = i < 4 ? 16 : 8 << (i % 3), c.layout = i % 2 ? 0 : 1;
    c.interleaved = true, c.token_major = i % 2 == 1, c.page_order = i % 3 == 0 ? 0 : 1;
    c.seqs = {{777, 300}, {64, 129}, {1000 + 7 * i, 65}};
    small_pages.push_back(c);
  }
  cases.insert(cases.end(), small_pages.begin(), small_pages.end());
  if (!quick) {
    for (int i = 0; i < 40; ++i) {  // random cases
      Case c;
      c.dt = rng.range(0, 1) ? BSPA_DTYPE_F16 : BSPA_DTYPE_BF16;
      c.D = rng.range(0, 1) ? 128 : 64;
      const int g = std::vector<int>{1, 4, 8}[rng.range(0, 2)];
      c.hkv = rng.range(1, 2);
      c.hq = c.hkv * g;
      c.ps = 16 << rng.range(0, 3);
      c.layout = rng.range(0, 5);
      c.lse = rng.range(0, 3) != 0;
      c.token_major = rng.range(0, 3) == 0;
      c.workspace = rng.range(0, 2) != 0;
      const int ns = rng.range(1, 4);
      for (int s = 0; s < ns; ++s) {
        const int ctx = rng.range(0, 3) == 0 ? 0 : 64 * rng.range(0, 40) + mods[rng.range(0, 7)];
        const int q = rng.range(0, 4) == 0 ? 1 : 64 * rng.range(0, 6) + 64 - mods[rng.range(0, 7)];
        c.seqs.push_back({ctx, q});
      }
      cases.push_back(c);
    }
  }
  if (tiny) {  // a handful of small cases for compute-sanitizer (slow under racecheck)
    std::vector<Case> few = {cases[1], cases[4], cases[9]};
    for (const Case &c : cases)  // a split decode case with GQA and a sparse layout
      if (c.seqs.size() == 1 && c.seqs[0].second > 1 && c.seqs[0].second <= 8 && c.hq == 4 * c.hkv && c.layout == 1 &&
          c.workspace && !c.identity && c.seqs[0].first < 3000) {
        few.push_back(c);
        break;
      }
    for (const Case &c : cases)  // e4m3 pages: a launch with prefill rows and a decode row
      if (c.fp8 && c.seqs.size() == 2 && c.seqs[0].second > 8 && c.seqs[0].first < 1500) {
        few.push_back(c);
        break;
      }
    for (auto &c : few) c.hq = std::min(c.hq, 2 * c.hkv), c.hq = c.hq < c.hkv ? c.hkv : c.hq;
    few[0].hq = few[0].hkv;
    few[2].hq = 4, few[2].hkv = 2;
    few.push_back(listed[0]);       // tiles listed by the kernel, split on the device
    few.push_back(small_pages[0]);  // a key tile in eight TMA boxes
    few.push_back(fp8_prefill[3]);  // e4m3 pages of 32 tokens, three sequences, on the sm90a kernel
    cases = few;
  }
  for (size_t i = 0; i < cases.size(); ++i) run_paged(cases[i], seed + i);
  run_pool(BSPA_DTYPE_BF16, 128, 8, 2, 64, 1, seed + 1000);
  if (!tiny) run_pool(BSPA_DTYPE_BF16, 128, 8, 2, 64, 1, seed + 1003, /*fp8=*/true);  // (sanitizers: one fp8 pool)
  run_pool(BSPA_DTYPE_F16, 64, 4, 1, 16, 0, seed + 1004, /*fp8=*/true);
  if (!quick) {
    run_pool(BSPA_DTYPE_F16, 64, 4, 4, 16, 0, seed + 1001);
    run_pool(BSPA_DTYPE_BF16, 128, 4, 1, 128, 4, seed + 1002);
  }
  for (bspa_dtype dt : {BSPA_DTYPE_BF16, BSPA_DTYPE_F16})
    for (int q_len : {1, 9, 130}) run_fp8_codes(dt, q_len);
  run_not_supported();
  std::printf("gpu check: %d passed, %d failed\n", passed, failures);
  return failures ? 1 : 0;
}
#endif
