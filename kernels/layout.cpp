#include "kernels/layout.hpp"

#include <algorithm>

#include "common/checked_size.hpp"
#include "common/error.hpp"

namespace bspa::kernels {

Layout make_strided_layout(const StridedLayoutParams &p) {
  check(p.block_size >= 1, Errc::InvalidArgument, "block_size = ", p.block_size, " must be at least 1");
  check(p.local_blocks >= 1, Errc::InvalidArgument, "local_blocks = ", p.local_blocks, " must be at least 1");
  // Bounded so that the kernels' int32 form of the rule (kb + g * s + 1, block_rule.hpp)
  // cannot overflow for any key block a CUDA launch reaches (below 2^25: blocks of at least
  // 64 of at most 2^31 tokens); past them CPU and GPU masks would differ.
  constexpr int32_t kMaxVertStride = 1 << 30, kMaxHeadsTotal = 1 << 24;
  check(p.vert_stride >= 1 && p.vert_stride <= kMaxVertStride, Errc::InvalidArgument, "vert_stride = ", p.vert_stride,
        " must be in [1, ", kMaxVertStride, "]");
  check(p.num_heads_total >= 1 && p.num_heads_total <= kMaxHeadsTotal, Errc::InvalidArgument,
        "num_heads_total = ", p.num_heads_total, " must be in [1, ", kMaxHeadsTotal, "]");
  check(p.num_heads >= 1, Errc::InvalidArgument, "num_heads = ", p.num_heads, " must be at least 1");
  check(p.head_begin >= 0, Errc::InvalidArgument, "head_begin = ", p.head_begin, " is negative");
  check(static_cast<int64_t>(p.head_begin) + p.num_heads <= p.num_heads_total, Errc::InvalidArgument,
        "head_begin = ", p.head_begin, " + num_heads = ", p.num_heads,
        " exceeds num_heads_total = ", p.num_heads_total);
  Layout l;
  l.kind = Layout::Kind::Strided;
  l.num_heads = p.num_heads;
  l.block_size = p.block_size;
  l.local_blocks = p.local_blocks;
  l.vert_stride = p.vert_stride;
  l.head_begin = p.head_begin;
  l.head_step = p.homo_head ? 0 : std::max(1, p.vert_stride / p.num_heads_total);
  return l;
}

Layout make_dense_layout(int32_t num_heads, int32_t block_size) {
  check(num_heads >= 1, Errc::InvalidArgument, "num_heads = ", num_heads, " must be at least 1");
  check(block_size >= 1, Errc::InvalidArgument, "block_size = ", block_size, " must be at least 1");
  Layout l;
  l.kind = Layout::Kind::Dense;
  l.num_heads = num_heads;
  l.block_size = block_size;
  return l;
}

Layout make_csr_layout(int32_t num_heads, int32_t block_size, int32_t num_block_rows, const int32_t *crow,
                       const int32_t *col) {
  check(num_heads >= 1, Errc::InvalidArgument, "num_heads = ", num_heads, " must be at least 1");
  check(block_size >= 1, Errc::InvalidArgument, "block_size = ", block_size, " must be at least 1");
  check(num_block_rows >= 1, Errc::InvalidArgument, "num_block_rows = ", num_block_rows, " must be at least 1");
  const int64_t row_len = static_cast<int64_t>(num_block_rows) + 1;
  // The copy of crow: bounded before anything is read or allocated.
  checked_product(Errc::InvalidArgument, "the bytes of crow",
                  {{"num_heads", static_cast<uint64_t>(num_heads)},
                   {"num_block_rows + 1", static_cast<uint64_t>(row_len)},
                   {"int32 bytes", sizeof(int32_t)}});
  // crow first, completely: col's length is crow's last value, so no entry of col may be
  // read before every offset is known to be non-decreasing from 0 (a decreasing offset
  // made the row loop below read col past that length).
  check(crow[0] == 0, Errc::InvalidArgument, "crow[0][0] = ", crow[0], " must be 0");
  for (int32_t h = 0; h < num_heads; ++h) {
    const int32_t *r = crow + h * row_len;
    if (h > 0)
      check(r[0] == r[-1], Errc::InvalidArgument, "crow[", h, "][0] = ", r[0], " must equal crow[", h - 1, "][",
            num_block_rows, "] = ", r[-1]);
    for (int32_t qb = 0; qb < num_block_rows; ++qb) {
      check(r[qb + 1] >= r[qb], Errc::InvalidArgument, "head ", h, ", row ", qb, ": crow[", h, "][", qb + 1,
            "] = ", r[qb + 1], " is below crow[", h, "][", qb, "] = ", r[qb]);
    }
  }
  const int64_t nnz = crow[num_heads * row_len - 1];
  // Then col, whose entries [0, nnz) are now all inside the header's length.
  for (int32_t h = 0; h < num_heads; ++h) {
    const int32_t *r = crow + h * row_len;
    for (int32_t qb = 0; qb < num_block_rows; ++qb) {
      for (int32_t e = r[qb]; e < r[qb + 1]; ++e) {
        const int32_t kb = col[e];
        check(kb >= 0 && kb <= qb, Errc::InvalidArgument, "head ", h, ", row ", qb, ", entry ", e - r[qb], ": col[", e,
              "] = ", kb, " is not in [0, ", qb, "] (key blocks must be causal)");
        if (e > r[qb])
          check(kb > col[e - 1], Errc::InvalidArgument, "head ", h, ", row ", qb, ", entry ", e - r[qb], ": col[", e,
                "] = ", kb, " is not above the previous entry ", col[e - 1], " (rows must be strictly ascending)");
      }
      check(r[qb + 1] > r[qb] && col[r[qb + 1] - 1] == qb, Errc::InvalidArgument, "head ", h, ", row ", qb,
            ": the diagonal block ", qb, " is missing (every row must hold its own block)");
    }
  }
  Layout l;
  l.kind = Layout::Kind::Csr;
  l.num_heads = num_heads;
  l.block_size = block_size;
  l.num_block_rows = num_block_rows;
  l.crow.assign(crow, crow + num_heads * row_len);
  l.col.assign(col, col + nnz);
  return l;
}

}  // namespace bspa::kernels
