// Block-sparse layouts: which key blocks a query block of a head may see.
// The strided rule is analytic (no O(blocks^2) mask); CSR holds a caller's layout.
#pragma once

#include <cstdint>
#include <vector>

namespace bspa::kernels {

struct Layout {
  enum class Kind : int32_t { Dense = 0, Strided = 1, Csr = 2 };

  Kind kind = Kind::Dense;
  int32_t num_heads = 0;    // local heads (this rank's)
  int32_t block_size = 64;  // tokens per block

  // Strided: allowed = kb <= qb && (qb - kb < local_blocks || (kb + (head_begin + h) * head_step + 1) % vert_stride == 0)
  int32_t local_blocks = 0;
  int32_t vert_stride = 1;
  int32_t head_begin = 0;
  int32_t head_step = 0;  // homo ? 0 : max(1, vert_stride / num_heads_total)

  // Csr: rows [num_heads][num_block_rows + 1] absolute offsets into col.
  int32_t num_block_rows = 0;
  std::vector<int32_t> crow;
  std::vector<int32_t> col;

  // Callers guarantee 0 <= h < num_heads, qb, kb >= 0 and (for Csr) qb < num_block_rows.
  bool allowed(int32_t h, int64_t qb, int64_t kb) const {
    if (kb > qb) return false;
    switch (kind) {
      case Kind::Dense:
        return true;
      case Kind::Strided:
        return qb - kb < local_blocks ||
               (kb + static_cast<int64_t>(head_begin + h) * head_step + 1) % vert_stride == 0;
      case Kind::Csr: {
        const int32_t *row = crow.data() + static_cast<int64_t>(h) * (num_block_rows + 1) + qb;
        for (int32_t i = row[0]; i < row[1]; ++i)
          if (col[i] == kb) return true;
        return false;
      }
    }
    return false;
  }
};

}  // namespace bspa::kernels
