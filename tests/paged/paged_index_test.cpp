// The shared paged builders (backends/common/paged_index.h) on garbage batches, the way a GPU
// backend runs them: with no value validation first. Whatever the values, they must stay inside
// the batch arrays (run under ASan/UBSan in `make test-asan`) and emit only -1 or slots inside the
// caches, with lengths within the list widths.
#include "common/paged_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "test_util.h"

namespace {

int32_t garbage(std::mt19937_64& g) {
  static const int32_t special[] = {0,
                                    1,
                                    -1,
                                    -2,
                                    63,
                                    64,
                                    127,
                                    128,
                                    129,
                                    4096,
                                    std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min()};
  if (g() % 3 == 0) return special[g() % (sizeof(special) / sizeof(special[0]))];
  return static_cast<int32_t>(static_cast<int64_t>(g() % 4000) - 500);
}

TEST(PagedIndexBuilders, GarbageBatchesStayInBounds) {
  std::mt19937_64 g(dsv4test::case_seed("PagedIndexBuilders.GarbageBatchesStayInBounds"));
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE(dsv4test::seed_note() + ", iteration " + std::to_string(iter));
    const int32_t ratios[] = {1, 4, 128};
    dsv4::paged_geometry geo{};
    geo.ratio = ratios[g() % 3];
    geo.window = static_cast<int32_t>(1 + g() % 130);
    geo.swa_block_size = static_cast<int32_t>(1 + g() % 70);
    geo.cmp_block_size = static_cast<int32_t>(1 + g() % 66);
    geo.cmp_width =
        static_cast<int32_t>(dsv4::paged_cmp_width(geo.ratio, 1 + g() % 40, 1 + g() % 40000));
    geo.decode_threshold = static_cast<int32_t>(1 + g() % 4);
    const int32_t R = static_cast<int32_t>(g() % 6);
    const int64_t T = static_cast<int64_t>(g() % 20);
    const int32_t swa_cols = static_cast<int32_t>(1 + g() % 5);
    const int32_t cmp_cols = static_cast<int32_t>(1 + g() % 5);
    std::vector<int32_t> qsl(R + 1), seq(R), swa_bt(static_cast<size_t>(R) * swa_cols),
        cmp_bt(static_cast<size_t>(R) * cmp_cols), slots(T),
        topk(static_cast<size_t>(T) * geo.cmp_width);
    for (auto* v : {&qsl, &seq, &swa_bt, &cmp_bt, &slots, &topk})
      for (int32_t& x : *v) x = garbage(g);
    if (g() % 2 == 0) {  // half the time a plausible query_start_loc with garbage elsewhere
      qsl[0] = 0;
      for (int32_t r = 0; r < R; ++r) qsl[r + 1] = qsl[r] + static_cast<int32_t>(g() % 5);
    }
    dsv4_mod_paged_batch b{};
    b.num_reqs = R;
    b.query_start_loc = qsl.data();
    b.seq_lens = seq.data();
    b.swa_block_table = swa_bt.data();
    b.swa_bt_stride = swa_cols;
    b.swa_bt_cols = swa_cols;
    b.cmp_block_table = cmp_bt.data();
    b.cmp_bt_stride = cmp_cols;
    b.cmp_bt_cols = cmp_cols;
    b.slot_mapping = slots.data();
    b.topk_indices = topk.data();
    b.topk_stride = geo.cmp_width;
    const dsv4::paged_capacity cap{static_cast<int64_t>(g() % 5000),
                                   static_cast<int64_t>(g() % 500)};
    const int32_t num_decodes = dsv4::paged_num_decodes(b, geo.decode_threshold);
    ASSERT_GE(num_decodes, 0);
    ASSERT_LE(num_decodes, R);
    std::vector<int32_t> swa_row(geo.window), cmp_row(geo.cmp_width + 1);
    const int64_t comb_width = geo.window + dsv4::flashinfer_cmp_columns(geo.cmp_width) + 2;
    std::vector<int32_t> comb(comb_width);
    for (int64_t t = 0; t < T; ++t) {
      int32_t swa_len = -5, cmp_len = -5;
      dsv4::paged_build_token(geo, b, cap, t, swa_row.data(), 1, &swa_len, cmp_row.data(), 1,
                              &cmp_len);
      ASSERT_GE(swa_len, 0);
      ASSERT_LE(swa_len, geo.window);
      ASSERT_GE(cmp_len, 0);
      ASSERT_LE(cmp_len, geo.cmp_width);
      for (int32_t v : swa_row) ASSERT_TRUE(v == -1 || (v >= 0 && v < cap.swa)) << v;
      for (int32_t i = 0; i < geo.cmp_width; ++i)
        ASSERT_TRUE(cmp_row[i] == -1 || (cmp_row[i] >= 0 && cmp_row[i] < cap.cmp)) << cmp_row[i];
      const int32_t len =
          dsv4::paged_build_flashinfer_row(geo, b, cap, t, num_decodes, comb.data(), comb_width);
      ASSERT_GE(len, geo.window);
      ASSERT_LE(len, geo.window + geo.cmp_width);
      for (int64_t c = 0; c < comb_width; ++c) {
        const int64_t capacity = c < geo.window ? cap.swa : cap.cmp;
        ASSERT_TRUE(comb[c] == -1 || (comb[c] >= 0 && comb[c] < capacity)) << comb[c];
      }
    }
  }
}

TEST(PagedIndexBuilders, WorkspaceLayoutIsAlignedAndDisjoint) {
  for (int64_t tokens : {0, 1, 7, 1024}) {
    for (int64_t width : {0, 64, 512, 8192}) {
      const dsv4::paged_workspace_layout w = dsv4::paged_workspace(tokens, 128, width);
      EXPECT_EQ(w.swa_indices, 0u);
      EXPECT_GE(w.swa_lengths, static_cast<size_t>(tokens * 128 * 4));
      EXPECT_GE(w.cmp_indices, w.swa_lengths + static_cast<size_t>(tokens * 4));
      EXPECT_GE(w.cmp_lengths, w.cmp_indices + static_cast<size_t>(tokens * width * 4));
      EXPECT_GE(w.total, w.cmp_lengths + static_cast<size_t>(tokens * 4));
      for (size_t off : {w.swa_lengths, w.cmp_indices, w.cmp_lengths, w.total})
        EXPECT_EQ(off % dsv4::kPagedWorkspaceAlign, 0u);
    }
  }
  EXPECT_EQ(dsv4::c128a_width(1048576), 8192);
  EXPECT_EQ(dsv4::c128a_width(131072), 1024);
  EXPECT_EQ(dsv4::c128a_width(8192), 128);
  EXPECT_EQ(dsv4::c128a_width(8193), 128);
  EXPECT_EQ(dsv4::c128a_width(128 * 128 + 1), 256);
}

}  // namespace
