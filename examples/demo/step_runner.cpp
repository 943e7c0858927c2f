#include "step_runner.hpp"

#include <stdexcept>

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
  tensors_[index(layer, 3)].poison_front(per_row(3));
}

std::vector<float> StepBuffers::download_out(int32_t layer) const {
  const View &v = views_[index(layer, 3)];
  return tensors_[index(layer, 3)].download_front(rows_ * v.shape[1] * v.shape[2]);
}

namespace {

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

  void launch() override {
    const int32_t layers = setup_.model->shape().num_layers;
    bspa_kv_write_args kw;
    DEMO_OK(bspa_kv_write_args_init(&kw));
    bspa_prefill_args pf;
    DEMO_OK(bspa_prefill_args_init(&pf));
    pf.scale = setup_.scale;
    for (int32_t layer = 0; layer < layers; ++layer) {
      kw.layer = pf.layer = layer;
      kw.k_new = buffers_.k(layer);
      kw.v_new = buffers_.v(layer);
      pf.layout = setup_.layouts->at(layer);
      pf.q = buffers_.q(layer);
      pf.out = buffers_.out(layer);
      const double t0 = now_s();
      DEMO_OK(bspa_kv_write(pool_, batch_.get(), &kw, nullptr));
      const double t1 = now_s();
      DEMO_OK(bspa_prefill(pool_, batch_.get(), &pf, nullptr));
      times_.kv_write_s += t1 - t0;
      times_.prefill_s += now_s() - t1;
    }
  }

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

}  // namespace

std::unique_ptr<StepRunner> make_eager_runner(bspa_pool *pool, const AttentionSetup &setup, StepBuffers &buffers) {
  return std::make_unique<EagerRunner>(pool, setup, buffers);
}

}  // namespace demo
