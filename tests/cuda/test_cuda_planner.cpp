// The CUDA module's run planner (backends/cuda/planner.cpp) without a GPU: the invariants every run
// relies on (its splits cover its chunks, fit the plan's workspace for partials, honour the tuning
// knobs), the choices on the H200 shapes that measured fastest there, and when the small-head
// kernel takes persistent CTAs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/planner.h"
#include "dsv4_backend.h"

namespace dsv4 {
namespace cuda {
namespace {

constexpr uint32_t kFp8 = DSV4_KV_LAYOUT_FP8_V4_584B;
constexpr uint32_t kBf16 = DSV4_KV_LAYOUT_BF16;

// A plan's tilings as module.cpp's size_plan builds them on a Hopper GPU with room for every kernel
// (`hopper` false: the mma.sync tilings only, as on sm_80..89).
run_planner make_planner(int heads, int chunks, uint32_t layout, bool hopper, int sms = 132) {
  run_planner p;
  p.sm_count = sms;
  p.num_heads = heads;
  p.total_chunks = chunks;
  const int tiles = mma_head_tiles(heads);
  p.wide = mma_tiles(tiles, heads, false);
  if (tiles == 4) p.narrow = mma_tiles(2, heads, true);
  if (!hopper) return p;
  if (heads <= 32) {
    p.sm90 = small_tiles(small_tile_rows(heads), heads, layout, false);
  } else {
    p.sm90 = wgmma_tiles(heads, layout);
    p.sm90_narrow[0] = small_tiles(16, heads, layout, true);
    p.sm90_narrow[1] = small_tiles(32, heads, layout, true);
  }
  return p;
}

std::string describe(const tiling& t, const split_plan& s) {
  return std::string(tiling_kernel(t)) + " h" + std::to_string(tiling_heads(t)) + " x" +
         std::to_string(s.splits);
}

// What a run of `tokens` tokens takes, as "kernel hN xS".
std::string pick(const run_planner& p, int64_t tokens, bool sm90_ok = true) {
  split_plan s;
  const tiling t = choose_tiling(p, tokens, sm90_ok, &s);
  return describe(t, s);
}

TEST(CudaPlanner, RunsCoverTheirChunksAndFitTheWorkspace) {
  std::vector<int64_t> token_counts;
  for (int64_t t = 1; t <= 64; ++t) token_counts.push_back(t);
  for (int64_t t = 65; t <= 1200; t += 13) token_counts.push_back(t);
  token_counts.push_back(5000);
  for (int sms : {20, 132})
    for (int heads : {1, 8, 13, 24, 32, 40, 64, 100, 128})
      for (uint32_t layout : {kFp8, kBf16})
        for (int chunks : {1, 3, 10, 18, 33})
          for (bool hopper : {false, true})
            for (int knob = 0; knob < 6; ++knob) {
              run_planner p = make_planner(heads, chunks, layout, hopper, sms);
              if (!hopper) p.wide.ctas_per_sm = 2;  // mma.sync CTAs may share an SM (sm_80..89)
              if (knob < 3) p.force_sm90_narrow = knob - 1;  // -1, 0, 1
              if (knob == 3) p.force_sm90_narrow = 2;
              if (knob == 4) p.max_splits = 3;
              if (knob == 5) p.min_splits = 4;
              const int64_t max_tokens = 1200;
              const size_t rows = max_partial_rows(p, max_tokens);
              for (int64_t t : token_counts) {
                for (bool sm90_ok : {false, true}) {
                  SCOPED_TRACE("sms " + std::to_string(sms) + " heads " + std::to_string(heads) +
                               " layout " + std::to_string(layout) + " chunks " +
                               std::to_string(chunks) + " hopper " + std::to_string(hopper) +
                               " knob " + std::to_string(knob) + " tokens " + std::to_string(t) +
                               " sm90_ok " + std::to_string(sm90_ok));
                  split_plan s;
                  const tiling tl = choose_tiling(p, t, sm90_ok, &s);
                  ASSERT_GT(tl.head_tiles, 0);
                  ASSERT_GE(tl.head_groups * tiling_heads(tl), heads);
                  ASSERT_GE(s.splits, 1);
                  ASSERT_GE(s.splits * s.chunks_per_split, chunks);  // every chunk has a split
                  ASSERT_LT((s.splits - 1) * s.chunks_per_split,
                            chunks);  // and every split a chunk
                  ASSERT_TRUE(p.max_splits == 0 || s.splits <= p.max_splits);
                  ASSERT_TRUE((hopper && sm90_ok) || !(tl.sm90 || tl.sm90_small));
                  if (s.splits > 1) {
                    ASSERT_LE(t, max_tokens);  // only runs a plan admits get here
                    ASSERT_LE(static_cast<size_t>(t) * s.splits, rows)
                        << "partials beyond the workspace";
                    ASSERT_LE(t * tl.head_groups * s.splits, 4LL * sms * tl.ctas_per_sm);
                  }
                  const bool wider = hopper && sm90_ok && heads > 32;
                  if (wider && p.force_sm90_narrow > 0) {
                    ASSERT_TRUE(tl.sm90_small);
                    ASSERT_EQ(tiling_heads(tl), 16 * p.force_sm90_narrow);
                  }
                  ASSERT_FALSE(wider && p.force_sm90_narrow < 0 && tl.sm90_small);
                  // bf16 runs take 32-head tiles of a wider plan only when asked.
                  ASSERT_FALSE(wider && layout == kBf16 && p.force_sm90_narrow != 2 &&
                               tl.sm90_small && tiling_heads(tl) == 32);
                }
              }
            }
}

// Tokens longest first: the wgmma kernel's one-split runs of uneven tokens over more than one wave
// of CTAs (pairs count as two), or any such run when DSV4_CUDA_ORDER=1 asks.
TEST(CudaPlanner, LongestTokensFirst) {
  for (int heads : {64, 128}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    run_planner p = make_planner(heads, 18, kFp8, true);
    p.sm90.resident[0] = 132;
    p.sm90.resident[1] = 132;
    const int64_t wave = heads > 64 ? 66 : 132;  // tokens of one wave of CTAs
    EXPECT_FALSE(order_tokens(p, p.sm90, wave, 1, true));
    EXPECT_TRUE(order_tokens(p, p.sm90, wave + 1, 1, true));
    EXPECT_FALSE(order_tokens(p, p.sm90, wave + 1, 1, false));  // uniform tokens
    EXPECT_FALSE(order_tokens(p, p.sm90, wave + 1, 2, true));   // key splits
    EXPECT_FALSE(order_tokens(p, p.wide, wave + 1, 1, true));   // the mma.sync kernel
    EXPECT_FALSE(order_tokens(p, p.sm90_narrow[1], wave + 1, 1, true));
    tiling forced = p.sm90;
    forced.persistent_forced = true;  // DSV4_CUDA_PERSISTENT: items in a fixed order
    EXPECT_FALSE(order_tokens(p, forced, wave + 1, 1, true));
    p.order = 1;
    EXPECT_TRUE(order_tokens(p, p.sm90, 1, 1, true));
    EXPECT_FALSE(order_tokens(p, p.sm90, 1, 1, false));
    p.order = -1;
    EXPECT_FALSE(order_tokens(p, p.sm90, 4 * wave, 1, true));
    p.order = 0;
    p.total_chunks = kOrderMaxChunks + 1;  // beyond the sort's buckets
    EXPECT_FALSE(order_tokens(p, p.sm90, 4 * wave, 1, true));
  }
}

// The split floor: honoured where the workspace allows it, else the modelled best of what it
// allows.
TEST(CudaPlanner, MinSplitsFloor) {
  run_planner config2 = make_planner(128, 18, kFp8, true);
  config2.min_splits = 9;  // b=2: 4 tokens; only the wgmma kernel's 8 CTAs can take 9 splits
  EXPECT_EQ(pick(config2, 4), "wgmma h64 x9");
  run_planner config1 = make_planner(64, 10, kFp8, true);
  config1.min_splits = 6;  // b=32: no tiling may split 64 tokens six ways (nor is 6 a count of 10)
  EXPECT_EQ(pick(config1, 64), "sm90-mma h32 x1");
  config1.min_splits = 0;
  EXPECT_EQ(pick(config1, 64), "sm90-mma h32 x1");
}

struct measured_pick {
  const char* shape;
  int heads, chunks;
  uint32_t layout;
  int batch;  // s_q = 2: tokens = 2 * batch
  const char* fastest;
};

// The H200's measured fastest choices (bench_cuda with forced tilings and split counts, and the
// planner's picks logged by DSV4_CUDA_LOG_RUNS). Where a case had several within the noise, the
// planner's is listed.
TEST(CudaPlanner, H200PicksTheMeasuredFastest) {
  const measured_pick cases[] = {
      {"CONFIG1", 64, 10, kFp8, 2, "sm90-mma h32 x10"},
      {"CONFIG1", 64, 10, kFp8, 8, "sm90-mma h32 x4"},
      {"CONFIG1", 64, 10, kFp8, 16, "sm90-mma h32 x2"},
      {"CONFIG1", 64, 10, kFp8, 32, "sm90-mma h32 x1"},
      {"CONFIG1", 64, 10, kFp8, 64, "wgmma h64 x1"},
      {"CONFIG1", 64, 10, kFp8, 256, "wgmma h64 x1"},
      {"CONFIG2", 128, 18, kFp8, 2, "sm90-mma h32 x6"},
      {"CONFIG2", 128, 18, kFp8, 8, "wgmma h64 x4"},
      {"CONFIG2", 128, 18, kFp8, 16, "sm90-mma h32 x1"},
      {"CONFIG2", 128, 18, kFp8, 32, "wgmma h64 x1"},
      {"CONFIG2", 128, 18, kFp8, 128, "wgmma h64 x1"},
      {"CONFIG3", 64, 18, kFp8, 2, "sm90-mma h32 x9"},
      {"CONFIG3", 64, 18, kFp8, 8, "sm90-mma h32 x4"},
      {"CONFIG3", 64, 18, kFp8, 16, "wgmma h64 x4"},
      {"CONFIG3", 64, 18, kFp8, 32, "sm90-mma h32 x1"},
      {"CONFIG3", 64, 18, kFp8, 64, "wgmma h64 x1"},
      {"bf16 CONFIG1", 64, 10, kBf16, 2, "sm90-mma h16 x5"},
      {"bf16 CONFIG2", 128, 18, kBf16, 2, "wgmma h64 x9"},
      {"bf16 CONFIG1", 64, 10, kBf16, 64, "wgmma h64 x1"},
      {"CONFIG1 h8", 8, 10, kFp8, 2, "sm90-mma h8 x10"},
      {"CONFIG1 h8", 8, 10, kFp8, 64, "sm90-mma h8 x1"},
      {"CONFIG1 h32", 32, 10, kFp8, 64, "sm90-mma h32 x1"},
  };
  for (const measured_pick& c : cases) {
    const run_planner p = make_planner(c.heads, c.chunks, c.layout, true);
    EXPECT_EQ(pick(p, 2 * c.batch), c.fastest) << c.shape << " b=" << c.batch;
  }
}

// Without the Hopper kernels (sm_80..89, or caches not 16-byte aligned) runs stay on mma.sync
// tiles.
TEST(CudaPlanner, WithoutHopperKernels) {
  const run_planner p = make_planner(64, 10, kFp8, true);
  for (int64_t t : {1, 4, 64, 512}) EXPECT_EQ(pick(p, t, false).rfind("mma h", 0), 0u) << t;
}

// Persistent small-head CTAs (attention_sm90_small_persistent): 16-head tiles of staged FP8 rows,
// one split, from three waves of uniform items (8 heads at b=128, 1.9 waves on 132 SMs, stay one
// CTA per item; b=256 runs persistent); DSV4_CUDA_PERSISTENT's forced CTAs take any lengths once
// the items outnumber them.
TEST(CudaPlanner, SmallHeadPersistentCtas) {
  static const int32_t entries[1] = {0};
  static const int32_t lengths[1] = {1};
  attention_params a{};
  a.seq_q = 2;
  a.num_heads = 8;
  a.head_tiles = 1;
  a.head_groups = 1;
  a.num_splits = 1;
  a.small_staged = 1;
  a.small_heads8 = 1;
  a.resident_ctas[0] = 132;
  a.cache[0].layout = a.cache[1].layout = kFp8;
  for (dsv4_mod_index_list& l : a.list) {
    l.indices = entries;
    l.format = DSV4_INDEX_DENSE;
  }
  auto persistent = [&](int tokens) {
    a.num_tokens = tokens;
    return attention_sm90_small_persistent(a);
  };
  EXPECT_FALSE(persistent(256));  // b=128
  EXPECT_FALSE(persistent(3 * 132 - 1));
  EXPECT_TRUE(persistent(3 * 132));
  EXPECT_TRUE(persistent(512));  // b=256
  // Not: 32-head tiles, split runs, rows not staged (bf16, or DSV4_CUDA_SMALL_STAGE=0), no resident
  // count.
  a.head_tiles = 2;
  EXPECT_FALSE(persistent(512));
  a.head_tiles = 1;
  a.num_splits = 2;
  EXPECT_FALSE(persistent(512));
  a.num_splits = 1;
  a.cache[0].layout = a.cache[1].layout = kBf16;
  EXPECT_FALSE(persistent(512));
  a.cache[0].layout = a.cache[1].layout = kFp8;
  a.small_staged = 0;
  EXPECT_FALSE(persistent(512));
  a.small_staged = 1;
  a.resident_ctas[0] = 0;  // DSV4_CUDA_PERSISTENT=0
  EXPECT_FALSE(persistent(512));
  // Per-row lengths: uneven items keep the hardware's balancing, unless forced.
  a.resident_ctas[0] = 132;
  a.list[1].lengths = lengths;
  EXPECT_FALSE(persistent(512));
  a.resident_ctas[0] = 3;
  a.persistent_forced = 1;
  EXPECT_FALSE(persistent(3));
  EXPECT_TRUE(persistent(4));
}

}  // namespace
}  // namespace cuda
}  // namespace dsv4
