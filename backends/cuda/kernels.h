// Interface between the CUDA module's host code (module.cpp, plain C++) and its kernels (*.cu).
// Only POD parameter structs and launch functions cross it; every launcher enqueues on the given
// stream, never allocates and never synchronises (CUDA-graph capturable).
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "common/index.h"
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
  float value_scale[2];       // kv_scale of the list's cache (per-tensor FP8), else 1
  int32_t stage_bytes;        // staging buffer for one chunk's raw rows
  int32_t q_aligned16;        // bf16 q rows are 16-byte aligned: loaded with cp.async
  int32_t out_aligned16;      // out rows are 16-byte aligned: written with 16-byte stores
  int32_t chunk_keys;         // kChunkKeys, or kSmallChunkKeys (16-head tiles, small shared memory)
  int32_t dependent_combine;  // sm_90+: the combine kernel is a programmatic dependent launch
  int32_t resident_ctas[2];   // Hopper kernels: CTAs / CTA pairs x 2 (wgmma) the device holds at
                              // once (persistent CTAs for many work items); 0: one CTA per item
  int32_t persistent_forced;  // persistent CTAs for uneven items too (DSV4_CUDA_PERSISTENT tests)
  int32_t stream_rows;        // Hopper producers: rows are mostly read once, evicted first from L2
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

// Bytes of a chunk's staging buffer for the caches in use (a pseudo-block of `chunk` entries).
size_t attention_stage_bytes(uint32_t main_layout, uint32_t extra_layout, int chunk);
// Dynamic shared memory of one attention CTA.
size_t attention_smem_bytes(int head_tiles, int head_dim_qk, size_t stage_bytes, int chunk);
// Raises the kernel's dynamic shared-memory limit on the current device (call at plan creation).
cudaError_t attention_configure(int head_tiles, int chunk, size_t smem_bytes);
// Attention CTAs one SM holds at once (after attention_configure).
int attention_ctas_per_sm(int head_tiles, int chunk, int head_dim_qk, size_t smem_bytes);
// Enqueues the attention kernel and, when num_splits > 1, the combine kernel.
cudaError_t attention_launch(const attention_params& p, size_t smem_bytes, cudaStream_t stream);
// Enqueues the kernel that merges the num_splits partials of every (token, head) (a programmatic
// dependent launch when p.dependent_combine).
cudaError_t combine_launch(const attention_params& p, cudaStream_t stream);

// Hopper (sm_90a) kernel, attention_sm90.cu: 64-head tiles (head_groups 1, or 2 as a CTA pair
// sharing each dequantised chunk), wgmma, a producer warpgroup; one 512-dim layout for both caches,
// 16-byte aligned caches. The module uses it on compute capability 9.0 when
// attention_sm90_compiled().
constexpr int kSm90Heads = 64;
size_t attention_sm90_smem_bytes();
bool attention_sm90_compiled();  // the loaded image has the sm_90a kernel (not a PTX JIT of it)
bool attention_sm90_layouts(uint32_t main_layout, uint32_t extra_layout);  // caches it serves
cudaError_t attention_sm90_configure();
// CTAs of the wgmma kernel the device holds at once: resident[0] single, resident[1] in pairs
// (after attention_sm90_configure).
cudaError_t attention_sm90_resident(int sm_count, int resident[2]);
// `order` (or nullptr): a buffer of num_tokens entries; the run's CTAs then take its tokens longest
// first (token_order_launch enqueues the order before the attention kernel, whose CTAs wait for
// it).
cudaError_t attention_sm90_launch(const attention_params& p, int32_t* order, cudaStream_t stream);

// Hopper kernel for 1..32 heads, attention_sm90_small.cu: 16- or 32-head tiles (head_tiles 1 or 2),
// mma.sync, two producer warpgroups; the layouts, alignment and image check of the kernel above.
// Whether its staged producers (FP8 rows by the bulk-copy engine) serve `head_tiles` tiles of
// `layout`: 16-head tiles of the FP8 layouts, 32-head tiles of the 584 B layout (their stage holds
// the FP8 bytes; attention_params::small_staged asks for them).
constexpr DSV4_HD bool small_staged_applies(int head_tiles, uint32_t layout) {
  return (head_tiles == 1 && layout != DSV4_KV_LAYOUT_BF16) ||
         (head_tiles == 2 && layout == DSV4_KV_LAYOUT_FP8_V4_584B);
}
// Whether it has a persistent form (attention_sm90_small_persistent) for `head_tiles` tiles of
// `layout`: 16-head tiles of staged FP8 rows (32-head tiles were slower persistent: planner.cpp).
constexpr DSV4_HD bool small_persistent_applies(int head_tiles, uint32_t layout) {
  return head_tiles == 1 && small_staged_applies(1, layout);
}
// Its dynamic shared memory for `head_tiles` tiles of `layout`, with the staged producers if
// `staged` asks for them where they apply.
size_t attention_sm90_small_smem_bytes(int head_tiles, uint32_t layout, bool staged);
bool attention_sm90_small_compiled();
cudaError_t attention_sm90_small_configure();
// CTAs of its staged kernel of `head_tiles` tiles of `layout` the device holds at once (its
// persistent CTAs; after attention_sm90_small_configure); 0 where it has no persistent form.
cudaError_t attention_sm90_small_resident(int head_tiles, uint32_t layout, int sm_count,
                                          int* resident);
// Whether run p takes persistent CTAs (p.resident_ctas[0] of them, each running its work items in
// turn): 16-head tiles of staged rows, one key split, at least three times the work items the
// device holds at once, all of one length (a fixed item order would lose the hardware's balancing
// of uneven ones); with p.persistent_forced, any lengths and more items than CTAs. Host code in
// planner.cpp (tested without a GPU).
bool attention_sm90_small_persistent(const attention_params& p);
// Enqueues the kernel and, when num_splits > 1, the combine kernel.
cudaError_t attention_sm90_small_launch(const attention_params& p, cudaStream_t stream);

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
struct export_params {
  paged_geometry geometry;
  paged_capacity capacity;
  dsv4_mod_paged_batch batch;
  int64_t num_tokens;
  uint32_t format;  // DSV4_EXPORT_*
  dsv4_mod_export_list swa, cmp, combined;
};
// Largest list width the CSR exporter stages in shared memory.
constexpr int64_t kExportMaxCsrWidth = 12288;
cudaError_t export_launch(const export_params& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace dsv4
