#include <cmath>
#include "attention.hpp"
#include "clock.hpp"
#include "handles.hpp"
#include "status.hpp"

namespace demo {

LayerOutputs prefill_with_cache(const AttentionSetup &setup, bspa_pool *pool, bspa_seq *seq, const int32_t *prompt,
                                int64_t n, int64_t cached, Timings &timings) {
  const ModelShape &m = setup.model->shape();
  const int64_t q_len = n - cached;
  const int32_t query_len = static_cast<int32_t>(q_len);
  bspa_batch *raw = nullptr;
  DEMO_OK(bspa_batch_create(&raw, pool, &seq, &query_len, 1, nullptr));
  BatchPtr batch(raw);

  const DLDataType dt = dl_dtype(setup.dtype);
  Tensor q(setup.device, dt, {q_len, m.num_q_heads, m.head_dim});
  Tensor out(setup.device, dt, {q_len, m.num_q_heads, m.head_dim});
  Tensor k(setup.device, dt, {q_len, m.num_kv_heads, m.head_dim});
  Tensor v(setup.device, dt, {q_len, m.num_kv_heads, m.head_dim});

  bspa_kv_write_args kw;
  DEMO_OK(bspa_kv_write_args_init(&kw));
  kw.k_new = k.dl();
  kw.v_new = v.dl();
  bspa_prefill_args pf;
  DEMO_OK(bspa_prefill_args_init(&pf));
  pf.q = q.dl();
  pf.out = out.dl();
  pf.scale = setup.scale;
  LayerOutputs outputs;
  for (int32_t layer = 0; layer < m.num_layers; ++layer) {
    double t0 = now_s();
    Projections p = setup.model->project(layer, prompt + cached, q_len, cached);
    q.upload_floats(p.q);
    k.upload_floats(p.k);
    v.upload_floats(p.v);
    out.poison();
    synchronize(setup.device);
    double t1 = now_s();
    kw.layer = layer;
    DEMO_OK(bspa_kv_write(pool, batch.get(), &kw, nullptr));
    synchronize(setup.device);
    double t2 = now_s();
    pf.layer = layer;
    pf.layout = setup.layouts->at(layer);
    DEMO_OK(bspa_prefill(pool, batch.get(), &pf, nullptr));
    synchronize(setup.device);
    double t3 = now_s();
    timings.project_s += t1 - t0;
    timings.kv_write_s += t2 - t1;
    timings.prefill_s += t3 - t2;
    outputs.push_back(out.download_floats());
  }
  return outputs;
}

double relative_l2(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(num) || std::isnan(den)) return NAN;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace demo
