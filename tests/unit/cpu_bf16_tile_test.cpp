// The bf16 tile builder of the AVX512_BF16 and AMX kernels (backends/cpu/fast/bf16_tile.h), bit
// for bit against common/layout.h's dequant_entry: every FP8 byte value (zeros, subnormals, NaN)
// under scales on both sides of the exact range, the layouts that take the fallback path, bf16
// rows read in place, padding keys. Built over SIMDe (DSV4_CPU_EMULATE_ISA), so it runs on any
// x86-64 CPU; the native builds compile the same source.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fast/bf16_tile.h"

namespace {

using dsv4::cpu::fast::bf16_tile;
using dsv4::cpu::fast::bf16_tile_of;
using dsv4::cpu::fast::build_bf16_tile;

constexpr int kBlock = 64;

uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return static_cast<uint16_t>(u >> 16);  // dequant_entry's values are bf16-exact
}

bool is_nan16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

// Equal bits, or both NaN (the payload is not part of the contract).
void expect_same(uint16_t got, uint16_t want, const char* what, int key, int dim) {
  if (is_nan16(want)) {
    EXPECT_TRUE(is_nan16(got)) << what << " key " << key << " dim " << dim;
  } else {
    EXPECT_EQ(got, want) << what << " key " << key << " dim " << dim << " (want " << want << ")";
  }
}

struct Case {
  uint32_t layout;
  uint32_t flags;
};

// A cache of `blocks` blocks: every data byte value 0..255 across each row's dims; rope and bf16
// values finite; the 584 B layout's scales inside the exact range (10..245) on most rows, its
// edges and beyond on others (the rows beyond take the fp32 decoder).
struct TestCache {
  static constexpr int64_t kBlocks = 8;
  Case cs;
  int64_t stride;
  std::vector<uint8_t> bytes;

  TestCache(Case c, uint32_t seed)
      : cs(c),
        stride(dsv4::layout_min_block_bytes(c.layout, kBlock)),
        bytes(static_cast<size_t>(kBlocks * stride)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (int64_t b = 0; b < kBlocks; ++b) {
      uint8_t* base = bytes.data() + b * stride;
      for (int e = 0; e < kBlock; ++e) {
        uint8_t* p = base + dsv4::entry_data_offset(cs.layout, e);
        const int bytes_per = cs.layout == DSV4_KV_LAYOUT_FP8_V4_584B
                                  ? dsv4::kV4DataBytes
                                  : dsv4::layout_bytes_per_token(cs.layout);
        for (int i = 0; i < bytes_per; ++i)
          p[i] = static_cast<uint8_t>((e * 7 + i * 13 + b + seed) & 0xff);
        if (cs.layout == DSV4_KV_LAYOUT_BF16 || cs.layout == DSV4_KV_LAYOUT_FP8_V4_584B) {
          const bool bf16 = cs.layout == DSV4_KV_LAYOUT_BF16;
          for (int j = 0; j < (bf16 ? dsv4::kHeadDim : dsv4::kRopeDim); ++j) {
            const uint16_t h = bf16_bits(normal(rng));
            std::memcpy(p + (bf16 ? 0 : dsv4::kNopeDim) + 2 * j, &h, 2);
          }
        }
        if (cs.layout == DSV4_KV_LAYOUT_FP8_V4_584B) {
          // Rows e % 4 == 3: each tile's scale from a list with the range's edges and beyond;
          // rows e % 4 == 1: every scale within 10..250, some just above the exact range (the
          // products of large bytes overflow bf16's exponent there: the fp32 decoder's job).
          static const uint8_t kScales[] = {127, 10,  245, 200, 60,  9,   246, 0,
                                            255, 127, 128, 247, 250, 254, 1};
          static const uint8_t kHigh[] = {247, 250, 246, 127, 245, 10, 200};
          uint8_t* sc = base + dsv4::v4_scale_offset(kBlock, e);
          for (int k = 0; k < dsv4::kV4Tiles; ++k)
            sc[k] = e % 4 == 3   ? kScales[(e + k) % 15]
                    : e % 4 == 1 ? kHigh[(e + k) % 7]
                                 : kScales[(e + k) % 5];
        }
        if (cs.layout == DSV4_KV_LAYOUT_FP8_V32_656B) {
          for (int k = 0; k < 4; ++k) {
            const float s = 0.5f * static_cast<float>(k + 1);
            std::memcpy(p + dsv4::kHeadDim + 4 * k, &s, sizeof s);
          }
        }
      }
    }
  }
  dsv4_mod_cache desc() {
    return dsv4_mod_cache{bytes.data(), cs.layout, kBlock, stride, kBlocks, 1.0f, cs.flags};
  }
  // Entry `slot` as dequant_entry's values in bf16 bits.
  void want(int32_t slot, int d_qk, uint16_t* out) const {
    std::vector<float> row(static_cast<size_t>(d_qk));
    dsv4::dequant_entry(cs.layout, cs.flags, bytes.data() + (slot / kBlock) * stride, kBlock,
                        slot % kBlock, row.data());
    for (int d = 0; d < d_qk; ++d) out[d] = bf16_bits(row[d]);
  }
};

// Builds tiles of nk keys (every chunk length up to kChunkKeys) from the two caches (`mixed`:
// alternating between them) and checks K^T and V pairs against dequant_entry, and that nothing
// past max_tile_bytes was written.
void check_tiles(TestCache& main_cache, TestCache& extra_cache, bool mixed) {
  const int d_qk = dsv4::layout_head_dim_qk(main_cache.cs.layout);
  dsv4_mod_run run{};
  run.swa_cache = main_cache.desc();
  run.extra_cache = extra_cache.desc();
  std::mt19937 rng(59);
  const size_t tile_bytes = dsv4::cpu::fast::max_tile_bytes(d_qk);
  constexpr size_t kCanary = 256;
  for (int nk : {1, 16, 37, 128, 200, dsv4::cpu::kChunkKeys}) {
    const int npad = (nk + 31) / 32 * 32;
    std::vector<int32_t> slots(static_cast<size_t>(npad));
    std::vector<uint8_t> list(static_cast<size_t>(npad), 0);
    for (int j = 0; j < nk; ++j) {
      slots[j] = static_cast<int32_t>(rng() % (TestCache::kBlocks * kBlock));
      list[j] = mixed ? static_cast<uint8_t>(rng() % 2) : 0;
    }
    std::vector<uint8_t> tile(tile_bytes + kCanary + 64);
    uint8_t* aligned = tile.data() + (64 - reinterpret_cast<uintptr_t>(tile.data()) % 64) % 64;
    std::memset(aligned, 0xa5, tile_bytes + kCanary);
    build_bf16_tile(run, d_qk, slots.data(), list.data(), nk, npad, aligned);
    for (size_t i = tile_bytes; i < tile_bytes + kCanary; ++i)
      ASSERT_EQ(aligned[i], 0xa5) << "written past max_tile_bytes at " << i << ", nk " << nk;
    const bf16_tile t = bf16_tile_of(aligned, d_qk);

    std::vector<uint16_t> want(static_cast<size_t>(npad) * d_qk, 0);
    for (int j = 0; j < nk; ++j)
      (list[j] == 0 ? main_cache : extra_cache)
          .want(slots[j], d_qk, &want[static_cast<size_t>(j) * d_qk]);
    const int pairs = d_qk / 2;
    for (int j = 0; j < npad; ++j) {
      const uint16_t* w = &want[static_cast<size_t>(j) * d_qk];
      const uint32_t* kt = t.kt + static_cast<size_t>(j / 16) * pairs * 16 + j % 16;
      for (int p = 0; p < pairs; ++p) {
        expect_same(static_cast<uint16_t>(kt[p * 16]), w[2 * p], "K^T low", j, 2 * p);
        expect_same(static_cast<uint16_t>(kt[p * 16] >> 16), w[2 * p + 1], "K^T high", j,
                    2 * p + 1);
      }
      const uint32_t* vn = t.vn + static_cast<size_t>(j / 2) * dsv4::kHeadDim;
      for (int d = 0; d < dsv4::kHeadDim; ++d)
        expect_same(static_cast<uint16_t>(j % 2 == 0 ? vn[d] : vn[d] >> 16), w[d], "V", j, d);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

class Bf16Tile : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Tile, MatchesDequantBitForBit) {
  TestCache cache(GetParam(), 61);
  check_tiles(cache, cache, false);
}

// A bf16 window cache (rows read in place) beside an FP8 compressed cache (rows staged), the two
// lists' rows interleaved within each 16-key block.
TEST(Bf16TileMixed, Bf16AndFp8RowsInOneTile) {
  TestCache bf16(Case{DSV4_KV_LAYOUT_BF16, 0}, 7);
  TestCache fp8(Case{DSV4_KV_LAYOUT_FP8_V4_584B, 0}, 11);
  check_tiles(bf16, fp8, true);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Bf16Tile,
    ::testing::Values(Case{DSV4_KV_LAYOUT_FP8_V4_584B, 0},
                      Case{DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_CACHE_FLAG_FP8_FNUZ},
                      Case{DSV4_KV_LAYOUT_BF16, 0}, Case{DSV4_KV_LAYOUT_FP8_V32_656B, 0},
                      Case{DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 0}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      switch (param_info.param.layout) {
        case DSV4_KV_LAYOUT_FP8_V4_584B:
          return std::string(param_info.param.flags != 0 ? "fp8_584b_fnuz" : "fp8_584b");
        case DSV4_KV_LAYOUT_BF16:
          return std::string("bf16");
        case DSV4_KV_LAYOUT_FP8_V32_656B:
          return std::string("fp8_656b");
        default:
          return std::string("fp8_per_tensor");
      }
    });

}  // namespace
