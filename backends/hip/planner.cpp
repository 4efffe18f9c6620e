// The HIP module's planner (planner.h). Costs are in units of one chunk of one block; the model
// only ranks choices, so its constants are the kernels' operation counts, not measurements.
#include "planner.h"

#include <algorithm>

namespace dsv4 {
namespace hip {
namespace {

constexpr int64_t kMaxSplitWaves = 4;  // splitting stops at 4 waves of blocks (bounds partials)

// A head group's cost per chunk, in heads: its heads' FMAs plus the dequantisation it shares among
// them (FP8 rows: ~3 operations per value against 2 x 2 FMAs per value and head; 16-bit rows ~1).
double group_cost(int heads_per_cta, const dsv4_mod_plan& plan, kernel_family f) {
  bool fp8 = false;
  for (const dsv4_mod_cache_plan& c : plan.cache) fp8 = fp8 || layout_is_fp8(c.layout);
  const double stage = fp8 ? 1.5 : 0.5;
  // The matrix cores do the products ~8x faster than SIMT lanes: the dequantisation weighs more.
  return f == kernel_family::mfma ? heads_per_cta / 8.0 + stage : heads_per_cta + stage;
}

bool fits(const dsv4_mod_plan& plan, const device_caps& caps, kernel_family f, int hg) {
  return make_smem_map(hg, plan.head_dim_qk, f).total <=
         static_cast<size_t>(caps.max_shared_per_block);
}

// How well `blocks` resident blocks of `threads` threads keep a compute unit busy: the kernels
// stop at four barriers per chunk and wait on row loads there; a few hundred resident lanes per
// compute unit hide that (an estimate, not a measurement: DSV4_HIP_HEADS_PER_CTA overrides).
double occupancy_efficiency(int blocks, int threads) {
  const double lanes = static_cast<double>(std::max(1, blocks)) * threads;
  return std::min(1.0, 0.7 + lanes / 1280.0);
}

}  // namespace

bool mfma_serves(const dsv4_mod_plan& plan) {
  for (const dsv4_mod_cache_plan& c : plan.cache)
    if (c.layout == DSV4_KV_LAYOUT_FP16) return false;  // fp16 values are not bf16-exact
  return true;
}

tiling choose_tiling(const dsv4_mod_plan& plan, const device_caps& caps, const plan_knobs& knobs,
                     occupancy_fn occupancy, void* user) {
  // The matrix-core kernel where the device has it, the plan's rows are bf16-exact and the plan
  // does not ask for the reference kernel (the SIMT kernel's fp32 products are the second
  // opinion); the SIMT kernel otherwise, or when no MFMA head group fits.
  const bool mfma_ok = caps.mfma && caps.wave_size == 64 && mfma_serves(plan);
  tiling none;
  none.family = kernel_family::simt;
  if (knobs.force_family == 1 && !mfma_ok) {
    none.why = "DSV4_HIP_KERNEL=mfma, but this device or plan has no matrix-core kernel";
    return none;
  }
  const bool reference = (plan.flags & DSV4_PLAN_FLAG_REFERENCE_KERNEL) != 0;
  kernel_family order[2] = {kernel_family::simt, kernel_family::simt};
  int families = 1;
  if (knobs.force_family == 1) {
    order[0] = kernel_family::mfma;
  } else if (mfma_ok && !reference && knobs.force_family != 0) {
    order[0] = kernel_family::mfma;
    families = 2;
  }
  for (int fi = 0; fi < families; ++fi) {
    const kernel_family family = order[fi];
    tiling best;
    best.family = family;
    double best_cost = 0.0;
    auto consider = [&](int hg) {
      if (knobs.heads_per_cta != 0 && hg != knobs.heads_per_cta) return;
      if (!fits(plan, caps, family, hg)) return;
      const int blocks = occupancy(user, family, hg);
      if (blocks <= 0) return;
      const int groups = (plan.num_heads + hg - 1) / hg;
      const double cost = groups * group_cost(hg, plan, family) /
                          occupancy_efficiency(blocks, attention_threads(family, hg));
      if (best.heads_per_cta != 0 && cost >= best_cost) return;
      best_cost = cost;
      best.heads_per_cta = hg;
      best.head_groups = groups;
      best.blocks_per_cu = blocks;
    };
    if (family == kernel_family::mfma) {
      for (int hg : kMfmaHeadGroups) consider(hg);
    } else {
      for (int hg : kSimtHeadGroups) consider(hg);
    }
    if (best.heads_per_cta == 0) continue;
    best.threads = attention_threads(family, best.heads_per_cta);
    best.smem_bytes = make_smem_map(best.heads_per_cta, plan.head_dim_qk, family).total;
    for (int i = 0; i < 2; ++i) best.chunks[i] = (plan.list_width[i] + kChunkKeys - 1) / kChunkKeys;
    return best;
  }
  none.why = knobs.heads_per_cta != 0
                 ? "DSV4_HIP_HEADS_PER_CTA names no head group of the kernel that fits this device"
                 : "no head group fits the device's shared memory per block";
  return none;
}

// The cost of a split count: the waves of blocks times the chunks each runs plus its fixed start
// (Q load, first gather, epilogue), plus, when split, the merge pass (a launch, then one read of
// every partial row: about half a chunk per wave of blocks).
split_choice choose_splits(const tiling& t, const device_caps& caps, int64_t tokens,
                           bool batch_invariant, int max_splits) {
  const int total = std::max(1, t.chunks[0] + t.chunks[1]);
  split_choice best{1, total};
  if (batch_invariant || tokens <= 0) return best;
  const int64_t base = tokens * t.head_groups;
  const int64_t resident =
      std::max<int64_t>(1, static_cast<int64_t>(caps.compute_units) * std::max(1, t.blocks_per_cu));
  double best_cost = 1e300;
  for (int want = 1; want <= total; ++want) {
    const int per = (total + want - 1) / want;
    const int splits = (total + per - 1) / per;
    if (splits != want) continue;  // the same as a smaller count
    if (splits > 1 && base * splits > kMaxSplitWaves * resident) break;
    if (max_splits > 0 && splits > max_splits) break;
    const int64_t blocks = base * splits;
    const double waves = static_cast<double>((blocks + resident - 1) / resident);
    double cost = waves * (per + 1.5);
    if (splits > 1) cost += 1.0 + 0.5 * static_cast<double>(blocks) / static_cast<double>(resident);
    if (cost < best_cost) {
      best_cost = cost;
      best = split_choice{splits, per};
    }
  }
  return best;
}

size_t max_partial_rows(const tiling& t, const device_caps& caps, int64_t max_tokens,
                        bool batch_invariant, int max_splits) {
  if (batch_invariant) return 0;
  const int64_t resident =
      std::max<int64_t>(1, static_cast<int64_t>(caps.compute_units) * std::max(1, t.blocks_per_cu));
  // Beyond kMaxSplitWaves waves of unsplit blocks no run splits.
  const int64_t t_max = std::min<int64_t>(max_tokens, kMaxSplitWaves * resident);
  size_t rows = 0;
  for (int64_t n = 1; n <= t_max; ++n) {
    const split_choice s = choose_splits(t, caps, n, false, max_splits);
    if (s.splits > 1) rows = std::max(rows, static_cast<size_t>(n) * static_cast<size_t>(s.splits));
  }
  return rows;
}

workspace_layout plan_workspace(const dsv4_mod_plan& plan, size_t partial_rows) {
  auto align = [](size_t n) {
    return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  };
  workspace_layout w;
  w.lists_bytes = static_cast<size_t>(plan.lists.bytes);
  size_t end = align(w.lists_bytes);
  if (partial_rows > 0) {
    const size_t heads = static_cast<size_t>(plan.num_heads);
    w.partial_o = end;
    end += align(partial_rows * heads * kHeadDim * sizeof(float));
    w.partial_lse = end;
    end += align(partial_rows * heads * sizeof(float));
    w.partial_max = end;
    end += align(partial_rows * heads * sizeof(float));
  }
  w.total = end > 0 ? end + kWorkspaceAlign : 0;
  return w;
}

}  // namespace hip
}  // namespace dsv4
