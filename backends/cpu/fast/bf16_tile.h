// The decoded tile of the bf16 ISAs (AVX512_BF16, AMX-BF16): each key row decoded once, then laid
// out twice in bf16 for the two products. Included only by isa_avx512_bf16.cpp and isa_amx.cpp.
//   kt: K^T in dim pairs, per block of 16 keys: [d_qk / 2][16 keys] 32-bit pairs (k[2i], k[2i+1])
//       (AMX's B operand of Q K^T; broadcast-q dot products on AVX-512)
//   vn: V in key pairs: [npad / 2][512] 32-bit pairs (v_j[d], v_j+1[d]) (B operand of P V)
// The row values are bf16-exact (common/layout.h), so taking the top half of the fp32 is exact;
// fp16 caches, which are not, run on the AVX2 kernel instead.
#pragma once

#include "fast/driver.h"

namespace dsv4 {
namespace cpu {
namespace fast {

struct bf16_tile {
  uint32_t* kt;
  uint32_t* vn;
  float* stage;  // [16][d_qk] fp32 rows of one block while it is laid out
};

inline bf16_tile bf16_tile_of(uint8_t* tile, int d_qk) {
  bf16_tile t;
  t.kt = reinterpret_cast<uint32_t*>(tile);
  t.vn = t.kt + static_cast<size_t>(kChunkKeys) * d_qk / 2;
  t.stage = reinterpret_cast<float*>(t.vn + static_cast<size_t>(kChunkKeys) / 2 * kHeadDim);
  return t;
}

inline uint32_t bf16_hi(const float* x) {
  uint32_t u;
  std::memcpy(&u, x, sizeof u);
  return u >> 16;
}

// Decodes nk candidates (npad, a multiple of 32, with zero keys after them) into the tile.
inline void build_bf16_tile(const dsv4_mod_run& run, int d_qk, const int32_t* slots,
                            const uint8_t* list, int nk, int npad, uint8_t* tile) {
  const bf16_tile t = bf16_tile_of(tile, d_qk);
  const int pairs = d_qk / 2;
  for (int blk = 0; blk < npad / 16; ++blk) {
    for (int k = 0; k < 16; ++k) {
      const int j = blk * 16 + k;
      float* row = t.stage + static_cast<size_t>(k) * d_qk;
      if (j >= nk) {
        std::memset(row, 0, sizeof(float) * static_cast<size_t>(d_qk));
        continue;
      }
      if (j + 4 < nk) {
        const dsv4_mod_cache& cn = list[j + 4] == 0 ? run.swa_cache : run.extra_cache;
        int64_t en;
        const uint8_t* pn =
            slot_block_base(cn, slots[j + 4], &en) + entry_data_offset(cn.layout, en);
        for (int b = 0; b < layout_bytes_per_token(cn.layout); b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pn + b), _MM_HINT_T0);
      }
      const dsv4_mod_cache& c = list[j] == 0 ? run.swa_cache : run.extra_cache;
      int64_t e;
      const uint8_t* block = slot_block_base(c, slots[j], &e);
      decode_entry_f32(c, block, e, row);
    }
    uint32_t* kt = t.kt + static_cast<size_t>(blk) * pairs * 16;
    for (int k = 0; k < 16; ++k) {
      const float* row = t.stage + static_cast<size_t>(k) * d_qk;
      for (int i = 0; i < pairs; ++i)
        kt[i * 16 + k] = bf16_hi(row + 2 * i) | (bf16_hi(row + 2 * i + 1) << 16);
    }
    for (int pr = 0; pr < 8; ++pr) {
      const float* r0 = t.stage + static_cast<size_t>(2 * pr) * d_qk;
      const float* r1 = r0 + d_qk;
      uint32_t* vn = t.vn + static_cast<size_t>(blk * 8 + pr) * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) vn[d] = bf16_hi(r0 + d) | (bf16_hi(r1 + d) << 16);
    }
  }
}

// Shared by the bf16 ISAs: bf16 query rows and P.
struct bf16_operands {
  using q_t = uint16_t;
  using p_t = uint16_t;
  static uint16_t from_f32(float x) { return f32_to_bf16(x); }
  static uint16_t from_bf16(uint16_t h) { return h; }
};

}  // namespace fast
}  // namespace cpu
}  // namespace dsv4
