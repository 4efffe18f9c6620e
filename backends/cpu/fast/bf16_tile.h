// The decoded tile of the bf16 ISAs (AVX512_BF16, AMX-BF16): each key row decoded once to bf16,
// then laid out twice for the two products. Included only by isa_avx512_bf16.cpp and isa_amx.cpp.
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
  float* stage;  // [16][d_qk] bf16 rows of one block while it is laid out, then d_qk fp32 (scratch)
};

inline bf16_tile bf16_tile_of(uint8_t* tile, int d_qk) {
  bf16_tile t;
  t.kt = reinterpret_cast<uint32_t*>(tile);
  t.vn = t.kt + static_cast<size_t>(kChunkKeys) * d_qk / 2;
  t.stage = reinterpret_cast<float*>(t.vn + static_cast<size_t>(kChunkKeys) / 2 * kHeadDim);
  return t;
}

// ---------------------------------------------------------------------------------------------
// The tile builder, on 512-bit vectors (both bf16 ISAs have AVX-512F/BW; over SIMDe in the
// test-only emulated module): each row to bf16 once, then two layouts straight from the bf16 rows.
// ---------------------------------------------------------------------------------------------
#if DSV4_CPU_EMULATE_ISA
#define DSV4_T512(name) simde##name
using vec512i = simde__m512i;
using mask32 = simde__mmask32;
#else
#define DSV4_T512(name) name
using vec512i = __m512i;
using mask32 = __mmask32;
#endif

// The all-lanes masked forms of the shuffles: their unmasked forms read an undefined vector, which
// GCC 12 reports as maybe-uninitialized (as in lanes16).
constexpr uint16_t kAll16 = 0xffff;
constexpr uint8_t kAll8 = 0xff;
inline vec512i unpacklo32(vec512i a, vec512i b) {
  return DSV4_T512(_mm512_maskz_unpacklo_epi32)(kAll16, a, b);
}
inline vec512i unpackhi32(vec512i a, vec512i b) {
  return DSV4_T512(_mm512_maskz_unpackhi_epi32)(kAll16, a, b);
}
inline vec512i unpacklo64(vec512i a, vec512i b) {
  return DSV4_T512(_mm512_maskz_unpacklo_epi64)(kAll8, a, b);
}
inline vec512i unpackhi64(vec512i a, vec512i b) {
  return DSV4_T512(_mm512_maskz_unpackhi_epi64)(kAll8, a, b);
}
template <int kImm>
inline vec512i shuffle128(vec512i a, vec512i b) {
  return DSV4_T512(_mm512_maskz_shuffle_i32x4)(kAll16, a, b, kImm);
}

inline vec512i load512(const void* p) { return DSV4_T512(_mm512_loadu_si512)(p); }
// 32 bytes zero-extended to 32 words (SIMDe's avx512 lacks cvtepu8_epi16: sign-extend, mask).
inline vec512i bytes_to_words(const uint8_t* p) {
  const auto b = DSV4_T512(_mm256_loadu_si256)(reinterpret_cast<const DSV4_T512(__m256i)*>(p));
#if DSV4_CPU_EMULATE_ISA
  return simde_mm512_and_si512(simde_mm512_cvtepi8_epi16(b), simde_mm512_set1_epi16(0xff));
#else
  return _mm512_maskz_cvtepu8_epi16(0xffffffffu, b);
#endif
}
// Lanes where lo <= x (unsigned words): the one comparison SIMDe and every AVX-512BW CPU share.
inline mask32 words_at_least(vec512i x, int lo) {
  return DSV4_T512(_mm512_cmple_epu16_mask)(DSV4_T512(_mm512_set1_epi16)(static_cast<short>(lo)),
                                            x);
}
inline void store512(void* p, vec512i v) { DSV4_T512(_mm512_storeu_si512)(p, v); }
inline vec512i set1_16(int x) { return DSV4_T512(_mm512_set1_epi16)(static_cast<short>(x)); }

// Bits of the bf16 value of e4m3 subnormals M * 2^-9 (M = 1..7), as exponent offset from 2^-9
// (floor(log2 M), << 7) and mantissa: the subnormal table, indexed by M (entries 8..31 unused).
inline vec512i e4m3_subnormal_bits() {
  alignas(64) uint16_t t[32] = {};
  for (int m = 1; m < 8; ++m) {
    const int l = m >= 4 ? 2 : m >= 2 ? 1 : 0;
    t[m] = static_cast<uint16_t>((l << 7) | ((m - (1 << l)) << (7 - l)));
  }
  return load512(t);
}

// 32 OCP e4m3 bytes times 2^(scale - 127) as bf16 bits, exactly (scale byte 10..245: every
// product is a normal, finite bf16). Normal bytes: the magnitude shifted into bf16's exponent and
// mantissa fields, the exponent rebased by the scale; subnormals from the table; 0 and NaN kept.
inline void e4m3x32_to_bf16(const uint8_t* p, int scale, vec512i subnormal, uint16_t* out) {
  const vec512i w = bytes_to_words(p);
  const vec512i mag = DSV4_T512(_mm512_and_si512)(w, set1_16(0x7f));
  const vec512i normal =
      DSV4_T512(_mm512_add_epi16)(DSV4_T512(_mm512_slli_epi16)(mag, 4), set1_16((scale - 7) << 7));
  const vec512i sub = DSV4_T512(_mm512_add_epi16)(
      DSV4_T512(_mm512_permutexvar_epi16)(mag, subnormal), set1_16((scale - 9) << 7));
  vec512i r = DSV4_T512(_mm512_mask_blend_epi16)(words_at_least(mag, 8), sub, normal);
  r = DSV4_T512(_mm512_maskz_mov_epi16)(words_at_least(mag, 1), r);                     // +-0
  r = DSV4_T512(_mm512_mask_mov_epi16)(r, words_at_least(mag, 0x7f), set1_16(0x7fc0));  // NaN
  const vec512i sign =
      DSV4_T512(_mm512_slli_epi16)(DSV4_T512(_mm512_and_si512)(w, set1_16(0x80)), 8);
  store512(out, DSV4_T512(_mm512_or_si512)(r, sign));
}

// fp32 values that are bf16-exact (decode_entry_f32's) to bf16 bits, 16 at a time.
inline void f32x16_to_bf16(const float* x, uint16_t* out) {
  lanes16::store_low_halves(out, lanes16::shift_right(lanes16::as_int(lanes16::load(x)), 16));
}

// Entry `e` of the block at `block` as d_qk bf16 values: the 584 B layout's OCP FP8 with scales
// 10..245 directly, every other row through decode_entry_f32 (tmp: d_qk floats). A bf16 cache's
// rows are already this; the caller reads them in place.
inline void decode_entry_bf16(const dsv4_mod_cache& c, const uint8_t* block, int64_t e, int d_qk,
                              vec512i subnormal, float* tmp, uint16_t* out) {
  if (c.layout == DSV4_KV_LAYOUT_FP8_V4_584B && (c.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) == 0) {
    const uint8_t* sc = block + v4_scale_offset(c.block_size, e);
    bool exact = true;
    for (int k = 0; k < kV4Tiles; ++k) exact = exact && ue8m0_scale_is_exact(sc[k]);
    if (exact) {
      const uint8_t* p = block + entry_data_offset(c.layout, e);
      for (int k = 0; k < kV4Tiles; ++k)
        for (int j = 0; j < kV4TileDim; j += 32)
          e4m3x32_to_bf16(p + k * kV4TileDim + j, sc[k], subnormal, out + k * kV4TileDim + j);
      std::memcpy(out + kNopeDim, p + kNopeDim, 2 * kRopeDim);
      return;
    }
  }
  decode_entry_f32(c, block, e, tmp);
  for (int d = 0; d < d_qk; d += 16) f32x16_to_bf16(tmp + d, out + d);
}

// Transposes 16 rows of 16 32-bit elements: out[c] = column c (row 0 in its lowest element).
inline void transpose16x16_32(const vec512i* r, vec512i* out) {
  vec512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = unpacklo32(r[i], r[i + 1]);
    t[i + 1] = unpackhi32(r[i], r[i + 1]);
  }
  // u[4g + j], lane L: column 4L + j of rows 4g..4g+3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = unpacklo64(t[g], t[g + 2]);
    u[g + 1] = unpackhi64(t[g], t[g + 2]);
    u[g + 2] = unpacklo64(t[g + 1], t[g + 3]);
    u[g + 3] = unpackhi64(t[g + 1], t[g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    // lanes 0-1 and 2-3 of rows 0-7, then of rows 8-15
    const vec512i p0 = shuffle128<0x44>(u[j], u[4 + j]);
    const vec512i q0 = shuffle128<0xee>(u[j], u[4 + j]);
    const vec512i p1 = shuffle128<0x44>(u[8 + j], u[12 + j]);
    const vec512i q1 = shuffle128<0xee>(u[8 + j], u[12 + j]);
    out[j] = shuffle128<0x88>(p0, p1);
    out[4 + j] = shuffle128<0xdd>(p0, p1);
    out[8 + j] = shuffle128<0x88>(q0, q1);
    out[12 + j] = shuffle128<0xdd>(q0, q1);
  }
}

// Decodes nk candidates (npad, a multiple of 32, with zero keys after them) into the tile, 16
// keys at a time: their bf16 rows (decoded into the staging area, or a bf16 cache's own rows),
// then K^T by 16 x 16 transposes of dim pairs and V by interleaving the words of two rows.
inline void build_bf16_tile(const dsv4_mod_run& run, int d_qk, const int32_t* slots,
                            const uint8_t* list, int nk, int npad, uint8_t* tile) {
  const bf16_tile t = bf16_tile_of(tile, d_qk);
  const int pairs = d_qk / 2;
  uint16_t* stage = reinterpret_cast<uint16_t*>(t.stage);     // [16][d_qk] bf16
  float* tmp = t.stage + static_cast<size_t>(16) * d_qk / 2;  // [d_qk] fp32 after it
  alignas(64) static const uint16_t zero_row[kHeadDim + kRopeDim] = {};
  const vec512i subnormal = e4m3_subnormal_bits();
  alignas(64) uint16_t lo_idx[32], hi_idx[32];  // word interleave of two rows (V pairs)
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i);
    lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
    hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const vec512i lo = load512(lo_idx), hi = load512(hi_idx);
  const uint16_t* rows[16];
  for (int blk = 0; blk < npad / 16; ++blk) {
    for (int k = 0; k < 16; ++k) {
      const int j = blk * 16 + k;
      if (j >= nk) {
        rows[k] = zero_row;
        continue;
      }
      if (j + kPrefetchRows < nk)
        prefetch_row(run, slots[j + kPrefetchRows], list[j + kPrefetchRows], 0);
      const dsv4_mod_cache& c = list[j] == 0 ? run.swa_cache : run.extra_cache;
      int64_t e;
      const uint8_t* block = slot_block_base(c, slots[j], &e);
      if (c.layout == DSV4_KV_LAYOUT_BF16) {
        rows[k] = reinterpret_cast<const uint16_t*>(block + entry_data_offset(c.layout, e));
        continue;
      }
      uint16_t* row = stage + static_cast<size_t>(k) * d_qk;
      decode_entry_bf16(c, block, e, d_qk, subnormal, tmp, row);
      rows[k] = row;
    }
    uint32_t* kt = t.kt + static_cast<size_t>(blk) * pairs * 16;
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      vec512i r[16], col[16];
      for (int k = 0; k < 16; ++k) r[k] = load512(rows[k] + 2 * p0);
      transpose16x16_32(r, col);
      for (int p = 0; p < 16; ++p) store512(kt + static_cast<size_t>(p0 + p) * 16, col[p]);
    }
    for (int pr = 0; pr < 8; ++pr) {
      const uint16_t* r0 = rows[2 * pr];
      const uint16_t* r1 = rows[2 * pr + 1];
      uint32_t* vn = t.vn + static_cast<size_t>(blk * 8 + pr) * kHeadDim;
      for (int d = 0; d < kHeadDim; d += 32) {
        const vec512i a = load512(r0 + d), b = load512(r1 + d);
        store512(vn + d, DSV4_T512(_mm512_permutex2var_epi16)(a, lo, b));
        store512(vn + d + 16, DSV4_T512(_mm512_permutex2var_epi16)(a, hi, b));
      }
    }
  }
}
#undef DSV4_T512

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
