// The KV writer's per-row work and its duplicate-slot rule (spec 12.4), shared by every backend:
// when rows of one call share a slot, the last of them wins, deterministically. Writers split the
// rows into parts by the slot's hash and write each part's rows in row order: all rows of one slot
// fall into one part, so the last one written is the last one given, and no two parts touch one
// entry.
#pragma once

#include <stdint.h>

#include "codec.h"
#include "dsv4_backend.h"
#include "hd.h"
#include "layout.h"

namespace dsv4 {

// The part, in [0, parts), that writes slot `slot` (>= 0). A multiplicative hash spreads any slot
// pattern (strided, clustered) evenly; the top bits scale to `parts` without a division.
DSV4_HD uint32_t kv_write_part(int64_t slot, uint32_t parts) {
  const uint64_t h = static_cast<uint64_t>(slot) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(((h >> 32) * parts) >> 32);
}

// Quantises row r of a write into slot `slot` (0 <= slot < capacity).
DSV4_HD void kv_write_row(const dsv4_mod_kv_write& w, int64_t r, int64_t slot) {
  float row[kV32HeadDimQK];
  if (w.values_is_bf16) {
    const uint16_t* v = static_cast<const uint16_t*>(w.values) + r * w.values_row_stride;
    for (int d = 0; d < w.dim; ++d) row[d] = bf16_to_f32(v[d]);
  } else {
    const float* v = static_cast<const float*>(w.values) + r * w.values_row_stride;
    for (int d = 0; d < w.dim; ++d) row[d] = v[d];
  }
  const slot_address a = split_slot(slot, w.cache.block_size);
  quantize_entry(w.cache.layout, w.cache.base + a.block * w.cache.block_stride_bytes,
                 w.cache.block_size, a.entry, row, w.cache.kv_scale);
}

}  // namespace dsv4
