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
DSV4_HD token_coord split_token(int64_t t, int64_t seq_q) {
  return token_coord{t / seq_q, t % seq_q};
}

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

// Token t's row of list l (l.indices set): list_entry(l, t, seq_q, i) is base[i * step]. Loops over
// many entries of one token resolve the row once (a token's row costs a division by seq_q).
// list_entry keeps its own single expression: rewritten through this, ptxas allocated the Hopper
// producers' registers differently (spills in three kernels).
struct list_row {
  const int32_t* base;
  int64_t step;
};
DSV4_HD list_row list_row_of(const dsv4_mod_index_list& l, int64_t t, int64_t seq_q) {
  if (l.format == DSV4_INDEX_CSR) return list_row{l.indices + static_cast<int64_t>(l.indptr[t]), 1};
  const token_coord c = split_token(t, seq_q);
  return list_row{l.indices + (c.b * l.stride_b + c.s * l.stride_s), l.stride_k};
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

// Division of dividends in [0, 2^31) by a divisor d in [1, 2^31) fixed ahead (a cache's block
// size): a multiply-high and a shift, with m = ceil(2^(31 + s) / d), s = ceil(log2 d). For n < 2^31
// the rounding error n (m - 2^(31+s)/d) / 2^(31+s) stays below 1/d, so the quotient is exact (a
// GPU's integer division is a dozen dependent instructions; this sits on the producers' address
// chains).
struct u31_divisor {
  uint32_t d;
  uint32_t mul;    // 0: d == 1
  uint32_t shift;  // s - 1
};
inline u31_divisor make_u31_divisor(uint32_t d) {
  u31_divisor v{d < 1 ? 1u : d, 0, 0};
  if (v.d == 1) return v;
  uint32_t s = 0;
  while ((uint64_t{1} << s) < v.d) ++s;
  v.mul = static_cast<uint32_t>(((uint64_t{1} << (31 + s)) + v.d - 1) / v.d);
  v.shift = s - 1;
  return v;
}
DSV4_HD uint32_t u31_div(uint32_t n, const u31_divisor& v) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(n, v.mul);
#else
  const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * v.mul) >> 32);
#endif
  return v.mul == 0 ? n : hi >> v.shift;
}

// slot_block_base for a slot that passed slot_is_valid, with the cache's block size as a
// u31_divisor (a valid slot is a non-negative int32).
DSV4_HD const uint8_t* slot_block_base32(const dsv4_mod_cache& c, const u31_divisor& bs,
                                         int32_t slot, int32_t* out_entry) {
  const uint32_t block = u31_div(static_cast<uint32_t>(slot), bs);
  *out_entry = static_cast<int32_t>(static_cast<uint32_t>(slot) - block * bs.d);
  return c.base + static_cast<int64_t>(block) * c.block_stride_bytes;
}

}  // namespace dsv4
