#include "step_runner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#ifdef BSPA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "clock.hpp"
#include "handles.hpp"
#include "status.hpp"

namespace demo {

StepBuffers::StepBuffers(Device device, bspa_dtype dtype, const ModelShape &m, int64_t capacity_rows)
    : capacity_(capacity_rows) {
  const DLDataType dt = dl_dtype(dtype);
  for (int32_t l = 0; l < m.num_layers; ++l)
    for (int kind = 0; kind < 4; ++kind) {
      const int64_t heads = kind == 1 || kind == 2 ? m.num_kv_heads : m.num_q_heads;
      tensors_.emplace_back(device, dt, std::vector<int64_t>{capacity_rows, heads, m.head_dim});
      View v;
      v.dl = *tensors_.back().dl();
      v.shape = {0, heads, m.head_dim};
      views_.push_back(v);
    }
  // The views' shape arrays are their own (views_ no longer grows).
  for (View &v : views_) v.dl.shape = v.shape.data();
}

void StepBuffers::set_rows(int64_t rows) {
  if (rows < 0 || rows > capacity_) throw std::logic_error("StepBuffers::set_rows: more rows than the capacity");
  rows_ = rows;
  set_view_rows(rows);
}

void StepBuffers::set_view_rows(int64_t rows) {
  if (rows < rows_ || rows > capacity_)
    throw std::logic_error("StepBuffers::set_view_rows: fewer rows than the step's or more than the capacity");
  view_rows_ = rows;
  for (View &v : views_) v.shape[0] = rows;
}

void StepBuffers::upload(int32_t layer, const Projections &p) {
  const auto per_row = [&](int kind) {
    return rows_ * views_[index(layer, kind)].shape[1] * views_[index(layer, kind)].shape[2];
  };
  if (static_cast<int64_t>(p.q.size()) != per_row(0) || static_cast<int64_t>(p.k.size()) != per_row(1) ||
      static_cast<int64_t>(p.v.size()) != per_row(2))
    throw std::logic_error("StepBuffers::upload: projections of another row count");
  tensors_[index(layer, 0)].upload_front(p.q);
  tensors_[index(layer, 1)].upload_front(p.k);
  tensors_[index(layer, 2)].upload_front(p.v);
  poison_out(layer);
}

void StepBuffers::poison_out(int32_t layer) {
  const View &v = views_[index(layer, 3)];
  tensors_[index(layer, 3)].poison_front(rows_ * v.shape[1] * v.shape[2]);
}

std::vector<float> StepBuffers::download_out(int32_t layer) const {
  const View &v = views_[index(layer, 3)];
  return tensors_[index(layer, 3)].download_front(rows_ * v.shape[1] * v.shape[2]);
}

namespace {

#ifdef BSPA_HAVE_CUDA
void cuda_ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

// kv_write and prefill of every layer through `batch` on `stream`: a step's launches (what
// a step's graph holds), timed into *times when given.
void launch_layers(bspa_pool *pool, const bspa_batch *batch, const AttentionSetup &setup, StepBuffers &buffers,
                   bspa_stream stream, StepCallTimes *times) {
  const int32_t layers = setup.model->shape().num_layers;
  bspa_kv_write_args kw;
  DEMO_OK(bspa_kv_write_args_init(&kw));
  bspa_prefill_args pf;
  DEMO_OK(bspa_prefill_args_init(&pf));
  pf.scale = setup.scale;
  for (int32_t layer = 0; layer < layers; ++layer) {
    kw.layer = pf.layer = layer;
    kw.k_new = buffers.k(layer);
    kw.v_new = buffers.v(layer);
    pf.layout = setup.layouts->at(layer);
    pf.q = buffers.q(layer);
    pf.out = buffers.out(layer);
    const double t0 = now_s();
    DEMO_OK(bspa_kv_write(pool, batch, &kw, stream));
    const double t1 = now_s();
    DEMO_OK(bspa_prefill(pool, batch, &pf, stream));
    if (times) {
      times->kv_write_s += t1 - t0;
      times->prefill_s += now_s() - t1;
    }
  }
}

// --launch batch: a one-step batch per step, eager launches on the default stream.
class EagerRunner final : public StepRunner {
 public:
  EagerRunner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers)
      : pool_(pool), setup_(setup), buffers_(buffers) {}

  void plan(bspa_seq *const *seqs, const int32_t *query_lens, int32_t n) override {
    times_ = StepCallTimes{};
    const double t0 = now_s();
    bspa_batch *raw = nullptr;
    DEMO_OK(bspa_batch_create(&raw, pool_, seqs, query_lens, n, nullptr));
    batch_.reset(raw);
    times_.plan_s = now_s() - t0;
  }

  void launch() override { launch_layers(pool_, batch_.get(), setup_, buffers_, nullptr, &times_); }
  void launch_eager() override { launch_layers(pool_, batch_.get(), setup_, buffers_, nullptr, nullptr); }

  void release() override {
    const double t0 = now_s();
    batch_.reset();
    times_.release_s = now_s() - t0;
  }

 private:
  bspa_pool *pool_;
  const AttentionSetup &setup_;
  StepBuffers &buffers_;
  BatchPtr batch_;
};

// A reusable batch and whether its current plan holds sequences of a step (rather than the
// runner's empty one).
struct Reusable {
  BatchPtr batch;
  bool holds = false;
};

// max_query_len 0: max_tokens (the batch may hold prompt chunks).
BatchPtr create_reusable(bspa_pool *pool, int32_t max_seqs, int64_t max_tokens, int64_t max_seq_tokens, bool fixed,
                         int32_t max_query_len = 0) {
  bspa_batch_options bo;
  DEMO_OK(bspa_batch_options_init(&bo));
  bo.max_seqs = max_seqs;
  bo.max_tokens = max_tokens;
  bo.max_seq_tokens = max_seq_tokens;
  bo.max_query_len = max_query_len;
  bo.fixed_launch_shape = fixed ? 1 : 0;
  // The engine's decode rows are one token each (engine.cpp): a fixed-shape bucket that also
  // holds prompt chunks would otherwise size the CUDA decode tile for 8 new tokens.
  bo.max_decode_query_len = 1;
  bspa_batch *raw = nullptr;
  DEMO_OK(bspa_batch_create_reusable(&raw, pool, &bo));
  return BatchPtr(raw);
}

// What drop_sequences() plans reusable batches onto: one sequence with no tokens and a query
// length of 0 (no pages, nothing launched).
class EmptyPlan {
 public:
  explicit EmptyPlan(bspa_pool *pool) {
    bspa_seq *raw = nullptr;
    DEMO_OK(bspa_seq_create(&raw, pool, nullptr));
    seq_.reset(raw);
  }
  void plan_onto(Reusable &r, bspa_stream stream) {
    if (!r.holds) return;
    bspa_seq *seq = seq_.get();
    const int32_t none = 0;
    DEMO_OK(bspa_batch_plan(r.batch.get(), &seq, &none, 1, stream));
    r.holds = false;
  }

 private:
  SeqPtr seq_;
};

// --launch plan: one reusable batch for every step, planned on the default stream.
class PlanRunner final : public StepRunner {
 public:
  PlanRunner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers, const RunnerOptions &o)
      : pool_(pool), setup_(setup), buffers_(buffers), empty_(pool) {
    batch_.batch = create_reusable(pool, o.max_seqs, o.max_tokens, o.max_seq_tokens, false);
  }

  void plan(bspa_seq *const *seqs, const int32_t *query_lens, int32_t n) override {
    times_ = StepCallTimes{};
    const double t0 = now_s();
    DEMO_OK(bspa_batch_plan(batch_.batch.get(), seqs, query_lens, n, nullptr));
    batch_.holds = true;
    times_.plan_s = now_s() - t0;
  }
  void launch() override { launch_layers(pool_, batch_.batch.get(), setup_, buffers_, nullptr, &times_); }
  void launch_eager() override { launch_layers(pool_, batch_.batch.get(), setup_, buffers_, nullptr, nullptr); }
  void release() override {}
  void drop_sequences() override { empty_.plan_onto(batch_, nullptr); }

 private:
  bspa_pool *pool_;
  const AttentionSetup &setup_;
  StepBuffers &buffers_;
  EmptyPlan empty_;  // before batch_: the batch is destroyed first
  Reusable batch_;
};

// --launch fixed and --graphs: fixed-shape reusable batches, one per bucket of step sizes.
class BucketRunner final : public StepRunner {
 public:
  BucketRunner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers, const RunnerOptions &o)
      : pool_(pool), setup_(setup), buffers_(buffers), graphs_(o.graphs), empty_(pool) {
#ifdef BSPA_HAVE_CUDA
    if (setup.device.cuda()) {
      cuda_ok(cudaSetDevice(setup.device.id), "cudaSetDevice");
      // Non-blocking: a legacy-stream call elsewhere cannot join the capture (and the
      // capture mode is thread-local, as bench_step's).
      cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
#endif
    if (graphs_ && !setup.device.cuda())
      throw std::logic_error("--graphs needs the CUDA device (refused earlier on a CPU run)");
    // max_tokens 1, 2, 4, ... below the budget, then the budget itself; then the same sizes
    // up to the sequence limit for steps of decode rows only (max_query_len 1: on CUDA their
    // launches, and so their graphs, hold the decode kernel alone, where a mixed bucket's
    // replay of a decode step also launches a prefill grid that finds no work).
    for (const bool decode_only : {false, true}) {
      const int64_t limit = decode_only ? std::min<int64_t>(o.max_seqs, o.max_tokens) : o.max_tokens;
      for (int64_t rows = 1;; rows *= 2) {
        const int64_t bucket_rows = std::min(rows, limit);
        Bucket b;
        b.rows = bucket_rows;
        b.max_seqs = static_cast<int32_t>(std::min<int64_t>(o.max_seqs, bucket_rows));
        b.decode_only = decode_only;
        b.batch.batch = create_reusable(pool, b.max_seqs, bucket_rows, o.max_seq_tokens, true, decode_only ? 1 : 0);
        buckets_.push_back(std::move(b));
        stats_.bucket_rows.push_back(bucket_rows);
        stats_.bucket_decode_only.push_back(decode_only);
        if (bucket_rows == limit) break;
      }
    }
    stats_.buckets = static_cast<int64_t>(buckets_.size());
    stats_.bucket_steps.assign(buckets_.size(), 0);
  }

  ~BucketRunner() override {
#ifdef BSPA_HAVE_CUDA
    for (Bucket &b : buckets_)
      if (b.exec) cudaGraphExecDestroy(b.exec);
    if (stream_) {
      cudaStreamSynchronize(stream_);
      // The batches are destroyed before the stream (they may have queued plan copies on it).
      buckets_.clear();
      cudaStreamDestroy(stream_);
    }
#endif
  }

  void plan(bspa_seq *const *seqs, const int32_t *query_lens, int32_t n) override {
    times_ = StepCallTimes{};
    replayed_ = false;
    const double t0 = now_s();
    int64_t total = 0;
    bool decode_step = n > 0;  // every sequence a decode row (one new token)
    for (int32_t i = 0; i < n; ++i) {
      total += query_lens[i];
      decode_step = decode_step && query_lens[i] == 1;
    }
    // The smallest bucket that holds the step: of decode rows only for such a step (a mixed
    // one if none does), else a mixed one.
    current_ = nullptr;
    for (const bool decode_only : {true, false}) {
      if (decode_only && !decode_step) continue;
      for (Bucket &b : buckets_)
        if (b.decode_only == decode_only && b.rows >= total && b.max_seqs >= n) {
          current_ = &b;
          break;
        }
      if (current_) break;
    }
    if (current_) {
      const bspa_status st = bspa_batch_plan(current_->batch.batch.get(), seqs, query_lens, n, stream_);
      if (st == BSPA_ERR_OUT_OF_RANGE) {
        current_ = nullptr;  // past a limit (a longer sequence than sized for): eagerly instead
      } else {
        ok(st, "bspa_batch_plan");
        current_->batch.holds = true;
      }
    }
    if (current_) {
      buffers_.set_view_rows(current_->rows);
      ++stats_.bucket_steps[static_cast<size_t>(current_ - buckets_.data())];
    } else {
      bspa_batch *raw = nullptr;
      DEMO_OK(bspa_batch_create(&raw, pool_, seqs, query_lens, n, stream_));
      fallback_.reset(raw);
      buffers_.set_view_rows(buffers_.rows());
      ++stats_.eager_fallbacks;
    }
    times_.plan_s = now_s() - t0;
  }

  void launch() override {
    if (!current_) {
      launch_layers(pool_, fallback_.get(), setup_, buffers_, stream_, &times_);
      return;
    }
    Bucket &b = *current_;
    if (!graphs_) {
      launch_layers(pool_, b.batch.batch.get(), setup_, buffers_, stream_, &times_);
      return;
    }
#ifdef BSPA_HAVE_CUDA
    if (!b.exec) {
      // This step's result: an eager launch (which also uploads what a first launch
      // uploads, such as the CSR layouts, outside the capture); then the capture.
      launch_layers(pool_, b.batch.batch.get(), setup_, buffers_, stream_, &times_);
      const double t0 = now_s();
      cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      cudaGraph_t graph = nullptr;
      cuda_ok(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        launch_layers(pool_, b.batch.batch.get(), setup_, buffers_, stream_, nullptr);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);  // ends the (invalidated) capture
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      cuda_ok(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
      const cudaError_t inst = cudaGraphInstantiate(&b.exec, graph, 0);
      cudaGraphDestroy(graph);
      cuda_ok(inst, "cudaGraphInstantiate");
      times_.capture_s = now_s() - t0;
      ++stats_.graph_captures;
      return;
    }
    const double t0 = now_s();
    cuda_ok(cudaGraphLaunch(b.exec, stream_), "cudaGraphLaunch");
    times_.replay_s = now_s() - t0;
    replayed_ = true;
    ++stats_.graph_replays;
#else
    throw std::logic_error("--graphs in a bspa-demo built without CUDA");
#endif
  }

  void launch_eager() override {
    const bspa_batch *batch = current_ ? current_->batch.batch.get() : fallback_.get();
    launch_layers(pool_, batch, setup_, buffers_, stream_, nullptr);
  }

  void release() override {
    const double t0 = now_s();
    fallback_.reset();
    times_.release_s = now_s() - t0;
  }

  void drop_sequences() override {
    for (Bucket &b : buckets_) empty_.plan_onto(b.batch, stream_);
  }

  bool replayed() const override { return replayed_; }

 private:
  struct Bucket {
    int64_t rows = 0;  // max_tokens: the launches' tensor rows
    int32_t max_seqs = 0;
    bool decode_only = false;  // max_query_len 1
    Reusable batch;
#ifdef BSPA_HAVE_CUDA
    cudaGraphExec_t exec = nullptr;
#endif
  };
  bspa_pool *pool_;
  const AttentionSetup &setup_;
  StepBuffers &buffers_;
  bool graphs_;
  bspa_stream stream_ = nullptr;  // the runner's own on CUDA (graphs capture on it); CPU: none
  EmptyPlan empty_;               // before buckets_: the batches are destroyed first
  std::vector<Bucket> buckets_;
  Bucket *current_ = nullptr;  // the last plan's bucket; null: fallback_
  BatchPtr fallback_;          // a one-step batch for a step no bucket holds
  bool replayed_ = false;
};

}  // namespace

std::unique_ptr<StepRunner> make_runner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers,
                                        const RunnerOptions &options) {
  switch (options.mode) {
    case LaunchMode::Batch: return std::make_unique<EagerRunner>(pool, setup, buffers);
    case LaunchMode::Plan: return std::make_unique<PlanRunner>(pool, setup, buffers, options);
    case LaunchMode::Fixed: return std::make_unique<BucketRunner>(pool, setup, buffers, options);
  }
  throw std::logic_error("make_runner: unknown launch mode");
}

}  // namespace demo
