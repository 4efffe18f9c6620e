// The CUDA module's planner: which kernel families and tilings a plan holds, and for each run the
// tiling, key splits, token order, CTA pairs and persistent CTAs it takes, by a cost model fitted
// on an H200 (its figures are in planner.cpp). Plain C++ without CUDA calls: module.cpp hands it
// the facts of the device and the plan, asks the kernel table (kernels.h) for what only the device
// can tell (shared memory, residency), and launches what it chose.
// tests/cuda/test_cuda_planner.cpp checks the choices without a GPU.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

namespace dsv4 {
namespace cuda {

// DSV4_CUDA_FORCE: the test and A/B hook, a comma-separated list of key=value read at plan
// creation. Unset keys keep the planner's choice.
struct force_knobs {
  int chunk = 0;       // chunk=32: the mma.sync kernel's 32-key variant (sm_86/89's; no Hopper)
  int kernel = 0;      // kernel=mma 1, wgmma 2, small 3, small32 4 (0: the planner's choice)
  int max_splits = 0;  // max_splits=N: no more key splits (0: no bound)
  int min_splits = 0;  // min_splits=N: no fewer, where the partials' workspace allows
  int order = -1;      // order=0: tokens never reordered; 1: every run that can be (-1: model)
  bool small_stage = true;  // small_stage=0: small-head FP8 rows by the producers' loads
  bool small_h8 = true;     // small_h8=0: 1..8 heads on the 16-head tile's consumer
  int persistent = -1;      // persistent=0: never; N > 0: at most N CTAs, any lengths (-1: model)
};
enum : int { kForceMma = 1, kForceWgmma = 2, kForceSmall = 3, kForceSmall32 = 4 };
// Parses `text` (nullptr or empty: nothing forced) into *out; false with the offending key=value
// named in `error` for an unknown key or a bad value.
bool parse_force(const char* text, force_knobs* out, char* error, size_t error_capacity);

// One head tiling of a plan: its kernel configuration, what it costs in shared memory and
// residency, and its modelled time.
struct tiling {
  int head_tiles = 0;  // 16-head mma tiles per CTA; 0: not available
  int head_groups = 1;
  kernel_config config{};
  int ctas_per_sm = 1;  // attention CTAs resident per SM
  size_t smem_bytes = 0;
  double chunk_cost = 1.0;   // time of one chunk relative to a 64-head tile (measured on an H200)
  double cta_cost = 1.5;     // a CTA's fixed time (Q load, first gather, epilogue), in chunks
  bool sm90 = false;         // the Hopper wgmma kernel (attention_sm90.cu)
  bool pairs_ok = false;     // its CTA pairs may share each chunk's conversion (FP8 rows)
  int resident[2] = {0, 0};  // its resident CTAs, single / pairs (0: no persistent CTAs)
  bool persistent_forced = false;  // DSV4_CUDA_FORCE persistent=N: whatever the lengths
  bool sm90_small = false;         // the Hopper kernel for 1..32 heads (attention_sm90_small.cu)
  bool small_heads8 = false;       // its 16-head tile serves 1..8 heads with the 8-head consumer
  bool forced_only = false;        // runs take it only when DSV4_CUDA_FORCE kernel= names it
};

// The key splits of a run and their modelled time.
struct split_plan {
  int splits;
  int chunks_per_split;
  double cost;     // in 64-head-tile chunk times
  bool meets_min;  // splits >= min_splits (a tuning run's floor, where the workspace allows)
  // Whether this plan is the better one: a tuning run's floor first, then the modelled time.
  bool better_than(const split_plan& o) const {
    return meets_min != o.meets_min ? meets_min : cost < o.cost;
  }
};

// What the choice reads: the device's SMs, the plan's heads, chunks and tilings, the forced knobs.
struct run_planner {
  int sm_count = 1;
  int num_heads = 1;
  int total_chunks = 1;  // chunks of both lists at their full widths
  tiling wide{};         // the mma.sync kernel's tiling (every plan)
  // 64-head plans also hold 32-head tiles for runs too small to fill the device: twice the CTAs,
  // each with half the mma work per chunk (CONFIG1 b=2 on an H200: 15 % faster, with the
  // dependent-launch combine).
  tiling narrow{};
  // Hopper plans (compute capability 9.0, sm_90a code loaded, one 512-dim layout) also hold the
  // tiling of a Hopper kernel (wgmma for > 32 heads, the small-head kernel otherwise); runs use it
  // when their caches are 16-byte aligned.
  tiling sm90{};
  // Hopper plans of 33..128 heads also hold the small-head kernel's tiles: 16 heads for runs of few
  // tokens (four times the CTAs of the wgmma kernel, each with a quarter of its partials to write),
  // 32 heads for medium runs (twice the CTAs, each chunk's gather shared by 32 heads).
  tiling sm90_narrow[2]{};  // [0]: 16-head tiles, [1]: 32-head tiles
  // kernel=small: 1 (always 16-head tiles), small32: 2 (always 32-head tiles), wgmma: -1 (never
  // the small-head kernel's tiles)
  int force_sm90_narrow = 0;
  int max_splits = 0;  // max_splits= (tuning runs): no more key splits; 0: none
  int min_splits = 0;  // min_splits= (tuning runs): no fewer, where the partials fit
  // order= (A/B runs, tests): -1 = "0" (tokens never reordered), 1 = "1" (every run that can be),
  // 0 = the model (order_tokens).
  int order = 0;
  // DSV4_PLAN_FLAG_BATCH_INVARIANT: every run takes the plan's widest tiling and the key splits
  // of the plan's largest run (max_tokens tokens), so that a token's reduction order is the same
  // whatever else the run holds.
  bool batch_invariant = false;
  int64_t max_tokens = 1;  // the plan's max_tokens
};

// What the device and the plan are, for the tilings (module.cpp fills it from the context, the
// derived plan and the kernel table).
struct plan_facts {
  int cc_major = 0;
  int sm_count = 1;
  size_t smem_optin = 0;
  int num_heads = 1;
  int head_dim_qk = 512;
  uint32_t layout[2] = {0, 0};  // main and extra cache layouts (DSV4_KV_LAYOUT_NONE: absent)
  int width[2] = {0, 0};        // list widths
  // Each family (kMmaFamily ...) serves the device, the key dims and the layouts, and the loaded
  // image holds its machine code (kernel_family::serves and compiled).
  bool family_ok[kFamilies] = {false, false, false};
  bool batch_invariant = false;
  int64_t max_tokens = 1;
  // The dynamic shared memory of a kernel configuration (the kernel table's smem_bytes hook).
  size_t (*smem_bytes)(const kernel_config& c) = nullptr;
};

// The tilings of a plan (the residency fields are left for module.cpp to ask the device), its
// chunk size and the chunks of each list; false with the reason in `error` when the device cannot
// run the plan.
bool plan_tilings(const plan_facts& f, const force_knobs& knobs, run_planner* out, int* chunk_keys,
                  int chunks[2], char* error, size_t error_capacity);
// After the device told each tiling's residency: persistent= caps the persistent CTAs.
void apply_persistent_knob(const force_knobs& knobs, run_planner* p);
// Every tiling of a plan, for walks over them (slots not available have head_tiles 0).
inline tiling* plan_tiling_slots(run_planner& p, int i) {
  tiling* slots[5] = {&p.wide, &p.narrow, &p.sm90, &p.sm90_narrow[0], &p.sm90_narrow[1]};
  return i < 5 ? slots[i] : nullptr;
}

// Key splits for `tokens` tokens on tiling `tl` (see planner.cpp for the model).
split_plan choose_splits(const run_planner& p, const tiling& tl, int64_t tokens);
// The tiling a run of `tokens` tokens uses (the one modelled fastest, or the one kernel= forces)
// and its splits; `sm90_ok`: the run may use the Hopper kernels.
tiling choose_tiling(const run_planner& p, int64_t tokens, bool sm90_ok, split_plan* splits);
// The most (token, split) rows of partials any run of 1..max_tokens tokens uses, on any tiling:
// what the plan's workspace holds (a run needing more would fail).
size_t max_partial_rows(const run_planner& p, int64_t max_tokens);

// Whether a run of `tokens` tokens on tiling `tl` with `splits` key splits hands its CTAs their
// tokens longest first (kernels.h, token_order_launch): the wgmma kernel's one-split runs of uneven
// tokens (`uneven`: per-row lengths or CSR rows) over more than one wave of CTAs, with lists of at
// most kOrderMaxChunks chunks. Persistent CTAs forced by persistent= keep their fixed order.
bool order_tokens(const run_planner& p, const tiling& tl, int64_t tokens, int splits, bool uneven);

// What a run is, for the choice of its launch.
struct run_facts {
  int64_t tokens = 0;
  bool sm90_ok = false;  // its caches are 16-byte aligned: the Hopper kernels may run it
  bool uniform = true;   // every token runs the same chunks (uniform_items)
  bool q_map = false;    // its Q qualifies for the wgmma kernel's tensor map (q_map_applies)
};
// Everything a run's launch needs decided.
struct run_choice {
  tiling tl;
  split_plan splits;
  bool order = false;       // tokens longest first
  int cluster = 1;          // 2: wgmma CTA pairs sharing each chunk's conversion
  bool persistent = false;  // fewer CTAs than work items, each running its items in turn
  int64_t ctas = 0;         // CTAs launched
};
run_choice choose_run(const run_planner& p, const run_facts& f);

// The tilings' geometry and fitted costs for `num_heads` heads (plan_tilings' parts).
// The mma.sync kernel's 16-head tiles per CTA for `num_heads` heads where shared memory allows:
// up to 4, and 4 for three (the kernel is built for 1, 2 and 4).
int mma_head_tiles(int num_heads);
// The mma.sync kernel's tiles of `head_tiles` 16-head tiles: the plan's own (`narrow` false), or
// the 32-head tiles of a 64-head plan.
tiling mma_tiles(int head_tiles, int num_heads, bool narrow);
// The Hopper wgmma kernel's 64-head CTAs (pairs for > 64 heads).
tiling wgmma_tiles(int num_heads, uint32_t layout);
// The Hopper small-head kernel's tile rows (16 or 32) for a plan of 1..32 heads.
int small_tile_rows(int num_heads);
// The Hopper small-head kernel's tiles of `tile_rows` (16 or 32) heads: the plan's own for 1..32
// heads (`narrow_of_wider` false), or narrow tiles of a plan of more heads. 16-head tiles of 1..8
// heads use the 8-head consumer (small_heads8).
tiling small_tiles(int tile_rows, int num_heads, uint32_t layout, bool narrow_of_wider);

// A tiling's kernel and heads per CTA: the plan's kernel name gives those of its widest tiling;
// DSV4_CUDA_LOG_RUNS logs the one each run takes (runs of few tokens may take narrower tiles).
const char* tiling_kernel(const tiling& tl);
int tiling_heads(const tiling& tl);

}  // namespace cuda
}  // namespace dsv4
