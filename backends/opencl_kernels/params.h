/*
 * Kernel parameter blocks of the OpenCL C kernels (dsv4_kernels.cl), passed by value. One
 * definition for both sides: the host modules (libdsv4-opencl.so, libdsv4-level-zero.so) include
 * this header as C/C++, and the build prepends it to the kernel source. Members are ordered by size
 * with explicit padding, so OpenCL C and the x86-64/AArch64 host ABIs give the same layout (the
 * kernels report their sizeof to tests/opencl, which compares it with the host's).
 */
#ifndef DSV4_CL_PARAMS_H
#define DSV4_CL_PARAMS_H

/* OpenCL C compilers define __OPENCL_C_VERSION__ (offline clang) or __OPENCL_VERSION__ (runtimes).
 */
#if defined(__OPENCL_C_VERSION__) || defined(__OPENCL_VERSION__)
#define DSV4_CL_DEVICE_SIDE 1
#endif

#ifdef DSV4_CL_DEVICE_SIDE
typedef long dsv4_cl_i64;
typedef int dsv4_cl_i32;
typedef uint dsv4_cl_u32;
#else
#include <stdint.h>
typedef int64_t dsv4_cl_i64;
typedef int32_t dsv4_cl_i32;
typedef uint32_t dsv4_cl_u32;
#endif

#ifdef DSV4_CL_DEVICE_SIDE
/* The public constants the kernels use (include/dsv4/dsv4_types.h, dsv4.h; tests/opencl checks
 * that the kernels decode every layout exactly as backends/common does). */
#define DSV4_KV_LAYOUT_NONE 0u
#define DSV4_KV_LAYOUT_BF16 1u
#define DSV4_KV_LAYOUT_FP8_V4_584B 2u
#define DSV4_KV_LAYOUT_FP8_V32_656B 3u
#define DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR 4u
#define DSV4_KV_LAYOUT_FP16 5u
#define DSV4_KV_CACHE_FLAG_FP8_FNUZ 1u
#define DSV4_INDEX_DENSE 0u
#define DSV4_INDEX_CSR 1u
#define DSV4_EXPORT_FLASHMLA 0u
#define DSV4_EXPORT_CSR 1u
#define DSV4_EXPORT_FLASHINFER 2u
#endif

/* Work-group geometry of the attention kernel: heads per work-group, keys per chunk and work-items
 * (one per (head, key) pair of a chunk; 16 per head own 32 output dims each). */
#define DSV4_CL_HEAD_TILE 8
#define DSV4_CL_KEY_CHUNK 16
#define DSV4_CL_ATTN_THREADS (DSV4_CL_HEAD_TILE * DSV4_CL_KEY_CHUNK)
#define DSV4_CL_MAX_DQK 576
#define DSV4_CL_KEY_STRIDE (DSV4_CL_MAX_DQK + 1) /* odd: column reads hit distinct banks */
#define DSV4_CL_MERGE_THREADS 64
#define DSV4_CL_SCAN_THREADS 256

/* A per-token, per-head view (q, out, lse, max_logits): element (t, h, d) at
 * (t / seq_q) * stride_b + (t % seq_q) * stride_s + h * stride_h + d. */
typedef struct dsv4_cl_view {
  dsv4_cl_i64 stride_b;
  dsv4_cl_i64 stride_s;
  dsv4_cl_i64 stride_h;
} dsv4_cl_view;

/* One KV cache (dsv4_mod_cache without the pointer). */
typedef struct dsv4_cl_cache {
  dsv4_cl_i64 block_stride; /* bytes */
  dsv4_cl_i64 num_blocks;
  dsv4_cl_i32 layout;
  dsv4_cl_i32 block_size;
  dsv4_cl_u32 flags;
  dsv4_cl_i32 present; /* 0: no cache (every candidate invalid) */
} dsv4_cl_cache;

/* One candidate list (dsv4_mod_index_list without the pointers). */
typedef struct dsv4_cl_list {
  dsv4_cl_i64 stride_b; /* dense */
  dsv4_cl_i64 stride_s;
  dsv4_cl_i64 stride_k;
  dsv4_cl_i64 len_stride_b;
  dsv4_cl_i64 len_stride_s;
  dsv4_cl_i64 num_entries; /* CSR: entries of the flat array */
  dsv4_cl_i32 present;
  dsv4_cl_i32 format; /* DSV4_INDEX_DENSE / CSR */
  dsv4_cl_i32 width;  /* dense */
  dsv4_cl_i32 has_lengths;
} dsv4_cl_list;

typedef struct dsv4_cl_attention_params {
  dsv4_cl_view q, out, lse, max_logits;
  dsv4_cl_cache cache[2];
  dsv4_cl_list list[2];
  float logit_scale[2]; /* softmax scale x q scale x per-tensor kv scale, per list */
  float weight[2];      /* each list's value multiplier, on its fp32 P (common/layout.h) */
  dsv4_cl_i32 num_tokens;
  dsv4_cl_i32 seq_q;
  dsv4_cl_i32 num_heads;
  dsv4_cl_i32 head_dim_qk;
  dsv4_cl_i32 q_fp8;
  dsv4_cl_i32 has_lse;
  dsv4_cl_i32 has_max_logits;
  dsv4_cl_i32 has_sink;
  dsv4_cl_i32 out_f32; /* out holds fp32 (partials for dsv4_merge), else bf16 */
} dsv4_cl_attention_params;

/* Paged geometry (backends/common/paged_index.h paged_geometry) and batch scalars. */
typedef struct dsv4_cl_paged_params {
  dsv4_cl_i64 swa_bt_stride;
  dsv4_cl_i64 cmp_bt_stride;
  dsv4_cl_i64 topk_stride;
  dsv4_cl_i64 swa_capacity;
  dsv4_cl_i64 cmp_capacity;
  dsv4_cl_i32 ratio;
  dsv4_cl_i32 window;
  dsv4_cl_i32 swa_block_size;
  dsv4_cl_i32 cmp_block_size;
  dsv4_cl_i32 cmp_width;
  dsv4_cl_i32 decode_threshold;
  dsv4_cl_i32 num_reqs;
  dsv4_cl_i32 swa_bt_cols;
  dsv4_cl_i32 cmp_bt_cols;
  dsv4_cl_i32 num_tokens;
} dsv4_cl_paged_params;

/* One exported list (dsv4_mod_export_list without the pointers). */
typedef struct dsv4_cl_export_list {
  dsv4_cl_i64 row_stride;
  dsv4_cl_i64 col_stride;
  dsv4_cl_i64 width;
  dsv4_cl_i64 len_stride;
  dsv4_cl_i64 indptr_stride;
  dsv4_cl_i32 present;
  dsv4_cl_i32 has_lengths;
} dsv4_cl_export_list;

typedef struct dsv4_cl_export_params {
  dsv4_cl_export_list swa, cmp, combined;
  dsv4_cl_i32 format;
  dsv4_cl_i32 pad0;
} dsv4_cl_export_params;

typedef struct dsv4_cl_kv_write_params {
  dsv4_cl_i64 block_stride;
  dsv4_cl_i64 num_blocks;
  dsv4_cl_i64 num_rows;
  dsv4_cl_i64 values_row_stride;
  float kv_scale;
  dsv4_cl_i32 layout;
  dsv4_cl_i32 block_size;
  dsv4_cl_i32 values_is_bf16;
} dsv4_cl_kv_write_params;

typedef struct dsv4_cl_merge_params {
  dsv4_cl_i64 part_stride_p, part_stride_t, part_stride_h;
  dsv4_cl_i64 lse_part_stride_p, lse_part_stride_t, lse_part_stride_h;
  dsv4_cl_i64 out_stride_t, out_stride_h;
  dsv4_cl_i64 lse_stride_t, lse_stride_h;
  dsv4_cl_i32 num_parts;
  dsv4_cl_i32 num_tokens;
  dsv4_cl_i32 num_heads;
  dsv4_cl_i32 out_parts_f32;
  dsv4_cl_i32 has_sink;
  dsv4_cl_i32 has_lse;
} dsv4_cl_merge_params;

#endif /* DSV4_CL_PARAMS_H */
