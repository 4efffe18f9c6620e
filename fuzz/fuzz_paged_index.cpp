// The paged-mode list builders of backends/common/paged_index.h as a GPU thread runs them: the
// batch description's values are not validated (GPU backends never read them back), only its
// shapes, as the host does. Every array is exactly as long as the batch says, so ASan reports any
// read beyond it. Invariants: every slot built is -1 or inside its cache; lengths stay within the
// widths and entries past a length are -1; the FlashInfer row holds the two lists side by side.
#include <algorithm>
#include <vector>

#include "common/paged_index.h"
#include "fuzz_support.h"

using namespace dsv4fuzz;

namespace {

std::vector<int32_t> values(FuzzedDataProvider& in, size_t n, int32_t lo, int32_t hi) {
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = pick32(in, lo, hi);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  dsv4::paged_geometry g{};
  g.ratio = in.PickValueInArray<int32_t>({1, 4, 128, 0, -3});
  g.window = in.ConsumeIntegralInRange<int32_t>(1, 300);
  g.swa_block_size = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(1, 70)
                                      : in.ConsumeIntegralInRange<int32_t>(1, INT32_MAX);
  g.cmp_block_size = in.ConsumeIntegralInRange<int32_t>(1, 70);
  g.cmp_width = g.ratio == 4     ? in.ConsumeIntegralInRange<int32_t>(1, 64)
                : g.ratio == 128 ? 128 * in.ConsumeIntegralInRange<int32_t>(1, 3)
                                 : 0;
  g.decode_threshold = in.ConsumeIntegralInRange<int32_t>(1, 8);
  dsv4::paged_capacity cap{};
  cap.swa = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 4096) : pick(in, 0, INT64_MAX);
  cap.cmp = g.cmp_width > 0 ? (in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 4096)
                                                : pick(in, 0, INT64_MAX))
                            : 0;
  if (cap.swa < 0) cap.swa = 0;
  if (cap.cmp < 0) cap.cmp = 0;

  // The batch: shapes as the host checks them, values anything (mostly plausible).
  const int32_t R = in.ConsumeIntegralInRange<int32_t>(0, 8);
  const int64_t T = in.ConsumeIntegralInRange<int64_t>(0, 40);
  std::vector<int32_t> qsl(static_cast<size_t>(R) + 1);
  int64_t at = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? pick32(in, -3, 3) : 0;
  for (int32_t& x : qsl) {
    x = static_cast<int32_t>(at);
    at = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? pick32(in, -8, 64)
                                                   : x + in.ConsumeIntegralInRange<int64_t>(0, 12);
    at = std::min<int64_t>(at, INT32_MAX);
  }
  const std::vector<int32_t> seq_lens = values(in, static_cast<size_t>(R), 0, 5000);
  const int32_t swa_cols = in.ConsumeIntegralInRange<int32_t>(1, 40);
  const int64_t swa_stride = swa_cols + in.ConsumeIntegralInRange<int64_t>(0, 3);
  const std::vector<int32_t> swa_bt = values(in, static_cast<size_t>(R * swa_stride), -1, 64);
  const int32_t cmp_cols = in.ConsumeIntegralInRange<int32_t>(1, 40);
  const int64_t cmp_stride = cmp_cols + in.ConsumeIntegralInRange<int64_t>(0, 3);
  const std::vector<int32_t> cmp_bt = g.ratio > 1
                                          ? values(in, static_cast<size_t>(R * cmp_stride), -1, 64)
                                          : std::vector<int32_t>();
  const std::vector<int32_t> slot_mapping = values(in, static_cast<size_t>(T), -1, 4096);
  const int64_t topk_stride = g.cmp_width + in.ConsumeIntegralInRange<int64_t>(0, 3);
  const std::vector<int32_t> topk = g.ratio == 4
                                        ? values(in, static_cast<size_t>(T * topk_stride), -1, 1200)
                                        : std::vector<int32_t>();

  dsv4_mod_paged_batch b{};
  b.num_reqs = R;
  b.query_start_loc = qsl.data();
  b.seq_lens = seq_lens.data();
  b.swa_block_table = swa_bt.data();
  b.swa_bt_stride = swa_stride;
  b.swa_bt_cols = swa_cols;
  b.cmp_block_table = g.ratio > 1 ? cmp_bt.data() : nullptr;
  b.cmp_bt_stride = cmp_stride;
  b.cmp_bt_cols = cmp_cols;
  b.slot_mapping = slot_mapping.data();
  b.topk_indices = g.ratio == 4 ? topk.data() : nullptr;
  b.topk_stride = topk_stride;

  const int32_t decodes = dsv4::paged_num_decodes(b, g.decode_threshold);
  FUZZ_CHECK(decodes >= 0 && decodes <= R, "decode count outside [0, R]");
  const int64_t W = g.window, CW = g.cmp_width;
  std::vector<int32_t> swa(static_cast<size_t>(W)), cmp(static_cast<size_t>(CW));
  const int64_t fi_width =
      W + dsv4::flashinfer_cmp_columns(CW) + in.ConsumeIntegralInRange<int64_t>(0, 3);
  std::vector<int32_t> combined(static_cast<size_t>(fi_width));
  for (int64_t t = 0; t < T; ++t) {
    int32_t swa_len = -1, cmp_len = -1;
    const dsv4::paged_token k = dsv4::paged_build_token(g, b, cap, t, swa.data(), 1, &swa_len,
                                                        CW > 0 ? cmp.data() : nullptr, 1, &cmp_len);
    const std::string where = "token " + std::to_string(t);
    FUZZ_CHECK(swa_len >= 0 && swa_len <= W, where + ": SWA length " + std::to_string(swa_len));
    FUZZ_CHECK(cmp_len >= 0 && cmp_len <= CW,
               where + ": compressed length " + std::to_string(cmp_len));
    FUZZ_CHECK(k.valid || (swa_len == 0 && cmp_len == 0), where + ": a padding token has a list");
    for (int64_t j = 0; j < W; ++j) {
      const int32_t s = swa[static_cast<size_t>(j)];
      FUZZ_CHECK(s == -1 || (s >= 0 && s < cap.swa), where + ": SWA slot outside the cache");
      FUZZ_CHECK(j < swa_len || s == -1, where + ": SWA entry past the length");
    }
    for (int64_t j = 0; j < CW; ++j) {
      const int32_t s = cmp[static_cast<size_t>(j)];
      FUZZ_CHECK(s == -1 || (s >= 0 && s < cap.cmp), where + ": compressed slot outside the cache");
      if (g.ratio == 128)
        FUZZ_CHECK(j < cmp_len || s == -1, where + ": C128A entry past the length");
    }
    const int32_t len =
        dsv4::paged_build_flashinfer_row(g, b, cap, t, decodes, combined.data(), fi_width);
    FUZZ_CHECK(len >= W && len <= W + CW, where + ": FlashInfer length " + std::to_string(len));
    for (int64_t j = 0; j < fi_width; ++j) {
      const int32_t s = combined[static_cast<size_t>(j)];
      if (j < W)
        FUZZ_CHECK(s == swa[static_cast<size_t>(j)], where + ": FlashInfer SWA column differs");
      else if (j < W + CW)
        FUZZ_CHECK(s == -1 || s == cmp[static_cast<size_t>(j - W)],
                   where + ": FlashInfer compressed column differs");
      else
        FUZZ_CHECK(s == -1, where + ": FlashInfer column past the lists is not -1");
    }
  }
  return 0;
}
