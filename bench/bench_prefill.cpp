// Prefill timing on a GPU through the public header (bspa_prefill_paged over caller-owned
// pages), Phi-3-small shapes: Hq 32, Hkv 8, head dim 128 (--shape HQ/HKV/D for others, e.g.
// 16/16/64), bf16, page 64 (--page-size), B 64, Lb 16, V 8,
// heterogeneous heads, scale 1/128. CUDA events around each launch, warm-up, median of
// many; K/V pages and q/out rows rotate over disjoint regions so L2 (60 MB) cannot hold
// one launch's inputs for the next. Useful FLOPs = 4 * D * visible (q, k) pairs * heads.
//   bench_prefill [--json FILE] [--commit SHA] [--quick] [--no-sweep] [--only CASE] [--no-workspace]
//                 [--sync-each | --idle-ms N | --graph] [--scale S] [--kv fp8] [--shape HQ/HKV/D]
//                 [--page-size N] [--shuffle-pages] [--kv-layout pool|token-major|interleaved]
// --kv fp8: e4m3 pages with per-head scales (q and out stay bf16). --page-size N: pages of
// N tokens (default 64). --kv-layout pool|token-major|interleaved: how the pages hold K and
// V (bspa's pools, vLLM's token-major cache, FlashInfer's NHD pages with K and V of a page
// in one block).
// Launches pass the split workspace (bspa_prefill_workspace_bytes) unless --no-workspace.
// Timing (as triton.testing.do_bench, which times the torch baselines): the launches are
// queued, each between its own pair of events, and the host waits once at the end, so an
// event pair holds the GPU's time for one launch and not the host's argument checks.
// --sync-each waits after every launch (the host's time from the first event to the
// kernel's start is then inside the pair: the method of bench/NOTES.md's entries before
// "v15–v19"); --idle-ms N also sleeps N ms after each (a cool GPU: power-cap diagnostic).
// --graph replays launches captured in a CUDA graph (about 2 ms of them per replay, one
// event pair per replay): the kernels' own time, without the per-launch gap that the
// queued events hold (a diagnostic; the torch baselines are timed queued).
// --scale S replaces the softmax scale (default 1/128: logits of N(0,1) inputs have a
// standard deviation of 0.09, so row maxima barely move; 1/sqrt(128) gives 1, nearer real
// attention). The sm90a softmax's lazy rescale fires more often on wide logits; the rate
// of the other kernels and of the torch baselines does not depend on the data.
// Prints a table (docs/design.md §11 cases, dense and sparse) and the prefix hit-rate sweep
// (attention time of the whole 16 sparse + 16 dense layer stack per step).
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
#include <cmath>
#include <ctime>
#include <random>
#include <thread>

#include "gpu_common.hpp"

using gpu::Tensor;

namespace {

constexpr int kB = 64, kLb = 16, kV = 8;
// Heads and head dim (--shape HQ/HKV/D; set once in main, before any case): Phi-3-small's by default.
int g_hq = 32, g_hkv = 8, g_head_dim = 128;
int g_page = 64;               // tokens per page (--page-size; set once in main, before any case)
bool g_shuffle_pages = false;  // --shuffle-pages: each rotation's page ids in a random order
// --kv-layout: how the caller's pages hold K and V (set once in main, before any case).
//  pool         [pages, Hkv, page, D], K and V apart (bspa's pools)
//  token-major  [pages, page, Hkv, D], K and V apart (vLLM's cache)
//  interleaved  [pages, 2, page, Hkv, D], K and V of a page in one block (FlashInfer's NHD)
std::string g_kv_layout = "pool";
constexpr int64_t kMaxTokens = 131072 + 8192;  // pages and q rows allocated once

struct Seq {
  int ctx, q;
};

// Visible (query, key) pairs summed over heads; the strided rule mirrors docs/design.md §2.
double visible_pairs(const std::vector<Seq> &seqs, bool sparse) {
  double total = 0;
  const int s_step = std::max(1, kV / g_hq);
  for (const Seq &s : seqs) {
    const int64_t first = s.ctx, last = static_cast<int64_t>(s.ctx) + s.q - 1;
    if (s.q == 0) continue;
    for (int h = 0; h < g_hq; ++h)
      for (int64_t qb = first / kB; qb <= last / kB; ++qb) {
        const int64_t r0 = std::max(first, qb * kB), r1 = std::min(last, qb * kB + kB - 1);
        const double rows = static_cast<double>(r1 - r0 + 1);
        int64_t full_blocks = qb;  // kb < qb
        if (sparse) {
          full_blocks = 0;
          for (int64_t kb = 0; kb < qb; ++kb)
            if (qb - kb < kLb || (kb + h * s_step + 1) % kV == 0) ++full_blocks;
        }
        total += rows * kB * full_blocks;
        total += (r0 - qb * kB + 1 + r1 - qb * kB + 1) * rows / 2;  // the diagonal block
      }
  }
  return total;
}

struct Bench {
  uint16_t *k = nullptr, *v = nullptr, *q = nullptr, *out = nullptr;
  bool fp8 = false;            // e4m3 pages (k, v then hold bytes)
  float *kv_scales = nullptr;  // fp8: [K, V][Hkv]
  int64_t num_pages = kMaxTokens / g_page;
  bspa_layout *sparse = nullptr, *dense = nullptr;
  cudaEvent_t e0, e1;
  bool quick = false;
  enum class Timing { Queued, SyncEach, Graph } timing = Timing::Queued;
  int idle_ms = 0;  // with SyncEach: sleep after every launch
  float scale = 1.0f / 128;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;  // a stream of its own for --graph (capture needs one)

  void init() {
    const size_t page_elems = static_cast<size_t>(num_pages) * g_hkv * g_page * g_head_dim;
    const size_t q_elems = static_cast<size_t>(kMaxTokens) * g_hq * g_head_dim;
    if (g_kv_layout == "interleaved") {
      // One block of both: K of page i at 2i pages' elements, V one page's elements on (the
      // elements are bytes for fp8, as k and v are below).
      const size_t one_page = static_cast<size_t>(g_hkv) * g_page * g_head_dim;
      char *kv = static_cast<char *>(gpu::dmalloc(2 * page_elems * 2));
      k = reinterpret_cast<uint16_t *>(kv);
      v = reinterpret_cast<uint16_t *>(kv + one_page * (fp8 ? 1 : 2));
    } else {
      k = static_cast<uint16_t *>(gpu::dmalloc(page_elems * 2));
      v = static_cast<uint16_t *>(gpu::dmalloc(page_elems * 2));
    }
    q = static_cast<uint16_t *>(gpu::dmalloc(q_elems * 2));
    out = static_cast<uint16_t *>(gpu::dmalloc(q_elems * 2));
    gpu::fill_normal_bf16({{k, page_elems}, {v, page_elems}, {q, q_elems}, {out, q_elems}}, 7);
    if (fp8) {
      const size_t chunk = 16u << 20;
      const std::vector<uint8_t> codes = gpu::random_e4m3(chunk, 7);
      uint8_t *dcodes = gpu::upload(codes);
      for (uint16_t *p : {k, v})
        for (size_t off = 0; off < page_elems; off += chunk)
          CUDA_OK(cudaMemcpy(reinterpret_cast<uint8_t *>(p) + off, dcodes, std::min(chunk, page_elems - off),
                             cudaMemcpyDeviceToDevice));
      cudaFree(dcodes);
      kv_scales = gpu::upload(std::vector<float>(2 * g_hkv, 1.0f / 64));
    }
    bspa_layout_strided_options o;
    bspa_layout_strided_options_init(&o);  // Phi-3-small defaults
    o.block_size = kB, o.local_blocks = kLb, o.vert_stride = kV, o.homo_head = 0, o.num_heads_total = g_hq;
    o.head_begin = 0, o.num_heads = g_hq;
    BSPA_OK_OR_DIE(bspa_layout_create_strided(&sparse, &o));
    BSPA_OK_OR_DIE(bspa_layout_create_dense(&dense, g_hq));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    if (timing == Timing::Graph) CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }

  void use_workspace() {
    BSPA_OK_OR_DIE(bspa_prefill_workspace_bytes(kDLCUDA, 0, g_head_dim, &workspace_bytes));
    if (workspace_bytes) workspace = gpu::dmalloc(workspace_bytes);
  }

  // Median milliseconds of one launch over the batch `seqs`.
  double time(const std::vector<Seq> &seqs, bool use_sparse) {
    const int ns = static_cast<int>(seqs.size());
    int64_t pages_needed = 0, T = 0;
    int max_pages = 1, max_q = 0;
    for (const Seq &s : seqs) {
      const int p = (s.ctx + s.q + g_page - 1) / g_page;
      pages_needed += p, T += s.q, max_pages = std::max(max_pages, p), max_q = std::max(max_q, s.q);
    }
    // Rotations: disjoint page ranges and q/out row ranges.
    const int R = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>({8, num_pages / pages_needed, kMaxTokens / std::max<int64_t>(T, 1)})));
    std::vector<int32_t *> bts(R);
    std::vector<int32_t> qs(ns + 1, 0), cl(ns);
    for (int i = 0; i < ns; ++i) qs[i + 1] = qs[i] + seqs[i].q, cl[i] = seqs[i].ctx;
    int32_t *dqs = gpu::upload(qs), *dcl = gpu::upload(cl);
    for (int r = 0; r < R; ++r) {
      std::vector<int32_t> bt(static_cast<size_t>(ns) * max_pages, 0);
      int64_t next = r * pages_needed;
      // In order by default (as a fresh pool hands pages out), or shuffled within the
      // rotation's range: no two pages of a tile then tend to be neighbours.
      std::vector<int32_t> ids(static_cast<size_t>(pages_needed));
      for (int64_t j = 0; j < pages_needed; ++j) ids[static_cast<size_t>(j)] = static_cast<int32_t>(next + j);
      if (g_shuffle_pages) std::shuffle(ids.begin(), ids.end(), std::mt19937(static_cast<uint32_t>(1234 + r)));
      size_t used = 0;
      for (int i = 0; i < ns; ++i)
        for (int p = 0; p * g_page < seqs[i].ctx + seqs[i].q; ++p)
          bt[static_cast<size_t>(i) * max_pages + p] = ids[used++];
      bts[r] = gpu::upload(bt);
    }
    const DLDevice dev{kDLCUDA, 0};
    const DLDataType bf = gpu::dl_dtype(BSPA_DTYPE_BF16);
    const DLDataType kv_dt = fp8 ? DLDataType{kDLUInt, 8, 1} : bf;
    // Strides (elements) of the [pages, Hkv, page, D] view: --kv-layout.
    const int64_t row = g_head_dim, page_elems = int64_t{g_hkv} * g_page * g_head_dim;
    std::vector<int64_t> kv_strides;  // pool: the view's own
    if (g_kv_layout == "token-major")
      kv_strides = {page_elems, row, int64_t{g_hkv} * row, 1};
    else if (g_kv_layout == "interleaved")
      kv_strides = {2 * page_elems, row, int64_t{g_hkv} * row, 1};
    Tensor tk(k, dev, kv_dt, {num_pages, g_hkv, g_page, g_head_dim}, kv_strides),
        tv(v, dev, kv_dt, {num_pages, g_hkv, g_page, g_head_dim}, kv_strides);
    Tensor tks(kv_scales, dev, gpu::dl_f32(), {g_hkv}), tvs(kv_scales + g_hkv, dev, gpu::dl_f32(), {g_hkv});
    Tensor tqs(dqs, dev, gpu::dl_i32(), {ns + 1}), tcl(dcl, dev, gpu::dl_i32(), {ns});
    Tensor tws(workspace, dev, DLDataType{kDLUInt, 8, 1}, {static_cast<int64_t>(workspace_bytes)});
    auto launch = [&](int r) {
      Tensor tq(q + static_cast<size_t>(r) * T * g_hq * g_head_dim, dev, bf, {T, g_hq, g_head_dim});
      Tensor to(out + static_cast<size_t>(r) * T * g_hq * g_head_dim, dev, bf, {T, g_hq, g_head_dim});
      Tensor tbt(bts[r], dev, gpu::dl_i32(), {ns, max_pages});
      bspa_paged_args a;
      bspa_paged_args_init(&a);
      a.q = tq.dl(), a.out = to.dl(), a.lse = nullptr, a.k_pages = tk.dl(), a.v_pages = tv.dl();
      a.block_table = tbt.dl(), a.query_starts = tqs.dl(), a.context_lens = tcl.dl();
      a.max_query_len = max_q, a.layout = use_sparse ? sparse : dense, a.scale = scale;
      a.workspace = workspace ? tws.dl() : nullptr;
      if (fp8) a.k_scale = tks.dl(), a.v_scale = tvs.dl();
      BSPA_OK_OR_DIE(bspa_prefill_paged(&a, stream));
    };
    for (int i = 0; i < 2; ++i) launch(i % R);
    CUDA_OK(cudaEventRecord(e0, stream));
    launch(0);
    CUDA_OK(cudaEventRecord(e1, stream));
    CUDA_OK(cudaEventSynchronize(e1));
    float est = 0;
    CUDA_OK(cudaEventElapsedTime(&est, e0, e1));
    const int iters = static_cast<int>(std::clamp((quick ? 300.0 : 1500.0) / std::max(est, 0.001f), 5.0, 50.0));
    std::vector<float> ms(iters);
    if (timing == Timing::Graph) {
      // G launches captured in one graph, each replay between one pair of events: the
      // launch gaps shrink to the graph's (kernel time with no per-launch event or host work).
      const int G = static_cast<int>(std::clamp(2.0 / std::max(est, 0.001f), 1.0, 64.0));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < G; ++i) launch(i % R);
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphLaunch(exec, stream));
      for (int i = 0; i < iters; ++i) {
        CUDA_OK(cudaEventRecord(e0, stream));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms[i], e0, e1));
        ms[i] /= static_cast<float>(G);
      }
      CUDA_OK(cudaGraphExecDestroy(exec));
      CUDA_OK(cudaGraphDestroy(graph));
    } else if (timing == Timing::Queued) {
      std::vector<cudaEvent_t> ev(2 * iters);
      for (auto &e : ev) CUDA_OK(cudaEventCreate(&e));
      for (int i = 0; i < iters; ++i) {
        CUDA_OK(cudaEventRecord(ev[2 * i], stream));
        launch(i % R);
        CUDA_OK(cudaEventRecord(ev[2 * i + 1], stream));
      }
      CUDA_OK(cudaEventSynchronize(ev[2 * iters - 1]));
      for (int i = 0; i < iters; ++i) CUDA_OK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
      for (auto &e : ev) CUDA_OK(cudaEventDestroy(e));
    } else {
      for (int i = 0; i < iters; ++i) {
        CUDA_OK(cudaEventRecord(e0, stream));
        launch(i % R);
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms[i], e0, e1));
        if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
      }
    }
    CUDA_OK(cudaGetLastError());
    for (auto *p : bts) cudaFree(p);
    cudaFree(dqs);
    cudaFree(dcl);
    std::sort(ms.begin(), ms.end());
    return ms[iters / 2];
  }
};

std::string fmt_tokens(int64_t n) {
  if (n % 1024 == 0) return std::to_string(n / 1024) + "k";
  return std::to_string(n);
}

}  // namespace

int main(int argc, char **argv) {
  std::string json_path, commit = "unknown", only;  // --only NAME: one case, sparse, no sweep (for ncu)
  bool quick = false, sweep = true, workspace = true, sync_each = false, graph = false, fp8 = false;
  int idle_ms = 0;
  float scale = 1.0f / 128;
  std::string kv = "bf16";
  CLI::App app("GPU prefill timing: bspa_prefill_paged over caller-owned pages, Phi-3-small shapes");
  app.option_defaults()->always_capture_default();
  app.add_option("--json", json_path, "write the results as JSON to FILE");
  app.add_option("--commit", commit, "the commit the JSON names");
  app.add_flag("--quick", quick, "fewer sizes and iterations");
  app.add_flag("!--no-sweep", sweep, "leave out the prefix hit-rate sweep");
  app.add_option("--only", only, "one case by name (sparse, no sweep: for ncu)");
  app.add_flag("!--no-workspace", workspace, "launch without the split workspace");
  app.add_flag("--sync-each", sync_each, "wait after every launch");
  app.add_flag("--graph", graph, "time replays of launches captured in a CUDA graph");
  app.add_option("--idle-ms", idle_ms, "sleep N ms after each launch (implies --sync-each)")
      ->transform(gpu::decimal())
      ->check(CLI::Range(0, 60000));
  app.add_option("--scale", scale, "the softmax scale");
  app.add_option("--page-size", g_page, "tokens per page (a power of two: 16, 32, 64, ...)")
      ->check(CLI::IsMember({8, 16, 32, 64, 128, 256}));
  std::string shape = "32/8/128";
  app.add_option("--shape", shape, "query heads / KV heads / head dim (head dim 64 or 128), e.g. 16/16/64");
  app.add_flag("--shuffle-pages", g_shuffle_pages,
               "block tables in a random page order (default: in order, as a fresh pool gives them)");
  app.add_option("--kv", kv, "page dtype (fp8: e4m3 pages with per-head scales)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--kv-layout", g_kv_layout,
                 "how pages hold K and V: pool [pages, Hkv, page, D], token-major [pages, page, Hkv, D] (vLLM), "
                 "interleaved [pages, 2, page, Hkv, D] (FlashInfer's NHD)")
      ->check(CLI::IsMember({"pool", "token-major", "interleaved"}));
  if (const int rc = gpu::parse_flags(app, argc, argv); rc >= 0) return rc;
  fp8 = kv == "fp8";
  if (std::sscanf(shape.c_str(), "%d/%d/%d", &g_hq, &g_hkv, &g_head_dim) != 3 || g_hq < 1 || g_hkv < 1 ||
      g_hq % g_hkv != 0 || (g_head_dim != 64 && g_head_dim != 128)) {
    std::fprintf(stderr, "bench_prefill: --shape %s: expected HQ/HKV/D with HKV dividing HQ and D 64 or 128\n",
                 shape.c_str());
    return 2;
  }
  if (app.count("--idle-ms")) sync_each = true;
  if (graph && sync_each) {
    std::fprintf(
        stderr,
        "bench_prefill: --graph times replays of captured launches; it does not go with --sync-each or --idle-ms\n");
    return 2;
  }
  int32_t n = 0;
  if (bspa_device_count(kDLCUDA, &n) != BSPA_OK || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  Bench b;
  b.quick = quick;
  b.timing = graph ? Bench::Timing::Graph : sync_each ? Bench::Timing::SyncEach : Bench::Timing::Queued;
  b.idle_ms = idle_ms;
  b.scale = scale;
  b.fp8 = fp8;
  b.init();
  if (workspace) b.use_workspace();
  const std::string timing = graph         ? "graph"
                             : !sync_each  ? "queued"
                             : idle_ms > 0 ? "sync-each, idle " + std::to_string(idle_ms) + " ms"
                                           : "sync-each";
  std::printf("split workspace: %zu bytes; timing: %s\n", b.workspace_bytes, timing.c_str());

  struct Row {
    std::string name, layout;
    int64_t S, C, T;
    double ms, tflops;
  };
  std::vector<Row> rows;
  auto run = [&](const std::string &name, const std::vector<Seq> &seqs, bool sparse) {
    const double ms = b.time(seqs, sparse);
    const double flops = 4.0 * g_head_dim * visible_pairs(seqs, sparse);
    int64_t S = 0, C = 0, T = 0;
    for (auto &s : seqs) S += s.ctx + s.q, C += s.ctx, T += s.q;
    rows.push_back({name, sparse ? "sparse" : "dense", S, C, T, ms, flops / ms / 1e9});
    std::printf("%-26s %-6s S=%-7lld C=%-7lld %9.3f ms %7.1f TFLOP/s\n", name.c_str(), sparse ? "sparse" : "dense",
                (long long)S, (long long)C, ms, flops / ms / 1e9);
    std::fflush(stdout);
    return ms;
  };
  struct Named {
    std::string name;
    std::vector<Seq> seqs;
  };
  std::vector<Named> cases = {
      {"8k C=0", {{0, 8192}}},
      {"32k C=0", {{0, 32768}}},
      {"32k C=16k", {{16384, 16384}}},
      {"32k C=24k", {{24576, 8192}}},
      {"32k C=30k", {{30720, 2048}}},
      {"32768 C=30000 (unaligned)", {{30000, 2768}}},
      {"128k C=0", {{0, 131072}}},
      {"128k C=96k", {{98304, 32768}}},
      {"131072 C=100000 (unaligned)", {{100000, 31072}}},
      {"mixed batch of 8",
       {{0, 4096}, {8192, 2048}, {30000, 2768}, {1000, 3000}, {16384, 1}, {4095, 4097}, {12000, 500}, {0, 8192}}},
      // A serving engine's prefill batches (issue 25): many short prompts, and chunks of
      // chunked prefill over contexts 0..14k.
      {"64 x 1024", std::vector<Seq>(64, Seq{0, 1024})},
      {"256 x 512", std::vector<Seq>(256, Seq{0, 512})},
      {"8 chunks of 2048",
       {{0, 2048},
        {2048, 2048},
        {4096, 2048},
        {6144, 2048},
        {8192, 2048},
        {10240, 2048},
        {12288, 2048},
        {14336, 2048}}},
  };
  if (!only.empty()) {
    for (auto &c : cases)
      if (c.name == only) run(c.name, c.seqs, true);
    return 0;
  }
  for (bool sparse : {true, false})
    for (auto &c : cases) run(c.name, c.seqs, sparse);

  struct SweepRow {
    int64_t S;
    int hit;
    bool aligned;
    int64_t C;
    double sparse_ms, dense_ms, stack_ms;
  };
  std::vector<SweepRow> sw;
  if (sweep) {
    std::printf("\nhit-rate sweep: one step's attention over the 16 sparse + 16 dense layers\n");
    for (int64_t S : {8192, 32768})
      for (bool aligned : {true, false})
        for (int hit : {0, 25, 50, 75, 90, 97}) {
          int64_t C = S * hit / 100 / g_page * g_page;  // a prefix-cache hit is page-aligned
          if (!aligned && hit > 0) C += 37;             // chunked prefill / partial reuse
          const std::vector<Seq> seqs = {{static_cast<int>(C), static_cast<int>(S - C)}};
          const double ms_s = b.time(seqs, true), ms_d = b.time(seqs, false);
          sw.push_back({S, hit, aligned, C, ms_s, ms_d, 16 * (ms_s + ms_d)});
          std::printf("S=%-6lld hit=%2d%% %-9s C=%-6lld sparse %8.3f ms dense %8.3f ms stack %9.3f ms\n", (long long)S,
                      hit, aligned ? "aligned" : "unaligned", (long long)C, ms_s, ms_d, 16 * (ms_s + ms_d));
          std::fflush(stdout);
        }
  }

  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  if (!json_path.empty()) {
    FILE *f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::perror(json_path.c_str());
      return 2;
    }
    // The kernel family: BSPA_CUDA_PATH (sm80 | sm90 | auto = by compute capability).
    const char *path = std::getenv("BSPA_CUDA_PATH");
    std::fprintf(f,
                 "{\n  \"gpu\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"backend\": \"bspa %s\",\n"
                 "  \"workspace_bytes\": %zu,\n  \"timing\": \"%s\",\n",
                 prop.name, commit.c_str(), date, path && *path ? path : "auto", b.workspace_bytes, timing.c_str());
    std::fprintf(
        f,
        "  \"shape\": {\"hq\": %d, \"hkv\": %d, \"head_dim\": %d, \"page_size\": %d, \"block\": %d, "
        "\"local_blocks\": %d, \"vert_stride\": %d, \"dtype\": \"bf16\", \"kv_dtype\": \"%s\", \"kv_layout\": \"%s\", "
        "\"shuffled_pages\": %s, \"scale\": %.7g},\n",
        g_hq, g_hkv, g_head_dim, g_page, kB, kLb, kV, fp8 ? "fp8_e4m3" : "bf16", g_kv_layout.c_str(),
        g_shuffle_pages ? "true" : "false", scale);
    std::fprintf(f, "  \"cases\": [\n");
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(
          f,
          "    {\"name\": \"%s\", \"layout\": \"%s\", \"S\": %lld, \"C\": %lld, \"T\": %lld, \"ms\": %.4f, \"useful_tflops\": %.1f}%s\n",
          rows[i].name.c_str(), rows[i].layout.c_str(), (long long)rows[i].S, (long long)rows[i].C,
          (long long)rows[i].T, rows[i].ms, rows[i].tflops, i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "  ],\n  \"sweep\": [\n");
    for (size_t i = 0; i < sw.size(); ++i)
      std::fprintf(
          f,
          "    {\"S\": %lld, \"hit\": %d, \"aligned\": %s, \"C\": %lld, \"sparse_ms\": %.4f, \"dense_ms\": %.4f, \"stack_ms\": %.3f}%s\n",
          (long long)sw[i].S, sw[i].hit, sw[i].aligned ? "true" : "false", (long long)sw[i].C, sw[i].sparse_ms,
          sw[i].dense_ms, sw[i].stack_ms, i + 1 < sw.size() ? "," : "");
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  std::printf("\n%s, commit %s, %s\n", prop.name, commit.c_str(), date);
  std::printf("%-26s %9s %9s %9s %9s\n", "case", "sparse ms", "TFLOP/s", "dense ms", "TFLOP/s");
  const size_t half = rows.size() / 2;
  for (size_t i = 0; i < half; ++i)
    std::printf("%-26s %9.3f %9.1f %9.3f %9.1f\n", rows[i].name.c_str(), rows[i].ms, rows[i].tflops, rows[half + i].ms,
                rows[half + i].tflops);
  return 0;
}
#endif
