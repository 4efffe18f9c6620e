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

// Dims 0..15 of an fp32 row (bf16-exact values) as 8 bf16 pairs (dim 2i low, 2i+1 high): the top
// two bytes of each fp32, gathered per 128-bit lane, then the lanes put in order.
inline __m256i bf16_pairs8(const float* x) {
  const __m256i lo = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2,
                                      3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i hi = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15,
                                      -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i a =
      _mm256_shuffle_epi8(_mm256_castps_si256(_mm256_loadu_ps(x)), lo);  // pairs 0 1 | 2 3
  const __m256i b =
      _mm256_shuffle_epi8(_mm256_castps_si256(_mm256_loadu_ps(x + 8)), hi);  // 4 5 | 6 7
  return _mm256_permute4x64_epi64(_mm256_or_si256(a, b), 0xd8);
}

// Stores the transpose of the 8 x 8 32-bit matrix r[0..7] as 8 rows of 8 at dst, dst + 16, ...
inline void transpose8_store(const __m256i* r, uint32_t* dst) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * i),
                        _mm256_permute2x128_si256(u[i], u[i + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * (i + 4)),
                        _mm256_permute2x128_si256(u[i], u[i + 4], 0x31));
  }
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
      if (j + kPrefetchRows < nk)
        prefetch_row(run, slots[j + kPrefetchRows], list[j + kPrefetchRows], 0);
      const dsv4_mod_cache& c = list[j] == 0 ? run.swa_cache : run.extra_cache;
      int64_t e;
      const uint8_t* block = slot_block_base(c, slots[j], &e);
      decode_entry_f32(c, block, e, row);
    }
    uint32_t* kt = t.kt + static_cast<size_t>(blk) * pairs * 16;
    for (int dp = 0; dp < pairs; dp += 8) {
      __m256i r[16];
      for (int k = 0; k < 16; ++k)
        r[k] = bf16_pairs8(t.stage + static_cast<size_t>(k) * d_qk + 2 * dp);
      transpose8_store(r, kt + static_cast<size_t>(dp) * 16);
      transpose8_store(r + 8, kt + static_cast<size_t>(dp) * 16 + 8);
    }
    for (int pr = 0; pr < 8; ++pr) {
      const float* r0 = t.stage + static_cast<size_t>(2 * pr) * d_qk;
      const float* r1 = r0 + d_qk;
      uint32_t* vn = t.vn + static_cast<size_t>(blk * 8 + pr) * kHeadDim;
      const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
      for (int d = 0; d < kHeadDim; d += 8) {
        const __m256i a = _mm256_castps_si256(_mm256_loadu_ps(r0 + d));
        const __m256i b = _mm256_castps_si256(_mm256_loadu_ps(r1 + d));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(vn + d),
                            _mm256_or_si256(_mm256_srli_epi32(a, 16), _mm256_and_si256(b, hi)));
      }
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
