/*
 * libdsv4 module ABI: the one entry symbol every backend module exports, and the two versioned
 * tables that cross between libdsv4 (the host) and a module. Pure C. Modules never link libdsv4.
 *
 * Negotiation (Vulkan-loader semantics, versions packed major << 16 | minor):
 *   the host writes the newest module ABI it speaks into *inout_abi_version; the module writes back
 *   min(host, module) and returns DSV4_STATUS_OK, or returns DSV4_STATUS_ABI_MISMATCH when the
 * majors differ. The host rejects a module whose answer has another major or whose
 * iface->struct_size is smaller than the 1.0 table. The host never reads a slot past
 * iface->struct_size.
 *
 * Everything the host passes has been validated against the public API: pointers are resolved
 * (byte_offset applied), shapes checked against the plan, strides converted to elements of the
 * tensor's dtype. Modules report errors by calling host->set_error() and returning a status; no
 * slot may throw, abort or exit.
 */
#ifndef DSV4_BACKEND_H
#define DSV4_BACKEND_H

#include <dsv4/dsv4.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_MODULE_ABI_MAJOR 2u
#define DSV4_MODULE_ABI_MINOR 0u
#define DSV4_MODULE_ABI_VERSION ((DSV4_MODULE_ABI_MAJOR << 16) | DSV4_MODULE_ABI_MINOR)
#define DSV4_MODULE_ENTRY_SYMBOL "dsv4_backend_entry"

#if defined(_WIN32)
#define DSV4_MODULE_EXPORT __declspec(dllexport)
#else
#define DSV4_MODULE_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------ host -> module -------------------------------------------
 */
typedef struct dsv4_host_services {
  uint32_t struct_size;      /**< sizeof as the host built it; modules never read past it */
  uint32_t host_abi_version; /**< DSV4_MODULE_ABI_VERSION of the host */
  /** Emits one log line (no newline) if `level` passes the host's log level. Thread-safe. */
  void (*log)(int32_t level, const char* module_name, const char* message);
  /** Sets the calling thread's dsv4_last_error_message(). */
  void (*set_error)(const char* message);
  /** getenv for module settings (DSV4_CPU_THREADS ...); NULL if unset. */
  const char* (*get_env)(const char* name);
  /* End of module ABI 2.0 host services — append only below. */
} dsv4_host_services;

/* ------------------------------------ normalised views -----------------------------------------
 */
/** A per-token, per-head tensor view (q, out, lse, max_logits). Token t = b*seq_q + s. Element
 *  (t, h, d) lives at data + b*stride_b + s*stride_s + h*stride_h + d (elements of its dtype). */
typedef struct dsv4_mod_token_view {
  void* data; /**< NULL when the tensor was not given */
  int64_t stride_b;
  int64_t stride_s;
  int64_t stride_h;
} dsv4_mod_token_view;

/** One KV cache: slot s lives in block s / block_size at entry s % block_size. */
typedef struct dsv4_mod_cache {
  uint8_t* base;   /**< block 0 (NULL when absent) */
  uint32_t layout; /**< DSV4_KV_LAYOUT_* */
  int32_t block_size;
  int64_t block_stride_bytes;
  int64_t num_blocks; /**< capacity = num_blocks * block_size slots */
  float kv_scale;     /**< per-tensor FP8 layout only */
  uint32_t flags;     /**< DSV4_KV_CACHE_FLAG_* */
} dsv4_mod_cache;

/* ------------------------------------ the derived plan -----------------------------------------
 */
/** One planned cache: the public description resolved (block stride >= the layout's minimum). */
typedef struct dsv4_mod_cache_plan {
  uint32_t layout;            /**< DSV4_KV_LAYOUT_*; NONE when the plan has no such cache */
  uint32_t flags;             /**< DSV4_KV_CACHE_FLAG_* */
  int32_t block_size;         /**< entries per block */
  int32_t bytes_per_token;    /**< layout_bytes_per_token */
  int64_t block_stride_bytes; /**< resolved */
  float kv_scale;             /**< per-tensor FP8 layout: dequantisation scale; 1 otherwise */
  int32_t head_dim;           /**< dims an entry holds (512; 576 for the V3.2 layout) */
} dsv4_mod_cache_plan;

/** Where a paged run's lists live in the workspace (byte offsets from the workspace start, each
 *  256-aligned; backends/common/paged_index.h paged_workspace). All 0 for explicit plans. */
typedef struct dsv4_mod_lists_map {
  uint64_t swa_indices; /**< int32 [max_tokens, window] */
  uint64_t swa_lengths; /**< int32 [max_tokens] */
  uint64_t cmp_indices; /**< int32 [max_tokens, cmp_width] (empty for SWA-only layers) */
  uint64_t cmp_lengths; /**< int32 [max_tokens] */
  uint64_t bytes;       /**< total, a multiple of 256; a module's own scratch goes after it */
} dsv4_mod_lists_map;

/** The plan as every module sees it: normalised, validated and derived once by the host. */
typedef struct dsv4_mod_plan {
  uint32_t struct_size; /**< sizeof(dsv4_mod_plan) as the host built it */
  uint32_t mode;        /**< DSV4_MODE_EXPLICIT / DSV4_MODE_PAGED */
  uint32_t flags;       /**< DSV4_PLAN_FLAG_* (known bits only) */
  int32_t num_heads;    /**< 1..128 */
  int32_t head_dim_qk;  /**< 512, or 576 (V3.2 layout) */
  int32_t head_dim_v;   /**< 512 */
  dsv4_dtype q_dtype;   /**< bf16, or e4m3 with the per-tensor FP8 layout */
  float q_scale;        /**< e4m3 q: dequantisation scale; 1 otherwise */
  float softmax_scale;  /**< resolved (0 in the options = head_dim_qk^-0.5) */
  /** softmax_scale x q_scale x cache[i].kv_scale: the factor of q . (raw entry) for list i (the
   *  per-tensor FP8 layout keeps raw e4m3 rows; kv_scale also scales that list's values). */
  float logit_scale[2];
  int32_t max_tokens;           /**< T capacity */
  dsv4_mod_cache_plan cache[2]; /**< [0] main (SWA), [1] extra (compressed); NONE if absent */
  /** Candidates per token of list i: explicit topk / extra_topk (CSR: the most entries a row may
   *  hold); paged: window / cmp_width. 0 for an absent list. */
  int32_t list_width[2];
  uint32_t index_format; /**< explicit: DSV4_INDEX_DENSE / CSR; paged: DENSE (the built lists) */
  /* Paged mode (spec section 4); zero in explicit plans. */
  int32_t compress_ratio;     /**< 1 (SWA only), 4 (C4A), 128 (C128A) */
  int32_t window;             /**< W */
  int32_t index_topk;         /**< C4A top-k K */
  int32_t cmp_width;          /**< compressed list width: 0, index_topk or the C128A width */
  int32_t flashinfer_columns; /**< W + round_up(cmp_width, 4) (DSV4_EXPORT_FLASHINFER) */
  int32_t decode_threshold;
  int32_t max_requests;
  int32_t max_swa_blocks_per_request;
  int32_t max_cmp_blocks_per_request;
  int32_t compressed_block_tokens;
  int64_t max_model_len;
  dsv4_mod_lists_map lists; /**< the paged lists in the workspace */
  dsv4_dtype out_dtype; /**< out: bf16, or fp32 (partials for dsv4_merge); refuse what you lack */
  int32_t reserved;
} dsv4_mod_plan;

/** One explicit candidate list per token (dense or CSR), see backends/common/index.h. */
typedef struct dsv4_mod_index_list {
  const int32_t* indices; /**< NULL when the list is absent */
  uint32_t format;        /**< DSV4_INDEX_DENSE / DSV4_INDEX_CSR */
  int32_t width;          /**< dense: entries per row; CSR: plan's max per row */
  int64_t stride_b;       /**< dense: row of token t starts at b*stride_b + s*stride_s */
  int64_t stride_s;
  int64_t stride_k;       /**< dense: element stride inside a row */
  const int32_t* indptr;  /**< CSR: row t = indices[indptr[t] .. indptr[t+1]) */
  int64_t num_entries;    /**< CSR: length of the flat indices array (bounds indptr values) */
  const int32_t* lengths; /**< optional cap: entry i counts only if i < length(t) */
  int64_t len_stride_b;   /**< length(t) = lengths[b*len_stride_b + s*len_stride_s] */
  int64_t len_stride_s;
} dsv4_mod_index_list;

/** Paged-mode batch description (spec section 4). All int32, device pointers on GPU backends. */
typedef struct dsv4_mod_paged_batch {
  int32_t num_reqs;
  int32_t reserved;
  const int32_t* query_start_loc; /**< [num_reqs + 1] */
  const int32_t* seq_lens;        /**< [num_reqs] */
  const int32_t* swa_block_table; /**< [num_reqs, swa_bt_cols] with row stride swa_bt_stride */
  int64_t swa_bt_stride;
  int32_t swa_bt_cols;
  int32_t cmp_bt_cols;
  const int32_t* cmp_block_table; /**< NULL for SWA-only layers */
  int64_t cmp_bt_stride;
  const int32_t* slot_mapping; /**< [num_tokens]; < 0 = padding token */
  const int32_t* topk_indices; /**< C4A: [num_tokens, index_topk] request-local, row stride */
  int64_t topk_stride;
} dsv4_mod_paged_batch;

typedef struct dsv4_mod_run {
  uint32_t struct_size;
  uint32_t mode;                  /**< DSV4_MODE_* (same as the plan) */
  int32_t num_tokens;             /**< T */
  int32_t seq_q;                  /**< S (1 for 3-D q) */
  dsv4_mod_token_view q;          /**< dtype per plan (bf16 / e4m3) */
  dsv4_mod_token_view out;        /**< the plan's out_dtype (bf16, or fp32) */
  dsv4_mod_token_view lse;        /**< fp32, data NULL if not requested */
  dsv4_mod_token_view max_logits; /**< fp32, data NULL if not requested */
  dsv4_mod_cache swa_cache;
  dsv4_mod_cache extra_cache;     /**< base NULL when absent */
  const float* attn_sink;         /**< [H] or NULL */
  dsv4_mod_index_list main_list;  /**< explicit mode */
  dsv4_mod_index_list extra_list; /**< explicit mode (indices NULL when absent) */
  dsv4_mod_paged_batch paged;     /**< paged mode */
  void* workspace;
  size_t workspace_bytes;
  void* stream;
} dsv4_mod_run;

typedef struct dsv4_mod_kv_write {
  uint32_t struct_size;
  int32_t dim; /**< values per row (512, 576 for V3.2) */
  dsv4_mod_cache cache;
  int64_t num_rows;
  const void* values; /**< row r at values + r*values_row_stride elements */
  int64_t values_row_stride;
  int32_t values_is_bf16; /**< 1 = bf16, 0 = fp32 */
  int32_t reserved;
  const int32_t* slots; /**< [num_rows]; < 0 skipped */
  void* stream;
} dsv4_mod_kv_write;

typedef struct dsv4_mod_ctx_config {
  uint32_t struct_size;
  int32_t device_id;
  int32_t num_threads; /**< resolved by the host (options, DSV4_CPU_THREADS); 0 = module default */
  int32_t reserved;
} dsv4_mod_ctx_config;

/** Index-export request; defined in dsv4_backend_export.h (paged mode). */
struct dsv4_mod_export;

/** A merge of P partial results (dsv4_merge, spec 12.2). Element (p, t, h, d) of out_parts lives
 *  at out_parts + p*part_stride_p + t*part_stride_t + h*part_stride_h + d (elements of its dtype);
 *  lse_parts likewise with the lse strides. */
typedef struct dsv4_mod_merge {
  uint32_t struct_size;
  int32_t num_parts;     /**< P >= 1 */
  int32_t num_tokens;    /**< T */
  int32_t num_heads;     /**< H */
  const void* out_parts; /**< bf16 or fp32 */
  int32_t out_parts_f32; /**< 1 = fp32, 0 = bf16 */
  int32_t reserved;
  int64_t part_stride_p, part_stride_t, part_stride_h;
  const float* lse_parts;
  int64_t lse_part_stride_p, lse_part_stride_t, lse_part_stride_h;
  const float* attn_sink; /**< [H] or NULL */
  void* out;              /**< bf16 (t, h, d) at out + t*out_stride_t + h*out_stride_h + d */
  int64_t out_stride_t, out_stride_h;
  float* lse; /**< fp32 or NULL */
  int64_t lse_stride_t, lse_stride_h;
  void* stream;
} dsv4_mod_merge;

/* ------------------------------------ module -> host -------------------------------------------
 */
typedef struct dsv4_backend_iface {
  uint32_t struct_size;       /**< sizeof the module's table; the host never reads past it */
  uint32_t abi_version;       /**< the module's own newest ABI */
  const char* name;           /**< "cpu", "cuda" — selection name, static storage */
  const char* module_version; /**< free text, static storage */
  int32_t device_type;        /**< DSV4_DEVICE_* served */
  int32_t reserved;
  /** Can this module run here? score 0 = no (reason says why: "no CUDA driver"). Never crashes
   *  when the vendor runtime is missing. */
  dsv4_status (*probe)(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t reason_capacity);
  dsv4_status (*get_device_info)(int32_t index, dsv4_device_info* out_info);
  dsv4_status (*ctx_create)(const dsv4_mod_ctx_config* config, void** out_mctx);
  void (*ctx_destroy)(void* mctx);
  /** The derived plan (valid for the call only: copy what you keep). Check only what this module
   *  alone knows; UNSUPPORTED with the reason for what it does not serve. */
  dsv4_status (*plan_create)(void* mctx, const dsv4_mod_plan* plan, void** out_mplan);
  void (*plan_destroy)(void* mplan);
  dsv4_status (*plan_get_workspace_size)(const void* mplan, size_t* out_bytes);
  dsv4_status (*plan_get_kernel_name)(const void* mplan, char* buffer, size_t capacity);
  dsv4_status (*run)(const void* mplan, const dsv4_mod_run* run);
  dsv4_status (*kv_write)(void* mctx, const dsv4_mod_kv_write* write);
  /** Paged plans only: writes the index lists a paged run would use into caller buffers in the
   *  formats engines use (dsv4_export_indices). NULL if unsupported. */
  dsv4_status (*export_indices)(const void* mplan, const dsv4_mod_run* batch,
                                const struct dsv4_mod_export* exp);
  /** dsv4_merge on this module's device (spec 12.2). NULL if unsupported. */
  dsv4_status (*merge)(void* mctx, const struct dsv4_mod_merge* merge);
  /* End of module ABI 2.0 — append only below. */
} dsv4_backend_iface;

/** The one symbol a module exports (DSV4_MODULE_ENTRY_SYMBOL). */
typedef dsv4_status (*dsv4_backend_entry_fn)(uint32_t* inout_abi_version,
                                             const dsv4_host_services* host,
                                             const dsv4_backend_iface** out_iface);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSV4_BACKEND_H */
