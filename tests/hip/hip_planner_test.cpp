// The HIP module's planner (backends/hip/planner.cpp) without a GPU: which kernel and head group a
// plan takes on AMD-like (64 KB shared memory, wave64, matrix cores or not) and NVIDIA-like
// devices, that every choice fits the device, and that key splits cover the chunks, stay within
// the workspace the plan reserves, and never happen for batch-invariant plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dsv4_backend.h"
#include "hip/geometry.h"
#include "hip/planner.h"

namespace dsv4 {
namespace hip {
namespace {

dsv4_mod_plan make_plan(int heads, uint32_t layout, int width0, int width1, int max_tokens = 1024,
                        uint32_t flags = 0) {
  dsv4_mod_plan p{};
  p.struct_size = sizeof p;
  p.mode = DSV4_MODE_EXPLICIT;
  p.flags = flags;
  p.num_heads = heads;
  p.head_dim_qk = layout == DSV4_KV_LAYOUT_FP8_V32_656B ? kV32HeadDimQK : kHeadDim;
  p.head_dim_v = kHeadDim;
  p.max_tokens = max_tokens;
  p.cache[0].layout = layout;
  p.cache[1].layout = width1 > 0 ? layout : DSV4_KV_LAYOUT_NONE;
  p.list_width[0] = width0;
  p.list_width[1] = width1;
  return p;
}

device_caps amd_cdna() {  // an MI300X-like device: 304 CUs, 64 KB LDS, wave64, matrix cores
  device_caps c;
  c.compute_units = 304;
  c.max_shared_per_block = 65536;
  c.wave_size = 64;
  c.mfma = true;
  return c;
}

device_caps amd_rdna() {
  device_caps c;
  c.compute_units = 48;
  c.max_shared_per_block = 65536;
  c.wave_size = 32;
  return c;
}

device_caps h200() {
  device_caps c;
  c.compute_units = 132;
  c.max_shared_per_block = 232448;
  c.wave_size = 32;
  return c;
}

// Occupancy as shared memory alone allows (the runtime also counts registers).
struct occupancy_model {
  const dsv4_mod_plan* plan;
  const device_caps* caps;
  int lds_per_cu;
};
int model_occupancy(void* user, kernel_family f, int hg) {
  const occupancy_model* m = static_cast<const occupancy_model*>(user);
  const size_t smem = make_smem_map(hg, m->plan->head_dim_qk, f).total;
  return static_cast<int>(static_cast<size_t>(m->lds_per_cu) / smem);
}

tiling choose(const dsv4_mod_plan& p, const device_caps& c, plan_knobs knobs = plan_knobs{}) {
  occupancy_model m{&p, &c, std::max(c.max_shared_per_block, 65536)};
  return choose_tiling(p, c, knobs, model_occupancy, &m);
}

TEST(HipPlanner, EveryHeadCountGetsAKernelThatFitsTheDevice) {
  for (const device_caps& caps : {amd_cdna(), amd_rdna(), h200()}) {
    for (uint32_t layout : {DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP16, DSV4_KV_LAYOUT_FP8_V4_584B,
                            DSV4_KV_LAYOUT_FP8_V32_656B, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR}) {
      for (int heads = 1; heads <= 128; ++heads) {
        const dsv4_mod_plan p = make_plan(heads, layout, 128, 512);
        const tiling t = choose(p, caps);
        ASSERT_NE(t.heads_per_cta, 0) << heads << " heads, layout " << layout << ": " << t.why;
        EXPECT_LE(t.smem_bytes, static_cast<size_t>(caps.max_shared_per_block));
        EXPECT_EQ(t.head_groups, (heads + t.heads_per_cta - 1) / t.heads_per_cta);
        EXPECT_EQ(t.threads, attention_threads(t.family, t.heads_per_cta));
        EXPECT_EQ(t.chunks[0], 128 / kChunkKeys);
        EXPECT_EQ(t.chunks[1], 512 / kChunkKeys);
        // Padded heads only where another head group would cost a whole pass over the rows. On the
        // matrix cores a padded head costs little next to that pass (its products), so a block
        // there may be up to half padding; never a whole padded group.
        const int padded = t.head_groups * t.heads_per_cta - heads;
        EXPECT_LT(padded, t.heads_per_cta) << heads << " heads in groups of " << t.heads_per_cta;
        if (t.family == kernel_family::simt) {
          EXPECT_LE(padded, std::max(7, heads / 2))
              << heads << " heads in groups of " << t.heads_per_cta;
        }
      }
    }
  }
}

TEST(HipPlanner, HeadCountsOfTheModelsRunWithoutPaddedHeads) {
  for (const device_caps& caps : {amd_rdna(), h200()}) {
    for (int heads : {8, 16, 24, 32, 48, 64, 96, 128}) {
      const tiling t = choose(make_plan(heads, DSV4_KV_LAYOUT_FP8_V4_584B, 128, 512), caps);
      EXPECT_EQ(t.head_groups * t.heads_per_cta, heads) << heads << " heads";
    }
  }
}

TEST(HipPlanner, MatrixCoresServeBf16ExactRowsUnlessTheReferenceKernelIsAsked) {
  const device_caps cdna = amd_cdna();
  EXPECT_EQ(choose(make_plan(64, DSV4_KV_LAYOUT_FP8_V4_584B, 128, 512), cdna).family,
            kernel_family::mfma);
  EXPECT_EQ(choose(make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 0), cdna).family, kernel_family::mfma);
  // fp16 values are not bf16-exact: the SIMT kernel's fp32 products.
  EXPECT_EQ(choose(make_plan(64, DSV4_KV_LAYOUT_FP16, 128, 0), cdna).family, kernel_family::simt);
  EXPECT_EQ(
      choose(make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 0, 1024, DSV4_PLAN_FLAG_REFERENCE_KERNEL),
             cdna)
          .family,
      kernel_family::simt);
  // No matrix cores on RDNA or NVIDIA; forcing them there is refused with a reason.
  EXPECT_EQ(choose(make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 0), amd_rdna()).family,
            kernel_family::simt);
  plan_knobs force;
  force.force_family = 1;
  const tiling refused = choose(make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 0), h200(), force);
  EXPECT_EQ(refused.heads_per_cta, 0);
  EXPECT_NE(std::string(refused.why).find("mfma"), std::string::npos);
  plan_knobs simt;
  simt.force_family = 0;
  EXPECT_EQ(choose(make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 0), cdna, simt).family,
            kernel_family::simt);
}

TEST(HipPlanner, HeadGroupKnobPicksOnlyFittingGroups) {
  plan_knobs k;
  k.heads_per_cta = 32;
  const dsv4_mod_plan p = make_plan(64, DSV4_KV_LAYOUT_FP8_V4_584B, 128, 512);
  EXPECT_EQ(choose(p, h200(), k).heads_per_cta, 32);
  // 32 SIMT heads need ~103 KB: more than an AMD block has.
  plan_knobs simt32 = k;
  simt32.force_family = 0;
  const tiling none = choose(p, amd_rdna(), simt32);
  EXPECT_EQ(none.heads_per_cta, 0);
  EXPECT_NE(std::string(none.why).find("DSV4_HIP_HEADS_PER_CTA"), std::string::npos);
}

TEST(HipPlanner, SplitsCoverTheChunksAndFitTheWorkspace) {
  for (const device_caps& caps : {amd_cdna(), amd_rdna(), h200()}) {
    for (int heads : {1, 8, 64, 128}) {
      for (int width1 : {0, 512, 8192}) {
        const dsv4_mod_plan p = make_plan(heads, DSV4_KV_LAYOUT_FP8_V4_584B, 128, width1, 2048);
        const tiling t = choose(p, caps);
        const size_t rows = max_partial_rows(t, caps, p.max_tokens, false, 0);
        const int total = t.chunks[0] + t.chunks[1];
        for (int64_t tokens : {1, 2, 3, 7, 64, 128, 257, 1000, 2048}) {
          const split_choice s = choose_splits(t, caps, tokens, false, 0);
          ASSERT_GE(s.splits, 1);
          EXPECT_GE(static_cast<int64_t>(s.splits) * s.chunks_per_split, total);
          EXPECT_LT(static_cast<int64_t>(s.splits - 1) * s.chunks_per_split, total)
              << "an empty split";
          if (s.splits > 1) {
            EXPECT_LE(static_cast<size_t>(tokens) * s.splits, rows) << tokens << " tokens";
          }
          EXPECT_EQ(choose_splits(t, caps, tokens, true, 0).splits, 1) << "batch invariant";
          EXPECT_LE(choose_splits(t, caps, tokens, false, 2).splits, 2) << "DSV4_HIP_MAX_SPLITS";
        }
        // Few tokens split their keys over the device; a full device does not split.
        if (total >= 8) {
          EXPECT_GT(choose_splits(t, caps, 1, false, 0).splits, 1);
        }
        EXPECT_EQ(choose_splits(t, caps, 64L * caps.compute_units * std::max(1, t.blocks_per_cu),
                                false, 0)
                      .splits,
                  1);
      }
    }
  }
}

TEST(HipPlanner, WorkspaceHoldsListsThenAlignedPartials) {
  dsv4_mod_plan p = make_plan(64, DSV4_KV_LAYOUT_BF16, 128, 512);
  p.lists.bytes = 1000;
  const workspace_layout w = plan_workspace(p, 10);
  EXPECT_EQ(w.lists_bytes, 1000u);
  EXPECT_EQ(w.partial_o % kWorkspaceAlign, 0u);
  EXPECT_GE(w.partial_o, 1000u);
  EXPECT_GE(w.partial_lse, w.partial_o + 10u * 64 * kHeadDim * 4);
  EXPECT_GE(w.partial_max, w.partial_lse + 10u * 64 * 4);
  EXPECT_GE(w.total, w.partial_max + 10u * 64 * 4 + kWorkspaceAlign);
  EXPECT_EQ(plan_workspace(make_plan(8, DSV4_KV_LAYOUT_BF16, 128, 0), 0).total, 0u);
}

}  // namespace
}  // namespace hip
}  // namespace dsv4
