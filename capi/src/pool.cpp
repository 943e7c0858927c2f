// C shims of the pool: options, create/destroy, KV views, stats, info, FP8 scales,
// invariant check.
#include <bspa/bspa.h>

#include "capi/src/guard.hpp"
#include "capi/src/handles.hpp"

namespace {

using bspa::Errc;
using bspa::capi::pool_of;
using bspa::capi::require;

bspa::cache::PoolConfig config_of(const bspa_pool_options &o) {
  bspa::cache::PoolConfig c;
  if (o.device_type == kDLCPU) {
    c.device = bspa::cache::DeviceKind::Cpu;
  } else if (o.device_type == kDLCUDA) {
    c.device = bspa::cache::DeviceKind::Cuda;
  } else {
    bspa::fail(Errc::InvalidArgument, "options->device_type = ", o.device_type,
               " is neither kDLCPU (1) nor kDLCUDA (2)");
  }
  bspa::check(o.dtype == BSPA_DTYPE_F32 || o.dtype == BSPA_DTYPE_F16 || o.dtype == BSPA_DTYPE_BF16 ||
                  o.dtype == BSPA_DTYPE_FP8_E4M3,
              Errc::InvalidArgument, "options->dtype = ", o.dtype,
              " is not BSPA_DTYPE_F32 (0), BSPA_DTYPE_F16 (1), BSPA_DTYPE_BF16 (2) or BSPA_DTYPE_FP8_E4M3 (3)");
  c.dtype = static_cast<bspa::cache::ElementType>(o.dtype);
  c.device_id = o.device_id;
  c.num_layers = o.num_layers;
  c.num_kv_heads = o.num_kv_heads;
  c.head_dim = o.head_dim;
  c.page_size = o.page_size;
  c.num_pages = o.num_pages;
  c.memory_bytes = o.memory_bytes;
  c.hash_seed = o.hash_seed;
  c.events_capacity = o.version >= 2 ? o.events_capacity : 0;  // a version 1 struct ends before it
  return c;
}

DLDataType dl_dtype(bspa::cache::ElementType t) {
  switch (t) {
    case bspa::cache::ElementType::F32: return DLDataType{kDLFloat, 32, 1};
    case bspa::cache::ElementType::F16: return DLDataType{kDLFloat, 16, 1};
    case bspa::cache::ElementType::FP8_E4M3: return DLDataType{BSPA_DL_FLOAT8_E4M3FN, 8, 1};
    case bspa::cache::ElementType::BF16: break;
  }
  return DLDataType{kDLBfloat, 16, 1};
}

void fill_view(DLTensor *t, void *data, const bspa::cache::Pool &pool) {
  t->data = data;
  t->device = DLDevice{pool.device() == bspa::cache::DeviceKind::Cuda ? kDLCUDA : kDLCPU, pool.device_id()};
  t->ndim = 4;
  t->dtype = dl_dtype(pool.dtype());
  // DLTensor's shape is non-const by declaration only; callers must not write through it.
  t->shape = const_cast<int64_t *>(pool.layer_shape());
  t->strides = nullptr;
  t->byte_offset = 0;
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_pool_options_init(bspa_pool_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(options, "options");
    *options = bspa_pool_options{};
    options->version = BSPA_POOL_OPTIONS_VERSION;
    options->device_type = kDLCPU;
    options->device_id = 0;
    options->dtype = BSPA_DTYPE_BF16;
    options->num_layers = 1;
    options->num_kv_heads = 1;
    options->head_dim = 128;
    options->page_size = 64;
    options->num_pages = 0;
    options->memory_bytes = 0;
    options->hash_seed = BSPA_DEFAULT_HASH_SEED;
    options->events_capacity = 0;
  });
}

BSPA_API bspa_status bspa_pool_create(bspa_pool **pool, const bspa_pool_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(pool, "pool");
    *pool = nullptr;
    require(options, "options");
    bspa::capi::check_options_version(options->version, BSPA_POOL_OPTIONS_VERSION, "options", "bspa_pool_options_init");
    *pool = bspa::capi::handle_of(new bspa::cache::Pool(config_of(*options)));
  });
}

BSPA_API void bspa_pool_destroy(bspa_pool *pool) { delete pool_of(pool); }

BSPA_API bspa_status bspa_pool_kv(const bspa_pool *pool, int32_t layer, DLTensor *k, DLTensor *v) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    void *k_data = p.k_data(layer);  // validates the layer before either view is written
    void *v_data = p.v_data(layer);
    if (k) fill_view(k, k_data, p);
    if (v) fill_view(v, v_data, p);
  });
}

BSPA_API bspa_status bspa_pool_stats(const bspa_pool *pool, struct bspa_pool_stats *stats) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(stats, "stats");
    const bspa::cache::PoolStats s = p.stats();
    stats->pages_total = s.pages_total;
    stats->pages_free = s.pages_free;
    stats->pages_cached = s.pages_cached;
    stats->pages_in_use = s.pages_in_use;
    stats->num_sequences = s.num_sequences;
    stats->match_calls = s.match_calls;
    stats->hits = s.hits;
    stats->misses = s.misses;
    stats->matched_tokens = s.matched_tokens;
    stats->queried_tokens = s.queried_tokens;
    stats->hashed_tokens = s.hashed_tokens;
    stats->published_pages = s.published_pages;
    stats->evictions = s.evictions;
  });
}

BSPA_API bspa_status bspa_pool_info(const bspa_pool *pool, struct bspa_pool_info *info) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(info, "info");
    bspa::check(info->version != 0 && info->version <= BSPA_POOL_INFO_VERSION, Errc::Version,
                "info->version = ", info->version, " but this library fills versions 1 to ", BSPA_POOL_INFO_VERSION,
                " (set it to BSPA_POOL_INFO_VERSION)");
    const bool cuda = p.device() == bspa::cache::DeviceKind::Cuda;
    info->device_type = cuda ? kDLCUDA : kDLCPU;
    info->device_id = p.device_id();
    info->dtype = static_cast<bspa_dtype>(p.dtype());
    info->num_layers = p.num_layers();
    info->num_kv_heads = p.num_kv_heads();
    info->head_dim = p.head_dim();
    info->page_size = p.page_size();
    info->num_pages = p.num_pages();
    // Per page over all layers, K and V (bounded by the pool's size checks).
    info->page_bytes = static_cast<uint64_t>(p.num_layers()) * 2 * static_cast<uint64_t>(p.num_kv_heads()) *
                       static_cast<uint64_t>(p.page_size()) * static_cast<uint64_t>(p.head_dim()) *
                       bspa::cache::element_bytes(p.dtype());
    info->storage_bytes = p.storage_bytes();
    info->kv_scales_layers = p.kv_scales_layers();
  });
}

BSPA_API bspa_status bspa_pool_set_kv_scales(bspa_pool *pool, int32_t layer, const float *k_scales,
                                             const float *v_scales, int32_t n) {
  return bspa::capi::guarded(__func__,
                             [&] { pool_of(require(pool, "pool"))->set_kv_scales(layer, k_scales, v_scales, n); });
}

BSPA_API bspa_status bspa_pool_get_kv_scales(const bspa_pool *pool, int32_t layer, float *k_scales, float *v_scales,
                                             int32_t n) {
  return bspa::capi::guarded(__func__,
                             [&] { pool_of(require(pool, "pool"))->get_kv_scales(layer, k_scales, v_scales, n); });
}

BSPA_API bspa_status bspa_pool_check(const bspa_pool *pool) {
  return bspa::capi::guarded(__func__, [&] { pool_of(require(pool, "pool"))->check(); });
}

}  // extern "C"
