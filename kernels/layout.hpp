// Block-sparse layouts: which key blocks a query block of a head may see.
// The strided rule is analytic (no O(blocks^2) mask); CSR holds a caller's layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/block_rule.hpp"

namespace bspa::kernels {

struct Layout {
  using Kind = LayoutKind;

  Kind kind = Kind::Dense;
  int32_t num_heads = 0;    // local heads (this rank's)
  int32_t block_size = 64;  // tokens per block

  // Strided: allowed = kb <= qb && (qb - kb < local_blocks || (kb + (head_begin + h) * head_step + 1) % vert_stride ==
  // 0)
  int32_t local_blocks = 0;
  int32_t vert_stride = 1;
  int32_t head_begin = 0;
  int32_t head_step = 0;  // homo ? 0 : max(1, vert_stride / num_heads_total)

  // Csr: rows [num_heads][num_block_rows + 1] absolute offsets into col.
  int32_t num_block_rows = 0;
  std::vector<int32_t> crow;
  std::vector<int32_t> col;

  // Device copies of crow/col, made by the CUDA backend on the layout's first CUDA use
  // on each device and freed with the layout (kernels/cuda/device_layout.cpp). Opaque
  // here; a layout is immutable, so copies of it may share them.
  mutable std::shared_ptr<void> device_copies;

  // Callers guarantee 0 <= h < num_heads, qb, kb >= 0 and (for Csr) qb < num_block_rows.
  // The rule is block_allowed (kernels/block_rule.hpp), the one the CUDA kernels apply.
  bool allowed(int32_t h, int64_t qb, int64_t kb) const { return block_allowed(*this, h, qb, kb); }
};

// Factories: validate and build. Errors are Error(InvalidArgument) naming the field and
// value (for CSR: the first bad head, row and entry).
struct StridedLayoutParams {
  int32_t block_size = 64, local_blocks = 16, vert_stride = 8;
  bool homo_head = false;
  int32_t num_heads_total = 32, head_begin = 0, num_heads = 32;
};
Layout make_strided_layout(const StridedLayoutParams &p);
Layout make_dense_layout(int32_t num_heads, int32_t block_size = 64);
// crow: [num_heads][num_block_rows + 1] absolute offsets; col: crow[num_heads-1][num_block_rows] entries.
Layout make_csr_layout(int32_t num_heads, int32_t block_size, int32_t num_block_rows, const int32_t *crow,
                       const int32_t *col);

// Longest sequence (in tokens) the layout can answer for: CSR stops at its rows.
inline int64_t layout_max_tokens(const Layout &l) {
  return l.kind == Layout::Kind::Csr ? static_cast<int64_t>(l.num_block_rows) * l.block_size : INT64_MAX;
}

}  // namespace bspa::kernels
