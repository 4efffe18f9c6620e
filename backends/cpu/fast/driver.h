// The fast kernels' per-item pass, written once and compiled in every ISA translation unit
// (isa_*.cpp) with that ISA's micro-kernels (the Isa template argument), so the softmax loops and
// the row decoder vectorise for it too. Included only by isa_*.cpp.
//
// An Isa provides:
//   kRowPad, kKeyPad       query rows / keys are padded to these multiples (zero rows / keys)
//   kChunk                 keys per chunk (fast_chunk_keys of its fast_isa)
//   lanes                  the softmax's vector operations (lanes8, or lanes16 with AVX-512)
//   q_t, p_t               element types of the query rows and of P (float or bf16 bits)
//   tile_bytes(d_qk)       bytes of one decoded tile of kChunkKeys keys
//   build_tile(...)        decodes nk candidates into the tile (padding keys zero)
//   qk(...), pv(...)       logits = Q K^T (fp32, [rows][kChunkKeys]); acc[rows][512] += P V,
//                          each calling stream.pace() at regular points of its loops
//   pace_steps(rows, d, npad)  how many pace() calls qk and pv make for one chunk
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "common/paged_index.h"
#include "common/softmax.h"
#include "fast/job.h"

#if DSV4_CPU_EMULATE_ISA
#include <simde/x86/avx512.h>
#endif

#ifndef DSV4_CPU_MUTATION
#define DSV4_CPU_MUTATION 0  // 1: sink ignored; 2: first valid candidate read one slot too far
#endif

namespace dsv4 {
namespace cpu {
namespace fast {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kAlign = 64;

inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
inline int round_up_int(int n, int m) { return (n + m - 1) / m * m; }

// The softmax's vector operations on 8 lanes (AVX2, every fast ISA) or 16 (AVX-512: the AMX and
// AVX512_BF16 kernels; over SIMDe in the test-only emulated module).
struct lanes8 {
  using f = __m256;
  using i = __m256i;
  static constexpr int kLanes = 8;
  static f load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, f v) { _mm256_storeu_ps(p, v); }
  static f set1(float x) { return _mm256_set1_ps(x); }
  static f add(f a, f b) { return _mm256_add_ps(a, b); }
  static f sub(f a, f b) { return _mm256_sub_ps(a, b); }
  static f mul(f a, f b) { return _mm256_mul_ps(a, b); }
  static f max(f a, f b) { return _mm256_max_ps(a, b); }  // b where either is NaN
  static f fmadd(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
  static f fnmadd(f a, f b, f c) { return _mm256_fnmadd_ps(a, b, c); }
  static i as_int(f v) { return _mm256_castps_si256(v); }
  static f as_float(i v) { return _mm256_castsi256_ps(v); }
  static i add_int(i a, i b) { return _mm256_add_epi32(a, b); }
  static i sub_int(i a, i b) { return _mm256_sub_epi32(a, b); }
  static i set1_int(int x) { return _mm256_set1_epi32(x); }
  static i shift_left(i v, int n) { return _mm256_slli_epi32(v, n); }
  // value where x >= lo (or x is NaN), 0 where x < lo
  static f zero_below(f value, f x, f lo) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), value);
  }
  // Sum and max of the 8 lanes in a fixed order.
  static float reduce_add(f v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
  }
  static float reduce_max(f v) {
    const __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
  }
  static void store_p(float* dst, f v) { _mm256_storeu_ps(dst, v); }
  // 8 fp32 to bf16 bits, round to nearest even (the values are finite or NaN).
  static void store_p(uint16_t* dst, f v) {
    i u = as_int(v);
    const i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), set1_int(1));
    u = _mm256_srli_epi32(add_int(u, add_int(set1_int(0x7fff), lsb)), 16);
    const i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
  }
};

#if defined(__AVX512F__) || DSV4_CPU_EMULATE_ISA
#if DSV4_CPU_EMULATE_ISA
#define DSV4_X512(name) simde##name
#else
#define DSV4_X512(name) name
#endif
struct lanes16 {
  using f = DSV4_X512(__m512);
  using i = DSV4_X512(__m512i);
  using mask = DSV4_X512(__mmask16);
  static constexpr int kLanes = 16;
  static constexpr mask kAll = 0xffff;
  static f load(const float* p) { return DSV4_X512(_mm512_loadu_ps)(p); }
  static void store(float* p, f v) { DSV4_X512(_mm512_storeu_ps)(p, v); }
  static f set1(float x) { return DSV4_X512(_mm512_set1_ps)(x); }
  static f add(f a, f b) { return DSV4_X512(_mm512_add_ps)(a, b); }
  static f sub(f a, f b) { return DSV4_X512(_mm512_sub_ps)(a, b); }
  static f mul(f a, f b) { return DSV4_X512(_mm512_mul_ps)(a, b); }
  // The masked forms with every lane set: their unmasked forms read an undefined vector, which
  // GCC 12 reports as maybe-uninitialized.
  static f max(f a, f b) { return DSV4_X512(_mm512_mask_max_ps)(a, kAll, a, b); }  // as lanes8
  static f fmadd(f a, f b, f c) { return DSV4_X512(_mm512_fmadd_ps)(a, b, c); }
  static f fnmadd(f a, f b, f c) { return DSV4_X512(_mm512_fnmadd_ps)(a, b, c); }
  static i as_int(f v) { return DSV4_X512(_mm512_castps_si512)(v); }
  static f as_float(i v) { return DSV4_X512(_mm512_castsi512_ps)(v); }
  static i add_int(i a, i b) { return DSV4_X512(_mm512_add_epi32)(a, b); }
  static i sub_int(i a, i b) { return DSV4_X512(_mm512_sub_epi32)(a, b); }
  static i set1_int(int x) { return DSV4_X512(_mm512_set1_epi32)(x); }
#if DSV4_CPU_EMULATE_ISA
  static i shift_left(i v, unsigned n) { return simde_mm512_slli_epi32(v, n); }
  static i shift_right(i v, unsigned n) { return simde_mm512_srli_epi32(v, n); }
  static void store_low_halves(uint16_t* dst, i v) {  // SIMDe has no cvtepi32_epi16
    uint32_t w[16];
    simde_mm512_storeu_si512(w, v);
    for (int k = 0; k < 16; ++k) dst[k] = static_cast<uint16_t>(w[k]);
  }
#else
  static i shift_left(i v, unsigned n) { return _mm512_mask_slli_epi32(v, kAll, v, n); }
  static i shift_right(i v, unsigned n) { return _mm512_mask_srli_epi32(v, kAll, v, n); }
  static void store_low_halves(uint16_t* dst, i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm512_mask_cvtepi32_epi16(_mm256_setzero_si256(), kAll, v));
  }
#endif
  static f zero_below(f value, f x, f lo) {
    const mask below = DSV4_X512(_mm512_cmp_ps_mask)(x, lo, _CMP_LT_OQ);
    return DSV4_X512(_mm512_maskz_mov_ps)(static_cast<mask>(~below), value);
  }
  // Sum and max of the 16 lanes in a fixed order (halves, then quarters, ...).
  static float reduce_add(f v) {
    float a[16];
    store(a, v);
    for (int w = 8; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) a[k] += a[k + w];
    return a[0];
  }
  static float reduce_max(f v) {
    float a[16];
    store(a, v);
    for (int w = 8; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) a[k] = a[k + w] > a[k] ? a[k + w] : a[k];
    return a[0];
  }
  // 16 fp32 to bf16 bits, round to nearest even (the values are finite or NaN).
  static void store_p(uint16_t* dst, f v) {
    i u = as_int(v);
    const i lsb = DSV4_X512(_mm512_and_si512)(shift_right(u, 16), set1_int(1));
    u = shift_right(add_int(u, add_int(set1_int(0x7fff), lsb)), 16);
    store_low_halves(dst, u);
  }
};
#undef DSV4_X512
#endif

// exp(x) per lane for the softmax (x = logit - running max <= 0): Cody-Waite reduction and a
// degree-6 polynomial, within 2 ulp; 0 below -87, NaN stays NaN. Every lane and every lane width
// computes the same function, so a row's weights never depend on where it sits.
template <class V>
inline typename V::f exp_lanes(typename V::f x) {
  const auto lo = V::set1(-87.0f);
  const auto xc = V::max(lo, x);            // NaN x stays NaN (max returns its second operand)
  const auto magic = V::set1(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const auto t = V::fmadd(xc, V::set1(1.44269504088896341f), magic);
  const auto n = V::sub(t, magic);
  const auto ni = V::sub_int(V::as_int(t), V::set1_int(0x4b400000));
  auto r = V::fnmadd(n, V::set1(0.693359375f), xc);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  auto p = V::set1(1.0f / 720.0f);
  p = V::fmadd(p, r, V::set1(1.0f / 120.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 24.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 6.0f));
  p = V::fmadd(p, r, V::set1(0.5f));
  p = V::fmadd(p, r, V::set1(1.0f));
  p = V::fmadd(p, r, V::set1(1.0f));
  const auto scale = V::as_float(V::shift_left(V::add_int(ni, V::set1_int(127)), 23));
  return V::zero_below(V::mul(p, scale), x, lo);
}

// ---------------------------------------------------------------------------------------------
// Row decoder (AVX2 + F16C, which every fast ISA has): one cache entry to fp32, exactly the values
// of dequant_entry (common/layout.h). FP8 bytes become fp16 bit patterns (sign, then the 7 low bits
// shifted by 7) that hold the e4m3 value times 2^-8 (2^-7 for FNUZ) for every byte, subnormals
// included; F16C widens them exactly; x 2^8 restores the value and x scale is the one rounding
// step of the reference's product, which is then rounded to bf16 as the reference does.
// ---------------------------------------------------------------------------------------------
inline __m256 round_to_bf16_v(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// 16 FP8 bytes to fp32 bit patterns of fp16 (the byte's value x 2^-8, FNUZ x 2^-7), widened.
inline void fp8x16_widen(const uint8_t* p, bool fnuz, __m256* lo, __m256* hi) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
  __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                              _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
  const __m256i nan = fnuz ? _mm256_cmpeq_epi16(w, _mm256_set1_epi16(0x80))
                           : _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f));
  h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// 16 FP8 bytes to fp32: x 2^8 (2^7) restores the value exactly, x scale is the reference's one
// rounding step, then the reference's rounding to bf16.
inline void fp8x16_to_f32(const uint8_t* p, bool fnuz, __m256 scale, bool round, float* out) {
  __m256 lo, hi;
  fp8x16_widen(p, fnuz, &lo, &hi);
  const __m256 unbias = _mm256_set1_ps(fnuz ? 128.0f : 256.0f);
  lo = _mm256_mul_ps(_mm256_mul_ps(lo, unbias), scale);
  hi = _mm256_mul_ps(_mm256_mul_ps(hi, unbias), scale);
  if (round) {
    lo = round_to_bf16_v(lo);
    hi = round_to_bf16_v(hi);
  }
  _mm256_storeu_ps(out, lo);
  _mm256_storeu_ps(out + 8, hi);
}

// The same where the product is exact (a power-of-two factor that keeps every FP8 value normal and
// finite in fp32, and bf16-exact): one multiply, no rounding.
inline void fp8x16_to_f32_exact(const uint8_t* p, bool fnuz, __m256 factor, float* out) {
  __m256 lo, hi;
  fp8x16_widen(p, fnuz, &lo, &hi);
  _mm256_storeu_ps(out, _mm256_mul_ps(lo, factor));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(hi, factor));
}

inline void bf16x16_to_f32(const uint8_t* p, float* out) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i w2 =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  _mm256_storeu_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  _mm256_storeu_ps(out + 8, _mm256_castsi256_ps(_mm256_slli_epi32(w2, 16)));
}

inline void fp16x16_to_f32(const uint8_t* p, float* out) {
  _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  _mm256_storeu_ps(out + 8,
                   _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
}

// Scale bytes 10..245 keep every product of an FP8 value normal, finite and bf16-exact.
inline bool ue8m0_scale_is_exact(uint8_t s) { return s >= 10 && s <= 245; }

// Entry `e` of the block at `block` (cache layout/flags) as layout_head_dim_qk values.
inline void decode_entry_f32(const dsv4_mod_cache& c, const uint8_t* block, int64_t e, float* out) {
  const uint8_t* p = block + entry_data_offset(c.layout, e);
  const bool fnuz = (c.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0;
  switch (c.layout) {
    case DSV4_KV_LAYOUT_BF16:
      for (int d = 0; d < kHeadDim; d += 16) bf16x16_to_f32(p + 2 * d, out + d);
      break;
    case DSV4_KV_LAYOUT_FP16:
      for (int d = 0; d < kHeadDim; d += 16) fp16x16_to_f32(p + 2 * d, out + d);
      break;
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      const uint8_t* sc = block + v4_scale_offset(c.block_size, e);
      for (int k = 0; k < kV4Tiles; ++k) {
        if (ue8m0_scale_is_exact(sc[k])) {
          const __m256 f = _mm256_set1_ps(ue8m0_to_f32(sc[k]) * (fnuz ? 128.0f : 256.0f));
          for (int j = 0; j < kV4TileDim; j += 16)
            fp8x16_to_f32_exact(p + k * kV4TileDim + j, fnuz, f, out + k * kV4TileDim + j);
          continue;
        }
        const __m256 s = _mm256_set1_ps(ue8m0_to_f32(sc[k]));
        for (int j = 0; j < kV4TileDim; j += 16)
          fp8x16_to_f32(p + k * kV4TileDim + j, fnuz, s, true, out + k * kV4TileDim + j);
      }
      for (int j = 0; j < kRopeDim; j += 16)
        bf16x16_to_f32(p + kNopeDim + 2 * j, out + kNopeDim + j);
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      for (int k = 0; k < kV32Tiles; ++k) {
        float s;
        std::memcpy(&s, p + kHeadDim + 4 * k, sizeof s);
        for (int j = 0; j < kV32TileDim; j += 16)
          fp8x16_to_f32(p + k * kV32TileDim + j, fnuz, _mm256_set1_ps(s), true,
                        out + k * kV32TileDim + j);
      }
      const uint8_t* r = p + kHeadDim + 4 * kV32Tiles;
      for (int j = 0; j < kRopeDim; j += 16) bf16x16_to_f32(r + 2 * j, out + kHeadDim + j);
      break;
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      for (int d = 0; d < kHeadDim; d += 16)
        fp8x16_to_f32_exact(p + d, fnuz, _mm256_set1_ps(fnuz ? 128.0f : 256.0f), out + d);
      break;
    default:
      break;
  }
}

// Rows are prefetched this far ahead of their decode: a random row comes from DRAM (~100 ns), one
// decode takes a few tens of ns.
constexpr int kPrefetchRows = 8;

// Prefetches the cache lines of one candidate row (its data and, in the 584 B layout, its scales).
// _mm_prefetch's hint must be a constant expression (clang refuses a conditional one).
inline void prefetch_line(const void* line, int hint) {
  if (hint == 0) {
    _mm_prefetch(static_cast<const char*>(line), _MM_HINT_T0);
  } else {
    _mm_prefetch(static_cast<const char*>(line), _MM_HINT_T1);
  }
}

// The cache lines of one candidate row: its data (every line it touches, the last through its
// last byte, since a row need not start on a line) and, in the 584 B layout, its scales' line.
struct row_lines {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;  // nullptr outside the 584 B layout
  int bytes = 0;
  int data_lines = 0;  // the data's lines, the last one through its last byte
  int count = 0;       // lines to fetch: line(0) .. line(count - 1)

  row_lines() = default;
  row_lines(const dsv4_mod_run& run, int32_t slot, uint8_t list) {
    const dsv4_mod_cache& c = list == 0 ? run.swa_cache : run.extra_cache;
    int64_t e;
    const uint8_t* block = slot_block_base(c, slot, &e);
    const bool v4 = c.layout == DSV4_KV_LAYOUT_FP8_V4_584B;
    data = block + entry_data_offset(c.layout, e);
    scale = v4 ? block + v4_scale_offset(c.block_size, e) : nullptr;
    bytes = v4 ? kV4DataBytes : layout_bytes_per_token(c.layout);
    data_lines = (bytes + 63) / 64 + 1;
    count = data_lines + (v4 ? 1 : 0);
  }
  const uint8_t* line(int i) const {
    if (i >= data_lines) return scale;
    const int b = 64 * i;
    return data + (b < bytes ? b : bytes - 1);
  }
};

inline void prefetch_row(const dsv4_mod_run& run, int32_t slot, uint8_t list, int hint) {
  const row_lines r(run, slot, list);
  for (int i = 0; i < r.count; ++i) prefetch_line(r.line(i), hint);
}

// The first kPrefetchRows candidates of the chunk at k0 (its decode prefetches the rest as it
// goes): issued one chunk ahead, so that no chunk starts on rows still in DRAM.
inline void prefetch_chunk_head(const dsv4_mod_run& run, const int32_t* slots, const uint8_t* list,
                                int64_t k0, int64_t n) {
  const int64_t end = std::min<int64_t>(n, k0 + kPrefetchRows);
  for (int64_t j = k0; j < end; ++j) prefetch_row(run, slots[j], list[j], 0);
}

// The next chunk's rows, prefetched a few cache lines at a time while this chunk's products run.
// A random row from DRAM takes ~300 ns; a burst of a chunk's prefetches overflows the core's miss
// buffers and stalls it, and rows prefetched only just before their decode arrive late. So the
// products call pace() at regular points (Isa::pace_steps of them per chunk) and each call issues
// its share of the next chunk's lines: the gather then overlaps the products.
class row_stream {
 public:
  // Rows [begin, end) of the item's candidates, spread over `steps` pace() calls.
  void start(const dsv4_mod_run& run, const int32_t* slots, const uint8_t* list, int64_t begin,
             int64_t end, int64_t steps) {
    run_ = &run;
    slots_ = slots;
    list_ = list;
    row_ = begin;
    end_ = end;
    line_ = 0;
    budget_ = 0;
    if (begin >= end) {
      step_ = 0;
      return;
    }
    const int64_t total = (end - begin) * row_lines(run, slots[begin], list[begin]).count;
    step_ = static_cast<uint32_t>((total * 256 + steps - 1) / (steps > 0 ? steps : 1));
  }
  // Issues this step's share of the lines (1/256 line units).
  inline void pace() {
    budget_ += step_;
    while (budget_ >= 256) {
      budget_ -= 256;
      if (!issue_line()) {
        step_ = 0;
        budget_ = 0;
        return;
      }
    }
  }
  // Whatever the steps left (when the products made fewer calls than counted).
  void finish() {
    while (issue_line()) {
    }
    step_ = 0;
  }

 private:
  bool issue_line() {
    if (row_ >= end_) return false;
    if (line_ == 0) current_ = row_lines(*run_, slots_[row_], list_[row_]);
    _mm_prefetch(reinterpret_cast<const char*>(current_.line(line_)), _MM_HINT_T0);
    if (++line_ == current_.count) {
      line_ = 0;
      ++row_;
    }
    return true;
  }

  const dsv4_mod_run* run_ = nullptr;
  const int32_t* slots_ = nullptr;
  const uint8_t* list_ = nullptr;
  int64_t row_ = 0, end_ = 0;
  int line_ = 0;
  row_lines current_{};
  uint32_t budget_ = 0, step_ = 0;
};

// ---------------------------------------------------------------------------------------------
// One item
// ---------------------------------------------------------------------------------------------
// Per-worker scratch, carved the same way for every ISA (sized for the largest tile).
struct item_scratch {
  int32_t* slots;   // [max_candidates] valid candidates of the item's lists, in list order
  uint8_t* list;    // [max_candidates] 0 main, 1 extra
  uint8_t* tile;    // decoded keys of one chunk
  void* q;          // [kMaxRowsPerItem][d_qk] q_t
  float* logits;    // [kMaxRowsPerItem][kChunkKeys]
  void* p;          // [kMaxRowsPerItem][kChunkKeys] p_t
  float* acc;       // [kMaxRowsPerItem][kHeadDim] running sum of p * v
  float* row_max;   // [kMaxRowsPerItem] running max
  float* row_sum;   // [kMaxRowsPerItem] running sum of p
  float* key_mult;  // [kChunkKeys] logit factor of each key (its list's)
};

inline size_t max_tile_bytes(int d_qk) {
  // fp32 rows (AVX2) or bf16 K^T blocks + V pairs + a 16-row fp32 staging area (bf16 ISAs).
  const size_t f32 = static_cast<size_t>(kChunkKeys) * d_qk * 4;
  const size_t bf16 = static_cast<size_t>(kChunkKeys) * d_qk * 2 + kChunkKeys * kHeadDim * 2 +
                      16 * static_cast<size_t>(d_qk) * 4;
  return align_up(f32 > bf16 ? f32 : bf16);
}

inline size_t scratch_layout(int d_qk, int64_t max_candidates, uint8_t* base, item_scratch* s) {
  const size_t m = static_cast<size_t>(max_candidates < 1 ? 1 : max_candidates);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    uint8_t* p = base != nullptr ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  item_scratch t;
  t.slots = reinterpret_cast<int32_t*>(take(m * 4));
  t.list = take(m);
  t.tile = take(max_tile_bytes(d_qk));
  t.q = take(static_cast<size_t>(kMaxRowsPerItem) * d_qk * 4);
  t.logits = reinterpret_cast<float*>(take(kMaxRowsPerItem * kChunkKeys * 4));
  t.p = take(kMaxRowsPerItem * kChunkKeys * 4);
  t.acc = reinterpret_cast<float*>(take(kMaxRowsPerItem * kHeadDim * 4));
  t.row_max = reinterpret_cast<float*>(take(kMaxRowsPerItem * 4));
  t.row_sum = reinterpret_cast<float*>(take(kMaxRowsPerItem * 4));
  t.key_mult = reinterpret_cast<float*>(take(kChunkKeys * 4));
  if (s != nullptr) *s = t;
  return off;
}

// Valid candidates of token t (main list, then extra list), in list order; returns the count and
// sets *n_main to the main list's. Paged runs build the token's two lists here, with the shared
// builders, into `slots` itself (SWA row, then compressed row), and compact them in place.
inline int64_t gather_candidates(const fast_job& job, int64_t t, int32_t* slots, uint8_t* list,
                                 int64_t* n_main) {
  const dsv4_mod_run& run = *job.run;
  const dsv4_mod_index_list* lists[2] = {&run.main_list, &run.extra_list};
  const dsv4_mod_cache* caches[2] = {&run.swa_cache, &run.extra_cache};
  int32_t paged_len[2] = {0, 0};
  if (job.paged) {
    const paged_geometry g = paged_geometry_of(*job.plan);
    const paged_capacity cap{
        run.swa_cache.base == nullptr ? 0 : run.swa_cache.num_blocks * run.swa_cache.block_size,
        run.extra_cache.base == nullptr ? 0
                                        : run.extra_cache.num_blocks * run.extra_cache.block_size};
    paged_build_token(g, run.paged, cap, t, slots, 1, &paged_len[0],
                      g.cmp_width > 0 ? slots + g.window : nullptr, 1, &paged_len[1]);
  }
  int64_t n = 0;
  *n_main = 0;
  [[maybe_unused]] bool first = true;
  for (int l = 0; l < 2; ++l) {
    if (l == 1) *n_main = n;
    int64_t count;
    list_row row;
    if (job.paged) {
      count = paged_len[l];
      row = list_row{slots + (l == 0 ? 0 : job.plan->window), 1};
    } else {
      count = list_row_count(*lists[l], t, run.seq_q);
      if (count == 0) continue;
      row = list_row_of(*lists[l], t, run.seq_q);
    }
    for (int64_t i = 0; i < count && n < job.max_candidates; ++i) {
      int64_t idx = row.base[i * row.step];
      if (!slot_is_valid(idx, *caches[l])) continue;
#if DSV4_CPU_MUTATION == 2
      if (first && slot_is_valid(idx + 1, *caches[l])) idx += 1;
      first = false;
#endif
      slots[n] = static_cast<int32_t>(idx);
      list[n] = static_cast<uint8_t>(l);
      ++n;
    }
  }
  return n;
}

// The chunks of an item's candidates: kChunk keys each in list order; where the lists' value
// multipliers differ, the extra list starts a chunk of its own (O changes units there, layout.h).
struct chunk_walk {
  int64_t n, n_main, chunk;
  bool by_list;
  int64_t main_chunks() const { return by_list ? (n_main + chunk - 1) / chunk : 0; }
  int64_t count() const {
    return by_list ? main_chunks() + (n - n_main + chunk - 1) / chunk : (n + chunk - 1) / chunk;
  }
  int64_t begin(int64_t c) const {
    const int64_t m = main_chunks();
    return c < m || !by_list ? c * chunk : n_main + (c - m) * chunk;
  }
  int64_t end(int64_t c) const {
    const int64_t stop = by_list && c < main_chunks() ? n_main : n;
    const int64_t full = begin(c) + chunk;
    return full < stop ? full : stop;
  }
};

// Writes one row's result from its state (running max m, sum s, acc = sum p v in the main list's
// value units). out holds the plan's out_dtype: bf16, or fp32 (partials for dsv4_merge, no
// rounding step).
inline void write_row(const fast_job& job, int64_t t, int h, float m, float s, const float* acc) {
  const dsv4_mod_run& run = *job.run;
  const int64_t seq_q = run.seq_q;
  const size_t elem = job.out_f32 ? sizeof(float) : sizeof(uint16_t);
  uint8_t* o = static_cast<uint8_t*>(run.out.data) +
               token_offset(run.out, t, seq_q, h) * static_cast<int64_t>(elem);
  float* lse_out = static_cast<float*>(run.lse.data);
  float* max_out = static_cast<float*>(run.max_logits.data);
  if (s == 0.0f && m == -kInf) {  // no valid candidate: the lonely-row rule (spec 2.3)
    std::memset(o, 0, elem * kHeadDim);
    if (lse_out != nullptr) lse_out[token_offset(run.lse, t, seq_q, h)] = kInf;
    if (max_out != nullptr) max_out[token_offset(run.max_logits, t, seq_q, h)] = -kInf;
    return;
  }
  const float lse = m + std::log(s);
  float f = 1.0f;
#if DSV4_CPU_MUTATION != 1
  if (run.attn_sink != nullptr) f = sink_factor(run.attn_sink[h], lse);
#endif
  if (f == 0.0f) {
    std::memset(o, 0, elem * kHeadDim);
  } else {
    const float c = job.scales.multiplier[0] * (1.0f / s) * f;
    if (job.out_f32) {
      float* of = reinterpret_cast<float*>(o);
      for (int d = 0; d < kHeadDim; ++d) of[d] = acc[d] * c;
    } else {
      uint16_t* ob = reinterpret_cast<uint16_t*>(o);
      for (int d = 0; d < kHeadDim; ++d) ob[d] = f32_to_bf16(acc[d] * c);
    }
  }
  if (lse_out != nullptr) lse_out[token_offset(run.lse, t, seq_q, h)] = lse;
  if (max_out != nullptr) max_out[token_offset(run.max_logits, t, seq_q, h)] = m;
}

// Query rows of the item into the Isa's format: row r = token t0 + r / nh, head h0 + r % nh;
// padding rows zero.
template <class Isa>
void load_queries(const fast_job& job, int64_t t0, int ntok, int h0, int nh, int rows_pad,
                  typename Isa::q_t* q) {
  const dsv4_mod_run& run = *job.run;
  const int d = job.d_qk;
  std::memset(q, 0, sizeof(typename Isa::q_t) * static_cast<size_t>(rows_pad) * d);
  for (int r = 0; r < ntok * nh; ++r) {
    const int64_t off = token_offset(run.q, t0 + r / nh, run.seq_q, h0 + r % nh);
    typename Isa::q_t* dst = q + static_cast<size_t>(r) * d;
    if (job.q_is_fp8) {
      const uint8_t* src = static_cast<const uint8_t*>(run.q.data) + off;
      for (int i = 0; i < d; ++i) dst[i] = Isa::from_f32(fp8_e4m3_to_f32(src[i]));
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(run.q.data) + off;
      for (int i = 0; i < d; ++i) dst[i] = Isa::from_bf16(src[i]);
    }
  }
}

// Folds one chunk's logits into the running state of each row and writes P (Isa format, never
// weighted: layout.h), on the Isa's softmax lanes (Isa::lanes: lanes8 or lanes16). acc_units
// converts the accumulator into this chunk's value units (value_units::enter).
template <class Isa>
__attribute__((noinline)) void softmax_chunk(int rows, int nk, int npad, float acc_units,
                                             const item_scratch& s) {
  using V = typename Isa::lanes;
  auto* p = static_cast<typename Isa::p_t*>(s.p);
  const int n16 = round_up_int(npad, 16);  // whole 16-key groups (the tile padding is 8 or 32)
  for (int r = 0; r < rows; ++r) {
    float* l = s.logits + static_cast<size_t>(r) * kChunkKeys;
    // Scaled logits and their max in one pass (padding keys: -inf, after the pass).
    auto lane_max = V::set1(-kInf);
    const int n_whole = nk / V::kLanes * V::kLanes;
    for (int j = 0; j < n_whole; j += V::kLanes) {
      const auto x = V::mul(V::load(l + j), V::load(s.key_mult + j));
      V::store(l + j, x);
      lane_max = V::max(x, lane_max);  // NaN ignored
    }
    for (int j = n_whole; j < n16; ++j) l[j] = j < nk ? l[j] * s.key_mult[j] : -kInf;
    for (int j = n_whole; j < n16; j += V::kLanes) lane_max = V::max(V::load(l + j), lane_max);
    const float m = V::reduce_max(lane_max);
    const float old = s.row_max[r];
    const float m_new = m > old ? m : old;
    const float alpha =
        old == -kInf
            ? 0.0f
            : _mm_cvtss_f32(_mm256_castps256_ps128(exp_lanes<lanes8>(_mm256_set1_ps(old - m_new))));
    const auto mv = V::set1(m_new);
    auto lane_sum = V::set1(0.0f);
    typename Isa::p_t* pr = p + static_cast<size_t>(r) * kChunkKeys;
    for (int j = 0; j < n16; j += V::kLanes) {
      const auto e = exp_lanes<V>(V::sub(V::load(l + j), mv));
      lane_sum = V::add(lane_sum, e);
      V::store_p(pr + j, e);
    }
    s.row_sum[r] = s.row_sum[r] * alpha + V::reduce_add(lane_sum);
    s.row_max[r] = m_new;
    if (alpha * acc_units != 1.0f) {
      const auto av = V::set1(alpha * acc_units);
      float* acc = s.acc + static_cast<size_t>(r) * kHeadDim;
      for (int d = 0; d < kHeadDim; d += V::kLanes) V::store(acc + d, V::mul(V::load(acc + d), av));
    }
  }
}

template <class Isa>
void run_item(const fast_job& job, int64_t item, int worker) {
  const dsv4_mod_run& run = *job.run;
  item_scratch s;
  scratch_layout(job.d_qk, job.max_candidates, job.scratch + job.scratch_stride * worker, &s);
  const int64_t per_group = static_cast<int64_t>(job.head_groups) * job.splits;
  const int64_t g = item / per_group;
  const int hg = static_cast<int>((item % per_group) / job.splits);
  const int split = static_cast<int>(item % job.splits);
  const int64_t t0 = job.group_first[g];
  const int ntok = static_cast<int>(job.group_first[g + 1] - t0);
  const int h0 = hg * job.heads_per_group;
  const int nh = std::min(job.plan->num_heads - h0, job.heads_per_group);
  const int rows = ntok * nh;
  const int rows_pad = round_up_int(rows, Isa::kRowPad);

  chunk_walk walk{};
  walk.n = gather_candidates(job, t0, s.slots, s.list, &walk.n_main);
  walk.chunk = Isa::kChunk;
  walk.by_list = job.scales.mixed;
  const int64_t n = walk.n;
  const int64_t chunks = walk.count();
  const int64_t per_split = (chunks + job.splits - 1) / job.splits;
  const int64_t c_begin = std::min(chunks, split * per_split);
  const int64_t c_end = std::min(chunks, c_begin + per_split);

  for (int r = 0; r < rows; ++r) {
    s.row_max[r] = -kInf;
    s.row_sum[r] = 0.0f;
  }
  std::memset(s.acc, 0, sizeof(float) * static_cast<size_t>(rows_pad) * kHeadDim);
  value_units units;
  if (c_end > c_begin) {
    prefetch_chunk_head(run, s.slots, s.list, walk.begin(c_begin), n);
    auto* q = static_cast<typename Isa::q_t*>(s.q);
    load_queries<Isa>(job, t0, ntok, h0, nh, rows_pad, q);
    row_stream stream;
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t k0 = walk.begin(c);
      const int nk = static_cast<int>(walk.end(c) - k0);
      const int npad = round_up_int(nk, Isa::kKeyPad);
      for (int j = 0; j < round_up_int(npad, 16); ++j)
        s.key_mult[j] = job.scales.logit[j < nk ? s.list[k0 + j] : 0];
      const float acc_units = units.enter(job.scales, s.list[k0]);
      Isa::build_tile(run, job.d_qk, s.slots + k0, s.list + k0, nk, npad, s.tile);
      const int64_t next_begin = c + 1 < c_end ? walk.begin(c + 1) : k0;
      const int64_t next_end = c + 1 < c_end ? walk.end(c + 1) : k0;
      stream.start(run, s.slots, s.list, next_begin, next_end,
                   Isa::pace_steps(rows_pad, job.d_qk, npad));
      Isa::qk(q, rows_pad, job.d_qk, s.tile, npad, s.logits, stream);
      softmax_chunk<Isa>(rows, nk, npad, acc_units, s);
      Isa::pv(static_cast<const typename Isa::p_t*>(s.p), rows_pad, job.d_qk, s.tile, npad, s.acc,
              stream);
      stream.finish();
    }
  }

  const float to_main = units.to_main(job.scales);
  if (to_main != 1.0f) {
    for (size_t i = 0; i < static_cast<size_t>(rows) * kHeadDim; ++i) s.acc[i] *= to_main;
  }
  if (job.splits == 1) {
    for (int r = 0; r < rows; ++r)
      write_row(job, t0 + r / nh, h0 + r % nh, s.row_max[r], s.row_sum[r],
                s.acc + static_cast<size_t>(r) * kHeadDim);
    return;
  }
  // Key splits: publish this split's states ([pair][split][rows_cap] states); the last split to
  // finish merges all of them in split order (so the result does not depend on which worker
  // finishes last).
  constexpr size_t kState = kHeadDim + 2;
  const int64_t pair = g * job.head_groups + hg;
  const size_t rows_cap = static_cast<size_t>(job.rows_cap);
  float* base = job.partials + static_cast<size_t>(pair) * job.splits * rows_cap * kState;
  float* mine = base + static_cast<size_t>(split) * rows_cap * kState;
  for (int r = 0; r < rows; ++r) {
    float* st = mine + static_cast<size_t>(r) * kState;
    st[0] = s.row_max[r];
    st[1] = s.row_sum[r];
    std::memcpy(st + 2, s.acc + static_cast<size_t>(r) * kHeadDim, sizeof(float) * kHeadDim);
  }
  if (job.pending[pair].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  for (int r = 0; r < rows; ++r) {
    float m = -kInf;
    for (int sp = 0; sp < job.splits; ++sp) {
      const float x = base[(static_cast<size_t>(sp) * rows_cap + r) * kState];
      m = x > m ? x : m;
    }
    float sum = 0.0f;
    float* acc = s.acc + static_cast<size_t>(r) * kHeadDim;
    std::memset(acc, 0, sizeof(float) * kHeadDim);
    for (int sp = 0; sp < job.splits; ++sp) {
      const float* st = base + (static_cast<size_t>(sp) * rows_cap + r) * kState;
      // A split that saw no key of the row adds nothing. One whose only keys were NaN rows kept
      // its max at -inf (max ignores NaN) but a NaN sum: it must still carry the NaN (spec 2.3).
      if (st[0] == -kInf && st[1] == 0.0f) continue;
      const float w = std::exp(st[0] - m);
      sum += st[1] * w;
      for (int d = 0; d < kHeadDim; ++d) acc[d] += st[2 + d] * w;
    }
    write_row(job, t0 + r / nh, h0 + r % nh, m, sum, acc);
  }
}

}  // namespace fast
}  // namespace cpu
}  // namespace dsv4
