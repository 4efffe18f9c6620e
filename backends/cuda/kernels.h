// Interface between the CUDA module's host code (module.cpp, plain C++) and its kernels (*.cu).
// Only POD parameter structs and launch functions cross it; every launcher enqueues on the given
// stream, never allocates and never synchronises (CUDA-graph capturable).
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "common/index.h"
#include "common/layout.h"
#include "common/paged_export.h"
#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"

namespace dsv4 {
namespace cuda {

constexpr int kChunkKeys = 64;  // keys dequantised to shared memory per step
constexpr int kSmallChunkKeys =
    32;  // 16-head tiles on devices with little shared memory (sm_86/89)
// Warps per attention CTA: 16 over 64-key chunks (four warps per scheduler: the kernel is latency
// bound, and 64-head tiles keep their O accumulators at 64 registers per thread), 4 for the
// small-chunk 16-head variant.
constexpr DSV4_HD int attention_warps(int head_tiles, int chunk) {
  return chunk == kSmallChunkKeys ? 4 : 16;
}
// Q K^T splits the head dimension over this many warp sets when a head tile has more warps than
// 8-key n-tiles (16-head tiles over 64-key chunks: 16 warps, 8 n-tiles); each set writes its own
// partial S buffer and the softmax adds them.
constexpr DSV4_HD int attention_qk_dim_splits(int head_tiles, int chunk) {
  return attention_warps(head_tiles, chunk) / head_tiles > chunk / 8
             ? attention_warps(head_tiles, chunk) / head_tiles / (chunk / 8)
             : 1;
}
constexpr int kMmaRows = 16;      // heads per mma tile (the M dimension)
constexpr int kMaxHeadTiles = 4;  // up to 64 heads per CTA

// One attention launch over explicit lists (paged mode builds its lists first, then uses this).
struct attention_params {
  int32_t num_tokens;
  int32_t seq_q;
  int32_t num_heads;
  int32_t head_dim_qk;  // 512 or 576
  int32_t head_tiles;   // mma row tiles per CTA (1, 2 or 4): heads_per_cta = 16 * head_tiles
  int32_t head_groups;  // ceil(num_heads / heads_per_cta)
  int32_t num_splits;   // CTAs along the key axis per (token, head group)
  int32_t chunks_per_split;
  int32_t chunks[2];          // 64-key chunks of the main / extra list (from the list widths)
  int32_t width[2];           // list widths: positions beyond are never read
  int32_t q_is_fp8;           // 1: q is e4m3 (per-tensor FP8 path)
  int32_t aligned16;          // caches allow 16-byte cp.async (base and block stride)
  float logit_scale_log2[2];  // softmax_scale * q_scale * kv_scale(list) * log2(e)
  float value_scale[2];       // the list's weight on P: 1 but for a per-tensor FP8 extra list of
                              // another kv_scale than the main's (module.cpp: not value_units yet)
  float out_scale;            // the main list's value multiplier, applied once to each output row
  int32_t stage_bytes;        // staging buffer for one chunk's raw rows
  int32_t q_aligned16;        // bf16 q rows are 16-byte aligned: loaded with cp.async
  int32_t out_aligned16;      // out rows are 16-byte aligned: written with 16-byte stores
  int32_t chunk_keys;         // kChunkKeys, or kSmallChunkKeys (16-head tiles, small shared memory)
  int32_t dependent_combine;  // sm_90+: the combine kernel is a programmatic dependent launch
  // How the planner launches it (host only; the kernels read gridDim): the CTAs, whether they
  // form pairs (cluster 2: the wgmma kernel's two head groups share each chunk's conversion), and
  // whether they are persistent (fewer CTAs than work items, each running its items in turn).
  int32_t launch_ctas;
  int32_t cluster_ctas;
  int32_t persistent;
  int32_t stream_rows;   // Hopper producers: rows are mostly read once, evicted first from L2
  int32_t small_staged;  // small-head kernel: FP8 rows staged by the bulk-copy engine where it can
  int32_t small_heads8;  // small-head kernel, 1..8 heads on a 16-head tile: the 8-head consumer
  dsv4_mod_token_view q;
  dsv4_mod_token_view out;
  dsv4_mod_token_view lse;
  dsv4_mod_token_view max_logits;
  dsv4_mod_cache cache[2];
  u31_divisor block_div[2];  // the caches' block sizes as divisors (Hopper producers)
  dsv4_mod_index_list list[2];
  const float* attn_sink;
  float* partial_o;   // [T][splits][H][512] fp32, unnormalised (num_splits > 1)
  float* partial_ml;  // [T][splits][H][2]: running max (log2 domain) and sum
  const int32_t*
      token_order;  // [T] or null: the tokens in the order their CTAs launch (token_order.cu)
};

// Makes launch cfg a programmatic dependent of the stream's previous kernel (sm_90+): its CTAs may
// start before that kernel ends, and wait for it (griddepcontrol.wait) before reading its output.
// attr holds cfg's attributes so far (if any) and has room for one more.
inline void add_programmatic_dependency(cudaLaunchConfig_t* cfg, cudaLaunchAttribute* attr) {
  attr[cfg->numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[cfg->numAttrs].val.programmaticStreamSerializationAllowed = 1;
  cfg->attrs = attr;
  cfg->numAttrs += 1;
}

// Work items of a launch, one CTA each unless persistent: (token, key split, head group) triples.
DSV4_HD int64_t item_count(const attention_params& p) {
  return static_cast<int64_t>(p.num_tokens) * p.head_groups * p.num_splits;
}

// Whether every token runs the same chunks: dense lists without per-row lengths (paged lists always
// have lengths).
inline bool uniform_items(const attention_params& p) {
  for (const dsv4_mod_index_list& l : p.list) {
    if (l.indices != nullptr && (l.format != DSV4_INDEX_DENSE || l.lengths != nullptr))
      return false;
  }
  return true;
}

// Longest tokens first (token_order.cu): for runs of uneven tokens over several waves of CTAs, the
// tokens sorted by their chunk counts, longest first, ties in token order, so that the hardware's
// in-order CTA dispatch runs the longest ones first and the waves end together (LPT scheduling).
// For lists of at most kOrderMaxChunks chunks (the sort's buckets live in shared memory).
constexpr int kOrderMaxChunks = 255;
// Enqueues the order of run p's tokens into order[T] (p.token_order is not read).
cudaError_t token_order_launch(const attention_params& p, int32_t* order, cudaStream_t stream);

// Enqueues the kernel that merges the num_splits partials of every (token, head) (a programmatic
// dependent launch when p.dependent_combine).
cudaError_t combine_launch(const attention_params& p, cudaStream_t stream);

// ------------------------------------------------------------------------------------------------
// The kernel table. A kernel family describes itself once, in its own file: what it serves, the
// shared memory and residency of a configuration, and its hooks. The planner (planner.cpp) picks
// the family, tiling, splits, token order, pairs and persistence; module.cpp configures what the
// plan holds and launches what the planner chose; a launch hook only launches what
// attention_params says (launch_ctas, cluster_ctas, persistent, token_order, small_*).
enum : int32_t { kMmaFamily = 0, kWgmmaFamily = 1, kSmallFamily = 2, kFamilies = 3 };

// One kernel configuration of a family: what its hooks need to know of a tiling.
struct kernel_config {
  int32_t family = kMmaFamily;
  int32_t head_tiles = 0;  // 16-head mma tiles per CTA
  int32_t chunk = 64;      // keys per chunk (the mma.sync kernel: 64, or 32 for small smem)
  int32_t head_dim_qk = 512;
  uint32_t layout = 0;     // the main cache's layout (the Hopper kernels: both caches')
  size_t stage_bytes = 0;  // the mma.sync kernel: one chunk's raw rows (attention_stage_bytes)
  bool staged = false;     // the small-head kernel: FP8 rows staged by the bulk-copy engine
};

struct kernel_family {
  const char* name;  // as plan names and run logs give it
  // What it serves: compute capability (major), key dims (512, or 576 for the V3.2 layout) and the
  // layouts of the main and extra caches (NONE: absent). Host only.
  bool (*serves)(int cc_major, int head_dim_qk, uint32_t main_layout, uint32_t extra_layout);
  // The loaded image holds its machine code for the current device (not a PTX JIT without it).
  bool (*compiled)();
  size_t (*smem_bytes)(const kernel_config& c);  // dynamic shared memory of one CTA
  // Raises its kernels' shared-memory limits on the current device (plan creation).
  cudaError_t (*configure)(const kernel_config& c);
  // CTAs of configuration c one SM holds, and the CTAs the device holds at once for persistent
  // runs: resident[0] single, resident[1] in pairs (0: no persistent form).
  cudaError_t (*occupancy)(const kernel_config& c, int sm_count, int* ctas_per_sm, int resident[2]);
  // Enqueues run p as it says, and the combine of its splits.
  cudaError_t (*launch)(const attention_params& p, cudaStream_t stream);
};
extern const kernel_family kMmaKernels;    // attention.cu: mma.sync, any layout, sm_80+
extern const kernel_family kWgmmaKernels;  // attention_sm90.cu: wgmma, 64-head CTAs, sm_90a
extern const kernel_family kSmallKernels;  // attention_sm90_small.cu: 1..32 heads, sm_90a
inline const kernel_family& kernel_family_of(int32_t family) {
  return family == kWgmmaFamily   ? kWgmmaKernels
         : family == kSmallFamily ? kSmallKernels
                                  : kMmaKernels;
}

// Bytes of the mma.sync kernel's staging buffer for the caches in use (a pseudo-block of `chunk`
// entries).
inline size_t attention_stage_bytes(uint32_t main_layout, uint32_t extra_layout, int chunk) {
  size_t bytes = 0;
  const uint32_t layouts[2] = {main_layout, extra_layout};
  for (uint32_t layout : layouts) {
    if (!layout_is_known(layout)) continue;
    const size_t b = static_cast<size_t>(layout_min_block_bytes(layout, chunk));
    bytes = b > bytes ? b : bytes;
  }
  return (bytes + 15) / 16 * 16;
}

// Whether rows of `layout` are 16-bit values the kernels copy as they are (bf16; fp16, multiplied
// as fp16), not FP8 bytes they convert to bf16.
constexpr DSV4_HD bool layout_copied(uint32_t layout) {
  return layout == DSV4_KV_LAYOUT_BF16 || layout == DSV4_KV_LAYOUT_FP16;
}

// The Hopper kernels' one 512-dim layout for both caches.
inline bool sm90_layouts(uint32_t main_layout, uint32_t extra_layout) {
  const bool known = main_layout == DSV4_KV_LAYOUT_FP8_V4_584B ||
                     main_layout == DSV4_KV_LAYOUT_BF16 || main_layout == DSV4_KV_LAYOUT_FP16 ||
                     main_layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
  return known && (extra_layout == DSV4_KV_LAYOUT_NONE || extra_layout == main_layout);
}

// Hopper (sm_90a) kernel, attention_sm90.cu: 64-head tiles (head_groups 1, or 2, as a CTA pair
// sharing each dequantised chunk where cluster_ctas is 2), wgmma, a producer warpgroup.
constexpr int kSm90Heads = 64;
// Whether run p's Q can come by the wgmma kernel's tensor map (bf16, 16-byte aligned rows, whole
// batch rows, strides the encoder takes): persistent wgmma CTAs need it. Host only.
bool q_map_applies(const attention_params& p);

// Hopper kernel for 1..32 heads, attention_sm90_small.cu: 16- or 32-head tiles (head_tiles 1 or 2),
// mma.sync, two producer warpgroups; the layouts, alignment and image check of the kernel above.
// Whether its staged producers (FP8 rows by the bulk-copy engine) serve `head_tiles` tiles of
// `layout`: 16-head tiles of the FP8 layouts, 32-head tiles of the 584 B layout (their stage holds
// the FP8 bytes; attention_params::small_staged asks for them).
constexpr DSV4_HD bool small_staged_applies(int head_tiles, uint32_t layout) {
  return (head_tiles == 1 && layout != DSV4_KV_LAYOUT_BF16 && layout != DSV4_KV_LAYOUT_FP16) ||
         (head_tiles == 2 && layout == DSV4_KV_LAYOUT_FP8_V4_584B);
}
// Whether it has a persistent form for `head_tiles` tiles of `layout`: 16-head tiles of staged FP8
// rows (32-head tiles were slower persistent: planner.cpp).
constexpr DSV4_HD bool small_persistent_applies(int head_tiles, uint32_t layout) {
  return head_tiles == 1 && small_staged_applies(1, layout);
}

// Paged mode: builds every token's SWA and compressed lists into the workspace (one thread per
// token, through backends/common/paged_index.h).
struct paged_build_params {
  paged_geometry geometry;
  paged_capacity capacity;
  dsv4_mod_paged_batch batch;
  int64_t num_tokens;
  int32_t* swa_indices;  // [T][window]
  int32_t* swa_lengths;  // [T]
  int32_t* cmp_indices;  // [T][cmp_width] (NULL when cmp_width is 0)
  int32_t* cmp_lengths;  // [T]
};
cudaError_t paged_build_launch(const paged_build_params& p, cudaStream_t stream);

// dsv4_merge: the partials of disjoint key sets combined per (token, head) (merge.cu).
cudaError_t merge_launch(const dsv4_mod_merge& m, cudaStream_t stream);

// KV writer: quantises rows into a cache (backends/common/layout.h quantize_entry).
cudaError_t kv_write_launch(const dsv4_mod_kv_write& w, cudaStream_t stream);

}  // namespace cuda
}  // namespace dsv4

namespace dsv4 {
namespace cuda {

// Paged-mode index export (dsv4_export_indices) in one of the engines' formats.
// Largest list width the CSR exporter stages in shared memory.
constexpr int64_t kExportMaxCsrWidth = 12288;
cudaError_t export_launch(const export_params& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace dsv4
