// Interface between the HIP module's host code (module.cpp, planner.cpp) and its kernels (*.hip).
// Only POD parameter structs and launch functions cross it; every launcher enqueues on the given
// stream, never allocates and never synchronises (capturable in a hipGraph).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/index.h"
#include "common/paged_export.h"
#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"
#include "geometry.h"
#include "platform.h"

namespace dsv4 {
namespace hip {

// One attention launch over explicit lists (paged mode builds its lists first, then uses this).
struct attention_params {
  int32_t num_tokens;
  int32_t seq_q;
  int32_t num_heads;
  int32_t head_dim_qk;        // 512 or 576 (V3.2 layout)
  int32_t heads_per_cta;      // the kernel's head group (a kSimtHeadGroups / kMfmaHeadGroups entry)
  int32_t head_groups;        // ceil(num_heads / heads_per_cta)
  int32_t num_splits;         // CTAs along the key axis per (token, head group)
  int32_t chunks_per_split;   // chunks (of both lists together) each split walks
  int32_t chunks[2];          // kChunkKeys-key chunks of the main / extra list (from the widths)
  int32_t width[2];           // list widths: positions beyond are never read
  int32_t q_is_fp8;           // 1: q holds e4m3 (per-tensor FP8 plans)
  int32_t out_f32;            // 1: out is fp32 (the plan's out_dtype: partials for dsv4_merge)
  int32_t aligned16;          // caches allow 16-byte loads (base and block stride)
  float logit_scale_log2[2];  // softmax_scale * q_scale * kv_scale(list) * log2(e)
  list_value_scales values;   // value multipliers (multiplier[0] on each output row) and O's unit
                              // conversions (value_units; common/layout.h)
  dsv4_mod_token_view q;
  dsv4_mod_token_view out;
  dsv4_mod_token_view lse;
  dsv4_mod_token_view max_logits;
  dsv4_mod_cache cache[2];
  dsv4_mod_index_list list[2];
  const float* attn_sink;
  // Split runs: each (token, split, head) leaves its normalised O, lse and max logit (natural log;
  // +inf / -inf without a valid key) for merge_launch, which applies the sink.
  float* partial_o;    // [T][splits][H][512]
  float* partial_lse;  // [T][splits][H]
  float* partial_max;  // [T][splits][H]
};

// A merge of P partial results per (token, head) (spec 12.2, backends/common/softmax.h): both
// dsv4_merge and the combine of a split attention run.
struct merge_params {
  int32_t num_parts;
  int32_t num_tokens;
  int32_t seq_q;  // the out / lse / max_logits views' token split (1 for dsv4_merge)
  int32_t num_heads;
  const void* out_parts;  // (p, t, h, d) at p*stride_p + t*stride_t + h*stride_h + d
  int32_t out_parts_f32;  // 1 = fp32, 0 = bf16
  int64_t part_stride_p, part_stride_t, part_stride_h;
  const float* lse_parts;  // (p, t, h) at p*lse_stride_p + t*lse_stride_t + h*lse_stride_h
  int64_t lse_stride_p, lse_stride_t, lse_stride_h;
  const float* max_parts;  // NULL, or the parts' max logits with the lse strides
  const float* attn_sink;  // [H] or NULL
  int32_t out_f32;         // out holds fp32 (an attention run's out_dtype), else bf16
  dsv4_mod_token_view out;
  dsv4_mod_token_view lse;         // data NULL if not wanted
  dsv4_mod_token_view max_logits;  // data NULL if not wanted
};

// Prepares the kernel for its shared memory and returns the CTAs one compute unit holds at once.
hipError_t attention_configure(kernel_family f, int heads_per_cta, int head_dim_qk,
                               int* blocks_per_cu);
// Enqueues the attention kernel and, when num_splits > 1, the merge of its partials.
hipError_t attention_launch(kernel_family f, const attention_params& p, hipStream_t stream);

// What the code object built for the device says about it (one tiny kernel, at context creation):
// its wave size and whether it has the matrix-core kernels.
struct device_traits {
  int32_t wave_size;
  int32_t mfma;      // 1: the CDNA matrix-core kernel is compiled in
  int32_t arch;      // gfx number as hex digits (0x90a, 0x940, 0x1100, ...), 0 elsewhere
  int32_t checksum;  // wave_size + 7 * mfma + arch: a kernel that did not run leaves garbage
};
// Runs the traits kernel on the current device and waits for it.
hipError_t query_device_traits(device_traits* out);

// dsv4_merge and split runs' combine.
hipError_t merge_launch(const merge_params& m, hipStream_t stream);
merge_params merge_params_of(const dsv4_mod_merge& m);

// Paged mode: every token's SWA and compressed lists into the workspace (one thread per token,
// backends/common/paged_index.h).
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
hipError_t paged_build_launch(const paged_build_params& p, hipStream_t stream);

// Paged-mode index export (dsv4_export_indices) in one of the engines' formats.
// Largest list width the CSR exporter stages in shared memory (48 KB: every device has it).
constexpr int64_t kExportMaxCsrWidth = 12288;
hipError_t export_launch(const export_params& p, hipStream_t stream);

// KV writer: the shared quantiser (layout.h quantize_entry); of several rows aimed at one slot the
// last one wins (spec 12.4).
hipError_t kv_write_launch(const dsv4_mod_kv_write& w, hipStream_t stream);

}  // namespace hip
}  // namespace dsv4
