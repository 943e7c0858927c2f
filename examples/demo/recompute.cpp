#include <vector>

#include "attention.hpp"
#include "clock.hpp"
#include "status.hpp"

namespace demo {

LayerOutputs prefill_from_scratch(const AttentionSetup &setup, const int32_t *prompt, int64_t n, int64_t rows,
                                  Timings &timings) {
  const ModelShape &m = setup.model->shape();
  const int64_t page = setup.page_size, hkv = m.num_kv_heads, d = m.head_dim, hq = m.num_q_heads;
  const int64_t num_pages = (n + page - 1) / page;
  const DLDataType dt = dl_dtype(setup.dtype);

  // The pages of this private cache are used in reverse order, so a kernel that ignored
  // the block table (or the pool's) could not pass by accident.
  std::vector<int32_t> block_table(static_cast<size_t>(num_pages));
  for (int64_t i = 0; i < num_pages; ++i) block_table[static_cast<size_t>(i)] = static_cast<int32_t>(num_pages - 1 - i);
  Tensor table(setup.device, DLDataType{kDLInt, 32, 1}, {1, num_pages});
  Tensor starts(setup.device, DLDataType{kDLInt, 32, 1}, {2});
  Tensor context(setup.device, DLDataType{kDLInt, 32, 1}, {1});
  table.upload_ints(block_table);
  starts.upload_ints({0, static_cast<int32_t>(n)});
  context.upload_ints({0});

  // FP8: e4m3 pages written here with the pool's scales, the bytes bspa_kv_write stores
  // for the same bf16/f16 values, so both paths attend over the same K/V.
  const bool fp8 = setup.kv_dtype == BSPA_DTYPE_FP8_E4M3;
  const DLDataType page_dt = fp8 ? dl_dtype(BSPA_DTYPE_FP8_E4M3) : dt;
  Tensor k_pages(setup.device, page_dt, {num_pages, hkv, page, d});
  Tensor v_pages(setup.device, page_dt, {num_pages, hkv, page, d});
  Tensor k_scale(setup.device, dl_dtype(BSPA_DTYPE_F32), {hkv});
  Tensor v_scale(setup.device, dl_dtype(BSPA_DTYPE_F32), {hkv});
  Tensor q(setup.device, dt, {n, hq, d});
  Tensor out(setup.device, dt, {n, hq, d});

  LayerOutputs outputs;
  for (int32_t layer = 0; layer < m.num_layers; ++layer) {
    double t0 = now_s();
    Projections p = setup.model->project(layer, prompt, n, 0);
    q.upload_floats(p.q);
    out.poison();
    synchronize(setup.device);
    double t1 = now_s();
    // [n, Hkv, D] rows into [pages, Hkv, page, D]; the tail of the last page stays zero.
    std::vector<float> kp(static_cast<size_t>(num_pages * hkv * page * d), 0.0f), vp(kp.size(), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pg = block_table[static_cast<size_t>(t / page)], slot = t % page;
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t dst = static_cast<size_t>(((pg * hkv + h) * page + slot) * d);
        const size_t src = static_cast<size_t>((t * hkv + h) * d);
        for (int64_t i = 0; i < d; ++i) {
          kp[dst + static_cast<size_t>(i)] = p.k[src + static_cast<size_t>(i)];
          vp[dst + static_cast<size_t>(i)] = p.v[src + static_cast<size_t>(i)];
        }
      }
    }
    if (fp8) {
      const float *ks = setup.fp8->k_of(layer), *vs = setup.fp8->v_of(layer);
      std::vector<uint8_t> kb(kp.size()), vb(vp.size());
      for (size_t e = 0; e < kp.size(); ++e) {
        const size_t h = (e / static_cast<size_t>(page * d)) % static_cast<size_t>(hkv);
        kb[e] = encode_e4m3(round_to(setup.dtype, kp[e]) / ks[h]);
        vb[e] = encode_e4m3(round_to(setup.dtype, vp[e]) / vs[h]);
      }
      k_pages.buffer().upload(kb.data(), kb.size());
      v_pages.buffer().upload(vb.data(), vb.size());
      k_scale.upload_floats(std::vector<float>(ks, ks + hkv));
      v_scale.upload_floats(std::vector<float>(vs, vs + hkv));
    } else {
      k_pages.upload_floats(kp);
      v_pages.upload_floats(vp);
    }
    synchronize(setup.device);
    double t2 = now_s();

    bspa_paged_args args;
    DEMO_OK(bspa_paged_args_init(&args));
    args.q = q.dl();
    args.out = out.dl();
    args.k_pages = k_pages.dl();
    args.v_pages = v_pages.dl();
    args.block_table = table.dl();
    args.query_starts = starts.dl();
    args.context_lens = context.dl();
    args.max_query_len = static_cast<int32_t>(n);
    args.layout = setup.layouts->at(layer);
    args.scale = setup.scale;
    if (fp8) {
      args.k_scale = k_scale.dl();
      args.v_scale = v_scale.dl();
    }
    DEMO_OK(bspa_prefill_paged(&args, nullptr));
    synchronize(setup.device);
    double t3 = now_s();
    timings.project_s += t1 - t0;
    timings.kv_write_s += t2 - t1;
    timings.prefill_s += t3 - t2;

    std::vector<float> all = out.download_floats();
    outputs.emplace_back(all.end() - static_cast<std::ptrdiff_t>(rows * hq * d), all.end());
  }
  return outputs;
}

}  // namespace demo
