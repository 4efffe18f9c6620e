// dsv4_kv_write: byte-exact hand-computed rows for every layout, round trips through the
// independent reference decoder, the vLLM quantiser's specifics, and argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "reference.h"
#include "test_device.h"
#include "test_env.h"
#include "test_util.h"

namespace dsv4test {
namespace {

// A cache of `num_blocks` blocks on the test device, pre-filled with a byte pattern so that every
// byte the writer must not touch can be checked afterwards.
class Fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
    std::string error;
    ctx_ = make_test_ctx(g_device, 0, &error);
    ASSERT_TRUE(ctx_) << error;
  }

  void make_cache(uint32_t layout, int32_t block_size, int64_t pad_bytes, int64_t num_blocks,
                  float kv_scale = 1.0f) {
    desc_ = dsv4_kv_cache_desc{};
    desc_.layout = layout;
    desc_.block_size = block_size;
    desc_.block_stride_bytes = ref_layout_min_block_bytes(layout, block_size) + pad_bytes;
    desc_.kv_scale = kv_scale;
    num_blocks_ = num_blocks;
    pattern_.resize(static_cast<size_t>(num_blocks * desc_.block_stride_bytes));
    for (size_t i = 0; i < pattern_.size(); ++i) pattern_[i] = static_cast<uint8_t>(i * 131 + 7);
    cache_ = to_device(g_device, pattern_);
  }

  // Writes rows [N, d] (fp32, or bf16 bits when `bf16` is set) to `slots`.
  dsv4_status write(const std::vector<float>& values, const std::vector<int32_t>& slots,
                    bool bf16 = false) {
    const int64_t n = static_cast<int64_t>(slots.size());
    const int64_t d = ref_layout_head_dim_qk(desc_.layout);
    DeviceBuffer vbuf;
    if (bf16) {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i) bits[i] = ref_double_to_bf16(values[i]);
      vbuf = to_device(g_device, bits);
    } else {
      vbuf = to_device(g_device, values);
    }
    DeviceBuffer sbuf = to_device(g_device, slots);
    TensorView vt(vbuf.get(), g_device->device(), bf16 ? kBf16 : kF32, {n, d});
    TensorView st(sbuf.get(), g_device->device(), kI32, {n});
    TensorView ct(cache_.get(), g_device->device(), kU8, {num_blocks_, desc_.block_stride_bytes});
    dsv4_kv_write_args a;
    dsv4_kv_write_args_init(&a);
    a.cache_desc = desc_;
    a.values = vt.get();
    a.slots = st.get();
    a.cache = ct.get();
    a.stream = g_device->stream();
    const dsv4_status status = dsv4_kv_write(ctx_.get(), &a);
    g_device->synchronize();
    host_ = cache_.download<uint8_t>();
    return status;
  }

  RefCache ref() const {
    RefCache r;
    r.base = host_.data();
    r.layout = desc_.layout;
    r.block_size = desc_.block_size;
    r.block_stride_bytes = desc_.block_stride_bytes;
    r.num_blocks = num_blocks_;
    r.kv_scale = static_cast<double>(desc_.kv_scale);
    return r;
  }

  // Byte ranges (offset, length) of slot `slot`: its data, and for the 584 B layout its scales.
  std::vector<std::pair<int64_t, int64_t>> entry_ranges(int64_t slot) const {
    const int64_t B = desc_.block_size;
    const int64_t base = (slot / B) * desc_.block_stride_bytes;
    const int64_t e = slot % B;
    switch (desc_.layout) {
      case DSV4_KV_LAYOUT_FP8_V4_584B:
        return {{base + e * 576, 576}, {base + B * 576 + e * 8, 8}};
      default: {
        const int64_t bpt = ref_layout_bytes_per_token(desc_.layout);
        return {{base + e * bpt, bpt}};
      }
    }
  }

  // Every byte outside the written slots still holds the pattern.
  void expect_untouched_except(const std::vector<int32_t>& slots) const {
    std::vector<char> mine(host_.size(), 0);
    for (int32_t s : slots) {
      if (s < 0) continue;
      for (auto [off, len] : entry_ranges(s))
        std::fill(mine.begin() + off, mine.begin() + off + len, 1);
    }
    int64_t changed = 0, first = -1;
    for (size_t i = 0; i < host_.size(); ++i) {
      if (!mine[i] && host_[i] != pattern_[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++changed;
      }
    }
    EXPECT_EQ(changed, 0) << "bytes outside the written entries changed; first at offset " << first;
  }

  const uint8_t* entry_data(int64_t slot) const {
    return host_.data() + entry_ranges(slot)[0].first;
  }
  const uint8_t* entry_scales(int64_t slot) const {
    return host_.data() + entry_ranges(slot)[1].first;
  }

  CtxPtr ctx_;
  dsv4_kv_cache_desc desc_{};
  int64_t num_blocks_ = 0;
  std::vector<uint8_t> pattern_;
  std::vector<uint8_t> host_;
  DeviceBuffer cache_;
};

// ----------------------------------------------------------------------------------------------
// Hand-computed rows. The test row (dims not listed are 0):
//   d0 = 1.0, d1 = -2.5, d2 = 0.001, d3 = 448, d4 = 1e-6, d5 = -448, d6 = 0.0625, d7 = 0.3,
//   d64 = 3e-5, d65 = -1e-5, d128 = 1000, d129 = -1, d130 = 3,
//   d448 = 1.0, d449 = -2.5, d450 = 0.001, d451 = 1e-6   (584 B: RoPE dims; V3.2: NoPE tile 3)
// V3.2 rows also carry RoPE d512 = 1.0, d513 = -2.5, d514 = 0.001, d515 = 1e-6.
//
// bf16 (round to nearest even of the fp32 value):
//   1.0 = 0x3F80; -2.5 = 0xC020; 448 = 0x43E0; -448 = 0xC3E0; 0.0625 = 0x3D80; 1000 = 0x447A;
//   -1 = 0xBF80; 3 = 0x4040 (all exact)
//   0.001  fp32 0x3A83126F -> low half 0x126F < 0x8000, round down -> 0x3A83 (= 0.00099945068)
//   1e-6   fp32 0x358637BD -> 0x3586 (= 9.98377e-7)
//   0.3    fp32 0x3E99999A -> low half 0x999A > 0x8000, round up -> 0x3E9A (= 0.30078125)
//   3e-5   fp32 0x37FBA882 -> round up -> 0x37FC (= 1.96875 * 2^-16 = 3.00407e-5)
//   -1e-5  fp32 0xB727C5AC -> round up -> 0xB728 (= -1.3125 * 2^-17 = -1.00136e-5)
// e4m3fn: byte = s.eeee.mmm, value = 1.mmm * 2^(eeee-7), subnormal 0.mmm * 2^-6; max 448 = 0x7E.
// ----------------------------------------------------------------------------------------------
std::vector<float> hand_row(int64_t d) {
  std::vector<float> r(static_cast<size_t>(d), 0.0f);
  const std::pair<int, float> v[] = {
      {0, 1.0f},    {1, -2.5f},  {2, 0.001f},  {3, 448.0f},   {4, 1e-6f},     {5, -448.0f},
      {6, 0.0625f}, {7, 0.3f},   {64, 3e-5f},  {65, -1e-5f},  {128, 1000.0f}, {129, -1.0f},
      {130, 3.0f},  {448, 1.0f}, {449, -2.5f}, {450, 0.001f}, {451, 1e-6f}};
  for (auto [i, x] : v) r[static_cast<size_t>(i)] = x;
  if (d == 576) {
    r[512] = 1.0f;
    r[513] = -2.5f;
    r[514] = 0.001f;
    r[515] = 1e-6f;
  }
  return r;
}

void expect_bytes(const uint8_t* got, const std::vector<std::pair<int, uint8_t>>& nonzero, int n,
                  const std::string& what) {
  std::vector<uint8_t> want(static_cast<size_t>(n), 0);
  for (auto [i, b] : nonzero) want[static_cast<size_t>(i)] = b;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(static_cast<int>(got[i]), static_cast<int>(want[static_cast<size_t>(i)]))
        << what << " byte " << i;
  }
}

using KvWriter = Fixture;

TEST_F(KvWriter, HandComputedFp8V4Row) {
  // Block size 3, stride padded by 64 B, 2 blocks; slot 4 = block 1, entry 1.
  make_cache(DSV4_KV_LAYOUT_FP8_V4_584B, 3, 64, 2);
  ASSERT_EQ(write(hand_row(512), {4}), DSV4_STATUS_OK) << dsv4_last_error_message();
  // Tile 0: amax = 448 -> e = ceil(log2(448/448)) = 0, scale byte 0 + 127 = 0x7F; q = x * 2^0:
  //   1.0 = 1.000*2^0 -> 0.0111.000 = 0x38;  -2.5 = -1.25*2^1 -> 1.1000.010 = 0xC2
  //   0.00099945 < 2^-6: subnormal, 0.00099945 * 2^9 = 0.5117 -> rounds to 1 -> 0x01
  //   448 -> 0.1111.110 = 0x7E;  -448 -> 0xFE;  9.98e-7 * 2^9 = 0.0005 -> 0x00
  //   0.0625 = 2^-4 -> 0.0011.000 = 0x18;  0.30078 = 1.203*2^-2 -> m = 1.625 -> 2: 0.0101.010 =
  //   0x2A
  // Tile 1: amax 3.004e-5 < 1e-4 -> floor: e = ceil(log2(1e-4/448)) = ceil(-22.09) = -22, byte 105
  //   = 0x69; q = x * 2^22: 3.00407e-5 * 2^22 = 126 = 1.96875*2^6 -> m = 7.75 -> 8 -> 2^7: 0x70
  //   -1.00136e-5 * 2^22 = -42 = -1.3125*2^5, m = 2.5 ties to even 2 -> 1.1100.010 = 0xE2
  // Tile 2: amax 1000 -> e = ceil(log2(2.232)) = 2, byte 0x81; q = x / 4:
  //   250 = 1.953*2^7 -> m = 7.625 -> 8 -> 2^8 = 0.1111.000 = 0x78;  -0.25 -> 1.0101.000 = 0xA8
  //   0.75 = 1.5*2^-1 -> 0.0110.100 = 0x34
  // Tiles 3..6: all zero -> floor scale byte 0x69, q = 0.  Byte 7 of the scale group: pad 0.
  // RoPE dims 448..451: bf16 0x3F80, 0xC020, 0x3A83, 0x3586, little-endian.
  const uint8_t* data = entry_data(4);
  expect_bytes(data, {{0, 0x38},   {1, 0xC2},   {2, 0x01},   {3, 0x7E},   {5, 0xFE},
                      {6, 0x18},   {7, 0x2A},   {64, 0x70},  {65, 0xE2},  {128, 0x78},
                      {129, 0xA8}, {130, 0x34}, {448, 0x80}, {449, 0x3F}, {450, 0x20},
                      {451, 0xC0}, {452, 0x83}, {453, 0x3A}, {454, 0x86}, {455, 0x35}},
               576, "584B data");
  expect_bytes(entry_scales(4),
               {{0, 0x7F}, {1, 0x69}, {2, 0x81}, {3, 0x69}, {4, 0x69}, {5, 0x69}, {6, 0x69}}, 8,
               "584B scales");
  expect_untouched_except({4});
}

TEST_F(KvWriter, HandComputedBf16Row) {
  make_cache(DSV4_KV_LAYOUT_BF16, 5, 32, 2);
  // The bf16 layout stores bf16(x) little-endian (values in the comment block above).
  ASSERT_EQ(write(hand_row(512), {7}), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_bytes(
      entry_data(7),
      {{0, 0x80},   {1, 0x3F},   {2, 0x20},   {3, 0xC0},   {4, 0x83},   {5, 0x3A},   {6, 0xE0},
       {7, 0x43},   {8, 0x86},   {9, 0x35},   {10, 0xE0},  {11, 0xC3},  {12, 0x80},  {13, 0x3D},
       {14, 0x9A},  {15, 0x3E},  {128, 0xFC}, {129, 0x37}, {130, 0x28}, {131, 0xB7}, {256, 0x7A},
       {257, 0x44}, {258, 0x80}, {259, 0xBF}, {260, 0x40}, {261, 0x40}, {896, 0x80}, {897, 0x3F},
       {898, 0x20}, {899, 0xC0}, {900, 0x83}, {901, 0x3A}, {902, 0x86}, {903, 0x35}},
      1024, "bf16 row");
  expect_untouched_except({7});
}

TEST_F(KvWriter, HandComputedFp16Row) {
  // The fp16 layout (spec 12.1) stores binary16(x), round to nearest even, little-endian:
  //   1.0 = 0x3C00; -2.5 = 0xC100; 0.001 -> 0x1419; 448 = 0x5F00; 1e-6 -> subnormal 17 = 0x0011;
  //   -448 = 0xDF00; 0.0625 = 0x2C00; 0.3 -> 0x34CD; 3e-5 -> subnormal 503 = 0x01F7;
  //   -1e-5 -> subnormal 168 = 0x80A8; 1000 = 0x63D0; -1 = 0xBC00; 3 = 0x4200.
  make_cache(DSV4_KV_LAYOUT_FP16, 3, 16, 2);
  ASSERT_EQ(write(hand_row(512), {4}), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_bytes(
      entry_data(4),
      {{0, 0x00},   {1, 0x3C},   {2, 0x00},   {3, 0xC1},   {4, 0x19},   {5, 0x14},   {6, 0x00},
       {7, 0x5F},   {8, 0x11},   {9, 0x00},   {10, 0x00},  {11, 0xDF},  {12, 0x00},  {13, 0x2C},
       {14, 0xCD},  {15, 0x34},  {128, 0xF7}, {129, 0x01}, {130, 0xA8}, {131, 0x80}, {256, 0xD0},
       {257, 0x63}, {258, 0x00}, {259, 0xBC}, {260, 0x00}, {261, 0x42}, {896, 0x00}, {897, 0x3C},
       {898, 0x00}, {899, 0xC1}, {900, 0x19}, {901, 0x14}, {902, 0x11}, {903, 0x00}},
      1024, "fp16 row");
  expect_untouched_except({4});
}

TEST_F(KvWriter, Fp16SaturatesToInfinityLikeGgml) {
  // Beyond the largest binary16 (65504) the value rounds to +-inf; 65519.99 still rounds down.
  make_cache(DSV4_KV_LAYOUT_FP16, 2, 0, 1);
  std::vector<float> row(512, 0.0f);
  row[0] = 70000.0f;
  row[1] = -65519.0f;
  row[2] = 65520.0f;
  row[3] = 65519.99f;
  row[4] = std::numeric_limits<float>::infinity();
  ASSERT_EQ(write(row, {1}), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_bytes(entry_data(1),
               {{0, 0x00},
                {1, 0x7C},
                {2, 0xFF},
                {3, 0xFB},
                {4, 0x00},
                {5, 0x7C},
                {6, 0xFF},
                {7, 0x7B},
                {8, 0x00},
                {9, 0x7C}},
               1024, "fp16 saturation");
}

TEST_F(KvWriter, HandComputedPerTensorRow) {
  // kv_scale 0.5: q = e4m3_satfinite(clamp(x / 0.5, +-448)) straight from fp32 (no bf16 step).
  //   1 -> 2 = 0.1000.000 = 0x40;  -2.5 -> -5 = -1.25*2^2 -> 1.1001.010 = 0xCA
  //   0.001 -> 0.002: subnormal, 0.002 * 2^9 = 1.024 -> 1 -> 0x01;  448 -> 896 saturates to 0x7E
  //   1e-6 -> 0x00;  -448 -> 0xFE;  0.0625 -> 0.125 = 2^-3 -> 0.0100.000 = 0x20
  //   0.3 -> 0.6 = 1.2*2^-1 -> m = 1.6 -> 2: 0.0110.010 = 0x32
  //   3e-5 -> 6e-5 * 2^9 = 0.03 -> 0x00;  -1e-5 -> -0 = 0x80 (sign kept)
  //   1000 -> 2000 saturates: 0x7E;  -1 -> -2 = 0xC0;  3 -> 6 = 1.5*2^2 -> 0.1001.100 = 0x4C
  //   d448..451 like d0..d2, d4: 0x40, 0xCA, 0x01, 0x00
  make_cache(DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 61, 0, 1, 0.5f);
  ASSERT_EQ(write(hand_row(512), {60}), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_bytes(entry_data(60),
               {{0, 0x40},
                {1, 0xCA},
                {2, 0x01},
                {3, 0x7E},
                {5, 0xFE},
                {6, 0x20},
                {7, 0x32},
                {65, 0x80},
                {128, 0x7E},
                {129, 0xC0},
                {130, 0x4C},
                {448, 0x40},
                {449, 0xCA},
                {450, 0x01}},
               512, "per-tensor row");
  expect_untouched_except({60});
}

TEST_F(KvWriter, HandComputedFp8V32Row) {
  // 656 B: 4 tiles of 128 dims, scale = 2^ceil(log2(max(amax/448, 1e-4))) as fp32, q =
  // bf16(x)/scale.
  //   tile 0 (d0..127): amax 448 -> scale 1 = fp32 0x3F800000; bytes as the 584 B tile 0, and
  //     d65: -1.00136e-5 -> subnormal * 2^9 = -0.005 -> -0 = 0x80; d64: 3e-5*2^9 = 0.015 -> 0x00
  //   tile 1 (d128..255): amax 1000 -> 1000/448 = 2.23 -> scale 4 = 0x40800000; 0x78, 0xA8, 0x34
  //   tile 2: zero -> max(0, 1e-4) -> ceil(log2(1e-4)) = ceil(-13.3) = -13, scale 2^-13 =
  //   0x39000000 tile 3 (d384..511): amax 2.5 -> 2.5/448 = 0.00558 -> ceil(-7.49) = -7, scale 2^-7
  //   = 0x3C000000
  //     d448: 1 * 128 = 2^7 -> 0.1110.000 = 0x70;  d449: -2.5 * 128 = -320 = -1.25*2^8 -> 0xFA
  //     d450: 0.00099945 * 128 = 0.1279 = 1.023*2^-3 -> 0.0100.000 = 0x20; d451 -> 0x00
  //   scales at bytes 512..527 (little-endian fp32), RoPE bf16 d512..515 at bytes 528..535.
  make_cache(DSV4_KV_LAYOUT_FP8_V32_656B, 2, 656, 3);
  ASSERT_EQ(write(hand_row(576), {3}), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_bytes(
      entry_data(3),
      {{0, 0x38},   {1, 0xC2},   {2, 0x01},   {3, 0x7E},   {5, 0xFE},   {6, 0x18},   {7, 0x2A},
       {65, 0x80},  {128, 0x78}, {129, 0xA8}, {130, 0x34}, {448, 0x70}, {449, 0xFA}, {450, 0x20},
       {514, 0x80}, {515, 0x3F}, {518, 0x80}, {519, 0x40}, {523, 0x39}, {527, 0x3C}, {528, 0x80},
       {529, 0x3F}, {530, 0x20}, {531, 0xC0}, {532, 0x83}, {533, 0x3A}, {534, 0x86}, {535, 0x35}},
      656, "656B row");
  expect_untouched_except({3});
}

TEST_F(KvWriter, Bf16InputMatchesFp32Input) {
  // The quantisers round to bf16 first (584 B, 656 B, bf16), so bf16 input gives the same bytes.
  for (uint32_t layout :
       {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_V32_656B}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    make_cache(layout, 64, 0, 1);
    ASSERT_EQ(write(hand_row(ref_layout_head_dim_qk(layout)), {9}), DSV4_STATUS_OK);
    const std::vector<uint8_t> from_f32 = host_;
    make_cache(layout, 64, 0, 1);
    ASSERT_EQ(write(hand_row(ref_layout_head_dim_qk(layout)), {9}, /*bf16=*/true), DSV4_STATUS_OK);
    EXPECT_TRUE(host_ == from_f32);
  }
}

// ----------------------------------------------------------------------------------------------
// Round trips with random rows
// ----------------------------------------------------------------------------------------------
struct RoundTripCase {
  uint32_t layout;
  int32_t block_size;
  int64_t pad_bytes;
};

class KvWriterRoundTrip : public Fixture, public ::testing::WithParamInterface<RoundTripCase> {};

// Random rows whose 64-dim tiles span many magnitudes (including tiles below the 1e-4 floor).
std::vector<float> random_rows(std::mt19937_64& gen, int64_t n, int64_t d) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> mag(-24, 10);
  std::vector<float> v(static_cast<size_t>(n * d));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t t = 0; t < d / 64; ++t) {
      const double m = std::ldexp(1.0, mag(gen));
      for (int64_t j = 0; j < 64; ++j)
        v[static_cast<size_t>(r * d + t * 64 + j)] = static_cast<float>(normal(gen) * m);
    }
  }
  return v;
}

TEST_P(KvWriterRoundTrip, DecodesBackWithinQuantiserError) {
  const RoundTripCase rc = GetParam();
  SCOPED_TRACE(seed_note());
  std::mt19937_64 gen(
      case_seed("kv_roundtrip_" + std::to_string(rc.layout) + "_" + std::to_string(rc.block_size)));
  const float kv_scale = rc.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR ? 0.0371f : 1.0f;
  const int64_t num_blocks = 4;
  make_cache(rc.layout, rc.block_size, rc.pad_bytes, num_blocks, kv_scale);
  const int64_t capacity = num_blocks * rc.block_size;
  const int64_t d = ref_layout_head_dim_qk(rc.layout);

  // Slots in random order: about two thirds of the capacity, plus some -1 (skipped) rows.
  std::vector<int32_t> slots(static_cast<size_t>(capacity));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), gen);
  slots.resize(static_cast<size_t>(std::max<int64_t>(1, capacity * 2 / 3)));
  for (size_t i = 0; i < slots.size(); i += 5)
    slots.insert(slots.begin() + static_cast<int64_t>(i), -1);
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<float> values = random_rows(gen, n, d);
  if (rc.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
    for (auto& x : values) x = static_cast<float>(std::clamp(static_cast<double>(x), -20.0, 20.0));
    values[1] = 1e4f;  // beyond 448 * kv_scale: saturates
    values[2] = -1e4f;
  }
  ASSERT_EQ(write(values, slots), DSV4_STATUS_OK) << dsv4_last_error_message();
  expect_untouched_except(slots);

  const RefCache cache = ref();
  int64_t failures = 0;
  std::string first;
  auto fail = [&](int64_t row, int64_t dim, double got, double want, const char* why) {
    if (failures++ == 0)
      first = std::string(why) + " row " + std::to_string(row) + " dim " + std::to_string(dim) +
              ": got " + std::to_string(got) + " want " + std::to_string(want);
  };
  for (int64_t r = 0; r < n; ++r) {
    const int32_t slot = slots[static_cast<size_t>(r)];
    if (slot < 0) continue;
    const std::vector<double> dec = reference_decode_entry(cache, slot);
    const float* x = values.data() + r * d;
    if (rc.layout == DSV4_KV_LAYOUT_BF16) {
      for (int64_t k = 0; k < d; ++k)
        if (dec[static_cast<size_t>(k)] != ref_round_to_bf16(x[k]))
          fail(r, k, dec[static_cast<size_t>(k)], x[k], "bf16");
      continue;
    }
    if (rc.layout == DSV4_KV_LAYOUT_FP16) {
      for (int64_t k = 0; k < d; ++k)
        if (dec[static_cast<size_t>(k)] != ref_fp16_to_double(ref_double_to_fp16(x[k])))
          fail(r, k, dec[static_cast<size_t>(k)], x[k], "fp16");
      continue;
    }
    if (rc.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
      const double s = static_cast<double>(kv_scale);
      for (int64_t k = 0; k < d; ++k) {
        const double want = std::clamp(static_cast<double>(x[k]), -448.0 * s, 448.0 * s);
        if (std::fabs(dec[static_cast<size_t>(k)] - want) >
            std::ldexp(std::fabs(want), -4) + std::ldexp(s, -10))
          fail(r, k, dec[static_cast<size_t>(k)], want, "per-tensor");
      }
      continue;
    }
    // 584 B (tiles of 64, NoPE 448, UE8M0) and 656 B (tiles of 128, NoPE 512, fp32 scales).
    const bool v4 = rc.layout == DSV4_KV_LAYOUT_FP8_V4_584B;
    const int64_t tile = v4 ? 64 : 128, nope = v4 ? 448 : 512;
    const uint8_t* data = entry_data(slot);
    for (int64_t t = 0; t < nope / tile; ++t) {
      double amax = 0;
      for (int64_t j = 0; j < tile; ++j)
        amax = std::max(amax, std::fabs(ref_round_to_bf16(x[t * tile + j])));
      // vLLM (584 B): e = ceil(log2(max(amax, 1e-4) / 448)); FlashMLA (656 B):
      // 2^ceil(log2(max(amax/448, 1e-4))).
      const float ratio = v4 ? std::max(static_cast<float>(amax), 1e-4f) / 448.0f
                             : std::max(static_cast<float>(amax) / 448.0f, 1e-4f);
      const int e = static_cast<int>(std::ceil(std::log2(static_cast<double>(ratio))));
      double scale;
      if (v4) {
        const uint8_t byte = entry_scales(slot)[t];
        if (byte != e + 127) fail(r, t, byte, e + 127, "scale byte of tile");
        scale = ref_ue8m0_to_double(byte);
      } else {
        float f;
        std::memcpy(&f, data + 512 + 4 * t, 4);
        if (f != std::ldexp(1.0f, e)) fail(r, t, f, std::ldexp(1.0, e), "fp32 scale of tile");
        scale = static_cast<double>(f);
      }
      for (int64_t j = 0; j < tile; ++j) {
        const int64_t k = t * tile + j;
        const double want = ref_round_to_bf16(x[k]);
        // e4m3 rounding: half an ulp = 2^-4 relative for normals, 2^-10 * scale for subnormals.
        if (std::fabs(dec[static_cast<size_t>(k)] - want) >
            std::ldexp(std::fabs(want), -4) + std::ldexp(scale, -10))
          fail(r, k, dec[static_cast<size_t>(k)], want, "fp8");
      }
    }
    if (v4 && entry_scales(slot)[7] != 0) fail(r, 7, entry_scales(slot)[7], 0, "pad byte");
    for (int64_t k = nope; k < d; ++k)
      if (dec[static_cast<size_t>(k)] != ref_round_to_bf16(x[k]))
        fail(r, k, dec[static_cast<size_t>(k)], x[k], "rope");
  }
  EXPECT_EQ(failures, 0) << first;
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvWriterRoundTrip,
                         ::testing::Values(RoundTripCase{DSV4_KV_LAYOUT_FP8_V4_584B, 53, 0},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP8_V4_584B, 2, 1152},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP8_V4_584B, 69, 64},
                                           RoundTripCase{DSV4_KV_LAYOUT_BF16, 61, 2048},
                                           RoundTripCase{DSV4_KV_LAYOUT_BF16, 3, 0},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP16, 7, 64},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 53,
                                                         512},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP8_V32_656B, 61, 656},
                                           RoundTripCase{DSV4_KV_LAYOUT_FP8_V32_656B, 2, 0}),
                         [](const ::testing::TestParamInfo<RoundTripCase>& p) {
                           return "layout" + std::to_string(p.param.layout) + "_bs" +
                                  std::to_string(p.param.block_size) + "_pad" +
                                  std::to_string(p.param.pad_bytes);
                         });

// ----------------------------------------------------------------------------------------------
// Duplicate slots (spec 12.4): the row that comes last in the call wins, on every backend, every
// time. The expected cache is the same writer's output for the deduplicated call (one row per
// slot, its last); the writer without duplicates is checked byte for byte above.
// ----------------------------------------------------------------------------------------------
TEST_F(KvWriter, DuplicateSlotsLastRowWins) {
  SCOPED_TRACE(seed_note());
  std::string error;
  ctx_ = make_test_ctx(g_device, 8, &error);  // more CPU workers than cores: they interleave
  ASSERT_TRUE(ctx_) << error;
  std::mt19937_64 gen(case_seed("kv_duplicates"));
  for (uint32_t layout : {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP16,
                          DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP8_V32_656B}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    const int32_t block_size = 7;
    const int64_t num_blocks = 9;  // 63 slots
    const int64_t capacity = block_size * num_blocks;
    const int64_t d = ref_layout_head_dim_qk(layout);
    // ~25 rows per slot, some in runs of neighbours, some far apart; -1 rows in between.
    const int64_t n = 1600;
    std::vector<int32_t> slots(static_cast<size_t>(n));
    std::uniform_int_distribution<int32_t> any_slot(-1, static_cast<int32_t>(capacity) - 1);
    for (int64_t r = 0; r < n; ++r)
      slots[static_cast<size_t>(r)] =
          r > 0 && gen() % 4 == 0 ? slots[static_cast<size_t>(r - 1)] : any_slot(gen);
    const std::vector<float> values = random_rows(gen, n, d);

    std::vector<int32_t> last_slots;
    std::vector<float> last_values;
    std::vector<char> seen(static_cast<size_t>(capacity), 0);
    for (int64_t r = n - 1; r >= 0; --r) {
      const int32_t s = slots[static_cast<size_t>(r)];
      if (s < 0 || seen[static_cast<size_t>(s)]) continue;
      seen[static_cast<size_t>(s)] = 1;
      last_slots.push_back(s);
      last_values.insert(last_values.end(), values.begin() + r * d, values.begin() + (r + 1) * d);
    }
    make_cache(layout, block_size, 64, num_blocks);
    ASSERT_EQ(write(last_values, last_slots), DSV4_STATUS_OK) << dsv4_last_error_message();
    const std::vector<uint8_t> expected = host_;

    for (int repeat = 0; repeat < 6; ++repeat) {
      make_cache(layout, block_size, 64, num_blocks);
      ASSERT_EQ(write(values, slots), DSV4_STATUS_OK) << dsv4_last_error_message();
      int64_t wrong = 0;
      for (int64_t s = 0; s < capacity; ++s) {
        bool same = true;
        for (auto [off, len] : entry_ranges(s))
          same = same &&
                 std::equal(host_.begin() + off, host_.begin() + off + len, expected.begin() + off);
        wrong += same ? 0 : 1;
      }
      ASSERT_EQ(wrong, 0) << "repeat " << repeat << ": " << wrong << " of " << capacity
                          << " slots do not hold their last row";
      expect_untouched_except(slots);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// vLLM quantiser specifics
// ----------------------------------------------------------------------------------------------
TEST_F(KvWriter, TilesAreQuantisedIndependently) {
  // Changing one 64-dim tile changes that tile's bytes and scale only.
  SCOPED_TRACE(seed_note());
  std::mt19937_64 gen(case_seed("kv_tiles"));
  make_cache(DSV4_KV_LAYOUT_FP8_V4_584B, 64, 0, 1);
  std::vector<float> row = random_rows(gen, 1, 512);
  ASSERT_EQ(write(row, {5}), DSV4_STATUS_OK);
  const std::vector<uint8_t> before(entry_data(5), entry_data(5) + 576);
  const std::vector<uint8_t> scales_before(entry_scales(5), entry_scales(5) + 8);
  for (int tile = 0; tile < 7; ++tile) {
    std::vector<float> changed = row;
    for (int j = 0; j < 64; ++j) changed[static_cast<size_t>(tile * 64 + j)] *= 1000.0f;
    ASSERT_EQ(write(changed, {5}), DSV4_STATUS_OK);
    const uint8_t* data = entry_data(5);
    const uint8_t* scales = entry_scales(5);
    for (int k = 0; k < 576; ++k) {
      if (k / 64 == tile && k < 448) continue;
      EXPECT_EQ(data[k], before[static_cast<size_t>(k)])
          << "tile " << tile << " changed byte " << k;
    }
    for (int k = 0; k < 8; ++k) {
      if (k == tile) {
        EXPECT_NE(scales[k], scales_before[static_cast<size_t>(k)])
            << "scale of the changed tile " << tile;
      } else {
        EXPECT_EQ(scales[k], scales_before[static_cast<size_t>(k)])
            << "tile " << tile << " changed scale " << k;
      }
    }
  }
}

TEST_F(KvWriter, ScaleFloorAppliesToAmaxBelow1e4) {
  // vLLM: max(amax, 1e-4) / 448 -> every tile with amax < 1e-4 gets e = -22, byte 105; amax just
  // above the floor moves the exponent: amax = 2^-13 (1.22e-4) -> ceil(log2(2^-13/448)) =
  // ceil(-21.8) = -21.
  make_cache(DSV4_KV_LAYOUT_FP8_V4_584B, 64, 0, 1);
  std::vector<float> row(512, 0.0f);
  row[0] = 5e-5f;                    // tile 0: below the floor
  row[64] = -9e-5f;                  // tile 1: below the floor
  row[128] = 0.0f;                   // tile 2: zero
  row[192] = std::ldexp(1.0f, -13);  // tile 3: above
  row[256] = 1e-30f;                 // tile 4: far below
  ASSERT_EQ(write(row, {0}), DSV4_STATUS_OK);
  const uint8_t* s = entry_scales(0);
  EXPECT_EQ(s[0], 105);
  EXPECT_EQ(s[1], 105);
  EXPECT_EQ(s[2], 105);
  EXPECT_EQ(s[3], 106);
  EXPECT_EQ(s[4], 105);
  EXPECT_EQ(s[7], 0) << "pad byte";
  // 5e-5: bf16 0x3852 = 1.640625*2^-15 = 5.0068e-5; * 2^22 = 210 = 1.640625*2^7 -> m = 5.125 -> 5:
  // 0.1110.101 = 0x75.  2^-13 * 2^21 = 2^8 -> 0.1111.000 = 0x78.
  EXPECT_EQ(entry_data(0)[0], 0x75);
  EXPECT_EQ(entry_data(0)[192], 0x78);
}

TEST_F(KvWriter, PerTensorSaturatesAt448) {
  make_cache(DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 4, 0, 1, 0.25f);
  std::vector<float> row(512, 0.0f);
  row[0] = 112.0f;  // 448 * 0.25: exactly the max -> 0x7E
  row[1] = 116.0f;  // 464 -> clamp -> 0x7E (never the NaN code 0x7F)
  row[2] = -1e30f;  // -> 0xFE
  row[3] = 1e30f;   // -> 0x7E
  row[4] = 104.0f;  // 416 = 1.625*2^8 -> 0.1111.101 = 0x7D
  ASSERT_EQ(write(row, {2}), DSV4_STATUS_OK);
  const uint8_t* d = entry_data(2);
  EXPECT_EQ(d[0], 0x7E);
  EXPECT_EQ(d[1], 0x7E);
  EXPECT_EQ(d[2], 0xFE);
  EXPECT_EQ(d[3], 0x7E);
  EXPECT_EQ(d[4], 0x7D);
  expect_untouched_except({2});
}

// ----------------------------------------------------------------------------------------------
// Arguments
// ----------------------------------------------------------------------------------------------
// The CPU backend rejects a slot beyond the capacity before writing anything; GPU backends never
// read device memory to validate, so they skip that row and write the others (dsv4.h).
TEST_F(KvWriter, SlotBeyondCapacityWritesNothing) {
  const bool strict = backend_checks_values(ctx_.get());
  for (uint32_t layout :
       {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR,
        DSV4_KV_LAYOUT_FP8_V32_656B, DSV4_KV_LAYOUT_FP16}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    make_cache(layout, 5, 0, 3);  // capacity 15
    const int64_t d = ref_layout_head_dim_qk(layout);
    std::vector<float> rows(static_cast<size_t>(3 * d), 0.5f);
    for (int32_t bad : {15, 1000, 2147483647}) {
      if (strict) {
        EXPECT_EQ(write(rows, {0, bad, 4}), DSV4_STATUS_INVALID_ARGUMENT) << "slot " << bad;
        EXPECT_NE(std::string(dsv4_last_error_message()), "");
        EXPECT_TRUE(host_ == pattern_)
            << "cache changed although the call failed (slot " << bad << ")";
        continue;
      }
      ASSERT_EQ(write(rows, {0, bad, 4}), DSV4_STATUS_OK)
          << "slot " << bad << ": " << dsv4_last_error_message();
      expect_untouched_except({0, 4});
      for (int64_t slot : {0, 4}) {
        const std::vector<double> got = reference_decode_entry(ref(), slot);
        for (int64_t i = 0; i < d; ++i)
          ASSERT_NEAR(got[static_cast<size_t>(i)], 0.5, 0.01) << "slot " << slot << " dim " << i;
      }
    }
    make_cache(layout, 5, 0, 3);
    EXPECT_EQ(write(rows, {-1, 14, -7}), DSV4_STATUS_OK) << dsv4_last_error_message();
    expect_untouched_except({14});
  }
}

// Spec 12.4: of several rows of one call aimed at one slot, the one that comes last wins, on every
// backend and whatever the rows' order of execution. Slots 3 and 7 are named three and two times,
// interleaved with others, each row holding its own value; the written entries must decode to the
// last row's. (DuplicateSlotsLastRowWins above: many rows per slot, many workers, repeated.)
TEST_F(KvWriter, DuplicateSlotsInterleavedLastRowWins) {
  for (uint32_t layout : {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP16,
                          DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP8_V32_656B}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    make_cache(layout, 4, 0, 4);
    const std::vector<int32_t> slots = {3, 7, 3, 9, -1, 3, 7, 12};
    const int64_t d = ref_layout_head_dim_qk(layout);
    std::vector<float> rows(slots.size() * static_cast<size_t>(d));
    for (size_t r = 0; r < slots.size(); ++r)
      for (int64_t i = 0; i < d; ++i)
        rows[r * static_cast<size_t>(d) + static_cast<size_t>(i)] =
            0.125f * static_cast<float>(r + 1) * (i % 2 == 0 ? 1.0f : -1.0f);
    ASSERT_EQ(write(rows, slots), DSV4_STATUS_OK) << dsv4_last_error_message();
    expect_untouched_except(slots);
    const std::pair<int32_t, size_t> last[] = {{3, 5}, {7, 6}, {9, 3}, {12, 7}};
    for (auto [slot, row] : last) {
      const std::vector<double> got = reference_decode_entry(ref(), slot);
      for (int64_t i = 0; i < d; ++i)
        ASSERT_NEAR(got[static_cast<size_t>(i)],
                    rows[row * static_cast<size_t>(d) + static_cast<size_t>(i)], 0.01)
            << "slot " << slot << " dim " << i << ": not the last row's value";
    }
  }
}

}  // namespace
}  // namespace dsv4test
