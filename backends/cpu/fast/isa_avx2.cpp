// The AVX2/FMA fast kernel: keys decoded once per chunk into fp32 rows (bf16-exact values, and
// fp16 caches exactly), fp32 FMA micro-kernels for Q K^T and P V. Compiled with -mavx2 -mfma
// -mf16c; runs on every x86-64 CPU that has those (the front checks).
#include <immintrin.h>

#include "fast/driver.h"

namespace dsv4 {
namespace cpu {
namespace {

// Eight sums, one per vector, each ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) whatever its position.
inline __m256 hsum8(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4, __m256 v5, __m256 v6,
                    __m256 v7) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v4, v5), _mm256_hadd_ps(v6, v7));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

struct isa_avx2 {
  static constexpr int kRowPad = 4;  // rows per micro-kernel block
  static constexpr int kKeyPad = 8;  // keys: pairs in Q K^T, 16-lane softmax loops
  using q_t = float;
  using p_t = float;
  static float from_f32(float x) { return x; }
  static float from_bf16(uint16_t h) { return bf16_to_f32(h); }

  // Tile: fp32 rows [npad][d_qk]; padding rows zero.
  static void build_tile(const dsv4_mod_run& run, int d_qk, const int32_t* slots,
                         const uint8_t* list, int nk, int npad, uint8_t* tile) {
    float* rows = reinterpret_cast<float*>(tile);
    for (int j = 0; j < nk; ++j) {
      const dsv4_mod_cache& c = list[j] == 0 ? run.swa_cache : run.extra_cache;
      if (j + 2 < nk) {  // the row after next: its block is far away in memory
        const dsv4_mod_cache& cn = list[j + 2] == 0 ? run.swa_cache : run.extra_cache;
        int64_t en;
        const uint8_t* bn = slot_block_base(cn, slots[j + 2], &en);
        const uint8_t* pn = bn + entry_data_offset(cn.layout, en);
        for (int b = 0; b < layout_bytes_per_token(cn.layout); b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pn + b), _MM_HINT_T0);
      }
      int64_t e;
      const uint8_t* block = slot_block_base(c, slots[j], &e);
      fast::decode_entry_f32(c, block, e, rows + static_cast<size_t>(j) * d_qk);
    }
    std::memset(rows + static_cast<size_t>(nk) * d_qk, 0,
                sizeof(float) * static_cast<size_t>(npad - nk) * d_qk);
  }

  // logits[r][j] = q[r] . k[j] for rows blocks of 4 and key pairs.
  static void qk(const float* q, int rows, int d, const uint8_t* tile, int npad, float* logits) {
    const float* k = reinterpret_cast<const float*>(tile);
    for (int r = 0; r < rows; r += 4) {
      const float* q0 = q + static_cast<size_t>(r) * d;
      for (int j = 0; j < npad; j += 2) {
        const float* k0 = k + static_cast<size_t>(j) * d;
        const float* k1 = k0 + d;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
               a30 = a00, a31 = a00;
        for (int x = 0; x < d; x += 8) {
          const __m256 kv0 = _mm256_loadu_ps(k0 + x);
          const __m256 kv1 = _mm256_loadu_ps(k1 + x);
          __m256 qv = _mm256_loadu_ps(q0 + x);
          a00 = _mm256_fmadd_ps(qv, kv0, a00);
          a01 = _mm256_fmadd_ps(qv, kv1, a01);
          qv = _mm256_loadu_ps(q0 + d + x);
          a10 = _mm256_fmadd_ps(qv, kv0, a10);
          a11 = _mm256_fmadd_ps(qv, kv1, a11);
          qv = _mm256_loadu_ps(q0 + 2 * d + x);
          a20 = _mm256_fmadd_ps(qv, kv0, a20);
          a21 = _mm256_fmadd_ps(qv, kv1, a21);
          qv = _mm256_loadu_ps(q0 + 3 * d + x);
          a30 = _mm256_fmadd_ps(qv, kv0, a30);
          a31 = _mm256_fmadd_ps(qv, kv1, a31);
        }
        alignas(32) float s[8];
        _mm256_store_ps(s, hsum8(a00, a01, a10, a11, a20, a21, a30, a31));
        for (int i = 0; i < 4; ++i) {
          logits[static_cast<size_t>(r + i) * kChunkKeys + j] = s[2 * i];
          logits[static_cast<size_t>(r + i) * kChunkKeys + j + 1] = s[2 * i + 1];
        }
      }
    }
  }

  // acc[r][0:512] += sum_j p[r][j] * v[j][0:512], 4 rows x 16 dims per pass, keys in order.
  static void pv(const float* p, int rows, int d, const uint8_t* tile, int npad, float* acc) {
    const float* v = reinterpret_cast<const float*>(tile);
    for (int r = 0; r < rows; r += 4) {
      const float* p0 = p + static_cast<size_t>(r) * kChunkKeys;
      float* o = acc + static_cast<size_t>(r) * kHeadDim;
      for (int x = 0; x < kHeadDim; x += 16) {
        __m256 a00 = _mm256_loadu_ps(o + x), a01 = _mm256_loadu_ps(o + x + 8);
        __m256 a10 = _mm256_loadu_ps(o + kHeadDim + x), a11 = _mm256_loadu_ps(o + kHeadDim + x + 8);
        __m256 a20 = _mm256_loadu_ps(o + 2 * kHeadDim + x),
               a21 = _mm256_loadu_ps(o + 2 * kHeadDim + x + 8);
        __m256 a30 = _mm256_loadu_ps(o + 3 * kHeadDim + x),
               a31 = _mm256_loadu_ps(o + 3 * kHeadDim + x + 8);
        for (int j = 0; j < npad; ++j) {
          const float* vj = v + static_cast<size_t>(j) * d + x;
          const __m256 v0 = _mm256_loadu_ps(vj);
          const __m256 v1 = _mm256_loadu_ps(vj + 8);
          __m256 pb = _mm256_broadcast_ss(p0 + j);
          a00 = _mm256_fmadd_ps(pb, v0, a00);
          a01 = _mm256_fmadd_ps(pb, v1, a01);
          pb = _mm256_broadcast_ss(p0 + kChunkKeys + j);
          a10 = _mm256_fmadd_ps(pb, v0, a10);
          a11 = _mm256_fmadd_ps(pb, v1, a11);
          pb = _mm256_broadcast_ss(p0 + 2 * kChunkKeys + j);
          a20 = _mm256_fmadd_ps(pb, v0, a20);
          a21 = _mm256_fmadd_ps(pb, v1, a21);
          pb = _mm256_broadcast_ss(p0 + 3 * kChunkKeys + j);
          a30 = _mm256_fmadd_ps(pb, v0, a30);
          a31 = _mm256_fmadd_ps(pb, v1, a31);
        }
        _mm256_storeu_ps(o + x, a00);
        _mm256_storeu_ps(o + x + 8, a01);
        _mm256_storeu_ps(o + kHeadDim + x, a10);
        _mm256_storeu_ps(o + kHeadDim + x + 8, a11);
        _mm256_storeu_ps(o + 2 * kHeadDim + x, a20);
        _mm256_storeu_ps(o + 2 * kHeadDim + x + 8, a21);
        _mm256_storeu_ps(o + 3 * kHeadDim + x, a30);
        _mm256_storeu_ps(o + 3 * kHeadDim + x + 8, a31);
      }
    }
  }
};

}  // namespace

void fast_item_avx2(const fast_job& job, int64_t item, int worker) {
  fast::run_item<isa_avx2>(job, item, worker);
}

size_t fast_worker_scratch_bytes(int d_qk, int64_t max_candidates) {
  return fast::scratch_layout(d_qk, max_candidates, nullptr, nullptr);
}

}  // namespace cpu
}  // namespace dsv4
