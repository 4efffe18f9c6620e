// The run planner's cost model (planner.h). Units: the time of one chunk of the mma.sync kernel's
// 64-head tile (~5.5 us on an H200). Every constant was fitted to bench_cuda's cases on an H200:
// the figures beside them are what it was fitted to.
#include "planner.h"

#include <algorithm>

#include "kernels.h"

namespace dsv4 {
namespace cuda {
namespace {

// The combine of a split run (one CTA per (token, head) row, a few resident per SM, each reading
// every split's partial). ~1 chunk time at b = 2 (256..512 rows), growing by ~0.33 us a split
// (32-head tiles, CONFIG1 b=2: 2..10 splits); ~3.7 at CONFIG1 b=32 (4096 rows, 2 splits: 45.2 us
// against 27.9 modelled without it).
double combine_cost(int64_t rows, int splits) {
  return 0.5 + 0.75 * static_cast<double>(rows) / 1000.0 + 0.06 * splits;
}

// A split CTA's fp32 partials: 128 KB for 64 heads took 2.3 us (a CONFIG4 b=2 timeline),
// about 0.42 chunk times.
double partial_store_cost(const tiling& tl) { return 0.42 * tl.head_tiles * kMmaRows / 64.0; }

}  // namespace

// The cost of a split count is its number of waves (CTAs over the resident CTA slots of the device)
// times the chunks each CTA runs plus its fixed cost (Q load, first gather, epilogue) and, with
// splits, each CTA's partial stores, plus the combine pass. Splitting is limited to 4 waves of
// CTAs, which bounds the workspace for partials (max_partial_rows).
split_plan choose_splits(const run_planner& p, const tiling& tl, int64_t tokens) {
  const int total = std::max(1, p.total_chunks);
  const int64_t base = tokens * tl.head_groups;
  const int64_t sms = std::max(1, p.sm_count) * static_cast<int64_t>(std::max(1, tl.ctas_per_sm));
  split_plan best{1, total, 1e300, false};
  for (int want = 1; want <= total; ++want) {
    const int per = (total + want - 1) / want;
    const int splits = (total + per - 1) / per;
    if (splits != want) continue;                         // same as a smaller count
    if (splits > 1 && base * splits > 4 * sms) continue;  // bounds the partials' workspace
    if (p.max_splits > 0 && splits > p.max_splits) continue;
    const int64_t waves = (base * splits + sms - 1) / sms;
    double cost = static_cast<double>(waves) * (per + tl.cta_cost) * tl.chunk_cost;
    if (splits > 1)
      cost += static_cast<double>(waves) * partial_store_cost(tl) +
              combine_cost(tokens * p.num_heads, splits);
    const split_plan candidate{splits, per, cost, splits >= p.min_splits};
    if (candidate.better_than(best)) best = candidate;
  }
  return best;
}

tiling choose_tiling(const run_planner& p, int64_t tokens, bool sm90_ok, split_plan* splits) {
  const tiling& wide = sm90_ok && p.sm90.head_tiles != 0 ? p.sm90 : p.wide;
  if (sm90_ok && p.force_sm90_narrow > 0) {
    const tiling& forced = p.sm90_narrow[p.force_sm90_narrow - 1];
    if (forced.head_tiles != 0) {
      *splits = choose_splits(p, forced, tokens);
      return forced;
    }
  }
  const tiling* pick = &wide;
  *splits = choose_splits(p, wide, tokens);
  const bool small_ok = sm90_ok && p.force_sm90_narrow >= 0;
  const tiling* others[3] = {&p.narrow, small_ok ? &p.sm90_narrow[0] : nullptr,
                             small_ok ? &p.sm90_narrow[1] : nullptr};
  for (const tiling* other : others) {
    if (other == nullptr || other->head_tiles == 0 || other->forced_only) continue;
    const split_plan s = choose_splits(p, *other, tokens);
    if (s.better_than(*splits)) {
      *splits = s;
      pick = other;
    }
  }
  return *pick;
}

size_t max_partial_rows(const run_planner& p, int64_t max_tokens) {
  // Beyond 4 waves' worth of tokens on the most resident tiling no tiling splits (choose_splits).
  int ctas_per_sm = 1;
  for (const tiling* t : {&p.wide, &p.narrow, &p.sm90, &p.sm90_narrow[0], &p.sm90_narrow[1]})
    if (t->head_tiles != 0) ctas_per_sm = std::max(ctas_per_sm, t->ctas_per_sm);
  const int64_t t_max = std::min<int64_t>(max_tokens, 4LL * std::max(1, p.sm_count) * ctas_per_sm);
  size_t rows = 0;
  for (int64_t t = 1; t <= t_max; ++t) {
    for (int sm90_ok = 0; sm90_ok < 2; ++sm90_ok) {
      split_plan s;
      choose_tiling(p, t, sm90_ok != 0, &s);
      if (s.splits > 1)
        rows = std::max(rows, static_cast<size_t>(t) * static_cast<size_t>(s.splits));
    }
  }
  return rows;
}

bool order_tokens(const run_planner& p, const tiling& tl, int64_t tokens, int splits, bool uneven) {
  if (!tl.sm90 || tl.persistent_forced || p.order < 0 || !uneven || splits != 1 ||
      p.total_chunks > kOrderMaxChunks)
    return false;
  if (p.order > 0) return true;
  // CTAs (pairs count as two) the device holds at once.
  const int held = tl.head_groups == 2 ? tl.resident[1] : tl.resident[0];
  const int64_t slots =
      held > 0 ? held : static_cast<int64_t>(std::max(1, p.sm_count)) * tl.ctas_per_sm;
  return tokens * tl.head_groups > slots;
}

namespace {
int groups(int num_heads, int heads_per_cta) {
  return (num_heads + heads_per_cta - 1) / heads_per_cta;
}
}  // namespace

int mma_head_tiles(int num_heads) {
  const int tiles = std::min(kMaxHeadTiles, groups(num_heads, kMmaRows));
  return tiles == 3 ? 4 : tiles;
}

tiling mma_tiles(int head_tiles, int num_heads, bool narrow) {
  tiling t;
  t.head_tiles = head_tiles;
  t.head_groups = groups(num_heads, head_tiles * kMmaRows);
  if (narrow)
    t.chunk_cost = 0.8;  // CONFIG1 shapes: 73.3 us (32 heads) vs 91.5 us (64 heads), 10 chunks
  return t;
}

tiling wgmma_tiles(int num_heads, uint32_t layout) {
  tiling t;
  t.head_tiles = kSm90Heads / kMmaRows;
  t.head_groups = groups(num_heads, kSm90Heads);
  t.sm90 = true;
  // Per-chunk time relative to the mma.sync 64-head tile (CONFIG1 b=64: FP8 69.5 vs 88.3 us, bf16
  // 49.5 vs 81.1 us; pairs count as two CTAs, as the mma.sync kernel's two head groups do). CTA
  // pairs (> 64 heads) share each FP8 chunk's conversion: CONFIG2 b=32 (128 pairs' CTAs of 18
  // chunks, one wave) takes 69.1 us, 0.62 a chunk.
  t.chunk_cost = layout == DSV4_KV_LAYOUT_BF16 ? 0.6 : num_heads > kSm90Heads ? 0.62 : 0.78;
  t.cta_cost = 1.5;
  return t;
}

int small_tile_rows(int num_heads) { return num_heads <= kMmaRows ? kMmaRows : 2 * kMmaRows; }

tiling small_tiles(int tile_rows, int num_heads, uint32_t layout, bool narrow_of_wider) {
  const bool bf16 = layout == DSV4_KV_LAYOUT_BF16;
  tiling t;
  t.head_tiles = tile_rows / kMmaRows;
  t.head_groups = groups(num_heads, tile_rows);
  t.sm90_small = true;
  t.small_heads8 = tile_rows == kMmaRows && num_heads <= kMmaRows / 2;
  if (!narrow_of_wider) {
    // 1..32 heads (CONFIG1 shapes at b=64 against the mma.sync kernel).
    t.chunk_cost = 0.45;
    t.cta_cost = 1.5;
  } else if (tile_rows == kMmaRows) {
    // 16-head tiles of a wider plan. FP8: a CTA's start is ~6 us (2.1 chunks). bf16 rows are
    // copied, not converted, so their tiles keep a start of 0.5, fitted at b = 2 (bf16 CONFIG1 b=2:
    // 15.0 us on these tiles against 18.0 on the wgmma kernel).
    t.chunk_cost = 0.52;
    t.cta_cost = bf16 ? 0.5 : 2.1;
  } else {
    // 32-head tiles of a wider plan: ~2.8 us a chunk (0.52), ~2.6 us (0.47) where three or four
    // head groups gather the same rows and find them in the L2; a start of ~6 us. On them CONFIG4
    // b=2 takes 19.6 us (6 splits, 20.3 on the other tilings), CONFIG1 b=32 36.2 (one split, 45.3
    // on the wgmma kernel with two). They gain nothing on
    // bf16 caches (bf16 CONFIG1 / CONFIG2 b=2: 14.6 / 18.6 us against 13.8 / 17.7 on the other
    // tilings), which take them only when DSV4_CUDA_KERNEL=small32 asks.
    t.chunk_cost = num_heads > 4 * kMmaRows ? 0.47 : 0.52;
    t.cta_cost = 2.1;
    t.forced_only = bf16;
  }
  return t;
}

// Persistent small-head CTAs pay at four waves of work items but not at two (H200, 8 heads: 3 %
// faster at b=256, 3.9 waves; 3.5 % slower at b=128, 1.9 waves, where the item changes cost more
// than the CTA starts they save); they are taken from three waves on, for 16-head tiles only:
// 32-head tiles, whose item change loads Q and whose persistent form spilled, were 10 % slower at
// b=256 (docs/tried.md, D6).
constexpr int64_t kSmallPersistentWaves = 3;
bool attention_sm90_small_persistent(const attention_params& p) {
  const int64_t items = item_count(p);
  const int64_t resident = p.resident_ctas[0];
  if (!small_persistent_applies(p.head_tiles, p.cache[0].layout) || p.small_staged == 0 ||
      p.num_splits != 1 || resident <= 0)
    return false;
  return p.persistent_forced != 0 ? items > resident
                                  : uniform_items(p) && items >= kSmallPersistentWaves * resident;
}

const char* tiling_kernel(const tiling& tl) {
  return tl.sm90 ? "wgmma" : tl.sm90_small ? "sm90-mma" : "mma";
}
int tiling_heads(const tiling& tl) {
  return tl.sm90 ? kSm90Heads : tl.small_heads8 ? kMmaRows / 2 : tl.head_tiles * kMmaRows;
}

}  // namespace cuda
}  // namespace dsv4
