/*
 * libdsv4 — DeepSeek-V4 sparse MLA attention behind a stable C ABI.
 *
 *   dsv4_ctx_create  -> picks a backend module for a device (CPU, CUDA, ...)
 *   dsv4_plan_create -> fixes one layer's static configuration and capacities; reports workspace
 *   dsv4_run         -> one attention call (explicit index lists, or an engine's paged batch)
 *
 * Threading: a dsv4_ctx is thread-safe (only create/destroy must not race with its use). A
 * dsv4_plan is read-only after creation; concurrent dsv4_run calls on one plan need distinct
 * workspaces. Errors: every function returns a dsv4_status; on failure dsv4_last_error_message()
 * (thread-local) names the argument at fault, out-parameters and output tensors are left untouched.
 * No function aborts, exits or lets an exception escape. Go callers: read the message in the same
 * cgo call.
 *
 * Structs: every options/args/info struct starts with struct_size and only grows at its end. The
 * dsv4_*_init(p) macros call the exported function dsv4_*_init(p, sizeof(*p)) with the size of the
 * caller's header, so a newer library never writes past an older caller's struct (FFI callers pass
 * the size they allocated). Output info structs: set struct_size = sizeof before the call.
 *
 * Environment variables (read at dsv4_ctx_create / enumeration):
 * | variable             | effect                                                   | default  |
 * setuid   |
 * |----------------------|----------------------------------------------------------|----------|----------|
 * | DSV4_BACKEND         | backend name ("cpu", "cuda", ...) when options name none | auto     |
 * honoured | | DSV4_BACKEND_DISABLE | comma-separated module names (globs) never loaded        |
 * none     | honoured | | DSV4_BACKEND_PATH    | colon-separated extra module directories | none |
 * IGNORED  | | DSV4_CPU_THREADS     | worker threads of the CPU backend                        |
 * cores    | honoured | | DSV4_LOG_LEVEL       | error, warn, info, debug (debug: one line per
 * candidate) | warn     | honoured |
 *
 * Module search order: options.module_dir, DSV4_BACKEND_PATH, <dir of libdsv4.so>/dsv4/backends,
 * <dir of libdsv4.so>, the configured install directory (only when libdsv4.so runs from that
 * install). Never the current or the executable's directory: relative directories are refused
 * (options.module_dir: INVALID_ARGUMENT; DSV4_BACKEND_PATH entries: ignored with a warning).
 */
#ifndef DSV4_H
#define DSV4_H

#include "dsv4_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------- version ---------------------------------------------
 */
/** DSV4_VERSION_NUMBER of the loaded library. Host-only; thread-safe. */
DSV4_API uint32_t dsv4_get_version(void);
/** "0.1.0" (static storage). */
DSV4_API const char* dsv4_get_version_string(void);

/* ----------------------------------------- errors ----------------------------------------------
 */
/** Static name of a status ("DSV4_STATUS_INVALID_ARGUMENT"); "DSV4_STATUS_UNKNOWN" otherwise. */
DSV4_API const char* dsv4_status_string(dsv4_status status);
/** Detail of the last failing call on this thread ("" if none). Valid until the next failing call
 *  on this thread. */
DSV4_API const char* dsv4_last_error_message(void);

/* ----------------------------------------- logging ---------------------------------------------
 */
#define DSV4_LOG_ERROR 0
#define DSV4_LOG_WARN 1
#define DSV4_LOG_INFO 2
#define DSV4_LOG_DEBUG 3
/** Log sink: called with a NUL-terminated line (no newline). Must be thread-safe. */
typedef void (*dsv4_log_fn)(int32_t level, const char* message, void* user_data);

/* ----------------------------------------- context ---------------------------------------------
 */
typedef struct dsv4_ctx dsv4_ctx;
typedef struct dsv4_plan dsv4_plan;

typedef struct dsv4_ctx_options {
  uint32_t struct_size;   /**< sizeof(dsv4_ctx_options); set by dsv4_ctx_options_init */
  uint32_t api_version;   /**< DSV4_API_VERSION of the caller's header */
  dsv4_device device;     /**< device the tensors live on; default {DSV4_DEVICE_CPU, 0} */
  const char* backend;    /**< module name to use ("cpu", "cuda"); NULL = DSV4_BACKEND, then auto */
  const char* module_dir; /**< absolute extra module directory searched first; NULL = none */
  int32_t num_threads;    /**< CPU backend worker threads; 0 = DSV4_CPU_THREADS, then cores */
  int32_t log_level;      /**< DSV4_LOG_*; -1 = DSV4_LOG_LEVEL, then WARN */
  dsv4_log_fn log_fn;     /**< NULL = stderr */
  void* log_user_data;    /**< passed to log_fn */
} dsv4_ctx_options;

/** Sets struct_size, api_version and defaults. Returns INVALID_ARGUMENT for NULL. */
DSV4_API dsv4_status(dsv4_ctx_options_init)(dsv4_ctx_options* options, size_t struct_size);
#define dsv4_ctx_options_init(options) (dsv4_ctx_options_init)((options), sizeof(*(options)))

/** Loads candidate modules, selects the backend (options.backend > DSV4_BACKEND > highest probe
 *  score among modules serving options.device.device_type) and opens the device. On success
 *  *out_ctx owns a context; release it with dsv4_ctx_destroy. On failure *out_ctx is unchanged.
 *  Host-only; may allocate. options may be NULL (CPU defaults). */
DSV4_API dsv4_status dsv4_ctx_create(const dsv4_ctx_options* options, dsv4_ctx** out_ctx);
/** Releases a context; NULL is ignored. Plans created from it must be destroyed first. */
DSV4_API void dsv4_ctx_destroy(dsv4_ctx* ctx);

/* ------------------------------------ enumeration ----------------------------------------------
 */
/** One backend module candidate as the loader saw it. */
typedef struct dsv4_backend_info {
  uint32_t struct_size;
  int32_t available;    /**< 1 if the module loaded, negotiated and probed with score > 0 */
  int32_t score;        /**< probe score (0 = cannot run here) */
  int32_t device_type;  /**< DSV4_DEVICE_* the module serves */
  int32_t device_count; /**< devices the module found */
  uint32_t module_abi;  /**< negotiated module ABI, major << 16 | minor (0 if not negotiated) */
  char name[32];        /**< "cpu", "cuda", ... ("" if the module could not be read) */
  char path[512];       /**< file the module was loaded from */
  char status[256];     /**< why it is (un)available: "ok", "no CUDA driver", "ABI major 2 != 1" */
} dsv4_backend_info;

/** Enumerates every module file in the search path (same rules as dsv4_ctx_create; options may be
 *  NULL) into out[0 .. capacity). *out_count receives the total found, which may exceed capacity.
 *  out may be NULL when capacity is 0. Host-only; thread-safe. */
DSV4_API dsv4_status dsv4_enumerate_backends(const dsv4_ctx_options* options,
                                             dsv4_backend_info* out, int32_t capacity,
                                             int32_t* out_count);

typedef struct dsv4_device_info {
  uint32_t struct_size;
  int32_t device_type; /**< DSV4_DEVICE_* */
  int32_t device_id;
  int32_t compute_units; /**< CPU cores / GPU multiprocessors */
  int64_t memory_bytes;  /**< device memory (0 if unknown) */
  char name[128];        /**< "AMD EPYC ... (avx512_bf16)", "NVIDIA H200 (sm_90)" */
} dsv4_device_info;

/** Describes device `index` of the named backend module (after the same search as enumeration). */
DSV4_API dsv4_status dsv4_get_device_info(const dsv4_ctx_options* options, const char* backend,
                                          int32_t index, dsv4_device_info* out_info);

typedef struct dsv4_ctx_info {
  uint32_t struct_size;
  dsv4_device device;
  int32_t num_threads; /**< CPU backend worker threads (0 on GPU backends) */
  char backend[32];    /**< selected module name */
  char path[512];      /**< its file */
  char reason[256];    /**< why it was selected ("options.backend", "DSV4_BACKEND", "score 40") */
} dsv4_ctx_info;

DSV4_API dsv4_status dsv4_ctx_get_info(const dsv4_ctx* ctx, dsv4_ctx_info* out_info);

/* ------------------------------------ KV layouts -----------------------------------------------
 */
DSV4_API dsv4_status(dsv4_kv_layout_info_init)(dsv4_kv_layout_info* info, size_t struct_size);
#define dsv4_kv_layout_info_init(info) (dsv4_kv_layout_info_init)((info), sizeof(*(info)))
/** Byte geometry of `layout` for `block_size` entries per block. */
DSV4_API dsv4_status dsv4_kv_layout_get_info(uint32_t layout, int32_t block_size,
                                             dsv4_kv_layout_info* out_info);

/* ------------------------------------------ plan -----------------------------------------------
 */
/** Explicit mode: the caller passes physical slot lists (FlashMLA-compatible). */
#define DSV4_MODE_EXPLICIT 0u
/** Paged mode: the caller passes an engine's batch description (vLLM-style); lists are built by the
 *  backend (on the device for GPU backends). */
#define DSV4_MODE_PAGED 1u

/** Explicit-mode index formats. */
#define DSV4_INDEX_DENSE 0u /**< indices [T, width] (or [B, S, width]) + optional lengths */
#define DSV4_INDEX_CSR 1u   /**< indptr [T+1] + flat indices [nnz] (+ optional lengths cap) */

/** Plan flags (bitmask). */
#define DSV4_PLAN_FLAG_NONE 0u
/** Batch-invariant results: every token's out, lse and max_logits are bit-identical whatever else
 *  is in the run (batch size, the token's position, other tokens' lengths and values, decode or
 *  prefill mix, paged or explicit mode, graph capture), for one device model, library version and
 *  plan. A backend that cannot honour it refuses the plan with DSV4_STATUS_UNSUPPORTED. */
#define DSV4_PLAN_FLAG_BATCH_INVARIANT 1u
/** Run the backend's reference kernel (the CPU module's exact fp32 loop, the second opinion of its
 *  fast kernels). Backends with a single kernel family ignore it. */
#define DSV4_PLAN_FLAG_REFERENCE_KERNEL 2u

typedef struct dsv4_plan_options {
  uint32_t struct_size; /**< sizeof(dsv4_plan_options); set by dsv4_plan_options_init */
  uint32_t mode;        /**< DSV4_MODE_EXPLICIT (default) or DSV4_MODE_PAGED */
  uint32_t flags;       /**< DSV4_PLAN_FLAG_* */
  int32_t num_heads;    /**< query heads, 1..128, no padding required. Default 64. */
  int32_t head_dim_qk;  /**< 512 (default) or 576 (V3.2 layout only) */
  int32_t head_dim_v;   /**< 512 */
  float softmax_scale;  /**< logit scale; 0 = head_dim_qk^-0.5 */
  dsv4_dtype q_dtype;   /**< bf16 (default); e4m3 only with the per-tensor FP8 layout */
  float q_scale;        /**< per-tensor FP8 q only: dequantisation scale (default 1) */
  int32_t max_tokens;   /**< capacity: query tokens per run (T). Default 1024. */
  dsv4_kv_cache_desc
      swa_cache; /**< the main cache: SWA cache (paged) / `indices` cache (explicit) */
  dsv4_kv_cache_desc extra_cache; /**< compressed / extra cache; layout NONE when absent */
  /* explicit mode */
  uint32_t index_format; /**< DSV4_INDEX_DENSE or DSV4_INDEX_CSR (both lists) */
  int32_t topk;          /**< dense width of the main list (CSR: max entries per token) */
  int32_t extra_topk;    /**< dense width of the extra list (0 when no extra cache) */
  /* paged mode (spec section 4) */
  int32_t compress_ratio;   /**< <= 1: SWA-only; 4: C4A; 128: C128A. Default 1. */
  int32_t window;           /**< sliding window W. Default 128. */
  int32_t index_topk;       /**< C4A indexer top-k width K (512 Flash, 1024 Pro) */
  int32_t decode_threshold; /**< requests with query_len <= this are decodes. Default 1. */
  int64_t max_model_len;    /**< sets the C128A width round_up(ceil(L/128),128). Default 65536 */
  int32_t max_requests;     /**< capacity: requests per run. Default 256. */
  int32_t max_swa_blocks_per_request; /**< capacity: SWA block-table columns. Default 1024. */
  int32_t
      max_cmp_blocks_per_request;  /**< capacity: compressed block-table columns. Default 1024. */
  int32_t compressed_block_tokens; /**< logical tokens per compressed block (entries = this/ratio).
                                        Default 256. Must equal ratio * extra_cache.block_size. */
  /* 0.2 */
  dsv4_dtype out_dtype; /**< out's dtype: bf16 (default), or fp32 for partial results that
                             dsv4_merge combines later without a rounding step (spec 12.2).
                             A backend without an fp32 epilogue refuses fp32 (UNSUPPORTED). */
} dsv4_plan_options;

/** Sets struct_size and defaults (explicit mode, 64 heads, d 512, bf16 q and out, FP8 584 B caches
 *  with 64-entry blocks, no extra cache, dense indices, topk 128). */
DSV4_API dsv4_status(dsv4_plan_options_init)(dsv4_plan_options* options, size_t struct_size);
#define dsv4_plan_options_init(options) (dsv4_plan_options_init)((options), sizeof(*(options)))

/** Validates the options against the context's backend and builds an immutable plan. On success
 *  *out_plan owns it; release with dsv4_plan_destroy. Host-only; may allocate; not capturable. */
DSV4_API dsv4_status dsv4_plan_create(dsv4_ctx* ctx, const dsv4_plan_options* options,
                                      dsv4_plan** out_plan);
/** Releases a plan; NULL is ignored. */
DSV4_API void dsv4_plan_destroy(dsv4_plan* plan);

/** Workspace bytes every run of this plan needs (same for every run; allocate once per stream, on
 *  the plan's device). May be 0. */
DSV4_API dsv4_status dsv4_plan_get_workspace_size(const dsv4_plan* plan, size_t* out_bytes);

typedef struct dsv4_plan_info {
  uint32_t struct_size;
  uint32_t mode;
  int32_t num_heads;
  int32_t head_dim_qk;
  uint64_t workspace_bytes;
  char backend[32]; /**< module that runs the plan */
  char kernel[128]; /**< kernel variant chosen, e.g. "cpu-ref-f32" */
} dsv4_plan_info;

DSV4_API dsv4_status dsv4_plan_get_info(const dsv4_plan* plan, dsv4_plan_info* out_info);

/* ------------------------------------------- run -----------------------------------------------
 */
/**
 * Arguments of one attention call. Integer index tensors are int32. Unused tensors are NULL.
 *
 * Query geometry: q is [T, H, d_qk] or [B, S, H, d_qk] (token t = b*S + s), any strides with the
 * last dimension contiguous; out matches it with d_v = 512 (the plan's out_dtype: bf16 by default,
 * or fp32). lse / max_logits (fp32,
 * optional) are [T, H] or [B, S, H], or FlashMLA's [B, H, S] given by strides; lse excludes the
 * sink and is +inf for a token with no valid key; max_logits is -inf there.
 *
 * Explicit dense mode: indices [T, topk] or [B, S, topk]; lengths optional, [T] (3-D q) or [B] or
 * [B, S] (4-D q, FlashMLA's per-batch-row topk_length). Entry i of token t counts only if
 * i < length, 0 <= idx and idx < cache capacity (num_blocks * block_size).
 * Explicit CSR mode: indptr [T+1] and flat indices [nnz]; lengths optional (caps each row).
 * The extra list works the same against extra_cache.
 *
 * Paged mode: query_start_loc [R+1], seq_lens [R], swa_block_table [R, >=cols], cmp_block_table
 * [R, >=cols] (compressed layers), slot_mapping [T] (< 0 marks a padding token: output 0, lse
 * +inf), topk_indices [T, index_topk] request-local C4A indices (C4A only). See README "Paged
 * mode".
 *
 * Stream contract: enqueues on `stream` (cudaStream_t / hipStream_t; NULL for CPU); never
 * allocates, never synchronises; capturable in a CUDA/HIP graph. The CPU backend computes
 * synchronously.
 */
typedef struct dsv4_run_args {
  uint32_t struct_size;           /**< sizeof(dsv4_run_args); set by dsv4_run_args_init */
  uint32_t reserved;              /**< must be 0 */
  const dsv4_tensor* q;           /**< [T,H,d] or [B,S,H,d], bf16 */
  const dsv4_tensor* swa_cache;   /**< main cache, dim 0 = blocks */
  const dsv4_tensor* extra_cache; /**< extra/compressed cache or NULL */
  const dsv4_tensor* attn_sink;   /**< [H] fp32 (natural-log logit; +-inf allowed) or NULL */
  dsv4_tensor* out;               /**< [T,H,512] or [B,S,H,512], the plan's out_dtype */
  dsv4_tensor* lse;               /**< optional fp32 */
  dsv4_tensor* max_logits;        /**< optional fp32 */
  /* explicit mode */
  const dsv4_tensor* indices; /**< dense [T,topk] / [B,S,topk], or CSR flat [nnz] */
  const dsv4_tensor* indptr;  /**< CSR only: [T+1] */
  const dsv4_tensor* lengths; /**< optional */
  const dsv4_tensor* extra_indices;
  const dsv4_tensor* extra_indptr;
  const dsv4_tensor* extra_lengths;
  /* paged mode */
  const dsv4_tensor* query_start_loc;
  const dsv4_tensor* seq_lens;
  const dsv4_tensor* swa_block_table;
  const dsv4_tensor* cmp_block_table;
  const dsv4_tensor* slot_mapping;
  const dsv4_tensor* topk_indices;
  /* execution */
  void* workspace; /**< >= dsv4_plan_get_workspace_size bytes on the plan's device */
  size_t workspace_bytes;
  void* stream; /**< backend-native stream or NULL */
} dsv4_run_args;

DSV4_API dsv4_status(dsv4_run_args_init)(dsv4_run_args* args, size_t struct_size);
#define dsv4_run_args_init(args) (dsv4_run_args_init)((args), sizeof(*(args)))

/** Runs one attention call. Validates every argument against the plan first (host-side metadata
 *  only; device values are never read for validation); on failure nothing is written. */
DSV4_API dsv4_status dsv4_run(const dsv4_plan* plan, const dsv4_run_args* args);

/* ---------------------------------------- KV writer --------------------------------------------
 */
/**
 * Stores N rows into a cache of any layout at the given slots, quantising as vLLM does (spec 3.2:
 * per-64-dim-tile UE8M0 scale ceil(log2(max(amax,1e-4)/448)), RNE saturating e4m3; 3.4: fp32 *
 * (1/kv_scale) saturating e4m3; 3.5: V3.2 fp32 power-of-two scales). values: [N, d] bf16 or fp32
 * with d = the layout's head_dim_qk. slots: [N] int32 (negative = skip). Slots beyond the cache
 * capacity: the CPU backend returns INVALID_ARGUMENT before anything is written; GPU backends
 * (device memory is never read for validation) skip such rows. Same stream contract as dsv4_run.
 */
typedef struct dsv4_kv_write_args {
  uint32_t struct_size;
  uint32_t reserved;
  dsv4_kv_cache_desc cache_desc; /**< layout, block size, stride, kv_scale */
  const dsv4_tensor* values;     /**< [N, d] bf16 or fp32 */
  const dsv4_tensor* slots;      /**< [N] int32 */
  dsv4_tensor* cache;            /**< dim 0 = blocks */
  void* stream;
} dsv4_kv_write_args;

DSV4_API dsv4_status(dsv4_kv_write_args_init)(dsv4_kv_write_args* args, size_t struct_size);
#define dsv4_kv_write_args_init(args) (dsv4_kv_write_args_init)((args), sizeof(*(args)))
DSV4_API dsv4_status dsv4_kv_write(dsv4_ctx* ctx, const dsv4_kv_write_args* args);

/* ------------------------------------------ merge ----------------------------------------------
 */
/**
 * Merges P partial results over disjoint key sets of the same tokens into the result over their
 * union (spec 12.2): decode-context parallelism (each rank attends to its shard of the cache) and
 * very long contexts. Partials come from dsv4_run with attn_sink = NULL and lse requested; the
 * sink is applied once, here. A part with lse = +inf (no valid key) contributes nothing; a token
 * with no valid key in any part gets out = 0 and lse = +inf; a NaN propagates. Parts are combined
 * in index order (deterministic). Same stream contract as dsv4_run; out must not alias the parts.
 *
 * out_parts: [P, T, H, 512] bf16 or fp32 (the last dimension contiguous, any other strides);
 * lse_parts: [P, T, H] fp32; attn_sink: [H] fp32 or NULL; out: [T, H, 512] bf16; lse: [T, H] fp32
 * or NULL (the merged lse, sink excluded). P >= 1.
 */
typedef struct dsv4_merge_args {
  uint32_t struct_size;         /**< sizeof(dsv4_merge_args); set by dsv4_merge_args_init */
  uint32_t reserved;            /**< must be 0 */
  const dsv4_tensor* out_parts; /**< [P, T, H, 512] bf16 or fp32 */
  const dsv4_tensor* lse_parts; /**< [P, T, H] fp32, natural log, sink excluded */
  const dsv4_tensor* attn_sink; /**< [H] fp32 or NULL */
  dsv4_tensor* out;             /**< [T, H, 512] bf16 */
  dsv4_tensor* lse;             /**< [T, H] fp32 or NULL */
  void* stream;                 /**< backend-native stream or NULL */
} dsv4_merge_args;

DSV4_API dsv4_status(dsv4_merge_args_init)(dsv4_merge_args* args, size_t struct_size);
#define dsv4_merge_args_init(args) (dsv4_merge_args_init)((args), sizeof(*(args)))
/** Merges partial results (see dsv4_merge_args) on ctx's device. Validates every tensor first;
 *  on failure nothing is written. */
DSV4_API dsv4_status dsv4_merge(dsv4_ctx* ctx, const dsv4_merge_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSV4_H */
