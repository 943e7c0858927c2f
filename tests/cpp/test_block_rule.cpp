// The kernels' folded forms of the block rule (kernels/block_rule.hpp) against the rule
// itself, on the host: strided_group_allowed (the decode kernel's listing of a KV group's
// key tiles) must say, for every query block and key block, whether some head and whether
// every head of the group may see the block, exactly as block_allowed of each head does.
// strided_group_listing (the closed form of a split's listed blocks) must name the same
// blocks in the same order. Internal (it includes the library's kernel headers, not the
// public one); no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/block_rule.hpp"
#include "kernels/layout.hpp"

using bspa::kernels::block_allowed;
using bspa::kernels::Layout;
using bspa::kernels::strided_group_allowed;
using bspa::kernels::strided_group_residues;

// Calls fn(layout, h0, G) for every KV group h0 .. h0 + G - 1 of strided layouts with
// vert_stride 1..32 and each of the given head steps, head offsets, local windows and group
// sizes (`groups` groups a layout).
template <class Fn>
void for_each_strided_group(std::initializer_list<int32_t> steps, std::initializer_list<int32_t> begins,
                            std::initializer_list<int32_t> locals, std::initializer_list<int32_t> group_sizes,
                            int32_t groups, Fn fn) {
  for (int32_t vs = 1; vs <= 32; ++vs)
    for (int32_t step : steps)
      for (int32_t begin : begins)
        for (int32_t local : locals)
          for (int32_t G : group_sizes) {
            Layout l;
            l.kind = Layout::Kind::Strided;
            l.num_heads = groups * G;
            l.vert_stride = vs, l.head_step = step, l.head_begin = begin, l.local_blocks = local;
            for (int32_t h0 = 0; h0 < l.num_heads; h0 += G) fn(l, h0, G);
          }
}

Test(block_rule, strided_group_equals_each_head) {
  int64_t checked = 0, some_not_all = 0;
  for_each_strided_group(
      {0, 1, 2, 3, 5}, {0, 3, 17}, {0, 1, 4}, {1, 2, 4, 8}, 4, [&](const Layout &l, int32_t h0, int32_t G) {
        const int32_t vs = l.vert_stride, step = l.head_step, begin = l.head_begin, local = l.local_blocks;
        const auto r = strided_group_residues(l, h0, G);
        cr_assert(r.fits(), "vert_stride %d fits the residue masks", vs);
        for (int32_t qb = 0; qb < 3 * vs + 2; ++qb)
          for (int32_t kb = 0; kb <= qb + 1; ++kb) {
            bool any = false, all = true;
            for (int32_t g = 0; g < G; ++g) {
              const bool a = block_allowed(l, h0 + g, int64_t{qb}, int64_t{kb});
              any = any || a;
              all = all && a;
            }
            bool f_any = !any, f_all = !all;
            strided_group_allowed(l, r, qb, kb, bspa::kernels::strided_residue_bit(l, kb), f_any, f_all);
            cr_assert_eq(f_any, any, "any: vs %d step %d begin %d local %d G %d h0 %d qb %d kb %d", vs, step, begin,
                         local, G, h0, qb, kb);
            cr_assert_eq(f_all, all, "all: vs %d step %d begin %d local %d G %d h0 %d qb %d kb %d", vs, step, begin,
                         local, G, h0, qb, kb);
            ++checked;
            some_not_all += any && !all;
          }
      });
  // The sweep must have met groups whose heads disagree (else `all` was never tested).
  cr_assert_gt(some_not_all, 1000, "only %lld blocks seen by some but not all heads", (long long)some_not_all);
  cr_assert_gt(checked, 1000000);
}

Test(block_rule, strided_group_residues_refuse_wide_strides) {
  Layout l;
  l.kind = Layout::Kind::Strided;
  l.vert_stride = 33, l.head_step = 1, l.local_blocks = 2;
  cr_assert(!strided_group_residues(l, 0, 4).fits(), "vert_stride 33 has no 32-bit residue mask");
}

// strided_group_listing (the decode kernel's closed form of a split's share of the listed
// blocks) against the blocks that some head of the group may see from query block qb_lo or
// qb_hi by block_allowed, in order: the residue blocks below the window, then every block
// from the window to qb_hi.
Test(block_rule, strided_group_listing_equals_the_listed_blocks) {
  int64_t checked = 0, with_residues = 0;
  for_each_strided_group({0, 1, 3}, {0, 5}, {1, 2, 5}, {1, 4, 8}, 2, [&](const Layout &l, int32_t h0, int32_t G) {
    const int32_t vs = l.vert_stride, step = l.head_step, begin = l.head_begin, local = l.local_blocks;
    const auto r = strided_group_residues(l, h0, G);
    for (int32_t qb_lo = 0; qb_lo < 3 * vs + local + 2; ++qb_lo)
      for (int32_t qb_hi : {qb_lo, qb_lo + 1}) {
        std::vector<int32_t> want;
        for (int32_t kb = 0; kb <= qb_hi; ++kb) {
          bool any = false;
          for (int32_t g = 0; g < G; ++g)
            any = any || block_allowed(l, h0 + g, int64_t{qb_lo}, int64_t{kb}) ||
                  block_allowed(l, h0 + g, int64_t{qb_hi}, int64_t{kb});
          if (any) want.push_back(kb);
        }
        const auto s = bspa::kernels::strided_group_listing(l, r, qb_lo);
        std::vector<int32_t> got;
        for (int32_t j = 0; j < s.residue_blocks; ++j) got.push_back(s.residue_block(j));
        for (int32_t kb = s.window; kb <= qb_hi; ++kb) got.push_back(kb);
        cr_assert(got == want, "vs %d step %d begin %d local %d G %d h0 %d qb %d..%d: %zu listed, %zu seen", vs, step,
                  begin, local, G, h0, qb_lo, qb_hi, got.size(), want.size());
        ++checked;
        with_residues += s.residue_blocks > 0;
      }
  });
  cr_assert_gt(with_residues, checked / 2, "the sweep must mostly reach past the local window");
  cr_assert_gt(checked, 50000);
}
