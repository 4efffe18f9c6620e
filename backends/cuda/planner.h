// The CUDA module's run planner: which head tiling and how many key splits a run of T tokens takes,
// by a cost model fitted on an H200 (its figures are in planner.cpp). Plain C++ without CUDA
// calls: module.cpp fills the tilings from the device at plan creation, and
// tests/cuda/test_cuda_planner.cpp checks the choices and the partials' workspace bound without a
// GPU.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace dsv4 {
namespace cuda {

// One head tiling of a plan: heads per CTA, what it costs in shared memory and residency, and its
// modelled time.
struct tiling {
  int head_tiles = 0;  // 16-head mma tiles per CTA; 0: not available
  int head_groups = 1;
  int ctas_per_sm = 1;  // attention CTAs resident per SM
  size_t smem_bytes = 0;
  double chunk_cost = 1.0;   // time of one chunk relative to a 64-head tile (measured on an H200)
  double cta_cost = 1.5;     // a CTA's fixed time (Q load, first gather, epilogue), in chunks
  bool sm90 = false;         // the Hopper wgmma kernel (attention_sm90.cu)
  int resident[2] = {0, 0};  // its resident CTAs, single / pairs (0: no persistent CTAs)
  bool persistent_forced = false;  // DSV4_CUDA_PERSISTENT=n: persistent CTAs whatever the lengths
  bool sm90_small = false;         // the Hopper kernel for 1..32 heads (attention_sm90_small.cu)
  bool small_staged = false;  // its FP8 rows staged by the bulk-copy engine (small_staged_applies)
  bool small_heads8 = false;  // its 16-head tile serves 1..8 heads with the 8-head consumer
  bool forced_only = false;   // runs take it only when DSV4_CUDA_KERNEL names it
};

// The key splits of a run and their modelled time.
struct split_plan {
  int splits;
  int chunks_per_split;
  double cost;     // in 64-head-tile chunk times
  bool meets_min;  // splits >= DSV4_CUDA_MIN_SPLITS (a tuning run's floor, where the workspace
                   // allows)
  // Whether this plan is the better one: a tuning run's floor first, then the modelled time.
  bool better_than(const split_plan& o) const {
    return meets_min != o.meets_min ? meets_min : cost < o.cost;
  }
};

// What the choice reads: the device's SMs, the plan's heads, chunks and tilings, the tuning knobs.
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
  // DSV4_CUDA_KERNEL: 1 = "small" (always 16-head tiles), 2 = "small32" (always 32-head tiles),
  // -1 = "wgmma" (never the small-head kernel's tiles)
  int force_sm90_narrow = 0;
  int max_splits = 0;  // DSV4_CUDA_MAX_SPLITS (tuning runs): no more key splits; 0: none
  int min_splits = 0;  // DSV4_CUDA_MIN_SPLITS (tuning runs): no fewer, where the partials fit
  // DSV4_CUDA_ORDER (A/B runs, tests): -1 = "0" (tokens never reordered), 1 = "1" (every run that
  // can be), 0 = the default (order_tokens).
  int order = 0;
};

// Key splits for `tokens` tokens on tiling `tl` (see planner.cpp for the model).
split_plan choose_splits(const run_planner& p, const tiling& tl, int64_t tokens);
// The tiling a run of `tokens` tokens uses (the one modelled fastest, or the one DSV4_CUDA_KERNEL
// forces) and its splits; `sm90_ok`: the run may use the Hopper kernels.
tiling choose_tiling(const run_planner& p, int64_t tokens, bool sm90_ok, split_plan* splits);
// The most (token, split) rows of partials any run of 1..max_tokens tokens uses, on any tiling:
// what the plan's workspace holds (a run needing more would fail).
size_t max_partial_rows(const run_planner& p, int64_t max_tokens);

// Whether a run of `tokens` tokens on tiling `tl` with `splits` key splits hands its CTAs their
// tokens longest first (kernels.h, token_order_launch): the wgmma kernel's one-split runs of uneven
// tokens (`uneven`: per-row lengths or CSR rows) over more than one wave of CTAs, with lists of at
// most kOrderMaxChunks chunks. Persistent CTAs (DSV4_CUDA_PERSISTENT) keep their fixed order.
bool order_tokens(const run_planner& p, const tiling& tl, int64_t tokens, int splits, bool uneven);

// The tilings' geometry and fitted costs for `num_heads` heads; module.cpp adds what the device
// tells (shared memory, residency, staged rows, persistent CTAs). `layout` is the plan's
// DSV4_KV_LAYOUT_*.
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
