// bspa_kv_write, bspa_prefill, bspa_prefill_paged: validate the DLTensors, describe the
// launch as a kernels::PrefillProblem / KvWriteProblem and dispatch on the device.
#include <bspa/bspa.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "capi/src/batch_handle.hpp"
#include "capi/src/guard.hpp"
#include "capi/src/handles.hpp"
#include "capi/src/layout_handle.hpp"
#include "capi/src/tensor_checks.hpp"
#include "kernels/backend.hpp"
#include "kernels/mixed_step_share.hpp"

using bspa::Errc;
using bspa::check;
using bspa::capi::guarded;
using bspa::capi::require;
using bspa::capi::TensorView;
using bspa::kernels::DType;

namespace {

// The validated q, out and lse (lse.t == nullptr without one), for the callers' overlap checks.
struct AttentionViews {
  TensorView q, out, lse;
};

// out and lse (outputs) each distinct elements, off q and off each other.
void check_outputs(const AttentionViews &a) {
  bspa::capi::check_elements_distinct(a.out, "out");
  bspa::capi::check_disjoint(a.out, "out", a.q, "q");
  if (!a.lse.t) return;
  bspa::capi::check_elements_distinct(a.lse, "lse");
  bspa::capi::check_disjoint(a.lse, "lse", a.q, "q");
  bspa::capi::check_disjoint(a.lse, "lse", a.out, "out");
}

// q, out and lse against the layout and the KV geometry; fills the problem's q/out/lse part.
AttentionViews describe_attention(bspa::kernels::PrefillProblem &p, const bspa_layout *layout, const DLTensor *q,
                                  DLTensor *out, DLTensor *lse, float scale, DType dtype, int32_t num_kv_heads,
                                  int32_t head_dim, DLDevice device, const char *device_from) {
  AttentionViews views;
  require(layout, "layout");
  const int32_t hq = layout->layout.num_heads;
  const TensorView qv = bspa::capi::view_tensor(q, "q", {-1, -1, head_dim});
  check(q->shape[1] == hq, Errc::ShapeMismatch, "q.shape[1] = ", q->shape[1], " query heads but the layout has ", hq,
        " heads");
  check(hq % num_kv_heads == 0, Errc::ShapeMismatch, "q has ", hq, " query heads, not a multiple of the ", num_kv_heads,
        " kv heads (GQA needs Hq % Hkv == 0)");
  const int64_t t = q->shape[0];
  const TensorView ov = bspa::capi::view_tensor(out, "out", {t, hq, head_dim});
  bspa::capi::check_dtype(q, dtype, "q");
  bspa::capi::check_dtype(out, dtype, "out");
  bspa::capi::check_device(q, device, "q", device_from);
  bspa::capi::check_device(out, device, "out", device_from);
  check(std::isfinite(scale), Errc::InvalidArgument, "scale = ", scale, " is not finite");
  p.dtype = dtype;
  p.num_q_heads = hq;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.total_q = static_cast<int32_t>(t);
  p.q = qv.data;
  p.q_token_stride = qv.stride[0];
  p.q_head_stride = qv.stride[1];
  p.out = ov.data;
  p.out_token_stride = ov.stride[0];
  p.out_head_stride = ov.stride[1];
  if (lse) {
    const TensorView lv = bspa::capi::view_tensor(lse, "lse", {hq, t});
    bspa::capi::check_float32(lse, "lse");
    bspa::capi::check_device(lse, device, "lse", device_from);
    p.lse = reinterpret_cast<float *>(lv.data);
    p.lse_head_stride = lv.stride[0];
    views.lse = lv;
  }
  p.layout = &layout->layout;
  p.scale = scale;
  views.q = qv;
  views.out = ov;
  check_outputs(views);
  return views;
}

void describe_pages(bspa::kernels::PagedKV &kv, const TensorView &k, const TensorView &v) {
  kv.k = k.data;
  kv.v = v.data;
  kv.k_page_stride = k.stride[0];
  kv.k_head_stride = k.stride[1];
  kv.k_token_stride = k.stride[2];
  kv.v_page_stride = v.stride[0];
  kv.v_head_stride = v.stride[1];
  kv.v_token_stride = v.stride[2];
  kv.num_pages = k.dim(0);
}

// Host metadata of bspa_prefill_paged, checked entry by entry (the CPU backend trusts it).
void check_paged_metadata(const bspa::kernels::PrefillProblem &p, int64_t num_pages, int64_t max_pages) {
  const int32_t *qs = p.query_starts;
  check(qs[0] == 0, Errc::OutOfRange, "query_starts[0] = ", qs[0], " must be 0");
  const int64_t limit = bspa::kernels::layout_max_tokens(*p.layout);
  for (int32_t i = 0; i < p.num_seqs; ++i) {
    check(qs[i + 1] >= qs[i], Errc::OutOfRange, "query_starts[", i + 1, "] = ", qs[i + 1], " is below query_starts[", i,
          "] = ", qs[i]);
    const int32_t ql = qs[i + 1] - qs[i], ctx = p.context_lens[i];
    check(ql <= p.max_query_len, Errc::OutOfRange, "sequence ", i, " has ", ql,
          " query rows, more than max_query_len = ", p.max_query_len);
    check(ctx >= 0, Errc::OutOfRange, "context_lens[", i, "] = ", ctx, " is negative");
    const int64_t tokens = static_cast<int64_t>(ctx) + ql;
    if (ql == 0) continue;
    check(tokens <= limit, Errc::OutOfRange, "sequence ", i, " has ", tokens, " tokens but the CSR layout covers only ",
          limit);
    const int64_t pages = (tokens + p.page_size - 1) / p.page_size;
    check(pages <= max_pages, Errc::OutOfRange, "sequence ", i, " needs ", pages, " pages for ", tokens,
          " tokens but block_table has ", max_pages, " columns");
    // Positions are int32 in the backends (bspa_batch_create bounds its sequences alike).
    check(tokens <= INT32_MAX, Errc::OutOfRange, "sequence ", i, ": context_lens[", i, "] = ", ctx, " + ", ql,
          " query rows = ", tokens, " tokens exceed INT32_MAX");
    const int32_t *row = p.block_table + i * p.block_table_stride;
    for (int64_t j = 0; j < pages; ++j)
      check(row[j] >= 0 && row[j] < num_pages, Errc::OutOfRange, "block_table[", i, "][", j, "] = ", row[j],
            " is not in [0, ", num_pages, ")");
  }
  check(qs[p.num_seqs] == p.total_q, Errc::OutOfRange, "query_starts[", p.num_seqs, "] = ", qs[p.num_seqs],
        " but q has ", p.total_q, " rows");
}

struct PoolGeometry {
  DType dtype;  // of the pages
  DLDevice device;
  bool cuda;
  bool fp8() const { return dtype == DType::FP8_E4M3; }
};

// An FP8 pool's scales for one launch on `layer` (bspa::cache::Pool::launch_kv_scales):
// device pointers for a CUDA pool, else a host copy held here for the launch's duration.
struct LaunchScales {
  std::vector<float> host;
  const float *k = nullptr, *v = nullptr;
  LaunchScales(const bspa::cache::Pool &pool, int32_t layer) {
    const size_t hkv = static_cast<size_t>(pool.num_kv_heads());
    if (pool.device() != bspa::cache::DeviceKind::Cuda) host.resize(2 * hkv);
    const auto s = pool.launch_kv_scales(layer, host.data(), host.data() + hkv);
    k = s.k;
    v = s.v;
  }
};

// FP8 page scales of bspa_prefill_paged: float32 [hkv], compact, on the pages' device; on
// CPU every value finite and positive (the kernels trust them).
const float *paged_scale(const DLTensor *t, const char *name, int64_t hkv, DLDevice device) {
  check(t != nullptr, Errc::NullPointer, name, " is NULL but k_pages/v_pages are fp8_e4m3 (their scales)");
  const TensorView s = bspa::capi::view_compact(t, name, {hkv});
  bspa::capi::check_float32(t, name);
  bspa::capi::check_device(t, device, name, "k_pages");
  const float *f = reinterpret_cast<const float *>(s.data);
  if (device.device_type == kDLCPU)
    for (int64_t h = 0; h < hkv; ++h)
      check(std::isfinite(f[h]) && f[h] > 0.0f, Errc::InvalidArgument, name, "[", h, "] = ", f[h], " (KV head ", h,
            ") is not a finite positive scale");
  return f;
}

PoolGeometry geometry_of(const bspa::cache::Pool &pool, const bspa_pool *handle, const bspa_batch *batch) {
  require(batch, "batch");
  check(batch->pool == handle, Errc::InvalidArgument, "batch was made from another pool");
  check(!batch->reusable || batch->planned, Errc::InvalidState,
        "batch is a reusable batch that has not been planned yet (call bspa_batch_plan first)");
  PoolGeometry g;
  g.dtype = static_cast<DType>(pool.dtype());
  g.cuda = pool.device() == bspa::cache::DeviceKind::Cuda;
  g.device = DLDevice{g.cuda ? kDLCUDA : kDLCPU, g.cuda ? pool.device_id() : 0};
  return g;
}

// The batch's metadata in the memory the backend reads: host plan or its device copy. CUDA
// launches are sized by the plan's launch shape (a fixed-shape batch's limits: the grids a
// CUDA graph captured), the CPU backend by the plan itself.
template <class Problem>
void describe_batch(Problem &p, const bspa_batch &b, bool cuda) {
  const bspa::kernels::BatchPlan &plan = b.plan;
  p.block_table_stride = plan.block_table_stride;
  if (cuda) {
    const bspa::kernels::DeviceBatchMetadata &d = b.device_metadata();
    p.device = d.device;
    p.num_seqs = plan.shape.num_seqs;
    p.total_q = plan.shape.total_q;
    p.query_starts = d.query_starts;
    p.context_lens = d.context_lens;
    p.block_table = d.block_table;
  } else {
    p.num_seqs = plan.num_seqs;
    p.total_q = plan.total_q;
    p.query_starts = plan.query_starts.data();
    p.context_lens = plan.context_lens.data();
    p.block_table = plan.block_table.data();
  }
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_kv_write_args_init(bspa_kv_write_args *args) {
  return guarded(__func__, [&] {
    require(args, "args");
    *args = bspa_kv_write_args{};
    args->version = BSPA_KV_WRITE_ARGS_VERSION;
  });
}

BSPA_API bspa_status bspa_kv_write(bspa_pool *pool, const bspa_batch *batch, const bspa_kv_write_args *args,
                                   bspa_stream stream) {
  return guarded(__func__, [&] {
    // The args struct unpacked into the names the checks below report ("k_new", "layer").
    require(args, "args");
    bspa::capi::check_options_version(args->version, BSPA_KV_WRITE_ARGS_VERSION, "args", "bspa_kv_write_args_init");
    const int32_t layer = args->layer;
    const DLTensor *k_new = args->k_new, *v_new = args->v_new;
    const bspa::cache::Pool &pl = *bspa::capi::pool_of(require(pool, "pool"));
    const PoolGeometry g = geometry_of(pl, pool, batch);
    void *k_pages = pl.k_data(layer);
    void *v_pages = pl.v_data(layer);
    const int64_t t = batch->tensor_rows(), hkv = pl.num_kv_heads(), d = pl.head_dim();
    const TensorView k = bspa::capi::view_tensor(k_new, "k_new", {t, hkv, d});
    const TensorView v = bspa::capi::view_tensor(v_new, "v_new", {t, hkv, d});
    // An FP8 pool quantizes 16-bit input (either kind; K and V alike).
    const DType in_dtype = g.fp8() ? bspa::capi::fp8_companion_dtype(k_new, "k_new", "an fp8_e4m3 pool") : g.dtype;
    bspa::capi::check_dtype(k_new, in_dtype, "k_new");
    bspa::capi::check_dtype(v_new, in_dtype, "v_new");
    bspa::capi::check_device(k_new, g.device, "k_new", "the pool");
    bspa::capi::check_device(v_new, g.device, "v_new", "the pool");
    // The write reads k_new/v_new while it writes the pool: a source inside the storage
    // (even one element off its destination) would be copied over itself.
    const char *storage = static_cast<const char *>(pl.storage_data());
    bspa::capi::check_disjoint(k, "k_new", storage, storage + pl.storage_bytes(), "the pool's KV storage");
    bspa::capi::check_disjoint(v, "v_new", storage, storage + pl.storage_bytes(), "the pool's KV storage");
    bspa::kernels::KvWriteProblem p;
    p.dtype = in_dtype;
    p.kv_dtype = g.dtype;
    std::unique_ptr<LaunchScales> scales;  // an FP8 pool's, checked set before anything is written
    if (g.fp8()) {
      scales = std::make_unique<LaunchScales>(pl, layer);
      p.k_scale = scales->k;
      p.v_scale = scales->v;
    }
    p.num_kv_heads = pl.num_kv_heads();
    p.head_dim = pl.head_dim();
    p.page_size = pl.page_size();
    describe_batch(p, *batch, g.cuda);
    p.k_new = k.data;
    p.v_new = v.data;
    p.k_new_token_stride = k.stride[0];
    p.k_new_head_stride = k.stride[1];
    p.v_new_token_stride = v.stride[0];
    p.v_new_head_stride = v.stride[1];
    p.k_pages = k_pages;
    p.v_pages = v_pages;
    if (p.total_q == 0) return;
    if (g.cuda)
      bspa::kernels::kv_write_cuda(p, stream);
    else
      bspa::kernels::kv_write_cpu(p);
  });
}

BSPA_API bspa_status bspa_prefill_args_init(bspa_prefill_args *args) {
  return guarded(__func__, [&] {
    require(args, "args");
    *args = bspa_prefill_args{};
    args->version = BSPA_PREFILL_ARGS_VERSION;
    args->scale = 1.0f;
  });
}

BSPA_API bspa_status bspa_prefill(bspa_pool *pool, const bspa_batch *batch, const bspa_prefill_args *args,
                                  bspa_stream stream) {
  return guarded(__func__, [&] {
    // The args struct unpacked into the names the checks below report ("q", "layout").
    require(args, "args");
    bspa::capi::check_options_version(args->version, BSPA_PREFILL_ARGS_VERSION, "args", "bspa_prefill_args_init");
    const int32_t layer = args->layer;
    const bspa_layout *layout = args->layout;
    const DLTensor *q = args->q;
    DLTensor *out = args->out, *lse = args->lse;
    const float scale = args->scale;
    const bspa::cache::Pool &pl = *bspa::capi::pool_of(require(pool, "pool"));
    const PoolGeometry g = geometry_of(pl, pool, batch);
    const void *k_pages = pl.k_data(layer);
    const void *v_pages = pl.v_data(layer);
    require(q, "q");
    require(out, "out");
    // q's rows are the batch's new tokens: checked before out is compared with q, so a
    // wrong q is reported as q, with the reason a fixed launch shape has its own.
    bspa::capi::view_tensor(q, "q", {-1, -1, pl.head_dim()});
    check(q->shape[0] == batch->tensor_rows(), Errc::ShapeMismatch, "q.shape[0] = ", q->shape[0], " but the batch has ",
          batch->tensor_rows(),
          batch->limits.fixed_launch_shape ? " rows (its max_tokens: a fixed launch shape's tensors have them all)"
                                           : " new tokens");
    bspa::kernels::PrefillProblem p;
    // q and out of an FP8 pool are 16-bit (their own dtype); otherwise the pool's.
    const DType qdtype = g.fp8() ? bspa::capi::fp8_companion_dtype(q, "q", "an fp8_e4m3 pool") : g.dtype;
    const AttentionViews views = describe_attention(p, layout, q, out, lse, scale, qdtype, pl.num_kv_heads(),
                                                    pl.head_dim(), g.device, "the pool");
    const char *storage = static_cast<const char *>(pl.storage_data());
    bspa::capi::check_disjoint(views.out, "out", storage, storage + pl.storage_bytes(), "the pool's KV storage");
    if (views.lse.t)
      bspa::capi::check_disjoint(views.lse, "lse", storage, storage + pl.storage_bytes(), "the pool's KV storage");
    const bspa::kernels::BatchPlan &plan = batch->plan;
    const int64_t limit = bspa::kernels::layout_max_tokens(layout->layout);
    for (int32_t i = 0; i < plan.num_seqs; ++i) {
      const int64_t tokens =
          static_cast<int64_t>(plan.context_lens[i]) + plan.query_starts[i + 1] - plan.query_starts[i];
      check(tokens <= limit || plan.query_starts[i + 1] == plan.query_starts[i], Errc::OutOfRange, "sequence ", i,
            " of the batch has ", tokens, " tokens but the CSR layout covers only ", limit);
    }
    p.page_size = pl.page_size();
    p.max_query_len = g.cuda ? plan.shape.max_query_len : plan.max_query_len;
    describe_batch(p, *batch, g.cuda);
    const int64_t head_stride = static_cast<int64_t>(pl.page_size()) * pl.head_dim();
    p.kv.k = k_pages;
    p.kv.v = v_pages;
    p.kv.k_page_stride = p.kv.v_page_stride = head_stride * pl.num_kv_heads();
    p.kv.k_head_stride = p.kv.v_head_stride = head_stride;
    p.kv.k_token_stride = p.kv.v_token_stride = pl.head_dim();
    p.kv.num_pages = pl.num_pages();
    std::unique_ptr<LaunchScales> scales;
    if (g.fp8()) {
      scales = std::make_unique<LaunchScales>(pl, layer);
      p.kv.kv_dtype = DType::FP8_E4M3;
      p.kv.k_scale = scales->k;
      p.kv.v_scale = scales->v;
    }
    if (g.cuda) {
      const bspa::kernels::DeviceBatchMetadata &d = batch->device_metadata();
      p.work = d.work;
      p.num_work = plan.shape.num_work;
      p.split = d.split;
      p.decode_seqs = plan.shape.decode_seqs;
      p.decode_max_keys = plan.shape.decode_max_keys;
      p.decode_max_q = plan.shape.decode_max_q;
      if (batch->limits.fixed_launch_shape) {
        p.live_work_entries = d.live_work;
        p.live_work = static_cast<int32_t>(plan.work.size());
        p.live_decode_seqs = plan.decode_seqs;
      } else {
        // A mixed step: how much of each kind (planned once) sizes the two grids' shares.
        p.mixed_work = bspa::kernels::launch_mixed_work(plan.mixed_work, layout->layout, p.kv.kv_dtype);
      }
    } else {
      p.work = plan.work.data();
      p.num_work = static_cast<int32_t>(plan.work.size());
      p.decode_seqs = plan.decode_seqs;
      p.decode_max_keys = plan.decode_max_keys;
      p.decode_max_q = plan.decode_max_q;
    }
    p.work_tile_rows = plan.tile_rows;
    // The launch routes as the plan did, and knows which sequences its work list leaves out.
    p.decode_query_bound = plan.decode_max_query_len;
    if (p.total_q == 0) return;
    if (g.cuda)
      bspa::kernels::prefill_cuda(p, stream);
    else
      bspa::kernels::prefill_cpu(p);
  });
}

BSPA_API bspa_status bspa_prefill_workspace_bytes(int32_t device_type, int32_t device_id, int32_t head_dim,
                                                  size_t *bytes) {
  if (bytes) *bytes = 0;
  return guarded(__func__, [&] {
    require(bytes, "bytes");
    check(head_dim > 0, Errc::InvalidArgument, "head_dim = ", head_dim, " must be positive");
    check(device_type == kDLCPU || device_type == kDLCUDA, Errc::NotSupported, "device_type = ", device_type, " (",
          bspa::capi::device_name(device_type), "); only kDLCPU and kDLCUDA are supported");
    if (device_type == kDLCPU) return;
    const int32_t n = bspa::cuda_device_count();
    check(device_id >= 0 && device_id < n, Errc::NoDevice, "device_id = ", device_id, " but this machine has ", n,
          " CUDA device(s)");
    *bytes = bspa::kernels::prefill_workspace_bytes_cuda(device_id, head_dim);
  });
}

BSPA_API bspa_status bspa_paged_args_init(bspa_paged_args *args) {
  return guarded(__func__, [&] {
    require(args, "args");
    *args = bspa_paged_args{};
    args->version = BSPA_PAGED_ARGS_VERSION;
    args->scale = 1.0f;
  });
}

BSPA_API bspa_status bspa_prefill_paged(const bspa_paged_args *args, bspa_stream stream) {
  return guarded(__func__, [&] {
    require(args, "args");
    bspa::capi::check_options_version(args->version, BSPA_PAGED_ARGS_VERSION, "args", "bspa_paged_args_init");
    require(args->q, "args->q");
    require(args->out, "args->out");
    require(args->k_pages, "args->k_pages");
    require(args->v_pages, "args->v_pages");
    require(args->block_table, "args->block_table");
    require(args->query_starts, "args->query_starts");
    require(args->context_lens, "args->context_lens");
    require(args->layout, "args->layout");

    const TensorView k = bspa::capi::view_tensor(args->k_pages, "k_pages", {-1, -1, -1, -1});
    const int64_t num_pages = k.dim(0), hkv = k.dim(1), page_size = k.dim(2), head_dim = k.dim(3);
    check(hkv >= 1 && page_size >= 1 && head_dim >= 1, Errc::ShapeMismatch, "k_pages.shape = [", num_pages, ", ", hkv,
          ", ", page_size, ", ", head_dim, "] has an empty head, page or head dimension");
    // The kernels hold these as int32: a larger value would be truncated, not rejected.
    check(num_pages <= INT32_MAX && hkv <= INT32_MAX && page_size <= INT32_MAX && head_dim <= INT32_MAX,
          Errc::ShapeMismatch, "k_pages.shape = [", num_pages, ", ", hkv, ", ", page_size, ", ", head_dim,
          "] has a dimension past INT32_MAX");
    const TensorView v = bspa::capi::view_tensor(args->v_pages, "v_pages", {num_pages, hkv, page_size, head_dim});
    // FP8 pages (since version 3) go with 16-bit q/out; other pages share q's dtype.
    const bool fp8 = bspa::capi::is_fp8_e4m3(args->k_pages->dtype);
    check(!fp8 || args->version >= 3, Errc::Version, "k_pages are fp8_e4m3 but args->version = ", args->version,
          ": FP8 pages need version 3 (k_scale, v_scale)");
    const DType dtype = fp8 ? bspa::capi::fp8_companion_dtype(args->q, "q", "fp8_e4m3 k_pages")
                            : bspa::capi::attention_dtype(args->k_pages, "k_pages");
    if (fp8)
      check(bspa::capi::is_fp8_e4m3(args->v_pages->dtype), Errc::DtypeMismatch,
            "v_pages.dtype is not fp8_e4m3 (float8_e4m3fn or uint8) but k_pages' is");
    else
      bspa::capi::check_dtype(args->v_pages, dtype, "v_pages");
    const DLDevice device = args->k_pages->device;
    check(device.device_type == kDLCPU || device.device_type == kDLCUDA, Errc::DeviceMismatch,
          "k_pages is on device type ", device.device_type, " (", bspa::capi::device_name(device.device_type),
          "); only kDLCPU and kDLCUDA are supported");
    bspa::capi::check_device(args->v_pages, device, "v_pages", "k_pages");

    bspa::kernels::PrefillProblem p;
    const AttentionViews views =
        describe_attention(p, args->layout, args->q, args->out, args->lse, args->scale, dtype,
                           static_cast<int32_t>(hkv), static_cast<int32_t>(head_dim), device, "k_pages");
    p.page_size = static_cast<int32_t>(page_size);
    describe_pages(p.kv, k, v);
    const DLTensor *k_scale = args->version >= 3 ? args->k_scale : nullptr;
    const DLTensor *v_scale = args->version >= 3 ? args->v_scale : nullptr;
    if (fp8) {
      p.kv.kv_dtype = DType::FP8_E4M3;
      p.kv.k_scale = paged_scale(k_scale, "args->k_scale", hkv, device);
      p.kv.v_scale = paged_scale(v_scale, "args->v_scale", hkv, device);
    } else {
      check(!k_scale && !v_scale, Errc::InvalidArgument, "args->", k_scale ? "k_scale" : "v_scale",
            " is given but k_pages are ", bspa::kernels::dtype_name(dtype), ", not fp8_e4m3");
    }

    const TensorView bt = bspa::capi::view_tensor(args->block_table, "block_table", {-1, -1});
    const int64_t num_seqs = bt.dim(0);
    // Before num_seqs + 1 below: INT64_MAX + 1 wrapped to the "any dimension" marker.
    check(num_seqs <= INT32_MAX, Errc::ShapeMismatch, "block_table.shape[0] = ", num_seqs, " exceeds INT32_MAX");
    const TensorView qs = bspa::capi::view_compact(args->query_starts, "query_starts", {num_seqs + 1});
    const TensorView cl = bspa::capi::view_compact(args->context_lens, "context_lens", {num_seqs});
    bspa::capi::check_int32(args->block_table, "block_table");
    bspa::capi::check_int32(args->query_starts, "query_starts");
    bspa::capi::check_int32(args->context_lens, "context_lens");
    bspa::capi::check_device(args->block_table, device, "block_table", "k_pages");
    bspa::capi::check_device(args->query_starts, device, "query_starts", "k_pages");
    bspa::capi::check_device(args->context_lens, device, "context_lens", "k_pages");
    check(args->max_query_len >= 0, Errc::InvalidArgument, "args->max_query_len = ", args->max_query_len,
          " is negative");
    const int32_t max_decode_query_len = args->version >= 4 ? args->max_decode_query_len : 0;
    check(max_decode_query_len >= 0, Errc::InvalidArgument, "args->max_decode_query_len = ", max_decode_query_len,
          " is negative");
    check(args->q->shape[0] <= INT32_MAX, Errc::ShapeMismatch, "q.shape[0] = ", args->q->shape[0],
          " exceeds INT32_MAX");
    p.num_seqs = static_cast<int32_t>(num_seqs);
    p.block_table = reinterpret_cast<const int32_t *>(bt.data);
    p.block_table_stride = bt.stride[0];
    p.query_starts = reinterpret_cast<const int32_t *>(qs.data);
    p.context_lens = reinterpret_cast<const int32_t *>(cl.data);
    p.max_query_len = args->max_query_len;
    p.decode_query_bound = max_decode_query_len;
    // The block table's reach bounds every sequence (clamped: positions are int32, and the
    // product must not overflow for a table of absurd width).
    p.decode_max_keys = std::min<int64_t>(bt.dim(1), INT32_MAX) * page_size;

    // Contradictions visible in the shapes and arguments alone are refused on every device
    // (on CUDA a launch would leave rows of out unwritten and report success).
    check(num_seqs > 0 || p.total_q == 0, Errc::OutOfRange, "block_table has no sequences but q has ", p.total_q,
          " rows");
    check(p.max_query_len > 0 || p.total_q == 0, Errc::OutOfRange, "max_query_len = 0 but q has ", p.total_q, " rows");
    // What the launch writes (out, lse, the workspace) must not overlap what it reads: the
    // CPU backend would read metadata it had already overwritten.
    const std::pair<const TensorView *, const char *> inputs[] = {
        {&k, "k_pages"}, {&v, "v_pages"}, {&bt, "block_table"}, {&qs, "query_starts"}, {&cl, "context_lens"}};
    for (const auto &in : inputs) {
      bspa::capi::check_disjoint(views.out, "out", *in.first, in.second);
      if (views.lse.t) bspa::capi::check_disjoint(views.lse, "lse", *in.first, in.second);
    }
    if (args->version >= 2 && args->workspace) {
      const TensorView w = bspa::capi::view_compact(args->workspace, "args->workspace", {-1});
      bspa::capi::check_uint8(args->workspace, "args->workspace");
      bspa::capi::check_device(args->workspace, device, "args->workspace", "k_pages");
      check((reinterpret_cast<uintptr_t>(w.data) & 15) == 0, Errc::InvalidArgument, "args->workspace data ",
            static_cast<const void *>(w.data), " is not 16-byte aligned");
      for (const auto &in : inputs) bspa::capi::check_disjoint(w, "args->workspace", *in.first, in.second);
      bspa::capi::check_disjoint(w, "args->workspace", views.q, "q");
      bspa::capi::check_disjoint(w, "args->workspace", views.out, "out");
      if (views.lse.t) bspa::capi::check_disjoint(w, "args->workspace", views.lse, "lse");
      p.split = bspa::kernels::SplitWorkspace{w.data, static_cast<size_t>(w.dim(0))};
    }
    if (fp8) {  // the scales are read too: no output may overlap them
      const TensorView ks = bspa::capi::view_compact(k_scale, "args->k_scale", {hkv});
      const TensorView vs = bspa::capi::view_compact(v_scale, "args->v_scale", {hkv});
      for (const TensorView *s : {&ks, &vs}) {
        const char *name = s == &ks ? "args->k_scale" : "args->v_scale";
        bspa::capi::check_disjoint(views.out, "out", *s, name);
        if (views.lse.t) bspa::capi::check_disjoint(views.lse, "lse", *s, name);
        if (p.split.data) {
          const char *w = static_cast<const char *>(p.split.data);
          bspa::capi::check_disjoint(*s, name, w, w + p.split.bytes, "args->workspace");
        }
      }
    }
    if (device.device_type == kDLCPU && num_seqs > 0) check_paged_metadata(p, num_pages, bt.dim(1));
    if (p.total_q == 0) return;
    if (device.device_type == kDLCPU)
      bspa::kernels::prefill_cpu(p);
    else
      bspa::kernels::prefill_cuda(p, stream);
  });
}

}  // extern "C"
