/* Layouts: the strided rule against an independently built block mask (Phi-3-small,
 * 32 heads, 128 and 2048 block rows, TP slices), dense, CSR validation and errors. */
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* The Phi-3-small mask built column-wise: a band of local_blocks diagonals, plus every
 * column whose index is the head's vertical stripe, from its diagonal down. */
static unsigned char *build_mask(int rows, int heads_total, int head, int local, int stride, int homo) {
  unsigned char *m = calloc((size_t)rows * rows, 1);
  int step = homo ? 0 : (stride / heads_total > 1 ? stride / heads_total : 1);
  int phase = ((stride - 1 - (head * step) % stride) % stride + stride) % stride; /* kb = phase mod stride */
  for (int c = phase; c < rows; c += stride)
    for (int r = c; r < rows; ++r) m[(size_t)r * rows + c] = 1;
  for (int r = 0; r < rows; ++r)
    for (int c = r - local + 1; c <= r; ++c)
      if (c >= 0) m[(size_t)r * rows + c] = 1;
  return m;
}

static void check_strided(int rows, int homo, int heads_total, int head_begin, int num_heads, int row_step) {
  bspa_layout_strided_options o;
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.homo_head = homo;
  o.num_heads_total = heads_total;
  o.head_begin = head_begin;
  o.num_heads = num_heads;
  bspa_layout *l = NULL;
  EXPECT_OK(bspa_layout_create_strided(&l, &o));
  long visible = 0;
  for (int h = 0; h < num_heads; ++h) {
    unsigned char *m = build_mask(rows, heads_total, head_begin + h, 16, 8, homo);
    for (int r = 0; r < rows; r += (r >= rows - 20 ? 1 : row_step))
      for (int c = 0; c < rows; ++c) {
        int32_t a = -1;
        EXPECT_OK(bspa_layout_allowed(l, h, r, c, &a));
        if (a != m[(size_t)r * rows + c])
          cr_assert_fail("head %d (global %d), q_block %d, k_block %d: library %d, mask %d", h, head_begin + h, r, c, a,
                         m[(size_t)r * rows + c]);
        visible += a;
      }
    free(m);
  }
  bspa_layout_destroy(l);
  cr_log_info("strided %s, %d rows, heads %d..%d of %d: %ld visible blocks checked", homo ? "homo" : "hetero", rows,
              head_begin, head_begin + num_heads - 1, heads_total, visible);
}

Test(layout, strided_phi3_128_rows) {
  check_strided(128, 0, 32, 0, 32, 1);
  check_strided(128, 1, 32, 0, 32, 1);
  check_strided(128, 0, 32, 8, 8, 1); /* TP rank 1 of 4 */
}

Test(layout, strided_phi3_2048_rows) {
  check_strided(2048, 0, 32, 0, 32, 3);
  check_strided(2048, 0, 32, 24, 8, 29);
}

Test(layout, strided_heads_differ_and_large_stride) {
  /* vert_stride 64 over 8 heads: step 8, so heads take 8 different stripes. */
  bspa_layout_strided_options o;
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.vert_stride = 64;
  o.num_heads_total = 8;
  o.num_heads = 8;
  o.local_blocks = 1;
  bspa_layout *l = NULL;
  EXPECT_OK(bspa_layout_create_strided(&l, &o));
  for (int h = 0; h < 8; ++h) {
    int32_t a;
    /* (kb + h*8 + 1) % 64 == 0 -> kb = 63 - 8h */
    EXPECT_OK(bspa_layout_allowed(l, h, 1000, 63 - 8 * h, &a));
    cr_expect_eq(a, 1, "head %d", h);
    EXPECT_OK(bspa_layout_allowed(l, h, 1000, 62 - 8 * h, &a));
    cr_expect_eq(a, 0, "head %d", h);
  }
  bspa_layout_destroy(l);
}

Test(layout, dense_and_errors) {
  bspa_layout *l = NULL;
  EXPECT_OK(bspa_layout_create_dense(&l, 4));
  int32_t a;
  EXPECT_OK(bspa_layout_allowed(l, 3, 5000, 0, &a));
  cr_expect_eq(a, 1);
  EXPECT_OK(bspa_layout_allowed(l, 3, 5, 6, &a));
  cr_expect_eq(a, 0);
  EXPECT_STATUS(bspa_layout_allowed(l, 4, 0, 0, &a), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(bspa_layout_allowed(l, 0, -1, 0, &a), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(bspa_layout_allowed(l, 0, 0, -1, &a), BSPA_ERR_OUT_OF_RANGE);
  EXPECT_STATUS(bspa_layout_allowed(l, 0, 0, 0, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_layout_allowed(NULL, 0, 0, 0, &a), BSPA_ERR_NULL_POINTER);
  bspa_layout_destroy(l);
  bspa_layout_destroy(NULL);
  l = (bspa_layout *)1;
  EXPECT_STATUS(bspa_layout_create_dense(&l, 0), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(l == NULL);

  bspa_layout_strided_options o;
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.version = 0;
  EXPECT_STATUS(bspa_layout_create_strided(&l, &o), BSPA_ERR_VERSION);
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.head_begin = 28;
  EXPECT_STATUS(bspa_layout_create_strided(&l, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "head_begin = 28") != NULL, "%s", bspa_last_error());
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.vert_stride = 0;
  EXPECT_STATUS(bspa_layout_create_strided(&l, &o), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "vert_stride = 0") != NULL, "%s", bspa_last_error());
  EXPECT_OK(bspa_layout_strided_options_init(&o));
  o.homo_head = 2;
  EXPECT_STATUS(bspa_layout_create_strided(&l, &o), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_layout_create_strided(&l, NULL), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_layout_strided_options_init(NULL), BSPA_ERR_NULL_POINTER);
}

/* Two heads, three block rows. */
Test(layout, csr_valid_and_validation) {
  int32_t crow[2][4] = {{0, 1, 3, 5}, {5, 6, 7, 9}};
  int32_t col[9] = {0, 0, 1, 0, 2, 0, 1, 1, 2};
  bspa_layout *l = NULL;
  EXPECT_OK(bspa_layout_create_csr(&l, 2, 64, 3, &crow[0][0], col));
  int32_t a;
  EXPECT_OK(bspa_layout_allowed(l, 0, 2, 1, &a));
  cr_expect_eq(a, 0);
  EXPECT_OK(bspa_layout_allowed(l, 1, 2, 1, &a));
  cr_expect_eq(a, 1);
  EXPECT_OK(bspa_layout_allowed(l, 1, 2, 0, &a));
  cr_expect_eq(a, 0);
  EXPECT_STATUS(bspa_layout_allowed(l, 0, 3, 0, &a), BSPA_ERR_OUT_OF_RANGE);
  bspa_layout_destroy(l);

  int32_t bad_col[9];
  memcpy(bad_col, col, sizeof col);
  bad_col[4] = 1; /* head 0 row 2: {0, 1}: diagonal missing */
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, &crow[0][0], bad_col), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "head 0, row 2") != NULL, "%s", bspa_last_error());
  cr_expect(l == NULL);
  memcpy(bad_col, col, sizeof col);
  bad_col[7] = 2;
  bad_col[8] = 1; /* head 1 row 2: {2, 1}: not ascending */
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, &crow[0][0], bad_col), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "head 1, row 2, entry 1") != NULL, "%s", bspa_last_error());
  memcpy(bad_col, col, sizeof col);
  bad_col[5] = 1; /* head 1 row 0: key block 1 > row 0: not causal */
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, &crow[0][0], bad_col), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "head 1, row 0, entry 0") != NULL, "%s", bspa_last_error());
  int32_t bad_crow[2][4] = {{0, 1, 3, 5}, {4, 6, 7, 9}}; /* head 1 does not start where head 0 ends */
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, &bad_crow[0][0], col), BSPA_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(bspa_last_error(), "crow[1][0]") != NULL, "%s", bspa_last_error());
  int32_t dec_crow[2][4] = {{0, 3, 1, 5}, {5, 6, 7, 9}};
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, &dec_crow[0][0], col), BSPA_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 64, 3, NULL, col), BSPA_ERR_NULL_POINTER);
  EXPECT_STATUS(bspa_layout_create_csr(&l, 2, 0, 3, &crow[0][0], col), BSPA_ERR_INVALID_ARGUMENT);
}
