// The AMX-BF16 fast kernel (Intel Sapphire Rapids and later): the same bf16 tiles as the
// AVX512_BF16 kernel (bf16_tile.h), Q K^T and P V as TDPBF16PS on 16-row tiles. Compiled with
// -mamx-tile -mamx-bf16 and -mavx512f (the softmax's 16 lanes); the front runs it only where CPUID
// reports AMX-BF16 and AVX-512F, the OS enables the tile state (XCR0) and Linux grants it to the
// process (arch_prctl). The project's machines have no AMX: there the test-only emulated module
// (DSV4_CPU_EMULATE_ISA, amx_emulation.h, SIMDe) runs this code.
#include "fast/bf16_tile.h"
#include "probe.h"

#if DSV4_CPU_EMULATE_ISA
#include "fast/amx_emulation.h"
#endif

namespace dsv4 {
namespace cpu {
namespace {

// Tiles 0-7: 16 rows x 64 bytes (C: 16 fp32; A and B: 32 bf16).
struct alignas(64) tile_config {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

struct isa_amx_bf16 : fast::bf16_operands {
  static constexpr int kRowPad = 16;
  static constexpr int kKeyPad = 32;
  static constexpr int kChunk = fast_chunk_keys(fast_isa::amx_bf16);
  using lanes = fast::lanes16;

  static void build_tile(const dsv4_mod_run& run, int d_qk, const int32_t* slots,
                         const uint8_t* list, int nk, int npad, uint8_t* tile) {
    fast::build_bf16_tile(run, d_qk, slots, list, nk, npad, tile);
  }

  // C[16 rows][16 keys] = Q[16 rows][d] . K^T block: A = q rows (32 dims), B = 16 dim pairs.
  // Two row groups by two key blocks at a time (C tiles 0-3, A 4-5, B 6-7): one tile load per
  // product instead of two, as the loads, not the products, set the pace. npad is a multiple of
  // 32 keys (kKeyPad); a last group of 16 rows takes the key blocks alone.
  // pace() calls per chunk: every 16 dim pairs of a Q K^T pass, every 32 keys of a P V pass.
  static int64_t pace_steps(int rows, int d, int npad) {
    const int64_t qk = static_cast<int64_t>((rows + 31) / 32) * (npad / 32) * (d / 32);
    return qk + static_cast<int64_t>(rows / 16) * (kHeadDim / 64) * (npad / 32);
  }

  static void qk(const uint16_t* q, int rows, int d, const uint8_t* tile, int npad, float* logits,
                 fast::row_stream& stream) {
    const fast::bf16_tile t = fast::bf16_tile_of(const_cast<uint8_t*>(tile), d);
    const tile_config cfg;
    _tile_loadconfig(&cfg);
    const int pairs = d / 2;
    constexpr long kLogitStride = kChunkKeys * 4;
    for (int r = 0; r < rows; r += 32) {
      const uint16_t* qr = q + static_cast<size_t>(r) * d;
      float* lr = logits + static_cast<size_t>(r) * kChunkKeys;
      const bool two_groups = r + 16 < rows;
      for (int blk = 0; blk < npad / 16; blk += 2) {
        const uint32_t* kt = t.kt + static_cast<size_t>(blk) * pairs * 16;
        _tile_zero(0);
        _tile_zero(1);
        if (two_groups) {
          _tile_zero(2);
          _tile_zero(3);
        }
        for (int dp = 0; dp < pairs; dp += 16) {
          stream.pace();
          _tile_loadd(4, qr + 2 * dp, d * 2);
          _tile_loadd(6, kt + dp * 16, 64);
          _tile_loadd(7, kt + static_cast<size_t>(pairs) * 16 + dp * 16, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          if (two_groups) {
            _tile_loadd(5, qr + static_cast<size_t>(16) * d + 2 * dp, d * 2);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
        _tile_stored(0, lr + blk * 16, kLogitStride);
        _tile_stored(1, lr + (blk + 1) * 16, kLogitStride);
        if (two_groups) {
          _tile_stored(2, lr + 16 * kChunkKeys + blk * 16, kLogitStride);
          _tile_stored(3, lr + 16 * kChunkKeys + (blk + 1) * 16, kLogitStride);
        }
      }
    }
    _tile_release();
  }

  // acc[16 rows][64 dims] += P[16 rows][32 keys] . V pairs, four C tiles per pass; dim blocks
  // outside the row groups, so that a block's V pairs (npad keys x 64 dims, 32 KB at 256 keys)
  // stay in L1 for every row group instead of streaming from L2 once per row group.
  static void pv(const uint16_t* p, int rows, int d, const uint8_t* tile, int npad, float* acc,
                 fast::row_stream& stream) {
    const fast::bf16_tile t = fast::bf16_tile_of(const_cast<uint8_t*>(tile), d);
    const tile_config cfg;
    _tile_loadconfig(&cfg);
    constexpr long kAccStride = kHeadDim * 4;
    for (int x = 0; x < kHeadDim; x += 64) {
      for (int r = 0; r < rows; r += 16) {
        const uint16_t* pr = p + static_cast<size_t>(r) * kChunkKeys;
        float* o = acc + static_cast<size_t>(r) * kHeadDim;
        _tile_loadd(0, o + x, kAccStride);
        _tile_loadd(1, o + x + 16, kAccStride);
        _tile_loadd(2, o + x + 32, kAccStride);
        _tile_loadd(3, o + x + 48, kAccStride);
        for (int k = 0; k < npad; k += 32) {
          stream.pace();
          const uint32_t* vn = t.vn + static_cast<size_t>(k / 2) * kHeadDim + x;
          _tile_loadd(4, pr + k, kChunkKeys * 2);
          _tile_loadd(5, vn, kAccStride);
          _tile_dpbf16ps(0, 4, 5);
          _tile_loadd(5, vn + 16, kAccStride);
          _tile_dpbf16ps(1, 4, 5);
          _tile_loadd(5, vn + 32, kAccStride);
          _tile_dpbf16ps(2, 4, 5);
          _tile_loadd(5, vn + 48, kAccStride);
          _tile_dpbf16ps(3, 4, 5);
        }
        _tile_stored(0, o + x, kAccStride);
        _tile_stored(1, o + x + 16, kAccStride);
        _tile_stored(2, o + x + 32, kAccStride);
        _tile_stored(3, o + x + 48, kAccStride);
      }
    }
    _tile_release();
  }
};

}  // namespace

void fast_item_amx_bf16(const fast_job& job, int64_t item, int worker) {
  fast::run_item<isa_amx_bf16>(job, item, worker);
}

bool fast_amx_request_permission() {
#if DSV4_CPU_EMULATE_ISA
  return true;
#else
  return request_amx_permission();
#endif
}

}  // namespace cpu
}  // namespace dsv4
