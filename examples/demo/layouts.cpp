#include "attention.hpp"
#include "status.hpp"

namespace demo {

LayerLayouts::LayerLayouts(int32_t num_layers, int32_t num_q_heads, const Strided &s) {
  try {
    for (int32_t l = 0; l < num_layers; ++l) {
      bspa_layout *layout = nullptr;
      if (sparse(l)) {
        bspa_layout_strided_options o;
        DEMO_OK(bspa_layout_strided_options_init(&o));
        o.block_size = s.block_size;
        o.local_blocks = s.local_blocks;
        o.vert_stride = s.vert_stride;
        o.homo_head = 0;  // heterogeneous heads: each query head has its own stripes
        o.num_heads_total = num_q_heads;
        o.head_begin = 0;
        o.num_heads = num_q_heads;
        DEMO_OK(bspa_layout_create_strided(&layout, &o));
      } else {
        DEMO_OK(bspa_layout_create_dense(&layout, num_q_heads));
      }
      layouts_.push_back(layout);
    }
  } catch (...) {
    for (bspa_layout *l : layouts_) bspa_layout_destroy(l);
    throw;
  }
}

LayerLayouts::~LayerLayouts() {
  for (bspa_layout *l : layouts_) bspa_layout_destroy(l);
}

}  // namespace demo
