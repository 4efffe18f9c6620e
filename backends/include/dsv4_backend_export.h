/*
 * Module ABI: the index-export request (slot dsv4_backend_iface.export_indices). Pure C.
 * The host has validated the public dsv4_export_args against the plan: every pointer below is
 * resolved (byte_offset applied) on the plan's device, strides are in int32 elements, and every
 * buffer is large enough for num_tokens rows of the widths the plan implies.
 */
#ifndef DSV4_BACKEND_EXPORT_H
#define DSV4_BACKEND_EXPORT_H

#include <dsv4/dsv4_paged.h>

#include "dsv4_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One exported list (SWA, compressed, or FlashInfer's combined matrix). */
typedef struct dsv4_mod_export_list {
  int32_t* indices;   /**< NULL when this list is not exported */
  int64_t row_stride; /**< dense: elements between the rows of consecutive tokens */
  int64_t col_stride; /**< dense: elements between consecutive columns */
  int64_t width;      /**< dense: columns to write (>= the list width; extra ones get -1);
                           CSR: capacity of the flat indices array in elements */
  int32_t* lengths;   /**< [T] or NULL (optional for CSR) */
  int64_t len_stride;
  int32_t* indptr; /**< CSR: [T+1]; NULL for dense formats */
  int64_t indptr_stride;
} dsv4_mod_export_list;

typedef struct dsv4_mod_export {
  uint32_t struct_size; /**< sizeof(dsv4_mod_export) as the host built it */
  uint32_t format;      /**< DSV4_EXPORT_* */
  /** The derived plan (paged geometry, widths, capacities), so a module needs nothing else. */
  const dsv4_mod_plan* plan;
  dsv4_mod_export_list swa;      /**< FLASHMLA / CSR */
  dsv4_mod_export_list cmp;      /**< FLASHMLA / CSR, compressed layers (indices NULL otherwise) */
  dsv4_mod_export_list combined; /**< FLASHINFER */
  void* stream;
} dsv4_mod_export;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSV4_BACKEND_EXPORT_H */
