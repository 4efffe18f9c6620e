// The AVX512_BF16 fast kernel: bf16 tiles (bf16_tile.h) and VDPBF16PS (pairs of bf16 products
// summed into fp32) for Q K^T and P V, P rounded to bf16 as FlashMLA does. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (and AVX2/F16C for the row decoder); the front runs
// it only where CPUID says so. With DSV4_CPU_EMULATE_ISA (a test-only module) the 512-bit
// operations come from SIMDe instead, so machines without AVX-512 test the same code.
#include "fast/bf16_tile.h"

#if DSV4_CPU_EMULATE_ISA
#include <simde/x86/avx512.h>
#endif

namespace dsv4 {
namespace cpu {
namespace {

#if DSV4_CPU_EMULATE_ISA
using v16f = simde__m512;
using v32bh = simde__m512bh;
inline v16f vzero() { return simde_mm512_setzero_ps(); }
inline v16f vload(const float* p) { return simde_mm512_loadu_ps(p); }
inline void vstore(float* p, v16f v) { simde_mm512_storeu_ps(p, v); }
inline v16f vdot(v16f acc, v32bh a, v32bh b) { return simde_mm512_dpbf16_ps(acc, a, b); }
inline v32bh bh_load(const uint32_t* p) {
  v32bh r;
  std::memcpy(&r, p, sizeof r);
  return r;
}
inline v32bh bh_set1(uint32_t x) {
  uint32_t a[16];
  for (uint32_t& v : a) v = x;
  v32bh r;
  std::memcpy(&r, a, sizeof r);
  return r;
}
#else
using v16f = __m512;
using v32bh = __m512bh;
inline v16f vzero() { return _mm512_setzero_ps(); }
inline v16f vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, v16f v) { _mm512_storeu_ps(p, v); }
inline v16f vdot(v16f acc, v32bh a, v32bh b) { return _mm512_dpbf16_ps(acc, a, b); }
inline v32bh bh_load(const uint32_t* p) { return (v32bh)_mm512_loadu_si512(p); }
inline v32bh bh_set1(uint32_t x) { return (v32bh)_mm512_set1_epi32(static_cast<int>(x)); }
#endif

struct isa_avx512_bf16 : fast::bf16_operands {
  static constexpr int kRowPad = 8;
  static constexpr int kKeyPad = 32;
  static constexpr int kChunk = fast_chunk_keys(fast_isa::avx512_bf16);
  using lanes = fast::lanes16;

  static void build_tile(const dsv4_mod_run& run, int d_qk, const int32_t* slots,
                         const uint8_t* list, int nk, int npad, uint8_t* tile) {
    fast::build_bf16_tile(run, d_qk, slots, list, nk, npad, tile);
  }

  // logits[r][j]: 8 rows x 32 keys per pass; each dim pair of q broadcast against 16 keys' pairs.
  // pace() calls per chunk: every 32 dim pairs of a Q K^T pass, every 16 key pairs of a P V pass.
  static int64_t pace_steps(int rows, int d, int npad) {
    const int64_t qk = static_cast<int64_t>(rows / 8) * (npad / 32) * ((d / 2 + 31) / 32);
    return qk + static_cast<int64_t>(rows / 4) * (kHeadDim / 64) * ((npad / 2 + 15) / 16);
  }

  static void qk(const uint16_t* q, int rows, int d, const uint8_t* tile, int npad, float* logits,
                 fast::row_stream& stream) {
    const fast::bf16_tile t = fast::bf16_tile_of(const_cast<uint8_t*>(tile), d);
    const int pairs = d / 2;
    for (int r = 0; r < rows; r += 8) {
      const uint32_t* q32 = reinterpret_cast<const uint32_t*>(q + static_cast<size_t>(r) * d);
      for (int blk = 0; blk < npad / 16; blk += 2) {
        v16f a[8][2];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) a[i][0] = a[i][1] = vzero();
        const uint32_t* k0 = t.kt + static_cast<size_t>(blk) * pairs * 16;
        const uint32_t* k1 = k0 + static_cast<size_t>(pairs) * 16;
        for (int dp = 0; dp < pairs; ++dp) {
          if ((dp & 31) == 0) stream.pace();
          const v32bh kv0 = bh_load(k0 + dp * 16);
          const v32bh kv1 = bh_load(k1 + dp * 16);
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) {
            const v32bh qb = bh_set1(q32[i * pairs + dp]);
            a[i][0] = vdot(a[i][0], kv0, qb);
            a[i][1] = vdot(a[i][1], kv1, qb);
          }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          float* l = logits + static_cast<size_t>(r + i) * kChunkKeys + blk * 16;
          vstore(l, a[i][0]);
          vstore(l + 16, a[i][1]);
        }
      }
    }
  }

  // acc[r][0:512] += P V: 4 rows x 64 dims per pass over the key pairs.
  static void pv(const uint16_t* p, int rows, int d, const uint8_t* tile, int npad, float* acc,
                 fast::row_stream& stream) {
    const fast::bf16_tile t = fast::bf16_tile_of(const_cast<uint8_t*>(tile), d);
    for (int r = 0; r < rows; r += 4) {
      const uint32_t* p32 =
          reinterpret_cast<const uint32_t*>(p + static_cast<size_t>(r) * kChunkKeys);
      float* o = acc + static_cast<size_t>(r) * kHeadDim;
      for (int x = 0; x < kHeadDim; x += 64) {
        v16f a[4][4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) a[i][c] = vload(o + i * kHeadDim + x + 16 * c);
        for (int pr = 0; pr < npad / 2; ++pr) {
          if ((pr & 15) == 0) stream.pace();
          const uint32_t* vp = t.vn + static_cast<size_t>(pr) * kHeadDim + x;
          v32bh v[4];
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) v[c] = bh_load(vp + 16 * c);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const v32bh pb = bh_set1(p32[i * (kChunkKeys / 2) + pr]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) a[i][c] = vdot(a[i][c], v[c], pb);
          }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) vstore(o + i * kHeadDim + x + 16 * c, a[i][c]);
      }
    }
  }
};

}  // namespace

void fast_item_avx512_bf16(const fast_job& job, int64_t item, int worker) {
  fast::run_item<isa_avx512_bf16>(job, item, worker);
}

}  // namespace cpu
}  // namespace dsv4
