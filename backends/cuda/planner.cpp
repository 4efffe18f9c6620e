// The run planner's cost model (planner.h). Units: the time of one chunk of the mma.sync kernel's
// 64-head tile (~5.5 us on an H200). Every constant was fitted to bench_cuda's cases on an H200:
// the figures beside them are what it was fitted to.
#include "planner.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
  const tiling* forced = nullptr;
  if (sm90_ok && p.force_sm90_narrow > 0 && p.sm90_narrow[p.force_sm90_narrow - 1].head_tiles != 0)
    forced = &p.sm90_narrow[p.force_sm90_narrow - 1];
  if (p.batch_invariant) {
    // The plan's tiling for its head count (or the one kernel= forces) and the key splits its
    // largest run takes: a token's sums then run over the same chunk ranges (set by the list
    // widths), in one CTA shape, merged in split order, whatever else the run holds. Plans of
    // many tokens get one split, which costs nothing where runs fill the device; plans of few
    // tokens keep the split runs' speed at every batch size up to theirs.
    const tiling& t = forced != nullptr ? *forced : wide;
    *splits = choose_splits(p, t, p.max_tokens);
    return t;
  }
  if (forced != nullptr) {
    *splits = choose_splits(p, *forced, tokens);
    return *forced;
  }
  const tiling* pick = &wide;
  *splits = choose_splits(p, wide, tokens);
  const bool small_ok = sm90_ok && p.force_sm90_narrow >= 0;
  // kernel=wgmma: the runs the wgmma kernel serves take it, whatever the splits.
  const bool wgmma_only = sm90_ok && p.force_sm90_narrow < 0 && p.sm90.head_tiles != 0;
  const tiling* others[3] = {wgmma_only ? nullptr : &p.narrow,
                             small_ok ? &p.sm90_narrow[0] : nullptr,
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
  t.config.family = kMmaFamily;
  t.config.head_tiles = head_tiles;
  if (narrow)
    t.chunk_cost = 0.8;  // CONFIG1 shapes: 73.3 us (32 heads) vs 91.5 us (64 heads), 10 chunks
  return t;
}

tiling wgmma_tiles(int num_heads, uint32_t layout) {
  tiling t;
  t.head_tiles = kSm90Heads / kMmaRows;
  t.head_groups = groups(num_heads, kSm90Heads);
  t.config.family = kWgmmaFamily;
  t.config.head_tiles = t.head_tiles;
  t.config.layout = layout;
  t.sm90 = true;
  // 16-bit rows (bf16, fp16) are copied, not converted: nothing for a pair to share, and cheaper.
  const bool copied = layout_copied(layout);
  t.pairs_ok = !copied;
  // Per-chunk time relative to the mma.sync 64-head tile (CONFIG1 b=64: FP8 69.5 vs 88.3 us, bf16
  // 49.5 vs 81.1 us; pairs count as two CTAs, as the mma.sync kernel's two head groups do). CTA
  // pairs (> 64 heads) share each FP8 chunk's conversion: CONFIG2 b=32 (128 pairs' CTAs of 18
  // chunks, one wave) takes 69.1 us, 0.62 a chunk.
  t.chunk_cost = copied ? 0.6 : num_heads > kSm90Heads ? 0.62 : 0.78;
  t.cta_cost = 1.5;
  return t;
}

int small_tile_rows(int num_heads) { return num_heads <= kMmaRows ? kMmaRows : 2 * kMmaRows; }

tiling small_tiles(int tile_rows, int num_heads, uint32_t layout, bool narrow_of_wider) {
  const bool bf16 = layout_copied(layout);  // bf16 or fp16 rows, copied
  tiling t;
  t.head_tiles = tile_rows / kMmaRows;
  t.head_groups = groups(num_heads, tile_rows);
  t.config.family = kSmallFamily;
  t.config.head_tiles = t.head_tiles;
  t.config.layout = layout;
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
    // tilings), which take them only when DSV4_CUDA_FORCE kernel=small32 asks.
    t.chunk_cost = num_heads > 4 * kMmaRows ? 0.47 : 0.52;
    t.cta_cost = 2.1;
    t.forced_only = bf16;
  }
  return t;
}

// Persistent CTAs save later work items their CTA start but pay an item change (epilogue, the next
// Q) and fix the items' order, losing the hardware's balancing of uneven ones. The wgmma kernel's
// take 4-5 % off prefill (31 waves) on an H200 from four waves of uniform items; decode of two
// waves gains nothing, and items of uneven lengths lose 7-11 % (docs/tried.md, D1). The small-head
// kernel's pay at four waves of work items but not at two (H200, 8 heads: 3 % faster at b=256,
// 3.9 waves; 3.5 % slower at b=128, 1.9 waves, where the item changes cost more than the CTA
// starts they save); they are taken from three waves on, for 16-head tiles only: 32-head tiles,
// whose item change loads Q and whose persistent form spilled, were 10 % slower at b=256
// (docs/tried.md, D6).
constexpr int64_t kWgmmaPersistentWaves = 4;
constexpr int64_t kSmallPersistentWaves = 3;

run_choice choose_run(const run_planner& p, const run_facts& f) {
  run_choice r;
  r.tl = choose_tiling(p, f.tokens, f.sm90_ok, &r.splits);
  const tiling& tl = r.tl;
  const int64_t items = f.tokens * tl.head_groups * r.splits.splits;
  r.order = order_tokens(p, tl, f.tokens, r.splits.splits, !f.uniform);
  r.ctas = items;
  if (tl.sm90) {
    // A CTA pair converts each FP8 chunk once for both head groups. A split run that the device
    // holds in one wave has SMs to spare: there each CTA converting its own chunks is faster, as
    // the pair's exchange and the wait for the peer's half leave every chunk (0.5-0.6 us off a
    // 128-head b=2 run on an H200).
    const bool one_wave = r.splits.splits > 1 && items <= tl.resident[0];
    r.cluster = tl.head_groups == 2 && tl.pairs_ok && !one_wave ? 2 : 1;
    const int64_t resident = tl.resident[r.cluster - 1] / r.cluster * r.cluster;
    r.persistent = f.q_map && resident > 0 && (tl.persistent_forced || f.uniform) &&
                   items >= kWgmmaPersistentWaves * resident;
    if (r.persistent) r.ctas = resident;
  } else if (tl.sm90_small) {
    const int64_t resident = tl.resident[0];
    if (small_persistent_applies(tl.head_tiles, tl.config.layout) && tl.config.staged &&
        r.splits.splits == 1 && resident > 0) {
      r.persistent = tl.persistent_forced ? items > resident
                                          : f.uniform && items >= kSmallPersistentWaves * resident;
    }
    if (r.persistent) r.ctas = resident;
  }
  return r;
}

bool parse_force(const char* text, force_knobs* out, char* error, size_t error_capacity) {
  *out = force_knobs{};
  if (text == nullptr) return true;
  const char* s = text;
  while (*s != '\0') {
    const char* end = std::strchr(s, ',');
    const size_t len = end != nullptr ? static_cast<size_t>(end - s) : std::strlen(s);
    char item[64] = {0};
    if (len >= sizeof item) {
      std::snprintf(error, error_capacity, "DSV4_CUDA_FORCE: item \"%.*s...\" is too long", 16, s);
      return false;
    }
    std::memcpy(item, s, len);
    s = end != nullptr ? end + 1 : s + len;
    if (len == 0) continue;
    char* eq = std::strchr(item, '=');
    const char* value = eq != nullptr ? eq + 1 : "";
    if (eq != nullptr) *eq = '\0';
    // A whole non-negative number, or -1 on failure.
    auto number = [&]() -> long {
      if (*value < '0' || *value > '9') return -1;
      errno = 0;
      char* rest = nullptr;
      const long v = std::strtol(value, &rest, 10);
      return errno == 0 && *rest == '\0' && v <= 1 << 20 ? v : -1;
    };
    auto choice = [&](const char* const* names, int n) {
      for (int i = 0; i < n; ++i)
        if (std::strcmp(value, names[i]) == 0) return i;
      return -1;
    };
    static const char* const kBits[] = {"0", "1"};
    static const char* const kKernels[] = {"mma", "wgmma", "small", "small32"};
    bool ok = eq != nullptr;
    if (!ok) {
    } else if (std::strcmp(item, "chunk") == 0) {
      const long v = number();
      ok = v == kChunkKeys || v == kSmallChunkKeys;
      out->chunk = static_cast<int>(v);
    } else if (std::strcmp(item, "kernel") == 0) {
      const int k = choice(kKernels, 4);
      ok = k >= 0;
      out->kernel = k + 1;
    } else if (std::strcmp(item, "max_splits") == 0 || std::strcmp(item, "min_splits") == 0) {
      const long v = number();
      ok = v >= 0;
      (item[1] == 'a' ? out->max_splits : out->min_splits) = static_cast<int>(v);
    } else if (std::strcmp(item, "order") == 0) {
      out->order = choice(kBits, 2);
      ok = out->order >= 0;
    } else if (std::strcmp(item, "small_stage") == 0 || std::strcmp(item, "small_h8") == 0) {
      const int b = choice(kBits, 2);
      ok = b >= 0;
      (item[6] == 's' ? out->small_stage : out->small_h8) = b == 1;
    } else if (std::strcmp(item, "persistent") == 0) {
      const long v = number();
      ok = v >= 0;
      out->persistent = static_cast<int>(v);
    } else {
      std::snprintf(error, error_capacity,
                    "DSV4_CUDA_FORCE: unknown key \"%s\" (chunk, kernel, max_splits, min_splits, "
                    "order, small_stage, small_h8, persistent)",
                    item);
      return false;
    }
    if (!ok) {
      std::snprintf(error, error_capacity, "DSV4_CUDA_FORCE: bad value in \"%s%s%s\"", item,
                    eq != nullptr ? "=" : "", value);
      return false;
    }
  }
  return true;
}

bool plan_tilings(const plan_facts& f, const force_knobs& knobs, run_planner* out, int* chunk_keys,
                  int chunks[2], char* error, size_t error_capacity) {
  run_planner& rp = *out;
  rp = run_planner{};
  // The mma.sync kernel: the most heads per CTA (up to 64) that the device's shared memory allows;
  // fewer heads than 16 per tile are computed as a padded tile (no memory traffic for them).
  kernel_config mma{};
  mma.family = kMmaFamily;
  mma.head_dim_qk = f.head_dim_qk;
  mma.layout = f.layout[0];
  mma.head_tiles = mma_head_tiles(f.num_heads);
  const bool force_small_chunk = knobs.chunk == kSmallChunkKeys;
  mma.chunk = kChunkKeys;
  mma.stage_bytes = attention_stage_bytes(f.layout[0], f.layout[1], mma.chunk);
  for (; mma.head_tiles >= 1 && !force_small_chunk; mma.head_tiles /= 2) {
    if (f.smem_bytes(mma) <= f.smem_optin) break;
  }
  if (force_small_chunk || mma.head_tiles < 1) {  // 16-head tiles over 32-key chunks (~75 KB)
    mma.head_tiles = 1;
    mma.chunk = kSmallChunkKeys;
    mma.stage_bytes = attention_stage_bytes(f.layout[0], f.layout[1], mma.chunk);
    if (f.smem_bytes(mma) > f.smem_optin) {
      std::snprintf(error, error_capacity, "plan: device shared memory %zu bytes is too small",
                    f.smem_optin);
      return false;
    }
  }
  *chunk_keys = mma.chunk;
  for (int i = 0; i < 2; ++i) chunks[i] = (f.width[i] + mma.chunk - 1) / mma.chunk;
  rp.sm_count = f.sm_count;
  rp.num_heads = f.num_heads;
  rp.total_chunks = chunks[0] + chunks[1];
  rp.batch_invariant = f.batch_invariant;
  rp.max_tokens = std::max<int64_t>(1, f.max_tokens);
  rp.wide = mma_tiles(mma.head_tiles, f.num_heads, false);
  rp.wide.config = mma;
  if (mma.head_tiles == kMaxHeadTiles && mma.chunk == kChunkKeys) {
    rp.narrow = mma_tiles(kMaxHeadTiles / 2, f.num_heads, true);
    rp.narrow.config = mma;
    rp.narrow.config.head_tiles = kMaxHeadTiles / 2;
  }
  rp.max_splits = knobs.max_splits;
  rp.min_splits = knobs.min_splits;
  rp.order = knobs.order < 0 ? 0 : knobs.order == 0 ? -1 : 1;
  if (knobs.kernel == kForceSmall) rp.force_sm90_narrow = 1;
  if (knobs.kernel == kForceSmall32) rp.force_sm90_narrow = 2;
  if (knobs.kernel == kForceWgmma) rp.force_sm90_narrow = -1;

  // Hopper: the wgmma kernel (64-head CTAs, pairs for > 64 heads) for 33..128 heads, faster than
  // the mma.sync kernel on an H200 for every layout it serves; the small-head kernel for 1..32
  // heads and, in plans of more heads, for runs that do not fill the device with 64-head CTAs.
  // kernel=mma and chunk=32 keep plans on the mma.sync kernel.
  if (knobs.kernel == kForceMma || force_small_chunk) return true;
  const uint32_t layout = f.layout[0];
  kernel_config small{};
  small.family = kSmallFamily;
  small.head_tiles = 2;
  small.layout = layout;
  const bool small_ok = f.family_ok[kSmallFamily] && f.smem_bytes(small) <= f.smem_optin;
  // The small-head kernel's tiles of `tile_rows` (16 or 32) heads per CTA: the plan's own tiling
  // (1..32 heads), or narrow tiles of a plan of more heads.
  auto small_tiling = [&](tiling* t, int tile_rows, bool narrow_of_wider) {
    *t = small_tiles(tile_rows, f.num_heads, layout, narrow_of_wider);
    kernel_config staged = t->config;
    staged.staged = true;
    t->config.staged = knobs.small_stage && small_staged_applies(t->head_tiles, layout) &&
                       f.smem_bytes(staged) <= f.smem_optin;
    t->small_heads8 = t->small_heads8 && knobs.small_h8;
  };
  if (small_ok && f.num_heads <= 2 * kMmaRows) {
    small_tiling(&rp.sm90, small_tile_rows(f.num_heads), false);
  } else if (f.num_heads > 2 * kMmaRows && f.family_ok[kWgmmaFamily]) {
    kernel_config wgmma{};
    wgmma.family = kWgmmaFamily;
    wgmma.head_tiles = kSm90Heads / kMmaRows;
    wgmma.layout = layout;
    if (f.smem_bytes(wgmma) > f.smem_optin) return true;
    rp.sm90 = wgmma_tiles(f.num_heads, layout);
    if (small_ok) {
      small_tiling(&rp.sm90_narrow[0], kMmaRows, true);
      small_tiling(&rp.sm90_narrow[1], 2 * kMmaRows, true);
    }
  }
  return true;
}

void apply_persistent_knob(const force_knobs& knobs, run_planner* p) {
  if (knobs.persistent < 0) return;
  for (int i = 0; tiling* t = plan_tiling_slots(*p, i); ++i) {
    if (!t->sm90 && !(t->sm90_small && t->config.staged)) continue;
    for (int& r : t->resident) r = std::min(r, knobs.persistent);
    t->persistent_forced = knobs.persistent > 0;
  }
}

const char* tiling_kernel(const tiling& tl) {
  return tl.sm90 ? "wgmma" : tl.sm90_small ? "sm90-mma" : "mma";
}
int tiling_heads(const tiling& tl) {
  return tl.sm90 ? kSm90Heads : tl.small_heads8 ? kMmaRows / 2 : tl.head_tiles * kMmaRows;
}

}  // namespace cuda
}  // namespace dsv4
