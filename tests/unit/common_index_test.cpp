// Shared index arithmetic of backends/common/index.h that kernels rely on for exactness.
#include "common/index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

// u31_div must equal integer division for every dividend in [0, 2^31) and divisor in [1, 2^31):
// edge dividends around multiples of d and the range ends, and random ones, over divisors that
// include 1, powers of two and their neighbours, odd block sizes and the largest ones.
TEST(CommonIndex, U31DivisorIsExact) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (int k = 1; k < 31; ++k) {
    const uint32_t p = uint32_t{1} << k;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  divisors.push_back(0x7fffffffu);
  for (int i = 0; i < 200; ++i) divisors.push_back(static_cast<uint32_t>(rng() % 0x7fffffffu) + 1);
  const uint32_t kMax = 0x7fffffffu;
  for (const uint32_t d : divisors) {
    const dsv4::u31_divisor v = dsv4::make_u31_divisor(d);
    ASSERT_EQ(v.d, d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, kMax, kMax - 1, kMax - d + 1, kMax / d * d,
                                kMax / d * d - 1};
    for (int i = 0; i < 2000; ++i) ns.push_back(static_cast<uint32_t>(rng() & kMax));
    for (int i = 0; i < 200; ++i) {
      const uint64_t q = rng() % (uint64_t{kMax} / d + 1);
      for (const int64_t delta : {-1, 0, 1}) {
        const int64_t n = static_cast<int64_t>(q * d) + delta;
        if (n >= 0 && n <= kMax) ns.push_back(static_cast<uint32_t>(n));
      }
    }
    for (const uint32_t n : ns) {
      if (n > kMax) continue;
      ASSERT_EQ(dsv4::u31_div(n, v), n / d) << "n " << n << " d " << d;
    }
  }
}

// The block and entry of a slot, as the GPU producers compute them, against 64-bit division (block
// stride 1 byte, so the block base is the arena plus the block index).
TEST(CommonIndex, SlotBlockBase32MatchesDivision) {
  static uint8_t arena[1 << 16];
  for (const int32_t bs : {1, 2, 3, 61, 64, 69, 256, 1000003}) {
    dsv4_mod_cache c{};
    c.base = arena;
    c.block_size = bs;
    c.block_stride_bytes = 1;
    c.num_blocks = 1 << 16;
    const dsv4::u31_divisor v = dsv4::make_u31_divisor(static_cast<uint32_t>(bs));
    for (const int64_t wide : {int64_t{0}, int64_t{1}, int64_t{bs} - 1, int64_t{bs}, int64_t{bs} + 1, int64_t{12345},
                               int64_t{bs} * 65535 + bs - 1}) {
      if (wide < 0 || wide >= int64_t{bs} * 65536 || wide > 0x7fffffff) continue;
      const int32_t slot = static_cast<int32_t>(wide);
      int32_t e = -1;
      const uint8_t* block = dsv4::slot_block_base32(c, v, slot, &e);
      EXPECT_EQ(e, slot % bs);
      EXPECT_EQ(block - c.base, static_cast<int64_t>(slot / bs) * c.block_stride_bytes);
    }
  }
}

}  // namespace
