// The outer dimensions of the sm90a producer's 16-bit TMA descriptors
// (kernels/tma_box_dims.hpp), on the host: for the page layouts a runtime hands bspa (a
// compact pool, token-major and head-major caller pages, padded strides, one KV head),
// either the two dimensions address every (8-row group, KV head, page) exactly where the
// strides put it, inside their extents, with a box's groups on consecutive coordinates of
// one dimension, or the layout is refused (the kernel then gathers). Internal; no GPU needed.
#include <criterion/criterion.h>

#include <cstdint>
#include <vector>

#include "kernels/tma_box_dims.hpp"

using bspa::kernels::tma::box_outer_dims;
using bspa::kernels::tma::group_box_outer_dims;
using bspa::kernels::tma::OuterDim;

namespace {

struct Layout {
  const char *name;
  int64_t page_size, tok, head, page, heads, pages;
};

// Every group, head and page: the coordinates' address equals the strides', inside the
// extents; the dimension with the box holds the groups with multiplier 1 (consecutive).
void expect_exact(const Layout &l, const OuterDim &a, const OuterDim &b) {
  const int64_t groups = l.page_size / 8;
  for (int64_t p = 0; p < l.pages; ++p)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t ca = g * a.g + h * a.h + p * a.p, cb = g * b.g + h * b.h + p * b.p;
        const int64_t want = g * 8 * l.tok + h * l.head + p * l.page;
        cr_assert(ca >= 0 && ca < a.extent && cb >= 0 && cb < b.extent,
                  "%s: (g %lld, h %lld, p %lld) at (%lld, %lld) outside (%lld, %lld)", l.name, (long long)g,
                  (long long)h, (long long)p, (long long)ca, (long long)cb, (long long)a.extent, (long long)b.extent);
        cr_assert_eq(ca * a.stride + cb * b.stride, want, "%s: (g %lld, h %lld, p %lld) addresses %lld, want %lld",
                     l.name, (long long)g, (long long)h, (long long)p, (long long)(ca * a.stride + cb * b.stride),
                     (long long)want);
      }
  const int64_t box_groups = l.page_size / 8;
  const OuterDim &boxed = a.box > 1 ? a : b, &other = a.box > 1 ? b : a;
  cr_expect_eq(other.box, 1u, "%s: both dimensions box more than 1", l.name);
  if (box_groups > 1) {
    cr_expect_eq(boxed.box, static_cast<uint32_t>(box_groups), "%s: box %u groups, want %lld", l.name, boxed.box,
                 (long long)box_groups);
    cr_expect_eq(boxed.g, 1, "%s: the boxed dimension's group multiplier %lld, want 1", l.name, (long long)boxed.g);
  }
}

// The addresses of a box's 8-row groups in the order TMA writes them to shared memory (the
// box's first dimension fastest), from (group 0, head, page).
std::vector<int64_t> box_groups(const OuterDim &a, const OuterDim &b, uint32_t box_a, uint32_t box_b, int64_t h,
                                int64_t p) {
  const int64_t ca = h * a.h + p * a.p, cb = h * b.h + p * b.p;
  std::vector<int64_t> out;
  for (uint32_t jb = 0; jb < box_b; ++jb)
    for (uint32_t ja = 0; ja < box_a; ++ja) out.push_back((ca + ja) * a.stride + (cb + jb) * b.stride);
  return out;
}

// A page's box: its groups land in the ring's order.
void expect_box_in_ring_order(const Layout &l, const OuterDim &a, const OuterDim &b) {
  const int64_t groups = l.page_size / 8;
  const int64_t h = l.heads - 1, p = l.pages - 1;
  std::vector<int64_t> want;
  for (int64_t g = 0; g < groups; ++g) want.push_back(g * 8 * l.tok + h * l.head + p * l.page);
  cr_expect(box_groups(a, b, a.box, b.box, h, p) == want, "%s: a page's box is not its groups in order", l.name);
}

}  // namespace

Test(tma_box_dims, layouts_that_merge) {
  const int64_t D = 128;
  const Layout layouts[] = {
      // bspa's pools: [pages, Hkv, page_size, D].
      {"pool p16", 16, D, 16 * D, 8 * 16 * D, 8, 6},
      {"pool p8", 8, D, 8 * D, 4 * 8 * D, 4, 9},
      {"pool p64", 64, D, 64 * D, 2 * 64 * D, 2, 3},
      {"pool p128", 128, D, 128 * D, 2 * 128 * D, 2, 3},
      // vLLM's token-major [pages, page_size, Hkv, D].
      {"token-major p16", 16, 8 * D, D, 16 * 8 * D, 8, 6},
      {"token-major p256", 256, 4 * D, D, 256 * 4 * D, 4, 2},
      // Head-major with a padded page stride: groups merge into heads, pages stand alone.
      {"head-major, padded pages", 32, D, 32 * D, 4 * 32 * D + 512, 4, 5},
      // Token-major with padded pages but one KV head: the head is left out or merged.
      {"token-major, padded, one head", 16, D, D, 16 * D + 1024, 1, 7},
      // Head stride past the page's: [Hkv, pages, page_size, D] (one tensor per head).
      {"heads outermost", 16, D, 7 * 16 * D, 16 * D, 3, 7},
  };
  for (const Layout &l : layouts) {
    OuterDim a, b;
    cr_assert(box_outer_dims(l.page_size, l.tok, l.head, l.page, l.heads, l.pages, a, b), "%s: refused", l.name);
    expect_exact(l, a, b);
    expect_box_in_ring_order(l, a, b);
  }
}

Test(tma_box_dims, layouts_that_do_not) {
  const int64_t D = 128;
  // Token-major pages with a padded page stride and several heads: no two strides chain.
  OuterDim a, b;
  cr_expect_not(box_outer_dims(16, 8 * D, D, 16 * 8 * D + 256, 8, 6, a, b), "padded token-major pages merged");
  // Token-major pages whose merged (page, group) coordinate passes 32 bits.
  cr_expect_not(box_outer_dims(16, 8 * D, D, 16 * 8 * D, 8, int64_t{1} << 30, a, b), "a coordinate past 2^31 accepted");
  // The same number of pages in a pool: the page is a dimension of its own, which fits.
  cr_expect(box_outer_dims(16, D, 16 * D, 8 * 16 * D, 8, int64_t{1} << 30, a, b), "a pool of 2^30 pages refused");
}

Test(tma_box_dims, a_box_per_group_where_nothing_merges) {
  const int64_t D = 128, heads = 8, pages = 6;
  // FlashInfer's token-major pages with K and V of a page in one block, [pages, 2,
  // page_size, Hkv, D] (K at offset 0, V at page_size x Hkv x D): no pair merges, so a box
  // is one 8-row group, at token coordinate 8 g (dimension 1), head and page as they are.
  for (int64_t page_size : {16, 32}) {
    const int64_t tok = heads * D, head = D, page = 2 * page_size * heads * D;
    OuterDim a, b;
    cr_expect_not(box_outer_dims(page_size, tok, head, page, heads, pages, a, b), "p%lld: merged",
                  (long long)page_size);
    cr_assert(group_box_outer_dims(head, page, heads, pages, a, b), "p%lld: refused", (long long)page_size);
    cr_expect(a.box == 1 && b.box == 1, "p%lld: a group's box spans one head and one page", (long long)page_size);
    for (int64_t p = 0; p < pages; ++p)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t g = 0; g < page_size / 8; ++g) {
          const int64_t ca = h * a.h + p * a.p, cb = h * b.h + p * b.p;
          cr_assert(ca >= 0 && ca < a.extent && cb >= 0 && cb < b.extent, "p%lld: (h %lld, p %lld) outside",
                    (long long)page_size, (long long)h, (long long)p);
          cr_assert_eq(8 * g * tok + ca * a.stride + cb * b.stride, 8 * g * tok + h * head + p * page,
                       "p%lld: (g %lld, h %lld, p %lld) misplaced", (long long)page_size, (long long)g, (long long)h,
                       (long long)p);
        }
  }
  OuterDim a, b;
  // 8-token pages are one group: the groups' dimension of extent 1 is left out, so they merge.
  cr_expect(box_outer_dims(8, heads * D, D, 2 * 8 * heads * D, heads, pages, a, b), "p8: refused");
  cr_expect_not(group_box_outer_dims(128, 1 << 20, 8, int64_t{1} << 32, a, b), "a page coordinate past 2^31 accepted");
}
