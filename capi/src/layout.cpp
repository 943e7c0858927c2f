// bspa_layout_*: thin shims over kernels/layout.
#include <bspa/bspa.h>

#include <memory>

#include "capi/src/guard.hpp"
#include "capi/src/layout_handle.hpp"

using bspa::Errc;
using bspa::capi::guarded;
using bspa::capi::require;

namespace {

template <class Make>
bspa_status create_layout(const char *function, bspa_layout **layout, Make &&make) {
  if (layout) *layout = nullptr;
  return guarded(function, [&] {
    require(layout, "layout");
    auto handle = std::make_unique<bspa_layout>();
    handle->layout = make();
    *layout = handle.release();
  });
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_layout_strided_options_init(bspa_layout_strided_options *options) {
  return guarded(__func__, [&] {
    require(options, "options");
    *options = bspa_layout_strided_options{};
    options->version = BSPA_LAYOUT_STRIDED_OPTIONS_VERSION;
    options->block_size = 64;
    options->local_blocks = 16;
    options->vert_stride = 8;
    options->homo_head = 0;
    options->num_heads_total = 32;
    options->head_begin = 0;
    options->num_heads = 32;
  });
}

BSPA_API bspa_status bspa_layout_create_strided(bspa_layout **layout, const bspa_layout_strided_options *options) {
  return create_layout(__func__, layout, [&] {
    require(options, "options");
    bspa::capi::check_options_version(options->version, BSPA_LAYOUT_STRIDED_OPTIONS_VERSION, "options",
                                      "bspa_layout_strided_options_init");
    bspa::check(options->homo_head == 0 || options->homo_head == 1, Errc::InvalidArgument,
                "options->homo_head = ", options->homo_head, " is neither 0 nor 1");
    bspa::kernels::StridedLayoutParams p;
    p.block_size = options->block_size;
    p.local_blocks = options->local_blocks;
    p.vert_stride = options->vert_stride;
    p.homo_head = options->homo_head != 0;
    p.num_heads_total = options->num_heads_total;
    p.head_begin = options->head_begin;
    p.num_heads = options->num_heads;
    return bspa::kernels::make_strided_layout(p);
  });
}

BSPA_API bspa_status bspa_layout_create_dense(bspa_layout **layout, int32_t num_heads) {
  return create_layout(__func__, layout, [&] { return bspa::kernels::make_dense_layout(num_heads); });
}

BSPA_API bspa_status bspa_layout_create_csr(bspa_layout **layout, int32_t num_heads, int32_t block_size,
                                            int32_t num_block_rows, const int32_t *crow, const int32_t *col) {
  return create_layout(__func__, layout, [&] {
    require(crow, "crow");
    require(col, "col");
    return bspa::kernels::make_csr_layout(num_heads, block_size, num_block_rows, crow, col);
  });
}

BSPA_API bspa_status bspa_layout_allowed(const bspa_layout *layout, int32_t head, int64_t q_block, int64_t k_block,
                                         int32_t *allowed) {
  return guarded(__func__, [&] {
    require(layout, "layout");
    require(allowed, "allowed");
    const auto &l = layout->layout;
    bspa::check(head >= 0 && head < l.num_heads, Errc::OutOfRange, "head = ", head, " is not in [0, ", l.num_heads,
                ")");
    bspa::check(q_block >= 0, Errc::OutOfRange, "q_block = ", q_block, " is negative");
    bspa::check(k_block >= 0, Errc::OutOfRange, "k_block = ", k_block, " is negative");
    if (l.kind == bspa::kernels::Layout::Kind::Csr)
      bspa::check(q_block < l.num_block_rows, Errc::OutOfRange, "q_block = ", q_block, " is past the CSR layout's ",
                  l.num_block_rows, " block rows");
    *allowed = l.allowed(head, q_block, k_block) ? 1 : 0;
  });
}

BSPA_API void bspa_layout_destroy(bspa_layout *layout) { delete layout; }

}  // extern "C"
