// Candidate-list access shared by every backend: the validity rule of spec 2.3 and the dense/CSR
// row arithmetic of dsv4_mod_index_list. Written once; kernels call these, never re-derive them.
#pragma once

#include <stdint.h>

#include "dsv4_backend.h"
#include "hd.h"

namespace dsv4 {

// Token t = b * seq_q + s.
struct token_coord {
  int64_t b;
  int64_t s;
};
DSV4_HD token_coord split_token(int64_t t, int64_t seq_q) { return token_coord{t / seq_q, t % seq_q}; }

// Element offset of (t, h) in a per-token view (add d for the dimension).
DSV4_HD int64_t token_offset(const dsv4_mod_token_view& v, int64_t t, int64_t seq_q, int64_t h) {
  const token_coord c = split_token(t, seq_q);
  return c.b * v.stride_b + c.s * v.stride_s + h * v.stride_h;
}

// Number of list positions of token t that may hold candidates: dense width or CSR row length,
// capped by the optional per-token length (negative lengths count as 0).
DSV4_HD int64_t list_row_count(const dsv4_mod_index_list& l, int64_t t, int64_t seq_q) {
  if (l.indices == nullptr) return 0;
  int64_t n;
  if (l.format == DSV4_INDEX_CSR) {
    n = static_cast<int64_t>(l.indptr[t + 1]) - static_cast<int64_t>(l.indptr[t]);
  } else {
    n = l.width;
  }
  if (l.lengths != nullptr) {
    const token_coord c = split_token(t, seq_q);
    const int64_t len = l.lengths[c.b * l.len_stride_b + c.s * l.len_stride_s];
    n = len < n ? len : n;
  }
  return n < 0 ? 0 : n;
}

// Index stored at list position i (< list_row_count) of token t.
DSV4_HD int32_t list_entry(const dsv4_mod_index_list& l, int64_t t, int64_t seq_q, int64_t i) {
  if (l.format == DSV4_INDEX_CSR) return l.indices[static_cast<int64_t>(l.indptr[t]) + i];
  const token_coord c = split_token(t, seq_q);
  return l.indices[c.b * l.stride_b + c.s * l.stride_s + i * l.stride_k];
}

// Spec 2.3, portable rule: a candidate counts iff its position is below the length (handled by
// list_row_count) and 0 <= idx < capacity.
DSV4_HD bool slot_is_valid(int64_t idx, const dsv4_mod_cache& c) {
  return idx >= 0 && idx < c.num_blocks * static_cast<int64_t>(c.block_size);
}

// Block base of a valid slot, and its entry inside the block.
DSV4_HD const uint8_t* slot_block_base(const dsv4_mod_cache& c, int64_t slot, int64_t* out_entry) {
  *out_entry = slot % c.block_size;
  return c.base + (slot / c.block_size) * c.block_stride_bytes;
}

// slot_block_base for a slot that passed slot_is_valid, in 32-bit arithmetic (a valid slot is a
// non-negative int32, so the unsigned division is exact and far cheaper on GPUs than 64-bit).
DSV4_HD const uint8_t* slot_block_base32(const dsv4_mod_cache& c, int32_t slot, int32_t* out_entry) {
  const uint32_t bs = static_cast<uint32_t>(c.block_size);
  const uint32_t block = static_cast<uint32_t>(slot) / bs;
  *out_entry = static_cast<int32_t>(static_cast<uint32_t>(slot) - block * bs);
  return c.base + static_cast<int64_t>(block) * c.block_stride_bytes;
}

}  // namespace dsv4
