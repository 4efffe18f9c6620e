// Paged-mode index builders (spec section 4), written once for every backend: a CPU loop or one
// CUDA/HIP thread per token calls them. They read the engine's batch description
// (dsv4_mod_paged_batch) and write one token's SWA list and compressed list as dense rows of
// physical slots (-1 = no candidate) plus lengths, which explicit-mode attention then consumes.
//
// Device safety: nothing here reads outside the batch arrays whatever the values are (request
// lookup is bounded by num_reqs, block-table columns by the table width, top-k columns by K);
// a value that would need an out-of-range read yields -1. The CPU backend additionally validates
// the values first and rejects malformed batches (backends/cpu/paged.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dsv4_backend.h"
#include "hd.h"

namespace dsv4 {

constexpr int32_t kC128Ratio = 128;
constexpr int32_t kC4Ratio = 4;

// Static per-plan geometry of the paged builders (from dsv4_mod_plan: paged_geometry_of).
struct paged_geometry {
  int32_t ratio;             // 1 SWA-only, 4 C4A, 128 C128A
  int32_t window;            // W
  int32_t swa_block_size;    // SWA tokens per block
  int32_t cmp_block_size;    // compressed entries per block (1 for SWA-only layers)
  int32_t cmp_width;         // compressed list width: 0, index_topk or the C128A width
  int32_t decode_threshold;  // query_len <= this (before the first prefill) = decode
};

// C128A list width round_up(ceil(max_model_len / 128), 128) (spec 4.5), for any max_model_len >= 0
// without overflow (INT64_MAX, an engine's "no limit", gives 2^56; the host rejects widths that do
// not fit its int32 lists).
DSV4_HD int64_t c128a_width(int64_t max_model_len) {
  const int64_t entries = max_model_len / kC128Ratio + (max_model_len % kC128Ratio != 0 ? 1 : 0);
  return entries / 128 * 128 + (entries % 128 != 0 ? 128 : 0);
}

// The builders' geometry of a paged plan.
DSV4_HD paged_geometry paged_geometry_of(const dsv4_mod_plan& p) {
  paged_geometry g;
  g.ratio = p.compress_ratio;
  g.window = p.window;
  g.swa_block_size = p.cache[0].block_size;
  g.cmp_block_size = p.compress_ratio > 1 ? p.cache[1].block_size : 1;
  g.cmp_width = p.cmp_width;
  g.decode_threshold = p.decode_threshold;
  return g;
}

DSV4_HD bool paged_is_c4a(const paged_geometry& g) { return g.ratio == kC4Ratio; }
DSV4_HD bool paged_is_c128a(const paged_geometry& g) { return g.ratio == kC128Ratio; }

// Compressed width for a plan: index_topk (C4A), the C128A width, or 0 (SWA-only).
DSV4_HD int64_t paged_cmp_width(int32_t ratio, int32_t index_topk, int64_t max_model_len) {
  if (ratio == kC4Ratio) return index_topk;
  if (ratio == kC128Ratio) return c128a_width(max_model_len);
  return 0;
}

// FlashInfer's compressed column count PT = round_up(cmp_width, 4) (spec 4.9; 16-byte rows).
DSV4_HD int64_t flashinfer_cmp_columns(int64_t cmp_width) { return (cmp_width + 3) / 4 * 4; }

// Where token t belongs. req = -1 (and valid = false) for tokens outside every request.
struct paged_token {
  int32_t req;
  int32_t pos;  // p = seq_len - query_len + i
  bool valid;   // inside a request and slot_mapping >= 0
};

// Binary search of query_start_loc: the request r with qsl[r] <= t < qsl[r+1] (empty requests
// are skipped), or -1.
DSV4_HD int32_t paged_request_of(const dsv4_mod_paged_batch& b, int64_t t) {
  int32_t lo = 0;
  int32_t hi = b.num_reqs;  // answer in [lo, hi)
  if (hi <= 0 || t < b.query_start_loc[0] || t >= b.query_start_loc[hi]) return -1;
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (b.query_start_loc[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

DSV4_HD paged_token paged_locate(const dsv4_mod_paged_batch& b, int64_t t) {
  paged_token k{-1, -1, false};
  const int32_t r = paged_request_of(b, t);
  if (r < 0) return k;
  const int64_t first = b.query_start_loc[r];
  const int64_t qlen = static_cast<int64_t>(b.query_start_loc[r + 1]) - first;
  const int64_t pos = b.seq_lens[r] - qlen + (t - first);
  k.req = r;
  k.valid = b.slot_mapping[t] >= 0 && pos >= 0 && pos <= INT32_MAX;
  k.pos = k.valid ? static_cast<int32_t>(pos) : -1;
  return k;
}

// Number of leading decode requests: the first request with query_len > threshold and all after
// it are prefills (spec 4.1). O(num_reqs); compute once per step.
DSV4_HD int32_t paged_num_decodes(const dsv4_mod_paged_batch& b, int32_t decode_threshold) {
  for (int32_t r = 0; r < b.num_reqs; ++r) {
    const int64_t query_len = static_cast<int64_t>(b.query_start_loc[r + 1]) - b.query_start_loc[r];
    if (query_len > decode_threshold) return r;
  }
  return b.num_reqs;
}

// Physical slot of logical entry `i` through one block-table row, or -1 when the column is beyond
// the table or the slot is outside [0, capacity) or int32 (slot lists are int32, as in vLLM).
DSV4_HD int32_t paged_slot(const int32_t* bt_row, int32_t bt_cols, int64_t i, int32_t block_size,
                           int64_t capacity) {
  if (i < 0) return -1;
  const int64_t col = i / block_size;
  if (col >= bt_cols) return -1;
  const int64_t slot = static_cast<int64_t>(bt_row[col]) * block_size + i % block_size;
  return (slot >= 0 && slot < capacity && slot <= INT32_MAX) ? static_cast<int32_t>(slot) : -1;
}

DSV4_HD int64_t paged_swa_start(int64_t pos, int32_t window) {
  const int64_t s = pos - window + 1;
  return s > 0 ? s : 0;
}

// Spec 4.2. Writes row[0 .. W) (element stride `stride`) and returns the length min(p+1, W);
// padding tokens get all -1 and length 0. swa_capacity = num_blocks * block_size of the SWA cache.
DSV4_HD int32_t paged_build_swa_row(const paged_geometry& g, const dsv4_mod_paged_batch& b,
                                    const paged_token& k, int64_t swa_capacity, int32_t* row,
                                    int64_t stride) {
  int32_t len = 0;
  int64_t start = 0;
  const int32_t* bt_row = nullptr;
  if (k.valid) {
    start = paged_swa_start(k.pos, g.window);
    len = static_cast<int32_t>(k.pos - start + 1);
    bt_row = b.swa_block_table + static_cast<int64_t>(k.req) * b.swa_bt_stride;
  }
  for (int32_t j = 0; j < g.window; ++j) {
    row[j * stride] =
        j < len ? paged_slot(bt_row, b.swa_bt_cols, start + j, g.swa_block_size, swa_capacity) : -1;
  }
  return len;
}

// Compressed entries visible at position p: (p+1) / ratio (spec 4.3); 0 for SWA-only layers.
DSV4_HD int64_t paged_visible_entries(const paged_geometry& g, int64_t pos) {
  return g.ratio > 1 ? (pos + 1) / g.ratio : 0;
}

// Spec 4.4 (C4A: request-local top-k -> global slots, -1 kept, length = count of entries >= 0)
// and 4.5 (C128A: entries 0 .. min((p+1)/128, width)-1). Writes row[0 .. cmp_width) and returns the
// length; padding tokens get all -1 and length 0. A C4A entry >= the visible count, or one whose
// block is out of range, becomes -1 (vLLM 4fec5ad sanitising) but still counts, as in vLLM.
DSV4_HD int32_t paged_build_cmp_row(const paged_geometry& g, const dsv4_mod_paged_batch& b,
                                    const paged_token& k, int64_t t, int64_t cmp_capacity,
                                    int32_t* row, int64_t stride) {
  int32_t len = 0;
  if (!k.valid || g.ratio <= 1) {
    for (int32_t i = 0; i < g.cmp_width; ++i) row[i * stride] = -1;
    return 0;
  }
  const int32_t* bt_row = b.cmp_block_table + static_cast<int64_t>(k.req) * b.cmp_bt_stride;
  const int64_t visible = paged_visible_entries(g, k.pos);
  if (paged_is_c4a(g)) {
    const int32_t* local = b.topk_indices + t * b.topk_stride;
    for (int32_t i = 0; i < g.cmp_width; ++i) {
      const int32_t l = local[i];
      int32_t slot = -1;
      if (l >= 0) {
        ++len;
        if (l < visible)
          slot = paged_slot(bt_row, b.cmp_bt_cols, l, g.cmp_block_size, cmp_capacity);
      }
      row[i * stride] = slot;
    }
    return len;
  }
  const int64_t n = visible < g.cmp_width ? visible : g.cmp_width;
  for (int32_t i = 0; i < g.cmp_width; ++i) {
    row[i * stride] =
        i < n ? paged_slot(bt_row, b.cmp_bt_cols, i, g.cmp_block_size, cmp_capacity) : -1;
  }
  return static_cast<int32_t>(n);
}

// One token's two lists (SWA row of W entries, compressed row of cmp_width entries) with lengths;
// the entry point a CPU loop or one GPU thread per token calls. Rows have element stride 1 unless
// given; cmp_row may be NULL when cmp_width is 0.
struct paged_capacity {
  int64_t swa;  // SWA cache slots (num_blocks * block_size)
  int64_t cmp;  // compressed cache slots (0 when absent)
};

DSV4_HD paged_token paged_build_token(const paged_geometry& g, const dsv4_mod_paged_batch& b,
                                      const paged_capacity& cap, int64_t t, int32_t* swa_row,
                                      int64_t swa_stride, int32_t* swa_len, int32_t* cmp_row,
                                      int64_t cmp_stride, int32_t* cmp_len) {
  const paged_token k = paged_locate(b, t);
  *swa_len = paged_build_swa_row(g, b, k, cap.swa, swa_row, swa_stride);
  *cmp_len = g.cmp_width > 0 ? paged_build_cmp_row(g, b, k, t, cap.cmp, cmp_row, cmp_stride) : 0;
  return k;
}

// FlashInfer combined row (spec 4.9) of token t, built in place: SWA slots in columns [0, W),
// compressed slots in [W, W + cmp_width), -1 in every further column up to `width`
// (>= W + cmp_width). Returns sparse_topk_lens: decode W + cmp_len; prefill
// W + min((p+1)/ratio, cmp_width) with compressed columns past that count set to -1; padding
// tokens all -1 with W (FlashInfer requires lens >= 128; no column is valid).
DSV4_HD int32_t paged_build_flashinfer_row(const paged_geometry& g, const dsv4_mod_paged_batch& b,
                                           const paged_capacity& cap, int64_t t,
                                           int32_t num_decodes, int32_t* row, int64_t width) {
  int32_t swa_len = 0;
  int32_t cmp_len = 0;
  const paged_token k =
      paged_build_token(g, b, cap, t, row, 1, &swa_len, row + g.window, 1, &cmp_len);
  int64_t keep = g.cmp_width;  // compressed columns kept
  int32_t len = g.window;
  if (!k.valid) {
    keep = 0;
  } else if (k.req < num_decodes || paged_is_c128a(g)) {
    len = g.window + cmp_len;
  } else {
    const int64_t visible = paged_visible_entries(g, k.pos);
    keep = visible < g.cmp_width ? visible : g.cmp_width;
    len = static_cast<int32_t>(g.window + keep);
  }
  for (int64_t c = g.window + keep; c < width; ++c) row[c] = -1;
  return len;
}

// Workspace of the paged builders for given capacities: one shared map for every backend.
struct paged_workspace_layout {
  size_t swa_indices;  // int32 [max_tokens, window]
  size_t swa_lengths;  // int32 [max_tokens]
  size_t cmp_indices;  // int32 [max_tokens, cmp_width] (empty for SWA-only)
  size_t cmp_lengths;  // int32 [max_tokens]
  size_t total;        // bytes, a multiple of 256
};

constexpr size_t kPagedWorkspaceAlign = 256;

DSV4_HD size_t paged_align(size_t bytes) {
  return (bytes + kPagedWorkspaceAlign - 1) / kPagedWorkspaceAlign * kPagedWorkspaceAlign;
}

DSV4_HD paged_workspace_layout paged_workspace(int64_t max_tokens, int64_t window,
                                               int64_t cmp_width) {
  const size_t t = static_cast<size_t>(max_tokens < 0 ? 0 : max_tokens);
  paged_workspace_layout w;
  w.swa_indices = 0;
  w.swa_lengths = w.swa_indices + paged_align(t * static_cast<size_t>(window) * sizeof(int32_t));
  w.cmp_indices = w.swa_lengths + paged_align(t * sizeof(int32_t));
  w.cmp_lengths = w.cmp_indices + paged_align(t * static_cast<size_t>(cmp_width) * sizeof(int32_t));
  w.total = w.cmp_lengths + paged_align(t * sizeof(int32_t));
  return w;
}

}  // namespace dsv4
