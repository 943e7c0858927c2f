// Decode timing on a GPU through the public header (bspa_prefill_paged over caller-owned
// pages, metadata on the device, as a runtime's decode step launches it). Phi-3-small
// shapes: Hq 32, Hkv 8, head dim 128, bf16, B 64, Lb 16, V 8, heterogeneous heads, scale
// 1/128; one new token per sequence (--q N for speculative rows). Pages of each sequence are
// a random permutation of the pool's, so the reads are as scattered as in a long-running
// server (--in-order-pages: consecutive, as a fresh pool hands them out). Every case reads
// far more than L2 holds (>= 134 MB), so launches need no rotation. CUDA events around each
// queued launch, warm-up, median of many.
//   bench_decode [--json FILE] [--commit SHA] [--pages 16,64] [--q N] [--quick] [--only CASE,...] [--kv fp8]
//                [--case SEQSxCTX] [--in-order-pages]
// --kv fp8: the pages hold e4m3 (half the bytes; q and out stay bf16), with per-head scales;
// the mixed-step rows are left out.
// "bytes" is the K/V a decode must read: every key of the sequence per KV head (dense), or
// the union over the KV group's query heads of their visible keys (sparse). GB/s = bytes /
// time; host_us is the median host time of one bspa_prefill_paged call (queued: the GPU
// is busy, so it is the call's own cost). With BSPA_CUDA_DECODE=0 the same launches go through the prefill kernels (the
// path before the decode kernel), for an A/B in one device call.
#include <bspa/bspa.h>

#include <cstdio>
#include <cstdlib>
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
#include <chrono>
#include <ctime>

#include "gpu_common.hpp"

using gpu::Tensor;

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128, kB = 64, kLb = 16, kV = 8;
constexpr int64_t kMaxTokens = 8 * 131072 + 4096;  // K/V allocated once for the largest case

struct Case {
  const char *name;
  int seqs, ctx;
};
const Case kCases[] = {{"64x8191", 64, 8191},
                       {"8x131071", 8, 131071},
                       {"256x2047", 256, 2047},
                       {"1x32767", 1, 32767},
                       {"128x4095", 128, 4095},
                       // Small batches (session 29): one two-quad CTA an SM. 8 x 8191: 64 items in 2
                       // splits, merged inside clusters of 2 on compute capability 9.0
                       // (decode::Split::cluster); 1 x 8191: 8 items in 16 splits (session 30's
                       // kMinSplitTiles), merged through L2 (7 clusters of 16 fit, not 8).
                       {"8x8191", 8, 8191},
                       {"1x8191", 1, 8191}};

bool allowed(int h, int64_t qb, int64_t kb, bool sparse) {
  if (kb > qb) return false;
  if (!sparse) return true;
  const int step = std::max(1, kV / kHq);
  return qb - kb < kLb || (kb + h * step + 1) % kV == 0;
}

// K/V bytes a decode step must read: per sequence and KV head, the keys any query head of
// the group sees from any of the q new rows.
double kv_bytes(int seqs, int ctx, int q, bool sparse, int elem_bytes) {
  const int group = kHq / kHkv, kv_len = ctx + q;
  double keys = 0;
  for (int g = 0; g < kHkv; ++g)
    for (int64_t kb = 0; kb * kB < kv_len; ++kb) {
      bool any = false;
      for (int hh = 0; hh < group && !any; ++hh)
        for (int64_t qb = ctx / kB; qb <= (kv_len - 1) / kB && !any; ++qb)
          any = allowed(g * group + hh, qb, kb, sparse);
      if (any) keys += std::min<int64_t>(kB, kv_len - kb * kB);
    }
  return keys * seqs * kD * elem_bytes * 2 /*K and V*/;
}

struct MixedResult {
  std::string name;
  bool sparse;
  double whole_ms, chunks_ms, decode_ms;
  double whole_bounded_ms = 0;  // the whole with max_decode_query_len = 1 (device metadata; 0: not timed)
};

// The JSON field of a mixed row's bounded whole (none when it was not timed).
std::string bounded_field(double ms) {
  if (ms <= 0) return "";
  char text[64];
  std::snprintf(text, sizeof text, ", \"whole_decode_bound_1_ms\": %.5f", ms);
  return text;
}

struct Result {
  std::string name;
  int page, q;
  bool sparse;
  double ms, bytes, host_us;
};

// Medians of `iters` queued launches, each between its own pair of events (the GPU's
// time), and of the host time of each launch call.
template <class Launch>
std::pair<double, double> time_queued(int iters, Launch launch) {
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto &e : ev) CUDA_OK(cudaEventCreate(&e));
  std::vector<double> host_us(iters);
  for (int i = 0; i < iters; ++i) {
    CUDA_OK(cudaEventRecord(ev[2 * i]));
    const auto h0 = std::chrono::steady_clock::now();
    launch();
    host_us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
    CUDA_OK(cudaEventRecord(ev[2 * i + 1]));
  }
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) CUDA_OK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto &e : ev) cudaEventDestroy(e);
  std::nth_element(ms.begin(), ms.begin() + iters / 2, ms.end());
  std::nth_element(host_us.begin(), host_us.begin() + iters / 2, host_us.end());
  return {static_cast<double>(ms[iters / 2]), host_us[iters / 2]};
}

}  // namespace

int main(int argc, char **argv) {
  std::string json_path, commit_name = "unknown", kv = "bf16";
  std::vector<std::string> only_names;
  std::vector<int> page_sizes = {16, 64};
  int q = 1;
  bool quick = false;
  CLI::App app("GPU decode timing: bspa_prefill_paged of decode rows over caller-owned pages, Phi-3-small shapes");
  app.option_defaults()->always_capture_default();
  app.add_option("--json", json_path, "write the results as JSON to FILE");
  app.add_option("--commit", commit_name, "the commit the JSON names");
  app.add_option("--pages", page_sizes, "page sizes (comma-separated)")
      ->delimiter(',')
      ->transform(gpu::decimal())
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--q", q, "new tokens per sequence (speculative rows)")
      ->transform(gpu::decimal())
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--quick", quick, "fewer iterations");
  app.add_option("--only", only_names, "only these cases and mixed steps, by name (comma-separated)")->delimiter(',');
  std::string extra_case;
  app.add_option("--case", extra_case,
                 "an extra case SEQSxCTX (e.g. 1x1023: a launch's fixed cost; one that fits in L2 reads from it)");
  app.add_option("--kv", kv, "page dtype (fp8: e4m3 pages with per-head scales, no mixed rows)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  bool in_order_pages = false;
  app.add_flag("--in-order-pages", in_order_pages,
               "bspa_prefill_paged's block tables in page order (default: a random permutation)");
  if (const int rc = gpu::parse_flags(app, argc, argv); rc >= 0) return rc;
  const char *json = json_path.empty() ? nullptr : json_path.c_str(), *commit = commit_name.c_str();
  const bool fp8 = kv == "fp8";
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  if (!extra_case.empty()) {
    int seqs = 0, ctx = 0;
    char tail = 0;
    if (std::sscanf(extra_case.c_str(), "%dx%d%c", &seqs, &ctx, &tail) != 2 || seqs < 1 || ctx < 0 ||
        int64_t{seqs} * (ctx + q) > kMaxTokens) {
      std::fprintf(stderr, "--case %s: expected SEQSxCTX, at most %lld tokens in all\n", extra_case.c_str(),
                   static_cast<long long>(kMaxTokens));
      return 2;
    }
    cases.push_back({extra_case.c_str(), seqs, ctx});
  }
  // Mixed steps (prefill chunks and decode rows in one launch) against their parts launched
  // apart, at 64-token pages, through bspa_prefill_paged and through a CUDA pool: a 2048-token chunk over a 30000-token
  // prefix with 63 decode rows at 8191, and 8 chunks of 512 over contexts 0..14k with 120 decode rows at 1k..8k.
  struct Mixed {
    const char *name;
    std::vector<std::pair<int, int> > chunks, decodes;
  };
  std::vector<Mixed> mixed(2);
  mixed[0].name = "chunk2048+63dec";
  mixed[0].chunks = {{30000, 2048}};
  mixed[0].decodes.assign(63, {8191, 1});
  mixed[1].name = "8x512+120dec";
  for (int i = 0; i < 8; ++i) mixed[1].chunks.push_back({2048 * i, 512});
  for (int i = 0; i < 120; ++i) mixed[1].decodes.push_back({1024 + (i * 131) % 7168, 1});
  // --only: every name must be a case's or a mixed step's (a typo would time nothing).
  auto selected = [&](const char *name) {
    return only_names.empty() || std::find(only_names.begin(), only_names.end(), name) != only_names.end();
  };
  for (const std::string &name : only_names) {
    const bool is_case = std::any_of(cases.begin(), cases.end(), [&](const Case &c) { return name == c.name; });
    const bool is_mixed = std::any_of(mixed.begin(), mixed.end(), [&](const Mixed &m) { return name == m.name; });
    if (!is_case && !is_mixed) {
      std::fprintf(stderr, "--only %s: no case or mixed step of that name\n", name.c_str());
      return 2;
    }
    if (is_mixed && fp8) {
      std::fprintf(stderr, "--only %s: the mixed steps are timed over bf16 pages only (not --kv fp8)\n", name.c_str());
      return 2;
    }
  }
  int32_t n = 0;
  if (bspa_device_count(kDLCUDA, &n) != BSPA_OK || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const char *decode_env = std::getenv("BSPA_CUDA_DECODE");
  const bool decode_off = decode_env && !std::strcmp(decode_env, "0");

  const size_t kv_elems = static_cast<size_t>(kMaxTokens) * kHkv * kD;
  uint16_t *k = static_cast<uint16_t *>(gpu::dmalloc(kv_elems * 2)),
           *v = static_cast<uint16_t *>(gpu::dmalloc(kv_elems * 2));
  gpu::fill_normal_bf16({{k, kv_elems}, {v, kv_elems}}, 7);
  uint8_t *k8 = nullptr, *v8 = nullptr;  // --kv fp8: e4m3 pages, and their scales
  float *kv_scales = nullptr;
  if (fp8) {
    const std::vector<uint8_t> h = gpu::random_e4m3(16u << 20, 7);
    k8 = static_cast<uint8_t *>(gpu::dmalloc(kv_elems)), v8 = static_cast<uint8_t *>(gpu::dmalloc(kv_elems));
    uint8_t *d = gpu::upload(h);
    for (uint8_t *p : {k8, v8})
      for (size_t off = 0; off < kv_elems; off += h.size())
        CUDA_OK(cudaMemcpy(p + off, d, std::min(h.size(), kv_elems - off), cudaMemcpyDeviceToDevice));
    cudaFree(d);
    kv_scales = gpu::upload(std::vector<float>(2 * kHkv, 1.0f / 64));
  }
  bspa_layout *sparse = nullptr, *dense = nullptr;
  {
    bspa_layout_strided_options o;
    bspa_layout_strided_options_init(&o);
    o.block_size = kB, o.local_blocks = kLb, o.vert_stride = kV, o.homo_head = 0, o.num_heads_total = kHq;
    o.head_begin = 0, o.num_heads = kHq;
    BSPA_OK_OR_DIE(bspa_layout_create_strided(&sparse, &o));
    BSPA_OK_OR_DIE(bspa_layout_create_dense(&dense, kHq));
  }
  size_t ws_bytes = 0;
  BSPA_OK_OR_DIE(bspa_prefill_workspace_bytes(kDLCUDA, 0, kD, &ws_bytes));
  void *ws = ws_bytes ? gpu::dmalloc(ws_bytes) : nullptr;
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));

  std::vector<Result> results;
  std::vector<MixedResult> mixed_rows;
  const DLDevice dev{kDLCUDA, 0};
  const DLDataType bf = gpu::dl_dtype(BSPA_DTYPE_BF16);
  // Median GPU ms (and host us per call) of one bspa_prefill_paged launch over `seqs`
  // ((context, new tokens) pairs) at page size ps.
  // decode_bound: bspa_paged_args.max_decode_query_len (0: none).
  auto measure = [&](const std::vector<std::pair<int, int> > &seqs, int ps, bool use_sparse, double &host_med,
                     int decode_bound = 0) {
    const int64_t num_pages = kMaxTokens / ps;
    const DLDataType kv_dt = fp8 ? DLDataType{kDLUInt, 8, 1} : bf;
    Tensor tk(fp8 ? static_cast<void *>(k8) : k, dev, kv_dt, {num_pages, kHkv, ps, kD}),
        tv(fp8 ? static_cast<void *>(v8) : v, dev, kv_dt, {num_pages, kHkv, ps, kD});
    Tensor tks(kv_scales, dev, gpu::dl_f32(), {kHkv}), tvs(kv_scales + kHkv, dev, gpu::dl_f32(), {kHkv});
    const int ns = static_cast<int>(seqs.size());
    int max_pages = 1, max_q = 0, T = 0;
    for (auto &sq : seqs) {
      max_pages = std::max(max_pages, (sq.first + sq.second + ps - 1) / ps);
      max_q = std::max(max_q, sq.second), T += sq.second;
    }
    // Each sequence's pages: a random draw without replacement from the whole pool (or, with
    // --in-order-pages, the next ones in order).
    std::vector<int32_t> perm(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) perm[i] = static_cast<int32_t>(i);
    gpu::Rng rng(11 + ps);
    if (!in_order_pages)
      for (int64_t i = num_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    std::vector<int32_t> bt(static_cast<size_t>(ns) * max_pages, 0), qs(ns + 1, 0), cl(ns);
    size_t next = 0;
    for (int i = 0; i < ns; ++i) {
      for (int pg = 0; pg * ps < seqs[i].first + seqs[i].second; ++pg)
        bt[static_cast<size_t>(i) * max_pages + pg] = perm[next++];
      qs[i + 1] = qs[i] + seqs[i].second, cl[i] = seqs[i].first;
    }
    int32_t *dbt = gpu::upload(bt), *dqs = gpu::upload(qs), *dcl = gpu::upload(cl);
    uint16_t *dq = static_cast<uint16_t *>(gpu::dmalloc(static_cast<size_t>(T) * kHq * kD * 2));
    uint16_t *dout = static_cast<uint16_t *>(gpu::dmalloc(static_cast<size_t>(T) * kHq * kD * 2));
    CUDA_OK(cudaMemcpy(dq, k, static_cast<size_t>(T) * kHq * kD * 2, cudaMemcpyDeviceToDevice));  // N(0,1) bf16
    Tensor tq(dq, dev, bf, {T, kHq, kD}), to(dout, dev, bf, {T, kHq, kD});
    Tensor tbt(dbt, dev, gpu::dl_i32(), {ns, max_pages}), tqs(dqs, dev, gpu::dl_i32(), {ns + 1}),
        tcl(dcl, dev, gpu::dl_i32(), {ns});
    Tensor tws(ws, dev, DLDataType{kDLUInt, 8, 1}, {static_cast<int64_t>(ws_bytes)});
    bspa_paged_args a;
    bspa_paged_args_init(&a);
    a.q = tq.dl(), a.out = to.dl(), a.k_pages = tk.dl(), a.v_pages = tv.dl();
    a.block_table = tbt.dl(), a.query_starts = tqs.dl(), a.context_lens = tcl.dl();
    a.max_query_len = max_q, a.layout = use_sparse ? sparse : dense, a.scale = 1.0f / 128;
    a.workspace = ws ? tws.dl() : nullptr;
    if (fp8) a.k_scale = tks.dl(), a.v_scale = tvs.dl();
    a.max_decode_query_len = decode_bound;
    for (int i = 0; i < 3; ++i) BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr));
    CUDA_OK(cudaEventRecord(e0));
    BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr));
    CUDA_OK(cudaEventRecord(e1));
    CUDA_OK(cudaEventSynchronize(e1));
    float est = 0;
    CUDA_OK(cudaEventElapsedTime(&est, e0, e1));
    const int iters = static_cast<int>(std::clamp((quick ? 200.0 : 800.0) / std::max(est, 0.001f), 10.0, 200.0));
    const auto [med, host] = time_queued(iters, [&] { BSPA_OK_OR_DIE(bspa_prefill_paged(&a, nullptr)); });
    host_med = host;
    for (void *ptr : {(void *)dbt, (void *)dqs, (void *)dcl, (void *)dq, (void *)dout}) cudaFree(ptr);
    return med;
  };

  std::printf("%s, decode kernel %s, q = %d, pages %s%s\n", prop.name, decode_off ? "OFF (prefill path)" : "on", q,
              fp8 ? "fp8_e4m3" : "bf16", in_order_pages ? " (block tables in page order)" : "");
  std::printf("%-10s %5s %-6s %10s %9s %9s %8s\n", "case", "page", "layout", "ms", "GB", "GB/s", "host_us");
  for (int ps : page_sizes) {
    for (const Case &c : cases) {
      if (!selected(c.name)) continue;
      const std::vector<std::pair<int, int> > seqs(c.seqs, {c.ctx, q});
      for (int sp = 0; sp < 2; ++sp) {
        double host = 0;
        const double med = measure(seqs, ps, sp != 0, host), bytes = kv_bytes(c.seqs, c.ctx, q, sp, fp8 ? 1 : 2);
        results.push_back({c.name, ps, q, sp != 0, med, bytes, host});
        std::printf("%-10s %5d %-6s %10.4f %9.3f %9.0f %8.1f\n", c.name, ps, sp ? "sparse" : "dense", med, bytes / 1e9,
                    bytes / (med * 1e-3) / 1e9, host);
        std::fflush(stdout);
      }
    }
  }
  if (fp8) mixed.clear();  // the mixed steps are timed over bf16 pages only
  // "dq<=1": the whole again with max_decode_query_len = 1 (the decode rows have one token:
  // the decode tile sized for them, not for the 8 a launch over device metadata must allow).
  std::printf("\n%-16s %-6s %10s %10s %10s %10s %10s %10s\n", "mixed step", "layout", "whole ms", "chunks ms",
              "decode ms", "whole/parts", "dq<=1 ms", "dq<=1/parts");
  for (const Mixed &m : mixed) {
    if (!selected(m.name)) continue;
    std::vector<std::pair<int, int> > whole = m.chunks;
    whole.insert(whole.begin() + 1, m.decodes.begin(), m.decodes.end());  // decode rows between chunks
    for (int sp = 0; sp < 2; ++sp) {
      double h = 0;
      const double tw = measure(whole, 64, sp != 0, h), tc = measure(m.chunks, 64, sp != 0, h),
                   td = measure(m.decodes, 64, sp != 0, h), tb = measure(whole, 64, sp != 0, h, 1);
      mixed_rows.push_back({m.name, sp != 0, tw, tc, td, tb});
      std::printf("%-16s %-6s %10.4f %10.4f %10.4f %10.3f %10.4f %10.3f\n", m.name, sp ? "sparse" : "dense", tw, tc, td,
                  tw / (tc + td), tb, tb / (tc + td));
      std::fflush(stdout);
    }
  }
  // The same mixed steps through a CUDA pool (bspa_batch_create + bspa_prefill): the host
  // plan knows which sequences are decode rows, so the prefill work list leaves them out.
  bspa_pool *pool = nullptr;
  {
    bspa_pool_options o;
    bspa_pool_options_init(&o);
    o.device_type = kDLCUDA, o.dtype = BSPA_DTYPE_BF16, o.num_layers = 1, o.num_kv_heads = kHkv, o.head_dim = kD;
    o.page_size = 64, o.num_pages = 700000 / 64;
    BSPA_OK_OR_DIE(bspa_pool_create(&pool, &o));
  }
  int32_t next_token = 1;
  auto measure_pool = [&](const std::vector<std::pair<int, int> > &seqs, bool use_sparse) {
    const int ns = static_cast<int>(seqs.size());
    std::vector<bspa_seq *> ss(ns);
    std::vector<int32_t> qlen(ns), all(ns), ctx(ns);
    int T = 0, T_all = 0;
    for (int i = 0; i < ns; ++i) {
      BSPA_OK_OR_DIE(bspa_seq_create(&ss[i], pool, nullptr));
      std::vector<int32_t> toks(seqs[i].first + seqs[i].second);
      for (auto &t : toks) t = next_token++ % 2000000000;  // unique: no page is shared
      BSPA_OK_OR_DIE(bspa_seq_append(ss[i], toks.data(), static_cast<int64_t>(toks.size())));
      T += qlen[i] = seqs[i].second;
      T_all += all[i] = seqs[i].first + seqs[i].second;
      ctx[i] = seqs[i].first;
    }
    // Every token's K/V written with N(0,1) values, the cached contexts' too (the kernels'
    // time depends on the values), then the contexts committed: the timed batch computes
    // only the new tokens.
    if (T_all > kMaxTokens) {
      std::fprintf(stderr, "mixed step of %d tokens: more than the %lld the bench holds\n", T_all,
                   static_cast<long long>(kMaxTokens));
      std::exit(2);
    }
    Tensor tk_all(k, dev, bf, {T_all, kHkv, kD}), tv_all(v, dev, bf, {T_all, kHkv, kD});
    gpu::write_contexts(pool, ss, all, ctx, 1, tk_all.dl(), tv_all.dl());
    bspa_batch *batch = nullptr;
    BSPA_OK_OR_DIE(bspa_batch_create(&batch, pool, ss.data(), qlen.data(), ns, nullptr));
    uint16_t *dq = static_cast<uint16_t *>(gpu::dmalloc(static_cast<size_t>(T) * kHq * kD * 2));
    uint16_t *dout = static_cast<uint16_t *>(gpu::dmalloc(static_cast<size_t>(T) * kHq * kD * 2));
    CUDA_OK(cudaMemcpy(dq, k, static_cast<size_t>(T) * kHq * kD * 2, cudaMemcpyDeviceToDevice));
    Tensor tq(dq, dev, bf, {T, kHq, kD}), to(dout, dev, bf, {T, kHq, kD});
    bspa_layout *layout = use_sparse ? sparse : dense;
    for (int i = 0; i < 3; ++i)
      BSPA_OK_OR_DIE(gpu::prefill(pool, batch, 0, layout, tq.dl(), to.dl(), 1.0f / 128, nullptr));
    const double med = time_queued(quick ? 20 : 60, [&] {
                         BSPA_OK_OR_DIE(gpu::prefill(pool, batch, 0, layout, tq.dl(), to.dl(), 1.0f / 128, nullptr));
                       }).first;
    bspa_batch_destroy(batch);
    for (bspa_seq *sq : ss) bspa_seq_destroy(sq);
    cudaFree(dq);
    cudaFree(dout);
    return med;
  };
  std::printf("\n%-16s %-6s %10s %10s %10s %10s   (CUDA pool: bspa_batch_create + bspa_prefill)\n", "mixed step",
              "layout", "whole ms", "chunks ms", "decode ms", "whole/parts");
  for (const Mixed &m : mixed) {
    if (!selected(m.name)) continue;
    std::vector<std::pair<int, int> > whole = m.chunks;
    whole.insert(whole.begin() + 1, m.decodes.begin(), m.decodes.end());
    for (int sp = 0; sp < 2; ++sp) {
      const double tw = measure_pool(whole, sp != 0), tc = measure_pool(m.chunks, sp != 0),
                   td = measure_pool(m.decodes, sp != 0);
      mixed_rows.push_back({std::string(m.name) + " (pool)", sp != 0, tw, tc, td});
      std::printf("%-16s %-6s %10.4f %10.4f %10.4f %10.3f\n", m.name, sp ? "sparse" : "dense", tw, tc, td,
                  tw / (tc + td));
      std::fflush(stdout);
    }
  }
  bspa_pool_destroy(pool);
  if (json) {
    FILE *f = std::fopen(json, "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json);
      return 2;
    }
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::fprintf(
        f,
        "{\n  \"gpu\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\", \"decode_kernel\": %s, \"kv_dtype\": \"%s\", \"in_order_pages\": %s,\n  \"results\": [\n",
        prop.name, commit, date, decode_off ? "false" : "true", fp8 ? "fp8_e4m3" : "bf16",
        in_order_pages ? "true" : "false");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result &r = results[i];
      std::fprintf(
          f,
          "    {\"case\": \"%s\", \"page_size\": %d, \"q\": %d, \"layout\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f, \"host_us\": %.2f}%s\n",
          r.name.c_str(), r.page, r.q, r.sparse ? "sparse" : "dense", r.ms, r.bytes, r.bytes / (r.ms * 1e-3) / 1e9,
          r.host_us, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"mixed\": [\n");
    for (size_t i = 0; i < mixed_rows.size(); ++i) {
      const MixedResult &r = mixed_rows[i];
      std::fprintf(
          f,
          "    {\"case\": \"%s\", \"layout\": \"%s\", \"whole_ms\": %.5f, \"chunks_ms\": %.5f, \"decode_ms\": %.5f%s}%s\n",
          r.name.c_str(), r.sparse ? "sparse" : "dense", r.whole_ms, r.chunks_ms, r.decode_ms,
          bounded_field(r.whole_bounded_ms).c_str(), i + 1 < mixed_rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  cudaFree(k);
  cudaFree(v);
  for (void *ptr : {(void *)k8, (void *)v8, (void *)kv_scales})
    if (ptr) cudaFree(ptr);
  if (ws) cudaFree(ws);
  bspa_layout_destroy(sparse);
  bspa_layout_destroy(dense);
  return 0;
}
#endif
