// The CUDA module's planner (backends/cuda/planner.cpp) without a GPU: the invariants every run
// relies on (its splits cover its chunks, fit the plan's workspace for partials, honour the forced
// knobs), the choices on the H200 shapes measured as the fastest, the tilings a plan holds, the
// launch of each run (token order, CTA pairs, persistent CTAs) and the DSV4_CUDA_FORCE hook.
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
// (`hopper` false: the mma.sync tilings only, as on sm_80..89); plan_tilings builds the same.
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
                  if (wider && p.force_sm90_narrow < 0) {
                    ASSERT_TRUE(tl.sm90);  // kernel=wgmma
                  }
                  // bf16 runs take 32-head tiles of a wider plan only when asked.
                  ASSERT_FALSE(wider && layout == kBf16 && p.force_sm90_narrow != 2 &&
                               tl.sm90_small && tiling_heads(tl) == 32);
                }
              }
            }
}

// Tokens longest first: the wgmma kernel's one-split runs of uneven tokens over more than one wave
// of CTAs (pairs count as two), or any such run when order=1 asks.
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
    forced.persistent_forced = true;  // persistent=N: items in a fixed order
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

// DSV4_PLAN_FLAG_BATCH_INVARIANT: every run of a plan takes the same tiling (the one for its head
// count, or the forced one) and the same key splits, those of the plan's largest run (max_tokens),
// whatever its token count, lengths or Q, so that a token's reduction order never depends on the
// batch; the workspace holds the partials of the largest run. (The results themselves, bit for
// bit, are the device-agnostic batch-invariance test's to check on a GPU.)
TEST(CudaPlanner, BatchInvariantPlansFixTheirTilingAndSplits) {
  for (int heads : {1, 8, 13, 16, 24, 32, 40, 64, 100, 128})
    for (uint32_t layout : {kFp8, kBf16})
      for (int chunks : {1, 3, 10, 18, 33})
        for (bool hopper : {false, true})
          for (int64_t max_tokens : {1, 4, 40, 5000})
            for (int knob = 0; knob < 6; ++knob) {
              run_planner p = make_planner(heads, chunks, layout, hopper);
              p.batch_invariant = true;
              p.max_tokens = max_tokens;
              p.sm90.resident[0] = p.sm90.resident[1] = 132;
              if (knob == 1) p.force_sm90_narrow = 1;
              if (knob == 2) p.force_sm90_narrow = 2;
              if (knob == 3) p.force_sm90_narrow = -1;
              if (knob == 4) p.min_splits = 4;
              if (knob == 5) p.max_splits = 3;
              size_t rows = 0;
              for (bool sm90_ok : {false, true}) {
                SCOPED_TRACE("heads " + std::to_string(heads) + " layout " +
                             std::to_string(layout) + " chunks " + std::to_string(chunks) +
                             " hopper " + std::to_string(hopper) + " max_tokens " +
                             std::to_string(max_tokens) + " knob " + std::to_string(knob) +
                             " sm90_ok " + std::to_string(sm90_ok));
                run_facts f;
                f.sm90_ok = sm90_ok;
                f.tokens = max_tokens;
                const run_choice largest = choose_run(p, f);
                const tiling& expected = sm90_ok && p.force_sm90_narrow > 0 && hopper && heads > 32
                                             ? p.sm90_narrow[p.force_sm90_narrow - 1]
                                         : sm90_ok && hopper ? p.sm90
                                                             : p.wide;
                EXPECT_EQ(describe(largest.tl, largest.splits),
                          describe(expected, choose_splits(p, expected, max_tokens)));
                if (max_tokens == 5000) {
                  EXPECT_EQ(largest.splits.splits, 1);
                }
                if (largest.splits.splits > 1) {
                  rows = std::max(rows, static_cast<size_t>(max_tokens * largest.splits.splits));
                }
                for (int64_t t = 1; t <= max_tokens; t += t < 80 ? 1 : 97) {
                  for (bool uniform : {false, true}) {
                    f.tokens = t;
                    f.uniform = uniform;
                    const run_choice r = choose_run(p, f);
                    ASSERT_EQ(describe(r.tl, r.splits), describe(largest.tl, largest.splits)) << t;
                    ASSERT_EQ(r.splits.chunks_per_split, largest.splits.chunks_per_split) << t;
                  }
                }
              }
              EXPECT_EQ(max_partial_rows(p, max_tokens), rows);
            }
  // The flag off keeps the batch-dependent choices (CONFIG1: 32-head split tiles at b=2); a plan
  // for b = 2 keeps its splits on the wgmma tiles, one for b >= 64 takes one split.
  run_planner p = make_planner(64, 10, kFp8, true);
  EXPECT_EQ(pick(p, 4), "sm90-mma h32 x10");
  p.batch_invariant = true;
  p.max_tokens = 4;
  EXPECT_EQ(pick(p, 1).rfind("wgmma h64 x", 0), 0u);
  EXPECT_NE(pick(p, 4), "wgmma h64 x1");
  EXPECT_EQ(pick(p, 1), pick(p, 4));
  p.max_tokens = 128;
  EXPECT_EQ(pick(p, 4), "wgmma h64 x1");
  EXPECT_EQ(pick(p, 128), "wgmma h64 x1");
}

// Persistent small-head CTAs (choose_run): 16-head tiles of staged FP8 rows, one split, from three
// waves of uniform items (8 heads at b=128, 1.9 waves on 132 SMs, stay one CTA per item; b=256
// runs persistent); persistent=N's forced CTAs take any lengths once the items outnumber them.
TEST(CudaPlanner, SmallHeadPersistentCtas) {
  run_planner p = make_planner(8, 10, kFp8, true);
  p.sm90.config.staged = true;
  p.sm90.resident[0] = 132;
  run_facts f;
  f.sm90_ok = true;
  auto persistent = [&](int64_t tokens) {
    f.tokens = tokens;
    p.max_splits = 1;  // one split, as every run this large takes
    const run_choice r = choose_run(p, f);
    EXPECT_TRUE(r.tl.sm90_small);
    EXPECT_EQ(r.ctas, r.persistent ? p.sm90.resident[0] : tokens);
    return r.persistent;
  };
  EXPECT_FALSE(persistent(256));  // b=128
  EXPECT_FALSE(persistent(3 * 132 - 1));
  EXPECT_TRUE(persistent(3 * 132));
  EXPECT_TRUE(persistent(512));  // b=256
  // Not: split runs, rows not staged (bf16, or small_stage=0), no resident count.
  p.min_splits = 2;
  p.max_splits = 2;
  f.tokens = 256;  // 512 items over two splits
  const run_choice split = choose_run(p, f);
  EXPECT_EQ(split.splits.splits, 2);
  EXPECT_FALSE(split.persistent);
  p.min_splits = 0;
  p.sm90.config.staged = false;
  EXPECT_FALSE(persistent(512));
  p.sm90.config.staged = true;
  p.sm90.resident[0] = 0;  // persistent=0
  EXPECT_FALSE(persistent(512));
  // Per-row lengths: uneven items keep the hardware's balancing, unless forced.
  p.sm90.resident[0] = 132;
  f.uniform = false;
  EXPECT_FALSE(persistent(512));
  p.sm90.resident[0] = 3;
  p.sm90.persistent_forced = true;
  EXPECT_FALSE(persistent(3));
  EXPECT_TRUE(persistent(4));
  // 32-head tiles have no persistent form.
  run_planner q = make_planner(32, 10, kFp8, true);
  q.sm90.config.staged = true;
  q.sm90.resident[0] = 132;
  f.tokens = 4096;
  f.uniform = true;
  EXPECT_FALSE(choose_run(q, f).persistent);
  // bf16 rows are never staged.
  run_planner b = make_planner(8, 10, kBf16, true);
  b.sm90.resident[0] = 132;
  EXPECT_FALSE(choose_run(b, f).persistent);
}

// The wgmma kernel's launch (choose_run): CTA pairs for 65..128 heads of FP8 rows unless a split
// run fits one wave; persistent CTAs from four waves of uniform items with a tensor-map Q.
TEST(CudaPlanner, WgmmaPairsAndPersistentCtas) {
  run_planner p = make_planner(128, 18, kFp8, true);
  p.sm90.resident[0] = 132;
  p.sm90.resident[1] = 132;
  run_facts f;
  f.sm90_ok = true;
  f.q_map = true;
  f.tokens = 256;
  run_choice r = choose_run(p, f);
  EXPECT_TRUE(r.tl.sm90);
  EXPECT_EQ(r.cluster, 2);
  EXPECT_FALSE(r.persistent);
  EXPECT_EQ(r.ctas, 512);
  f.tokens = 4 * 66;  // four waves of pairs
  r = choose_run(p, f);
  EXPECT_TRUE(r.persistent);
  EXPECT_EQ(r.ctas, 132);
  f.q_map = false;  // fp8 or unaligned Q: no tensor map, no persistent CTAs
  EXPECT_FALSE(choose_run(p, f).persistent);
  f.q_map = true;
  f.uniform = false;  // uneven items keep one CTA each, longest first
  r = choose_run(p, f);
  EXPECT_FALSE(r.persistent);
  EXPECT_TRUE(r.order);
  // A split run of one wave: every CTA converts its own chunks.
  f.uniform = true;
  f.tokens = 4;
  r = choose_run(p, f);
  if (r.tl.sm90 && r.splits.splits > 1) {
    EXPECT_EQ(r.cluster, 1);
  }
  p.force_sm90_narrow = -1;
  p.min_splits = 2;
  r = choose_run(p, f);
  ASSERT_TRUE(r.tl.sm90);
  ASSERT_GT(r.splits.splits, 1);
  EXPECT_EQ(r.cluster, 1);
  // bf16 rows are copied, not converted: no pairs.
  run_planner b = make_planner(128, 18, kBf16, true);
  b.sm90.resident[0] = b.sm90.resident[1] = 132;
  f.tokens = 256;
  r = choose_run(b, f);
  EXPECT_TRUE(r.tl.sm90);
  EXPECT_EQ(r.cluster, 1);
  // fp16 rows likewise.
  run_planner h = make_planner(128, 18, DSV4_KV_LAYOUT_FP16, true);
  h.sm90.resident[0] = h.sm90.resident[1] = 132;
  EXPECT_FALSE(h.sm90.pairs_ok);
  EXPECT_EQ(choose_run(h, f).cluster, 1);
  // 64 heads: one head group, no pairs.
  run_planner h64 = make_planner(64, 10, kFp8, true);
  h64.sm90.resident[0] = h64.sm90.resident[1] = 132;
  EXPECT_EQ(choose_run(h64, f).cluster, 1);
}

// DSV4_CUDA_FORCE: every key and value the hook takes, and a clear refusal of anything else.
TEST(CudaPlanner, ForceKnobs) {
  force_knobs k;
  char error[256];
  ASSERT_TRUE(parse_force(nullptr, &k, error, sizeof error));
  EXPECT_EQ(k.kernel, 0);
  ASSERT_TRUE(parse_force("", &k, error, sizeof error));
  ASSERT_TRUE(
      parse_force("chunk=32,kernel=small32,max_splits=3,min_splits=2,order=0,"
                  "small_stage=0,small_h8=0,persistent=7",
                  &k, error, sizeof error))
      << error;
  EXPECT_EQ(k.chunk, 32);
  EXPECT_EQ(k.kernel, kForceSmall32);
  EXPECT_EQ(k.max_splits, 3);
  EXPECT_EQ(k.min_splits, 2);
  EXPECT_EQ(k.order, 0);
  EXPECT_FALSE(k.small_stage);
  EXPECT_FALSE(k.small_h8);
  EXPECT_EQ(k.persistent, 7);
  ASSERT_TRUE(parse_force("kernel=mma", &k, error, sizeof error));
  EXPECT_EQ(k.kernel, kForceMma);
  EXPECT_EQ(k.persistent, -1);  // each parse starts from the defaults
  ASSERT_TRUE(parse_force("kernel=wgmma,order=1,chunk=64", &k, error, sizeof error));
  EXPECT_EQ(k.kernel, kForceWgmma);
  EXPECT_EQ(k.order, 1);
  for (const char* bad : {"chunk=48", "kernel=fast", "max_splits=-1", "max_splits=x", "order=2",
                          "small_stage=yes", "persistent=", "kernel", "splits=2",
                          "chunk=32,bogus=1", "max_splits=99999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_force(bad, &k, error, sizeof error));
    EXPECT_NE(std::string(error).find("DSV4_CUDA_FORCE"), std::string::npos) << error;
  }
  EXPECT_FALSE(parse_force("bogus=1", &k, error, sizeof error));
  EXPECT_NE(std::string(error).find("bogus"), std::string::npos) << error;
  EXPECT_FALSE(parse_force("order=2", &k, error, sizeof error));
  EXPECT_NE(std::string(error).find("order=2"), std::string::npos) << error;
}

// A fake of the kernel table's shared-memory hook: the H200's figures in round numbers.
size_t fake_smem(const kernel_config& c) {
  if (c.family == kWgmmaFamily) return 200 * 1024;
  if (c.family == kSmallFamily)
    return c.staged ? 226 * 1024 : (c.head_tiles == 2 ? 168 : 152) * 1024;
  return static_cast<size_t>(c.head_tiles) * 40 * 1024 + c.stage_bytes +
         (c.chunk == 32 ? 0 : 20 * 1024);
}

plan_facts hopper_facts(int heads, uint32_t layout) {
  plan_facts f;
  f.cc_major = 9;
  f.sm_count = 132;
  f.smem_optin = 227 * 1024;
  f.num_heads = heads;
  f.layout[0] = f.layout[1] = layout;
  f.width[0] = 128;
  f.width[1] = 512;
  for (bool& ok : f.family_ok) ok = true;
  f.smem_bytes = fake_smem;
  return f;
}

// The tilings a plan holds (plan_tilings), as size_plan built them before the kernel table.
TEST(CudaPlanner, PlanTilings) {
  char error[256];
  int chunk = 0;
  int chunks[2] = {0, 0};
  run_planner p;
  const force_knobs none;
  ASSERT_TRUE(plan_tilings(hopper_facts(128, kFp8), none, &p, &chunk, chunks, error, sizeof error));
  EXPECT_EQ(chunk, 64);
  EXPECT_EQ(chunks[0], 2);
  EXPECT_EQ(chunks[1], 8);
  EXPECT_EQ(p.total_chunks, 10);
  EXPECT_EQ(p.wide.head_tiles, 4);
  EXPECT_EQ(p.narrow.head_tiles, 2);
  EXPECT_TRUE(p.sm90.sm90);
  EXPECT_TRUE(p.sm90.pairs_ok);
  EXPECT_TRUE(p.sm90_narrow[0].sm90_small && p.sm90_narrow[0].config.staged);
  EXPECT_EQ(p.sm90_narrow[1].head_tiles, 2);
  EXPECT_TRUE(p.sm90_narrow[1].config.staged);  // 584 B rows: the 32-head stage holds FP8 bytes
  // 1..32 heads: the small-head kernel is the plan's own; 1..8 heads take the 8-head consumer.
  ASSERT_TRUE(plan_tilings(hopper_facts(8, kFp8), none, &p, &chunk, chunks, error, sizeof error));
  EXPECT_TRUE(p.sm90.sm90_small && p.sm90.small_heads8 && p.sm90.config.staged);
  force_knobs k;
  k.small_h8 = false;
  k.small_stage = false;
  ASSERT_TRUE(plan_tilings(hopper_facts(8, kFp8), k, &p, &chunk, chunks, error, sizeof error));
  EXPECT_TRUE(p.sm90.sm90_small && !p.sm90.small_heads8 && !p.sm90.config.staged);
  // fp16 rows are copied like bf16 rows: never staged, no pairs.
  ASSERT_TRUE(plan_tilings(hopper_facts(8, DSV4_KV_LAYOUT_FP16), none, &p, &chunk, chunks, error,
                           sizeof error));
  EXPECT_TRUE(p.sm90.sm90_small && !p.sm90.config.staged);
  ASSERT_TRUE(plan_tilings(hopper_facts(128, DSV4_KV_LAYOUT_FP16), none, &p, &chunk, chunks, error,
                           sizeof error));
  EXPECT_TRUE(p.sm90.sm90 && !p.sm90.pairs_ok);
  EXPECT_FALSE(p.sm90_narrow[0].config.staged);
  EXPECT_TRUE(p.sm90_narrow[1].forced_only);
  // kernel=mma and chunk=32: no Hopper tiling.
  k = force_knobs{};
  k.kernel = kForceMma;
  ASSERT_TRUE(plan_tilings(hopper_facts(64, kFp8), k, &p, &chunk, chunks, error, sizeof error));
  EXPECT_EQ(p.sm90.head_tiles, 0);
  k.kernel = 0;
  k.chunk = 32;
  ASSERT_TRUE(plan_tilings(hopper_facts(64, kFp8), k, &p, &chunk, chunks, error, sizeof error));
  EXPECT_EQ(chunk, 32);
  EXPECT_EQ(p.wide.head_tiles, 1);
  EXPECT_EQ(p.sm90.head_tiles, 0);
  // A device without the Hopper families (sm_80..89), and one whose shared memory holds only
  // 16-head tiles of 32 keys, and one that holds none.
  plan_facts ampere = hopper_facts(64, kFp8);
  ampere.cc_major = 8;
  ampere.family_ok[kWgmmaFamily] = ampere.family_ok[kSmallFamily] = false;
  ASSERT_TRUE(plan_tilings(ampere, none, &p, &chunk, chunks, error, sizeof error));
  EXPECT_EQ(p.sm90.head_tiles, 0);
  EXPECT_EQ(p.wide.head_tiles, 4);
  ampere.smem_optin = 90 * 1024;
  ASSERT_TRUE(plan_tilings(ampere, none, &p, &chunk, chunks, error, sizeof error));
  EXPECT_EQ(chunk, 32);
  ampere.smem_optin = 20 * 1024;
  EXPECT_FALSE(plan_tilings(ampere, none, &p, &chunk, chunks, error, sizeof error));
  EXPECT_NE(std::string(error).find("shared memory"), std::string::npos) << error;
  // persistent=N caps the Hopper tilings' resident CTAs and forces them on any lengths.
  ASSERT_TRUE(plan_tilings(hopper_facts(128, kFp8), none, &p, &chunk, chunks, error, sizeof error));
  p.sm90.resident[0] = p.sm90.resident[1] = 132;
  p.sm90_narrow[0].resident[0] = 132;
  k = force_knobs{};
  k.persistent = 5;
  apply_persistent_knob(k, &p);
  EXPECT_EQ(p.sm90.resident[0], 5);
  EXPECT_EQ(p.sm90.resident[1], 5);
  EXPECT_TRUE(p.sm90.persistent_forced);
  EXPECT_EQ(p.sm90_narrow[0].resident[0], 5);
  EXPECT_FALSE(p.wide.persistent_forced);
}

// Every case of the GPU benchmark (bench/gpu/bench_cuda.cpp) launches on an H200 as round 49's
// module launched it: the expected launches were printed by the planner and launchers of 8fc109d
// (the wgmma launcher then chose pairs and persistence, the small-head launcher persistence),
// built on the host with the same facts. The kernel table and choose_run changed no launch; in
// particular the 64/128-head b = 2 runs keep round 49's split 32-head tiles.
struct bench_launch {
  const char* name;
  int heads;
  int width[2];  // list widths (no extra list: 0)
  uint32_t layout;
  int64_t tokens;
  bool uniform;  // CONFIG3/4 have per-row extra lengths
  const char* launch;
};

std::string describe_launch(const run_choice& r) {
  std::string s = std::string(tiling_kernel(r.tl)) + " h" + std::to_string(tiling_heads(r.tl)) +
                  " x" + std::to_string(r.splits.splits) + "/" +
                  std::to_string(r.splits.chunks_per_split);
  if (r.order) s += ", ordered";
  if (r.cluster == 2) s += ", pairs";
  if (r.persistent) s += ", persistent";
  return s + ", " + std::to_string(r.ctas) + " CTAs";
}

TEST(CudaPlanner, BenchmarkCasesLaunchAsRound49) {
  // clang-format off
  const bench_launch cases[] = {
      {"CONFIG1/b:2", 64, {128, 512}, kFp8, 4, true, "sm90-mma h32 x10/1, 80 CTAs"},
      {"CONFIG1/b:64", 64, {128, 512}, kFp8, 128, true, "wgmma h64 x1/10, 128 CTAs"},
      {"CONFIG1/b:128", 64, {128, 512}, kFp8, 256, true, "wgmma h64 x1/10, 256 CTAs"},
      {"CONFIG1/b:256", 64, {128, 512}, kFp8, 512, true, "wgmma h64 x1/10, 512 CTAs"},
      {"CONFIG2/b:2", 128, {128, 1024}, kFp8, 4, true, "sm90-mma h32 x6/3, 96 CTAs"},
      {"CONFIG2/b:64", 128, {128, 1024}, kFp8, 128, true, "wgmma h64 x1/18, pairs, 256 CTAs"},
      {"CONFIG2/b:128", 128, {128, 1024}, kFp8, 256, true, "wgmma h64 x1/18, pairs, 512 CTAs"},
      {"CONFIG2/b:256", 128, {128, 1024}, kFp8, 512, true,
       "wgmma h64 x1/18, pairs, persistent, 132 CTAs"},
      {"CONFIG3/b:2", 64, {128, 1024}, kFp8, 4, false, "sm90-mma h32 x9/2, 72 CTAs"},
      {"CONFIG3/b:64", 64, {128, 1024}, kFp8, 128, false, "wgmma h64 x1/18, 128 CTAs"},
      {"CONFIG3/b:128", 64, {128, 1024}, kFp8, 256, false, "wgmma h64 x1/18, ordered, 256 CTAs"},
      {"CONFIG3/b:256", 64, {128, 1024}, kFp8, 512, false, "wgmma h64 x1/18, ordered, 512 CTAs"},
      {"CONFIG4/b:2", 128, {128, 1024}, kFp8, 4, false, "sm90-mma h32 x6/3, 96 CTAs"},
      {"CONFIG4/b:64", 128, {128, 1024}, kFp8, 128, false,
       "wgmma h64 x1/18, ordered, pairs, 256 CTAs"},
      {"CONFIG4/b:128", 128, {128, 1024}, kFp8, 256, false,
       "wgmma h64 x1/18, ordered, pairs, 512 CTAs"},
      {"CONFIG4/b:256", 128, {128, 1024}, kFp8, 512, false,
       "wgmma h64 x1/18, ordered, pairs, 1024 CTAs"},
      {"CONFIG1/heads:8/b:2", 8, {128, 512}, kFp8, 4, true, "sm90-mma h8 x10/1, 40 CTAs"},
      {"CONFIG1/heads:8/b:64", 8, {128, 512}, kFp8, 128, true, "sm90-mma h8 x1/10, 128 CTAs"},
      {"CONFIG1/heads:8/b:128", 8, {128, 512}, kFp8, 256, true, "sm90-mma h8 x1/10, 256 CTAs"},
      {"CONFIG1/heads:8/b:256", 8, {128, 512}, kFp8, 512, true,
       "sm90-mma h8 x1/10, persistent, 132 CTAs"},
      {"CONFIG1/heads:16/b:2", 16, {128, 512}, kFp8, 4, true, "sm90-mma h16 x10/1, 40 CTAs"},
      {"CONFIG1/heads:16/b:64", 16, {128, 512}, kFp8, 128, true, "sm90-mma h16 x1/10, 128 CTAs"},
      {"CONFIG1/heads:16/b:128", 16, {128, 512}, kFp8, 256, true, "sm90-mma h16 x1/10, 256 CTAs"},
      {"CONFIG1/heads:16/b:256", 16, {128, 512}, kFp8, 512, true,
       "sm90-mma h16 x1/10, persistent, 132 CTAs"},
      {"CONFIG1/heads:32/b:2", 32, {128, 512}, kFp8, 4, true, "sm90-mma h32 x10/1, 40 CTAs"},
      {"CONFIG1/heads:32/b:64", 32, {128, 512}, kFp8, 128, true, "sm90-mma h32 x1/10, 128 CTAs"},
      {"CONFIG1/heads:32/b:128", 32, {128, 512}, kFp8, 256, true, "sm90-mma h32 x1/10, 256 CTAs"},
      {"CONFIG1/heads:32/b:256", 32, {128, 512}, kFp8, 512, true, "sm90-mma h32 x1/10, 512 CTAs"},
      {"CONFIG1/cache:bf16/b:2", 64, {128, 512}, kBf16, 4, true, "sm90-mma h16 x5/2, 80 CTAs"},
      {"CONFIG1/cache:bf16/b:64", 64, {128, 512}, kBf16, 128, true, "wgmma h64 x1/10, 128 CTAs"},
      {"CONFIG1/cache:bf16/b:128", 64, {128, 512}, kBf16, 256, true, "wgmma h64 x1/10, 256 CTAs"},
      {"CONFIG1/cache:bf16/b:256", 64, {128, 512}, kBf16, 512, true, "wgmma h64 x1/10, 512 CTAs"},
      {"CONFIG2/cache:bf16/b:2", 128, {128, 1024}, kBf16, 4, true, "wgmma h64 x9/2, 72 CTAs"},
      {"CONFIG2/cache:bf16/b:64", 128, {128, 1024}, kBf16, 128, true, "wgmma h64 x1/18, 256 CTAs"},
      {"CONFIG2/cache:bf16/b:128", 128, {128, 1024}, kBf16, 256, true, "wgmma h64 x1/18, 512 CTAs"},
      {"CONFIG2/cache:bf16/b:256", 128, {128, 1024}, kBf16, 512, true,
       "wgmma h64 x1/18, persistent, 132 CTAs"},
      {"prefill/heads:64", 64, {512, 0}, kBf16, 4096, true, "wgmma h64 x1/8, persistent, 132 CTAs"},
      {"prefill/heads:128", 128, {1024, 0}, kBf16, 4096, true,
       "wgmma h64 x1/16, persistent, 132 CTAs"},
  };
  // clang-format on
  for (const bench_launch& c : cases) {
    SCOPED_TRACE(c.name);
    plan_facts f = hopper_facts(c.heads, c.layout);
    f.width[0] = c.width[0];
    f.width[1] = c.width[1];
    if (c.width[1] == 0) f.layout[1] = DSV4_KV_LAYOUT_NONE;
    char error[256];
    int chunk = 0;
    int chunks[2] = {0, 0};
    run_planner p;
    ASSERT_TRUE(plan_tilings(f, force_knobs{}, &p, &chunk, chunks, error, sizeof error)) << error;
    // What the kernels report on an H200: one CTA per SM for every Hopper configuration; the
    // persistent forms (wgmma, staged 16-head tiles) hold one wave of 132.
    for (int i = 0; tiling* t = plan_tiling_slots(p, i); ++i) {
      t->ctas_per_sm = 1;
      if (t->sm90) t->resident[0] = t->resident[1] = 132;
      if (t->sm90_small && t->config.staged &&
          small_persistent_applies(t->head_tiles, t->config.layout))
        t->resident[0] = 132;
    }
    run_facts rf;
    rf.tokens = c.tokens;
    rf.sm90_ok = true;
    rf.uniform = c.uniform;
    rf.q_map = true;  // bf16 Q, 16-byte aligned, whole batch rows
    EXPECT_EQ(describe_launch(choose_run(p, rf)), c.launch);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace dsv4
