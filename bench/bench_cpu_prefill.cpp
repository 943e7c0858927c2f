// CPU prefill throughput through the public API (bspa_prefill_paged over caller-owned
// pages): useful GFLOP/s = 4 * D * visible (q, k) pairs / time, for Phi-3-small shapes
// (Hq 32, Hkv 8, D 128, block 64, local 16, stride 8, hetero heads, scale 1/128).
//
//   bench_cpu_prefill [--tokens 2048,8192] [--heads 32] [--reps 3] [--json FILE]
//
// Each row: total tokens S, cached prefix C (0, 3S/4, or S - 1: a decode row, one new
// token), layout, dtype; the median of --reps runs after one warm-up (the warm-up is
// skipped for runs over 10 s).
#include <bspa/bspa.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Row {
  int64_t S, C;
  const char *layout, *dtype;
  double ms, gflops, visible;
};

void die(bspa_status s, const char *what) {
  if (s != BSPA_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, bspa_status_string(s), bspa_last_error());
    std::exit(1);
  }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

DLTensor tensor(void *data, bool bf16, int ndim, int64_t *shape) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

// Visible (q, k) pairs of the new rows [C, S) under the layout, summed over heads.
double visible_pairs(const bspa_layout *l, int heads, int64_t S, int64_t C, int64_t B) {
  double total = 0;
  for (int h = 0; h < heads; ++h)
    for (int64_t qb = C / B; qb * B < S; ++qb) {
      const int64_t r0 = std::max(C, qb * B), r1 = std::min(S, (qb + 1) * B);
      for (int64_t kb = 0; kb <= qb; ++kb) {
        int32_t a = 0;
        die(bspa_layout_allowed(l, h, qb, kb, &a), "bspa_layout_allowed");
        if (!a) continue;
        if (kb < qb)
          total += static_cast<double>(r1 - r0) * B;
        else
          for (int64_t p = r0; p < r1; ++p) total += static_cast<double>(p - kb * B + 1);
      }
    }
  return total;
}

std::string git_commit() {
  FILE *f = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  char buf[64] = {0};
  if (f) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    pclose(f);
  }
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

std::string cpu_model() {
  FILE *f = std::fopen("/proc/cpuinfo", "r");
  char line[512];
  std::string m = "unknown";
  while (f && std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "model name", 10) == 0) {
      const char *c = std::strchr(line, ':');
      m = c ? c + 2 : line;
      while (!m.empty() && m.back() == '\n') m.pop_back();
      break;
    }
  if (f) std::fclose(f);
  return m;
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<int64_t> sizes = {2048, 8192};
  int heads = 32, reps = 3;
  std::string json_path;
  CLI::App app("CPU prefill: useful GFLOP/s of bspa_prefill_paged on Phi-3-small shapes");
  app.option_defaults()->always_capture_default();
  app.add_option("--tokens", sizes, "total sequence lengths S (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--heads", heads, "query heads (KV heads: a quarter)")->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "timed runs per case (median)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--json", json_path, "write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  const char *json = json_path.empty() ? nullptr : json_path.c_str();
  const int hq = heads, hkv = std::max(1, heads / 4), d = 128, ps = 64;
  bspa_layout *strided = nullptr, *dense = nullptr;
  bspa_layout_strided_options o;
  die(bspa_layout_strided_options_init(&o), "options");
  o.num_heads_total = hq;
  o.num_heads = hq;
  die(bspa_layout_create_strided(&strided, &o), "strided");
  die(bspa_layout_create_dense(&dense, hq), "dense");

  std::mt19937 gen(1234);
  std::normal_distribution<float> normal;
  std::vector<Row> rows;
  std::printf("%-6s %-6s %-8s %-5s %10s %12s %10s\n", "S", "C", "layout", "dtype", "ms", "pairs(M)", "GFLOP/s");
  for (int64_t S : sizes)
    for (int bf = 1; bf >= 0; --bf) {
      const size_t eb = bf ? 2 : 4;
      const int64_t pages = (S + ps - 1) / ps;
      std::vector<char> kp(pages * hkv * ps * d * eb), vp(kp.size()), q(S * hq * d * eb), out(q.size());
      auto fill = [&](std::vector<char> &buf) {
        for (size_t i = 0; i < buf.size() / eb; ++i) {
          const float x = normal(gen);
          if (bf) {
            const uint16_t b = to_bf16(x);
            std::memcpy(buf.data() + 2 * i, &b, 2);
          } else {
            std::memcpy(buf.data() + 4 * i, &x, 4);
          }
        }
      };
      fill(kp);
      fill(vp);
      fill(q);
      for (int c = 0; c < 3; ++c) {
        const int64_t C = c == 0 ? 0 : c == 1 ? S * 3 / 4 : S - 1, T = S - C;
        std::vector<int32_t> table(pages);
        for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
        int32_t qs[2] = {0, static_cast<int32_t>(T)}, cl[1] = {static_cast<int32_t>(C)};
        int64_t sq[3] = {T, hq, d}, sp[4] = {pages, hkv, ps, d}, sbt[2] = {1, pages}, s2[1] = {2}, s1[1] = {1};
        DLTensor tq = tensor(q.data() + C * hq * d * eb, bf, 3, sq), to = tensor(out.data(), bf, 3, sq);
        DLTensor tk = tensor(kp.data(), bf, 4, sp), tv = tensor(vp.data(), bf, 4, sp);
        DLTensor tbt = tensor(table.data(), false, 2, sbt), tqs = tensor(qs, false, 1, s2),
                 tcl = tensor(cl, false, 1, s1);
        tbt.dtype = tqs.dtype = tcl.dtype = DLDataType{kDLInt, 32, 1};
        for (int li = 0; li < 2; ++li) {
          const bspa_layout *layout = li ? dense : strided;
          bspa_paged_args a;
          die(bspa_paged_args_init(&a), "args");
          a.q = &tq;
          a.out = &to;
          a.k_pages = &tk;
          a.v_pages = &tv;
          a.block_table = &tbt;
          a.query_starts = &tqs;
          a.context_lens = &tcl;
          a.max_query_len = static_cast<int32_t>(T);
          a.layout = layout;
          a.scale = 1.0f / 128;
          std::vector<double> times;
          for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            die(bspa_prefill_paged(&a, nullptr), "bspa_prefill_paged");
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0 || ms > 10000) times.push_back(ms);  // run 0 is the warm-up unless it was long
            if (ms > 10000 && static_cast<int>(times.size()) >= 1) break;
          }
          std::sort(times.begin(), times.end());
          const double ms = times[times.size() / 2];
          const double vis = visible_pairs(layout, hq, S, C, 64);
          Row row{S, C, li ? "dense" : "strided", bf ? "bf16" : "f32", ms, 4.0 * d * vis / (ms * 1e6), vis};
          rows.push_back(row);
          std::printf("%-6lld %-6lld %-8s %-5s %10.1f %12.1f %10.2f\n", static_cast<long long>(S),
                      static_cast<long long>(C), row.layout, row.dtype, ms, vis / 1e6, row.gflops);
          std::fflush(stdout);
        }
      }
    }
  if (json) {
    FILE *f = std::fopen(json, "w");
    if (!f) {
      std::perror(json);
      return 1;
    }
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::fprintf(f,
                 "{\n  \"bench\": \"cpu_prefill\",\n  \"git_commit\": \"%s\",\n  \"date\": \"%s\",\n"
                 "  \"machine\": {\"cpu\": \"%s\", \"hardware_threads\": %u},\n  \"build\": \"%s\",\n"
                 "  \"shape\": {\"hq\": %d, \"hkv\": %d, \"head_dim\": %d, \"page_size\": %d, \"block\": 64, "
                 "\"local_blocks\": 16, \"vert_stride\": 8},\n  \"reps\": %d,\n  \"rows\": [\n",
                 git_commit().c_str(), date, cpu_model().c_str(), std::thread::hardware_concurrency(),
                 bspa_build_info(), hq, hkv, d, ps, reps);
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "    {\"tokens\": %lld, \"cached\": %lld, \"layout\": \"%s\", \"dtype\": \"%s\", \"ms\": %.3f, "
                   "\"visible_pairs\": %.0f, \"useful_gflops\": %.3f}%s\n",
                   static_cast<long long>(rows[i].S), static_cast<long long>(rows[i].C), rows[i].layout, rows[i].dtype,
                   rows[i].ms, rows[i].visible, rows[i].gflops, i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  bspa_layout_destroy(strided);
  bspa_layout_destroy(dense);
  return 0;
}
