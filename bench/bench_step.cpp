// One engine step on a GPU through the public header: reusable batches planned step after
// step and CUDA graphs replayed across steps (issue 19).
//
//   bench_step --check             graph replay across a 20-step decode loop equals eager
//                                  launches bitwise (and one-step batches within bf16
//                                  rounding), refusals, no device allocation per step; and
//                                  across the chunks of one prompt whose padded work list
//                                  the sm90a walk splits;
//                                  exit 0 pass, 1 fail, 77 no GPU (the CTest test step_check)
//   bench_step [--json FILE] [--commit SHA] [--reps N]
//                                  host time per call (GPU idle before each call, median and
//                                  p90; the floor of one cudaMemsetAsync alike; the launches
//                                  back to back as well), allocations per step, and a
//                                  32-layer decode step eager against its graph replay,
//                                  from a mixed bucket and from one of decode rows only,
//                                  with each bucket's plan and graph launch alone;
//                                  --schedule auto|spin|yield|blocking: how the host
//                                  waits (cudaSetDeviceFlags); auto (the default) leaves
//                                  the runtime's choice
//
// Phi-3-small shapes: bf16, Hq 32, Hkv 8, head_dim 128, 64-token pages, the strided layout.
#include <bspa/bspa.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#ifndef BSPA_HAVE_CUDA
int main() {
  std::printf("SKIP: bspa was built without CUDA\n");
  return 77;
}
#else
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu_common.hpp"

using gpu::Tensor;

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128, kPage = 64;
const DLDevice kDev{kDLCUDA, 0};

bspa_pool *make_pool(int layers, int64_t pages) {
  bspa_pool_options o;
  bspa_pool_options_init(&o);
  o.device_type = kDLCUDA, o.dtype = BSPA_DTYPE_BF16, o.num_layers = layers, o.num_kv_heads = kHkv, o.head_dim = kD;
  o.page_size = kPage, o.num_pages = pages;
  bspa_pool *pool = nullptr;
  BSPA_OK_OR_DIE(bspa_pool_create(&pool, &o));
  return pool;
}

bspa_layout *phi3_layout() {
  bspa_layout_strided_options o;
  bspa_layout_strided_options_init(&o);
  o.block_size = 64, o.local_blocks = 16, o.vert_stride = 8, o.homo_head = 0, o.num_heads_total = kHq;
  o.head_begin = 0, o.num_heads = kHq;
  bspa_layout *l = nullptr;
  BSPA_OK_OR_DIE(bspa_layout_create_strided(&l, &o));
  return l;
}

int32_t g_token = 1;
void append_unique(bspa_seq *s, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto &x : t) x = g_token++ % 2000000000;  // no page shared between sequences
  BSPA_OK_OR_DIE(bspa_seq_append(s, t.data(), n));
}

struct SeqInfo {
  int64_t tokens, computed;
};
SeqInfo info_of(bspa_seq *s) {
  struct bspa_seq_info i;
  BSPA_OK_OR_DIE(bspa_seq_info(s, &i));
  return {i.num_tokens, i.num_computed};
}

// Device tensors of one step at fixed addresses: q, k_new, v_new, out of `rows` rows.
struct StepTensors {
  int64_t rows;
  uint16_t *q, *k, *v, *out;
  float *lse;
  Tensor tq, tk, tv, to, tl;
  explicit StepTensors(int64_t r) : rows(r) {
    q = static_cast<uint16_t *>(gpu::dmalloc(r * kHq * kD * 2));
    out = static_cast<uint16_t *>(gpu::dmalloc(r * kHq * kD * 2));
    k = static_cast<uint16_t *>(gpu::dmalloc(r * kHkv * kD * 2));
    v = static_cast<uint16_t *>(gpu::dmalloc(r * kHkv * kD * 2));
    lse = static_cast<float *>(gpu::dmalloc(r * kHq * 4));
    const DLDataType bf = gpu::dl_dtype(BSPA_DTYPE_BF16);
    tq = Tensor(q, kDev, bf, {r, kHq, kD}), to = Tensor(out, kDev, bf, {r, kHq, kD});
    tk = Tensor(k, kDev, bf, {r, kHkv, kD}), tv = Tensor(v, kDev, bf, {r, kHkv, kD});
    tl = Tensor(lse, kDev, gpu::dl_f32(), {kHq, r});
  }
  ~StepTensors() {
    for (void *p : {(void *)q, (void *)k, (void *)v, (void *)out, (void *)lse}) cudaFree(p);
  }
  // N(0,1) bf16 in the first t rows (k, v and q of `layer` differ), zeros after.
  void fill(int64_t t, uint64_t seed) {
    gpu::Rng rng(seed);
    auto put = [&](uint16_t *d, int64_t per_row) {
      std::vector<uint16_t> h(static_cast<size_t>(rows * per_row), 0);
      for (int64_t i = 0; i < t * per_row; ++i) h[static_cast<size_t>(i)] = gpu::f32_to_bf16(rng.normal());
      CUDA_OK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    };
    put(q, kHq * kD), put(k, kHkv * kD), put(v, kHkv * kD);
  }
  std::vector<uint16_t> read_out(int64_t t) const {
    std::vector<uint16_t> h(static_cast<size_t>(t * kHq * kD));
    CUDA_OK(cudaMemcpy(h.data(), out, h.size() * 2, cudaMemcpyDeviceToHost));
    return h;
  }
  std::vector<float> read_lse() const {
    std::vector<float> h(static_cast<size_t>(rows * kHq));
    CUDA_OK(cudaMemcpy(h.data(), lse, h.size() * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

void kv_write(bspa_pool *pool, const bspa_batch *batch, int layer, StepTensors &t, cudaStream_t s) {
  bspa_kv_write_args a;
  bspa_kv_write_args_init(&a);
  a.layer = layer, a.k_new = t.tk.dl(), a.v_new = t.tv.dl();
  BSPA_OK_OR_DIE(bspa_kv_write(pool, batch, &a, s));
}

void prefill(bspa_pool *pool, const bspa_batch *batch, int layer, const bspa_layout *layout, StepTensors &t,
             bool with_lse, cudaStream_t s) {
  bspa_prefill_args a;
  bspa_prefill_args_init(&a);
  a.layer = layer, a.layout = layout, a.q = t.tq.dl(), a.out = t.to.dl(), a.lse = with_lse ? t.tl.dl() : nullptr;
  a.scale = 1.0f / 128;
  BSPA_OK_OR_DIE(bspa_prefill(pool, batch, &a, s));
}

// kv_write + prefill of every layer through `batch` (what a step's graph holds).
void launch_layers(bspa_pool *pool, const bspa_batch *batch, int layers, const bspa_layout *layout, StepTensors &t,
                   cudaStream_t s) {
  for (int l = 0; l < layers; ++l) {
    kv_write(pool, batch, l, t, s);
    prefill(pool, batch, l, layout, t, true, s);
  }
}

uint64_t allocations_now() {
  uint64_t a = 0, f = 0;
  BSPA_OK_OR_DIE(bspa_device_allocation_counts(&a, &f));
  return a + f;
}

int failures = 0;
void expect(bool ok, const char *what, int step) {
  if (!ok) {
    ++failures;
    std::printf("FAIL step %d: %s\n", step, what);
  }
}

// Step 1 of a bucket, after its plan: one eager launch (as a runtime warms up), then every
// layer captured into a graph; `while_capturing` runs after the captured launches, before
// the capture ends.
template <class F>
cudaGraphExec_t capture_layers(bspa_pool *pool, const bspa_batch *batch, int layers, const bspa_layout *layout,
                               StepTensors &t, cudaStream_t s, F &&while_capturing) {
  launch_layers(pool, batch, layers, layout, t, s);
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch_layers(pool, batch, layers, layout, t, s);
  while_capturing();
  CUDA_OK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_OK(cudaGraphDestroy(g));
  return exec;
}

// One step of a captured bucket, after its plan: replays `exec` (captured from `batch`'s
// launches), launches the same plan eagerly, and expects the two bitwise equal (outputs and
// lse, both poisoned first) and near a one-step batch of the same step (its own launch
// shapes): outputs within bf16 rounding, lse within 1e-3; max_err keeps the outputs' largest
// difference from the one-step batch. Returns whether replay == eager.
bool replay_matches(bspa_pool *pool, const bspa_batch *batch, cudaGraphExec_t exec, int layers,
                    const bspa_layout *layout, StepTensors &t, const std::vector<bspa_seq *> &seqs,
                    const std::vector<int32_t> &ql, int64_t total, int step, cudaStream_t s, double &max_err) {
  const int n = static_cast<int>(seqs.size());
  CUDA_OK(cudaMemsetAsync(t.out, 0xff, t.rows * kHq * kD * 2, s));  // poison: NaN bf16
  CUDA_OK(cudaMemsetAsync(t.lse, 0xff, t.rows * kHq * 4, s));       // and NaN fp32
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  const std::vector<uint16_t> replay = t.read_out(total);
  const std::vector<float> replay_lse = t.read_lse();
  CUDA_OK(cudaMemsetAsync(t.out, 0xff, t.rows * kHq * kD * 2, s));
  CUDA_OK(cudaMemsetAsync(t.lse, 0xff, t.rows * kHq * 4, s));
  launch_layers(pool, batch, layers, layout, t, s);
  CUDA_OK(cudaStreamSynchronize(s));
  const std::vector<uint16_t> eager = t.read_out(total);
  const std::vector<float> eager_lse = t.read_lse();
  expect(replay == eager, "graph replay differs from the eager launch of the same plan", step);
  // A one-step batch of the same step (its own launch shapes): the same function within rounding.
  {
    bspa_batch *one = nullptr;
    BSPA_OK_OR_DIE(bspa_batch_create(&one, pool, seqs.data(), ql.data(), n, s));
    StepTensors u(total);
    CUDA_OK(cudaMemcpy(u.q, t.q, total * kHq * kD * 2, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMemcpy(u.k, t.k, total * kHkv * kD * 2, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMemcpy(u.v, t.v, total * kHkv * kD * 2, cudaMemcpyDeviceToDevice));
    launch_layers(pool, one, layers, layout, u, s);
    CUDA_OK(cudaStreamSynchronize(s));
    const std::vector<uint16_t> ref = u.read_out(total);
    const std::vector<float> ref_lse = u.read_lse();
    // lse: replay == eager bitwise, both written (the poison gone: every row here sees a key,
    // so a finite lse is expected) and within 1e-3 of the one-step batch's; the first rows
    // that are not are printed.
    int64_t differ = 0, off = 0;
    for (int h = 0; h < kHq; ++h)
      for (int64_t r = 0; r < total; ++r) {
        const float a = replay_lse[h * t.rows + r], b = eager_lse[h * t.rows + r], c = ref_lse[h * total + r];
        const bool same = std::memcmp(&a, &b, 4) == 0, near = std::isfinite(a) && std::fabs(a - c) <= 1e-3f;
        differ += !same, off += !near;
        if ((!same || !near) && differ + off <= 4)
          std::printf("  lse head %d row %lld: replay %.9g, eager %.9g, one-step batch %.9g\n", h,
                      static_cast<long long>(r), a, b, c);
      }
    if (differ + off)
      std::printf("  lse: %lld differ from eager, %lld from the one-step batch\n", (long long)differ, (long long)off);
    expect(differ == 0, "graph replay's lse differs from the eager launch's", step);
    expect(off == 0, "graph replay's lse is unwritten or off the one-step batch's", step);
    bspa_batch_destroy(one);
    double err = 0;
    bool finite = true;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float a = gpu::bf16_to_f32(replay[i]), b = gpu::bf16_to_f32(ref[i]);
      finite = finite && std::isfinite(a);
      err = std::max(err, static_cast<double>(std::fabs(a - b)));
    }
    max_err = std::max(max_err, err);
    expect(finite, "graph replay left a row unwritten (NaN poison) or produced a non-finite value", step);
    expect(err <= 1.6e-2, "graph replay differs from a one-step batch by more than bf16 rounding", step);
  }
  return replay == eager;
}

// Graph replay across a decode loop: bucket of 8 sequences, 2 layers, 2 rows of chunked
// prefill plus decode rows per step; sequences grow across page boundaries, one finishes and
// one joins. Each step: plan, replay the graph captured at step 1, read out; then launch the
// same plan eagerly and compare bitwise; then a one-step batch within bf16 rounding.
// decode_bound: the batch's max_decode_query_len (1: the 3-token rows of every fourth step
// go to the prefill work list, the 1-token ones to a decode tile sized for one token).
// max_query_len: the batch's (chunks are cut to it); at 64 or less the prefill rows of a
// fixed-shape batch still take the sm90a kernel on compute capability 9.0 (its persistent
// grid walks the step's own work items, prefill_cuda.cpp), where a one-step batch takes sm80.
void run_check_bound(int decode_bound, int max_query_len = 300) {
  std::printf("-- bucket of 8 sequences, max_decode_query_len = %d, max_query_len = %d\n", decode_bound, max_query_len);
  const int layers = 2, max_seqs = 8;
  const int64_t max_tokens = 8 + 2 * 300;
  bspa_pool *pool = make_pool(layers, 4096);
  bspa_layout *layout = phi3_layout();
  bspa_batch_options bo;
  bspa_batch_options_init(&bo);
  bo.max_seqs = max_seqs, bo.max_tokens = max_tokens, bo.max_query_len = max_query_len, bo.max_seq_tokens = 20000;
  bo.fixed_launch_shape = 1;
  bo.max_decode_query_len = decode_bound;
  bspa_batch *batch = nullptr;
  BSPA_OK_OR_DIE(bspa_batch_create_reusable(&batch, pool, &bo));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  StepTensors t(max_tokens);

  std::vector<bspa_seq *> seqs;
  const int contexts[6] = {4000, 63, 1, 10000, 129, 700};
  {  // the contexts' K/V written through a one-step batch, then committed
    std::vector<int32_t> ql;
    int64_t total = 0;
    for (int c : contexts) {
      bspa_seq *q = nullptr;
      BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
      append_unique(q, c);
      seqs.push_back(q);
      ql.push_back(c);
      total += c;
    }
    bspa_batch *fill = nullptr;
    BSPA_OK_OR_DIE(bspa_batch_create(&fill, pool, seqs.data(), ql.data(), 6, s));
    StepTensors ctx(total);
    ctx.fill(total, 99);
    for (int l = 0; l < layers; ++l) kv_write(pool, fill, l, ctx, s);
    CUDA_OK(cudaStreamSynchronize(s));
    bspa_batch_destroy(fill);
    for (int i = 0; i < 6; ++i) BSPA_OK_OR_DIE(bspa_seq_commit(seqs[i], contexts[i]));
  }
  auto chunk = [&](int rows) { return std::min(rows, max_query_len); };
  append_unique(seqs[0], chunk(300));  // a prompt chunk
  append_unique(seqs[3], chunk(177));  // another
  for (int i : {1, 2, 4, 5}) append_unique(seqs[i], 1);
  cudaGraphExec_t exec = nullptr;
  uint64_t allocs_after_capture = 0;
  double max_err = 0;
  for (int step = 1; step <= 20; ++step) {
    if (step == 7) {  // one finishes, one joins with a chunk
      bspa_seq_destroy(seqs[2]);
      bspa_seq *q = nullptr;
      BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
      append_unique(q, chunk(250));
      seqs[2] = q;
    }
    if (step == 11) {  // and a seventh joins
      bspa_seq *q = nullptr;
      BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
      append_unique(q, 64);
      seqs.push_back(q);
    }
    std::vector<int32_t> ql;
    int64_t total = 0;
    for (bspa_seq *q : seqs) {
      SeqInfo i = info_of(q);
      if (i.tokens == i.computed) append_unique(q, step % 4 == 0 ? 3 : 1), i = info_of(q);
      ql.push_back(static_cast<int32_t>(i.tokens - i.computed));
      total += ql.back();
    }
    const int n = static_cast<int>(seqs.size());
    t.fill(total, 1000 + step);
    BSPA_OK_OR_DIE(bspa_batch_plan(batch, seqs.data(), ql.data(), n, s));
    if (step == 1) {
      exec = capture_layers(pool, batch, layers, layout, t, s, [&] {
        // Planning while capturing is refused and keeps the plan.
        const bspa_status st = bspa_batch_plan(batch, seqs.data(), ql.data(), n, s);
        expect(st == BSPA_ERR_INVALID_STATE, "bspa_batch_plan while capturing is not BSPA_ERR_INVALID_STATE", step);
      });
      allocs_after_capture = allocations_now();
    }
    if (step == 5) {
      // Later plans wait on a staging buffer's copy (a synchronisation): a plan while the
      // stream captures must still be refused before that, leaving the capture intact, in
      // the strictest mode too.
      cudaGraph_t g;
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      const bspa_status st = bspa_batch_plan(batch, seqs.data(), ql.data(), n, s);
      expect(st == BSPA_ERR_INVALID_STATE, "a later bspa_batch_plan while capturing (global mode) is not refused",
             step);
      const cudaError_t end = cudaStreamEndCapture(s, &g);
      expect(end == cudaSuccess, "the refused plan broke the capture", step);
      if (end == cudaSuccess) {
        CUDA_OK(cudaGraphDestroy(g));
      } else {
        cudaGetLastError();
      }
    }
    const bool same = replay_matches(pool, batch, exec, layers, layout, t, seqs, ql, total, step, s, max_err);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const SeqInfo in = info_of(seqs[i]);
      BSPA_OK_OR_DIE(bspa_seq_commit(seqs[i], in.computed + ql[i]));
    }
    std::printf("step %2d: %d sequences, %4lld rows: replay == eager %s, vs one-step batch max |diff| %.3g\n", step, n,
                static_cast<long long>(total), same ? "yes" : "NO", max_err);
  }
  // One-step batches allocate; the reusable batch's steps (plans, replays, eager launches) did
  // not: count only across a loop without them.
  const uint64_t before = allocations_now();
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> ql;
    for (bspa_seq *q : seqs) {
      append_unique(q, 1);
      ql.push_back(1);
    }
    BSPA_OK_OR_DIE(bspa_batch_plan(batch, seqs.data(), ql.data(), static_cast<int>(seqs.size()), s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    launch_layers(pool, batch, layers, layout, t, s);
    for (bspa_seq *q : seqs) BSPA_OK_OR_DIE(bspa_seq_commit(q, info_of(q).tokens));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  expect(allocations_now() == before, "device allocations or frees during re-planned steps", 0);
  (void)allocs_after_capture;
  // Refusal past a limit: 9 sequences in a bucket of 8; the previous plan stays usable.
  {
    std::vector<bspa_seq *> more = seqs;
    while (more.size() < 9) {
      bspa_seq *q = nullptr;
      BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
      append_unique(q, 1);
      more.push_back(q);
    }
    std::vector<int32_t> ql(more.size(), 0);
    for (size_t i = 0; i < more.size(); ++i) {
      const SeqInfo in = info_of(more[i]);
      if (in.tokens == in.computed) append_unique(more[i], 1);
      ql[i] = static_cast<int32_t>(info_of(more[i]).tokens - info_of(more[i]).computed);
    }
    const bspa_status st = bspa_batch_plan(batch, more.data(), ql.data(), 9, s);
    expect(st == BSPA_ERR_OUT_OF_RANGE, "a plan of 9 sequences in a bucket of 8 is not BSPA_ERR_OUT_OF_RANGE", 0);
    std::printf("refusal: %s: %s\n", bspa_status_string(st), bspa_last_error());
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    for (size_t i = seqs.size(); i < more.size(); ++i) bspa_seq_destroy(more[i]);
  }
  BSPA_OK_OR_DIE(bspa_pool_check(pool));
  CUDA_OK(cudaGraphExecDestroy(exec));
  bspa_batch_destroy(batch);
  for (bspa_seq *q : seqs) bspa_seq_destroy(q);
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
  CUDA_OK(cudaStreamDestroy(s));
}

// A bucket whose padded work list the sm90a walk splits: on a GPU of 132 SMs one sequence of
// up to 600 new tokens pads to 6 query tiles x 32 heads = 192 items, the 60 past one round
// split in two (prefill_sm90.hpp, plan_split). Its steps' own items reach into the split ones
// (600-row chunks over 5 and 6 tiles, a 513-row one over 5: the walk covers the whole padded
// list, empty split units included) or end before them (a 300-row chunk, decode rows: the
// walk ends with them); each replays bitwise as its eager launch and within rounding of a
// one-step batch. On other GPUs the same steps run, split or not.
void run_check_split() {
  std::printf("-- bucket of 1 sequence, max_query_len = 600 (a split padded work list on 132 SMs)\n");
  const int layers = 2;
  const int64_t max_tokens = 600;
  bspa_pool *pool = make_pool(layers, 256);
  bspa_layout *layout = phi3_layout();
  bspa_batch_options bo;
  bspa_batch_options_init(&bo);
  bo.max_seqs = 1, bo.max_tokens = max_tokens, bo.max_query_len = max_tokens, bo.max_seq_tokens = 4096;
  bo.fixed_launch_shape = 1;
  bspa_batch *batch = nullptr;
  BSPA_OK_OR_DIE(bspa_batch_create_reusable(&batch, pool, &bo));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  StepTensors t(max_tokens);
  std::vector<bspa_seq *> seqs(1, nullptr);
  BSPA_OK_OR_DIE(bspa_seq_create(&seqs[0], pool, nullptr));
  cudaGraphExec_t exec = nullptr;
  double max_err = 0;
  const int chunks[] = {600, 600, 300, 1, 1, 3, 1, 513};  // at contexts 0, 600, 1200, 1500, ..., 1506
  for (int step = 1; step <= static_cast<int>(sizeof(chunks) / sizeof(chunks[0])); ++step) {
    append_unique(seqs[0], chunks[step - 1]);
    const std::vector<int32_t> ql(1, chunks[step - 1]);
    t.fill(ql[0], 2000 + step);
    BSPA_OK_OR_DIE(bspa_batch_plan(batch, seqs.data(), ql.data(), 1, s));
    if (step == 1) exec = capture_layers(pool, batch, layers, layout, t, s, [] {});
    const bool same = replay_matches(pool, batch, exec, layers, layout, t, seqs, ql, ql[0], step, s, max_err);
    BSPA_OK_OR_DIE(bspa_seq_commit(seqs[0], info_of(seqs[0]).tokens));
    std::printf("step %2d: %4d rows: replay == eager %s, vs one-step batch max |diff| %.3g\n", step, ql[0],
                same ? "yes" : "NO", max_err);
  }
  BSPA_OK_OR_DIE(bspa_pool_check(pool));
  CUDA_OK(cudaGraphExecDestroy(exec));
  bspa_batch_destroy(batch);
  bspa_seq_destroy(seqs[0]);
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);
  CUDA_OK(cudaStreamDestroy(s));
}

int run_check() {
  for (int bound : {0, 1}) run_check_bound(bound);
  run_check_bound(1, 64);
  run_check_split();
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}

using Clock = std::chrono::steady_clock;
struct Stat {
  double median, p90;
};
// Host microseconds of `call`, the GPU idle before each one (`before` runs first, untimed:
// the conditions the call meets, e.g. a wait of some milliseconds for earlier work;
// `settle` runs after the synchronisation, untimed: e.g. another call that pays whatever
// the first one after a wait pays; a settle that launches work leaves the GPU busy with it
// when `call` comes, so those rows no longer time a call to an idle GPU).
template <class F, class B, class S>
Stat host_time(int reps, F &&call, B &&before, S &&settle) {
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    before();
    CUDA_OK(cudaDeviceSynchronize());
    settle();
    const auto t0 = Clock::now();
    call();
    const double x = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 3) us.push_back(x);
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}
template <class F, class B>
Stat host_time(int reps, F &&call, B &&before) {
  return host_time(reps, std::forward<F>(call), std::forward<B>(before), [] {});
}
template <class F>
Stat host_time(int reps, F &&call) {
  return host_time(reps, std::forward<F>(call), [] {});
}

// Keeps the calling thread busy for `us` microseconds (no sleep: the CPU stays awake).
void spin_host(double us) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double, std::micro>(Clock::now() - t0).count() < us) {
  }
}

// Host microseconds per call of `call` issued `reps` times back to back (the GPU busy with
// the earlier ones, no wait between calls): the host cost without an idle GPU's wake-up.
template <class F>
double back_to_back(int reps, F &&call) {
  CUDA_OK(cudaDeviceSynchronize());
  call();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) call();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
  CUDA_OK(cudaDeviceSynchronize());
  return us;
}

int run_bench(const std::string &json, const std::string &commit, int reps) {
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const int decode_seqs = 64, ctx = 8191;
  bspa_pool *pool = make_pool(1, (decode_seqs * 8256 + 33000) / kPage + 64);
  bspa_layout *layout = phi3_layout();
  std::vector<bspa_seq *> seqs(decode_seqs);
  for (auto &q : seqs) {
    BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
    append_unique(q, ctx);
    BSPA_OK_OR_DIE(bspa_seq_commit(q, ctx));
    append_unique(q, 1);
  }
  std::vector<int32_t> ql(decode_seqs, 1);
  struct Row {
    std::string name;
    Stat s;
  };
  std::vector<Row> rows;
  auto add = [&](const char *name, Stat s) {
    rows.push_back({name, s});
    std::printf("%-44s %9.1f %9.1f\n", name, s.median, s.p90);
    std::fflush(stdout);
  };
  std::printf("%s, host time per call (GPU idle before each), %d calls\n", prop.name, reps);
  std::printf("%-44s %9s %9s\n", "call (64 decode sequences at 8k)", "median us", "p90 us");
  // The floor under the same conditions: one asynchronous CUDA call that queues work, and
  // the launch of an empty kernel (JIT-compiled from PTX) with no parameters and with a
  // 512-byte one (bspa's kernels take their parameters by value, 200-500 bytes).
  void *scratch = gpu::dmalloc(256);
  add("floor: cudaMemsetAsync (4 bytes)", host_time(reps, [&] { CUDA_OK(cudaMemsetAsync(scratch, 0, 4, nullptr)); }));
  static const char kEmptyPtx[] =
      ".version 7.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry empty() { ret; }\n"
      ".visible .entry empty512(.param .align 8 .b8 p[512]) { ret; }\n"
      ".visible .entry empty1k(.param .align 64 .b8 p[1024]) { ret; }\n"
      // Runs `ns` nanoseconds of the GPU's clock: a stand-in for a long kernel before a call.
      ".visible .entry spin_ns(.param .u64 ns) {\n"
      "  .reg .u64 %rd<4>;\n  .reg .pred %p;\n"
      "  ld.param.u64 %rd0, [ns];\n  mov.u64 %rd1, %globaltimer;\n"
      "WAIT:\n  mov.u64 %rd2, %globaltimer;\n  sub.u64 %rd3, %rd2, %rd1;\n"
      "  setp.lt.u64 %p, %rd3, %rd0;\n  @%p bra WAIT;\n  ret;\n}\n";
  cudaLibrary_t empty_lib;
  cudaKernel_t empty, empty512, empty1k, spin_ns;
  CUDA_OK(cudaLibraryLoadData(&empty_lib, kEmptyPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUDA_OK(cudaLibraryGetKernel(&empty, empty_lib, "empty"));
  CUDA_OK(cudaLibraryGetKernel(&empty512, empty_lib, "empty512"));
  CUDA_OK(cudaLibraryGetKernel(&empty1k, empty_lib, "empty1k"));
  CUDA_OK(cudaLibraryGetKernel(&spin_ns, empty_lib, "spin_ns"));
  // What comes before a call besides an idle GPU. A call timed after a long kernel (the 32k
  // prefill after the previous one) starts right after cudaDeviceSynchronize waited for it
  // for milliseconds; these conditions tell that wait's share of a launch from bspa's.
  constexpr double kWaitUs = 2500;  // about one 32k prefill
  auto gpu_busy_first = [&] {
    unsigned long long ns = static_cast<unsigned long long>(kWaitUs * 1000);
    void *args[] = {&ns};
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(spin_ns), dim3(1), dim3(32), args, 0, nullptr));
  };
  auto host_sleeps_first = [&] {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(kWaitUs)));
  };
  auto host_spins_first = [&] { spin_host(kWaitUs); };
  struct alignas(8) Param512 {
    char bytes[512];
  } param{};
  void *param_args[] = {&param};
  auto launch_empty = [&] {
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty), dim3(1), dim3(32), nullptr, 0, nullptr));
  };
  add("floor: empty kernel launch", host_time(reps, launch_empty));
  add("floor: empty kernel launch after 2.5 ms of GPU work", host_time(reps, launch_empty, gpu_busy_first));
  add("floor: empty kernel launch, 512-byte parameter", host_time(reps, [&] {
        CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty512), dim3(1), dim3(32), param_args, 0, nullptr));
      }));
  // What a launch of bspa's shape adds to the floor: the decode grid of these sequences
  // (8 KV heads x 64 sequences of 128 threads), and 100 KB of dynamic shared memory (the
  // decode and prefill kernels take 70-227 KB).
  add("floor: empty kernel, 512-byte parameter, 512 CTAs", host_time(reps, [&] {
        CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty512), dim3(1, 8, 64), dim3(128), param_args, 0,
                                 nullptr));
      }));
  constexpr int kBigSmem = 100 * 1024;
  CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void *>(empty512), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kBigSmem));
  add("floor: empty kernel, 512-byte parameter, 100 KB smem", host_time(reps, [&] {
        CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty512), dim3(1), dim3(32), param_args, kBigSmem,
                                 nullptr));
      }));
  // The sm90a prefill's launch shape (one CTA of 384 threads an SM, the shared memory a
  // block may opt in to, a 1 KB parameter holding two 64-byte aligned TMA descriptors): the
  // floor under "one 32k prefill" below.
  {
    int sms = 0, optin = 0;
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CUDA_OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void *>(empty1k), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 optin));
    struct alignas(64) Param1k {
      char bytes[1024];
    } param1k{};
    void *args1k[] = {&param1k};
    auto launch_shape = [&] {
      CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty1k), dim3(sms), dim3(384), args1k, optin, nullptr));
    };
    add("floor: empty kernel, sm90a prefill's shape", host_time(reps, launch_shape));
    add("floor: sm90a prefill's shape after 2.5 ms of GPU work", host_time(reps, launch_shape, gpu_busy_first));
    add("floor: sm90a prefill's shape after 2.5 ms of host sleep", host_time(reps, launch_shape, host_sleeps_first));
    add("floor: sm90a prefill's shape after 2.5 ms of host spin", host_time(reps, launch_shape, host_spins_first));
  }
  bspa_batch *one = nullptr;
  add("bspa_batch_create (one step)", host_time(reps, [&] {
        bspa_batch_destroy(one);
        BSPA_OK_OR_DIE(bspa_batch_create(&one, pool, seqs.data(), ql.data(), decode_seqs, nullptr));
      }));
  std::vector<bspa_batch *> many(static_cast<size_t>(reps) + 3, nullptr);
  for (auto &b : many) BSPA_OK_OR_DIE(bspa_batch_create(&b, pool, seqs.data(), ql.data(), decode_seqs, nullptr));
  size_t next = 0;
  add("bspa_batch_destroy (one step)", host_time(reps, [&] { bspa_batch_destroy(many[next++]); }));
  bspa_batch_destroy(one);
  bspa_batch *reuse = nullptr, *fixed = nullptr;
  bspa_batch_options bo;
  bspa_batch_options_init(&bo);
  bo.max_seqs = 256, bo.max_tokens = 4096, bo.max_seq_tokens = 33000;
  BSPA_OK_OR_DIE(bspa_batch_create_reusable(&reuse, pool, &bo));
  bo.fixed_launch_shape = 1;
  BSPA_OK_OR_DIE(bspa_batch_create_reusable(&fixed, pool, &bo));
  const uint64_t a0 = allocations_now();
  add("bspa_batch_plan (reusable)",
      host_time(reps, [&] { BSPA_OK_OR_DIE(bspa_batch_plan(reuse, seqs.data(), ql.data(), decode_seqs, nullptr)); }));
  add("bspa_batch_plan (reusable, fixed shapes)",
      host_time(reps, [&] { BSPA_OK_OR_DIE(bspa_batch_plan(fixed, seqs.data(), ql.data(), decode_seqs, nullptr)); }));
  StepTensors t(decode_seqs), tf(4096);
  t.fill(decode_seqs, 1), tf.fill(decode_seqs, 1);
  add("bspa_kv_write (reusable)", host_time(reps, [&] { kv_write(pool, reuse, 0, t, nullptr); }));
  auto decode_rows = [&] { prefill(pool, reuse, 0, layout, t, false, nullptr); };
  add("bspa_prefill (reusable, decode rows)", host_time(reps, decode_rows));
  add("bspa_prefill (reusable, decode rows) after 2.5 ms of GPU work", host_time(reps, decode_rows, gpu_busy_first));
  // The same with an empty kernel launched (untimed) between the wait and the call: what
  // is left of the row above once something else has paid for the first launch after a wait.
  add("bspa_prefill (reusable, decode rows) after 2.5 ms of GPU work, an empty kernel first",
      host_time(reps, decode_rows, gpu_busy_first, launch_empty));
  add("bspa_prefill (fixed shapes, decode rows)",
      host_time(reps, [&] { prefill(pool, fixed, 0, layout, tf, false, nullptr); }));
  // The same launches back to back: what a step of many layers pays per call.
  const double memset_b2b = back_to_back(reps, [&] { CUDA_OK(cudaMemsetAsync(scratch, 0, 4, nullptr)); });
  const double empty_b2b = back_to_back(reps, [&] {
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void *>(empty512), dim3(1), dim3(32), param_args, 0, nullptr));
  });
  add("back to back: empty kernel, 512-byte parameter", {empty_b2b, empty_b2b});
  const double kv_b2b = back_to_back(reps, [&] { kv_write(pool, reuse, 0, t, nullptr); });
  const double prefill_b2b = back_to_back(reps, decode_rows);
  add("back to back: cudaMemsetAsync (mean)", {memset_b2b, memset_b2b});
  add("back to back: bspa_kv_write (mean)", {kv_b2b, kv_b2b});
  add("back to back: bspa_prefill, decode rows (mean)", {prefill_b2b, prefill_b2b});
  const uint64_t steady_allocs = allocations_now() - a0;
  {
    // bspa_kv_write over a plan of no new tokens: every check, nothing launched (after the
    // allocation count: the batch allocates).
    bspa_batch *none = nullptr;
    bspa_batch_options zo;
    bspa_batch_options_init(&zo);
    zo.max_seqs = decode_seqs, zo.max_tokens = decode_seqs, zo.max_seq_tokens = 33000;
    BSPA_OK_OR_DIE(bspa_batch_create_reusable(&none, pool, &zo));
    const std::vector<int32_t> zeros(decode_seqs, 0);
    BSPA_OK_OR_DIE(bspa_batch_plan(none, seqs.data(), zeros.data(), decode_seqs, nullptr));
    StepTensors t0(0);
    add("bspa_kv_write, no new tokens (checks only)", host_time(reps, [&] { kv_write(pool, none, 0, t0, nullptr); }));
    bspa_batch_destroy(none);
  }
  std::printf("device allocations + frees across the reusable plans and launches above: %llu\n",
              static_cast<unsigned long long>(steady_allocs));
  // One 32k prefill.
  bspa_seq *big = nullptr;
  BSPA_OK_OR_DIE(bspa_seq_create(&big, pool, nullptr));
  append_unique(big, 32768);
  const int32_t q32 = 32768;
  bspa_batch *b32 = nullptr;
  bspa_batch_options_init(&bo);
  bo.max_seqs = 1, bo.max_tokens = 32768, bo.max_seq_tokens = 32768;
  BSPA_OK_OR_DIE(bspa_batch_create_reusable(&b32, pool, &bo));
  add("bspa_batch_plan (one 32k prefill)",
      host_time(reps, [&] { BSPA_OK_OR_DIE(bspa_batch_plan(b32, &big, &q32, 1, nullptr)); }));
  {
    StepTensors t32(32768);
    auto big_prefill = [&] { prefill(pool, b32, 0, layout, t32, false, nullptr); };
    add("bspa_prefill (one 32k prefill)", host_time(reps, big_prefill));
    // The same with an empty kernel launched (untimed) after the wait for the previous 32k
    // prefill: what is left once something else has paid for the first launch after it.
    auto nothing = [] {};
    add("bspa_prefill (one 32k prefill), an empty kernel first", host_time(reps, big_prefill, nothing, launch_empty));
    // The previous 32k prefill ends while the host spins (longer than its ~2.5 ms), so the
    // synchronisation before the call returns at once: no millisecond wait before it.
    add("bspa_prefill (one 32k prefill), the host spinning 3 ms first",
        host_time(reps, big_prefill, [&] { spin_host(kWaitUs + 500); }));
    // The same launches queued behind each other (each runs ~2 ms, so the host never waits
    // for the queue): the host's own cost, without whatever an idle GPU adds to a launch.
    const double big_b2b = back_to_back(std::min(reps, 50), big_prefill);
    add("back to back: bspa_prefill, one 32k prefill (mean)", {big_b2b, big_b2b});
  }
  bspa_batch_destroy(b32);
  CUDA_OK(cudaFree(scratch));
  CUDA_OK(cudaLibraryUnload(empty_lib));
  bspa_seq_destroy(big);
  bspa_batch_destroy(reuse);
  bspa_batch_destroy(fixed);
  for (auto &q : seqs) bspa_seq_destroy(q);
  bspa_pool_destroy(pool);

  // A 32-layer decode step (64 sequences at 1k context): eager launches against a graph
  // replay, both after a plan; wall time per step with the GPU idle before it.
  const int layers = 32, sctx = 1023;
  pool = make_pool(layers, decode_seqs * (sctx + 64) / kPage + 2 * decode_seqs);
  seqs.assign(decode_seqs, nullptr);
  for (auto &q : seqs) {
    BSPA_OK_OR_DIE(bspa_seq_create(&q, pool, nullptr));
    append_unique(q, sctx);
  }
  {  // every layer's context K/V written (N(0,1)), then committed: the step reads real values
    // K and V of every layer alike (the values need not differ between layers, only be real)
    const int64_t rows = static_cast<int64_t>(decode_seqs) * sctx;
    const size_t elems = static_cast<size_t>(rows) * kHkv * kD;
    uint16_t *kv = static_cast<uint16_t *>(gpu::dmalloc(elems * 2));
    gpu::fill_normal_bf16({{kv, elems}}, 5);
    Tensor tkv(kv, kDev, gpu::dl_dtype(BSPA_DTYPE_BF16), {rows, kHkv, kD});
    const std::vector<int32_t> ctx_lens(decode_seqs, sctx);
    gpu::write_contexts(pool, seqs, ctx_lens, ctx_lens, layers, tkv.dl(), tkv.dl());
    cudaFree(kv);
  }
  for (auto &q : seqs) append_unique(q, 1);
  // Two buckets of the same step: one that may also hold prefill rows (max_query_len =
  // max_tokens, so its capture holds the prefill grid too, idle in a decode step) and one of
  // decode rows only (max_query_len 1, at most the decode bound: its capture holds the decode
  // grid alone), the runtime pattern for decode graphs. Both tell the batch that decode rows
  // are one token (max_decode_query_len 1), so their decode tiles are the same and the rows
  // differ by the idle prefill grid alone.
  std::printf("\n%-44s %9s %9s\n", "32-layer decode step, 64 x 1k (plan + run)", "median us", "p90 us");
  for (const int bucket_query_len : {0, 1}) {
    bspa_batch_options_init(&bo);
    bo.max_seqs = decode_seqs, bo.max_tokens = decode_seqs, bo.max_seq_tokens = 2048, bo.fixed_launch_shape = 1;
    bo.max_query_len = bucket_query_len;
    bo.max_decode_query_len = 1;
    BSPA_OK_OR_DIE(bspa_batch_create_reusable(&fixed, pool, &bo));
    StepTensors ts(decode_seqs);
    ts.fill(decode_seqs, 3);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto plan = [&] { BSPA_OK_OR_DIE(bspa_batch_plan(fixed, seqs.data(), ql.data(), decode_seqs, s)); };
    plan();
    const cudaGraphExec_t exec = capture_layers(pool, fixed, layers, layout, ts, s, [] {});
    auto step_time = [&](bool graph) {
      return host_time(reps, [&] {
        plan();
        if (graph)
          CUDA_OK(cudaGraphLaunch(exec, s));
        else
          launch_layers(pool, fixed, layers, layout, ts, s);
        CUDA_OK(cudaStreamSynchronize(s));
      });
    };
    // The host's part of a replayed step: the plan alone, and the graph's launch alone after a
    // plan (the GPU idle before each).
    const Stat plan_host = host_time(reps, plan);
    const Stat launch_host = host_time(
        reps, [&] { CUDA_OK(cudaGraphLaunch(exec, s)); }, plan);
    // Row names as earlier JSON has them: eager, graph, plan alone, graph launch alone.
    static const char *const kRowNames[2][4] = {
        {"eager: plan + 32 x (kv_write + prefill)", "graph: plan + cudaGraphLaunch",
         "mixed bucket: bspa_batch_plan alone (host)", "mixed bucket: cudaGraphLaunch alone (host)"},
        {"eager, decode-only bucket (max_query_len 1)", "graph, decode-only bucket (max_query_len 1)",
         "decode-only bucket: bspa_batch_plan alone (host)", "decode-only bucket: cudaGraphLaunch alone (host)"}};
    const char *const *names = kRowNames[bucket_query_len];
    add(names[0], step_time(false));
    add(names[1], step_time(true));
    add(names[2], plan_host);
    add(names[3], launch_host);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaStreamDestroy(s));
    bspa_batch_destroy(fixed);
  }
  for (auto &q : seqs) bspa_seq_destroy(q);
  bspa_layout_destroy(layout);
  bspa_pool_destroy(pool);

  if (!json.empty()) {
    std::ofstream f(json);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    f << "{\"gpu\": \"" << prop.name << "\", \"commit\": \"" << commit << "\", \"date\": \"" << date
      << "\", \"reps\": " << reps << ", \"steady_state_allocations\": " << steady_allocs << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i)
      f << (i ? ", " : "") << "{\"call\": \"" << rows[i].name << "\", \"median_us\": " << rows[i].s.median
        << ", \"p90_us\": " << rows[i].s.p90 << "}";
    f << "]}\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"bspa engine-step host costs and CUDA-graph replay check"};
  bool check = false;
  std::string json, commit = "unknown";
  int reps = 200;
  app.add_flag("--check", check, "graph replay across steps against eager launches (exit 1 on failure)");
  app.add_option("--json", json, "write the timings as JSON");
  app.add_option("--commit", commit, "commit recorded in the JSON");
  app.add_option("--reps", reps, "calls per timing")->check(CLI::PositiveNumber);
  std::string schedule = "auto";
  app.add_option("--schedule", schedule,
                 "how the host waits for the GPU (cudaSetDeviceFlags): auto, spin, yield, blocking")
      ->check(CLI::IsMember({"auto", "spin", "yield", "blocking"}));
  CLI11_PARSE(app, argc, argv);
  int32_t n = 0;
  if (bspa_device_count(kDLCUDA, &n) != BSPA_OK || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  if (schedule != "auto") {
    const unsigned flag = schedule == "spin"    ? cudaDeviceScheduleSpin
                          : schedule == "yield" ? cudaDeviceScheduleYield
                                                : cudaDeviceScheduleBlockingSync;
    CUDA_OK(cudaSetDeviceFlags(flag));
  }
  return check ? run_check() : run_bench(json, commit, reps);
}
#endif
