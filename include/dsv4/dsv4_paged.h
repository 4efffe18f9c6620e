/*
 * libdsv4 — paged mode: exporting the index lists built from an engine's batch description.
 *
 * A paged plan (dsv4_plan_options.mode = DSV4_MODE_PAGED) builds every token's candidate lists from
 * query_start_loc / seq_lens / block tables / slot_mapping / C4A top-k (spec section 4). The same
 * lists can be written into caller buffers in the formats engines feed other kernels:
 *
 *   DSV4_EXPORT_FLASHMLA   dense SWA [T, >= W] int32 slots + swa_lengths [T], and dense
 *                          compressed [T, >= width] + cmp_lengths [T] (width = index_topk for
 *                          C4A, round_up(ceil(max_model_len/128), 128) for C128A; none for
 *                          SWA-only layers)
 *   DSV4_EXPORT_CSR        ROCm ragged: swa_indptr [T+1] + swa_indices flat [>= T*W], likewise
 *                          cmp_indptr + cmp_indices [>= T*width]; row t = the first length
 *                          entries of the dense row; *_lengths optional [T]
 *   DSV4_EXPORT_FLASHINFER combined_indices [T, >= W + PT] (PT = round_up(width, 4); columns
 *                          [0, W) SWA slots, [W, W+PT) compressed slots, -1 elsewhere) +
 *                          combined_lengths [T]: decode W + cmp_len, prefill
 *                          W + min((p+1)/ratio, width), padding W
 *
 * Slots are physical (block * block_size + entry) in the SWA / compressed cache; -1 = no candidate.
 * Dense columns beyond the list width are written -1. Padding tokens (slot_mapping < 0, or t >=
 * query_start_loc[R]) get all -1 and length 0 (FlashInfer: W). See README.md, "Paged mode".
 *
 * C99 and C++11 compatible. Includes dsv4.h (the inclusion is one-way).
 */
#ifndef DSV4_PAGED_H
#define DSV4_PAGED_H

#include "dsv4.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Export formats (dsv4_export_args.format). */
#define DSV4_EXPORT_FLASHMLA 0u   /**< dense [T, W] + [T, width] lists with lengths */
#define DSV4_EXPORT_CSR 1u        /**< indptr [T+1] + flat indices per list (ROCm, spec 4.8) */
#define DSV4_EXPORT_FLASHINFER 2u /**< one [T, W + PT] matrix + lengths (TRTLLM-gen, spec 4.9) */

/**
 * Arguments of dsv4_export_indices. Output tensors are int32, on the plan's device, any strides
 * (dense: the last dimension may be strided); unused ones are NULL.
 */
typedef struct dsv4_export_args {
  uint32_t struct_size; /**< sizeof(dsv4_export_args); set by dsv4_export_args_init */
  uint32_t format;      /**< DSV4_EXPORT_* */
  /** The paged batch as for dsv4_run: query_start_loc, seq_lens, swa_block_table,
   *  cmp_block_table, slot_mapping, topk_indices (C4A), swa_cache and extra_cache (their block
   *  counts bound the block-table entries). q, out, lse, sink and workspace are not read.
   *  T = slot_mapping.shape[0]. */
  const dsv4_run_args* batch;
  dsv4_tensor* swa_indices;      /**< FLASHMLA [T, >=W]; CSR flat [>= T*W] */
  dsv4_tensor* swa_lengths;      /**< FLASHMLA [T] (required); CSR [T] (optional) */
  dsv4_tensor* swa_indptr;       /**< CSR [T+1] */
  dsv4_tensor* cmp_indices;      /**< compressed: FLASHMLA [T, >=width]; CSR flat [>= T*width] */
  dsv4_tensor* cmp_lengths;      /**< FLASHMLA [T] (needed with cmp_indices); CSR optional */
  dsv4_tensor* cmp_indptr;       /**< CSR [T+1] (required with cmp_indices) */
  dsv4_tensor* combined_indices; /**< FLASHINFER [T, >= W + PT] */
  dsv4_tensor* combined_lengths; /**< FLASHINFER [T] */
  void* stream;                  /**< backend-native stream or NULL (same contract as dsv4_run) */
} dsv4_export_args;

/** Sets struct_size and zeroes every other field (format FLASHMLA). INVALID_ARGUMENT for NULL. */
DSV4_API dsv4_status(dsv4_export_args_init)(dsv4_export_args* args, size_t struct_size);
#define dsv4_export_args_init(args) (dsv4_export_args_init)((args), sizeof(*(args)))

/** Writes the lists a paged run of `plan` would build for args->batch into the caller's
 *  buffers. Paged plans only (INVALID_ARGUMENT otherwise). Validates shapes, dtypes and devices
 *  first (host metadata); the CPU backend also validates the batch values (seq_len < query_len,
 *  non-monotone query_start_loc, block-table or top-k entries out of range ...) before writing
 *  anything. GPU backends build on the device without reading values back; same stream contract
 *  as dsv4_run. */
DSV4_API dsv4_status dsv4_export_indices(const dsv4_plan* plan, const dsv4_export_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSV4_PAGED_H */
