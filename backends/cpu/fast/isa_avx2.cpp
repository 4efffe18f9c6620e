// The AVX2/FMA fast kernel: keys decoded once per chunk into fp32 rows (bf16-exact values, and
// fp16 caches exactly), fp32 FMA micro-kernels for Q K^T and P V. Compiled with -mavx2 -mfma
// -mf16c; runs on every x86-64 CPU that has those (the front checks).
#include <immintrin.h>

#include "fast/driver.h"

namespace dsv4 {
namespace cpu {
namespace {

// Four sums, one per vector, each ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) whatever its position.
inline __m128 hsum4x8(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// logits of RB query rows against keys j, j+1 (every key pair of the tile).
template <int RB>
inline void qk_rows(const float* q, int d, const float* k, int npad, float* logits,
                    fast::row_stream& stream) {
  for (int j = 0; j < npad; j += 2) {
    stream.pace();
    const float* k0 = k + static_cast<size_t>(j) * d;
    const float* k1 = k0 + d;
    __m256 a[RB][2];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int x = 0; x < d; x += 8) {
      const __m256 kv0 = _mm256_loadu_ps(k0 + x);
      const __m256 kv1 = _mm256_loadu_ps(k1 + x);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) {
        __m256 qv = _mm256_loadu_ps(q + static_cast<size_t>(i) * d + x);
        // One load feeds both keys: without this the compiler folds the load into each FMA,
        // and 14 loads per 12 FMAs make the loop load-bound.
        __asm__("" : "+x"(qv));
        a[i][0] = _mm256_fmadd_ps(qv, kv0, a[i][0]);
        a[i][1] = _mm256_fmadd_ps(qv, kv1, a[i][1]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i += 2) {
      alignas(16) float s[4];
      _mm_store_ps(s, hsum4x8(a[i][0], a[i][1], a[i + 1][0], a[i + 1][1]));
      logits[static_cast<size_t>(i) * kChunkKeys + j] = s[0];
      logits[static_cast<size_t>(i) * kChunkKeys + j + 1] = s[1];
      logits[static_cast<size_t>(i + 1) * kChunkKeys + j] = s[2];
      logits[static_cast<size_t>(i + 1) * kChunkKeys + j + 1] = s[3];
    }
  }
}

// acc[RB rows][0:512] += sum_j p[row][j] * v[j][0:512], 16 dims per pass, keys in order.
template <int RB>
inline void pv_rows(const float* p, int d, const float* v, int npad, float* acc,
                    fast::row_stream& stream) {
  for (int x = 0; x < kHeadDim; x += 16) {
    stream.pace();
    __m256 a[RB][2];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      a[i][0] = _mm256_loadu_ps(acc + static_cast<size_t>(i) * kHeadDim + x);
      a[i][1] = _mm256_loadu_ps(acc + static_cast<size_t>(i) * kHeadDim + x + 8);
    }
    for (int j = 0; j < npad; ++j) {
      const float* vj = v + static_cast<size_t>(j) * d + x;
      const __m256 v0 = _mm256_loadu_ps(vj);
      const __m256 v1 = _mm256_loadu_ps(vj + 8);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) {
        const __m256 pb = _mm256_broadcast_ss(p + static_cast<size_t>(i) * kChunkKeys + j);
        a[i][0] = _mm256_fmadd_ps(pb, v0, a[i][0]);
        a[i][1] = _mm256_fmadd_ps(pb, v1, a[i][1]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      _mm256_storeu_ps(acc + static_cast<size_t>(i) * kHeadDim + x, a[i][0]);
      _mm256_storeu_ps(acc + static_cast<size_t>(i) * kHeadDim + x + 8, a[i][1]);
    }
  }
}

struct isa_avx2 {
  static constexpr int kRowPad = 2;  // rows per micro-kernel block: 6, 4 or 2
  static constexpr int kKeyPad = 8;  // keys: pairs in Q K^T, 16-lane softmax loops
  static constexpr int kChunk = fast_chunk_keys(fast_isa::avx2);
  using lanes = fast::lanes8;
  using q_t = float;
  using p_t = float;
  static float from_f32(float x) { return x; }
  static float from_bf16(uint16_t h) { return bf16_to_f32(h); }

  // Tile: fp32 rows [npad][d_qk]; padding rows zero.
  __attribute__((noinline)) static void build_tile(const dsv4_mod_run& run, int d_qk,
                                                   const int32_t* slots, const uint8_t* list,
                                                   int nk, int npad, uint8_t* tile) {
    float* rows = reinterpret_cast<float*>(tile);
    for (int j = 0; j < nk; ++j) {
      const dsv4_mod_cache& c = list[j] == 0 ? run.swa_cache : run.extra_cache;
      if (j + fast::kPrefetchRows < nk)
        fast::prefetch_row(run, slots[j + fast::kPrefetchRows], list[j + fast::kPrefetchRows], 0);
      int64_t e;
      const uint8_t* block = slot_block_base(c, slots[j], &e);
      fast::decode_entry_f32(c, block, e, rows + static_cast<size_t>(j) * d_qk);
    }
    std::memset(rows + static_cast<size_t>(nk) * d_qk, 0,
                sizeof(float) * static_cast<size_t>(npad - nk) * d_qk);
  }

  // Row blocks of the 6 / 4 / 2 rule below.
  static int row_blocks(int rows) {
    int blocks = 0;
    for (int r = 0; r < rows; ++blocks)
      r += rows - r >= 6 && rows - r != 8 ? 6 : rows - r >= 4 ? 4 : 2;
    return blocks;
  }
  // pace() calls per chunk: every key pair of Q K^T and every 16-dim pass of P V, per row block.
  static int64_t pace_steps(int rows, int /*d*/, int npad) {
    return static_cast<int64_t>(row_blocks(rows)) * (npad / 2 + kHeadDim / 16);
  }

  // Rows in blocks of 6 (12 accumulators: the tile is read once per 6 rows), then 4 or 2 (8 rows
  // as 4 + 4).
  __attribute__((noinline)) static void qk(const float* q, int rows, int d, const uint8_t* tile,
                                           int npad, float* logits, fast::row_stream& stream) {
    const float* k = reinterpret_cast<const float*>(tile);
    for (int r = 0; r < rows;) {
      const float* qr = q + static_cast<size_t>(r) * d;
      float* lr = logits + static_cast<size_t>(r) * kChunkKeys;
      if (rows - r >= 6 && rows - r != 8) {
        qk_rows<6>(qr, d, k, npad, lr, stream);
        r += 6;
      } else if (rows - r >= 4) {
        qk_rows<4>(qr, d, k, npad, lr, stream);
        r += 4;
      } else {
        qk_rows<2>(qr, d, k, npad, lr, stream);
        r += 2;
      }
    }
  }

  __attribute__((noinline)) static void pv(const float* p, int rows, int d, const uint8_t* tile,
                                           int npad, float* acc, fast::row_stream& stream) {
    const float* v = reinterpret_cast<const float*>(tile);
    for (int r = 0; r < rows;) {
      const float* pr = p + static_cast<size_t>(r) * kChunkKeys;
      float* ar = acc + static_cast<size_t>(r) * kHeadDim;
      if (rows - r >= 6 && rows - r != 8) {
        pv_rows<6>(pr, d, v, npad, ar, stream);
        r += 6;
      } else if (rows - r >= 4) {
        pv_rows<4>(pr, d, v, npad, ar, stream);
        r += 4;
      } else {
        pv_rows<2>(pr, d, v, npad, ar, stream);
        r += 2;
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
