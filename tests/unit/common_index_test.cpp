// Shared index arithmetic of backends/common/index.h that kernels rely on for exactness.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/index.h"

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
    std::vector<uint32_t> ns = {
        0, 1, d - 1, d, d + 1, kMax, kMax - 1, kMax - d + 1, kMax / d * d, kMax / d * d - 1};
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
    for (const int64_t wide : {int64_t{0}, int64_t{1}, int64_t{bs} - 1, int64_t{bs},
                               int64_t{bs} + 1, int64_t{12345}, int64_t{bs} * 65535 + bs - 1}) {
      if (wide < 0 || wide >= int64_t{bs} * 65536 || wide > 0x7fffffff) continue;
      const int32_t slot = static_cast<int32_t>(wide);
      int32_t e = -1;
      const uint8_t* block = dsv4::slot_block_base32(c, v, slot, &e);
      EXPECT_EQ(e, slot % bs);
      EXPECT_EQ(block - c.base, static_cast<int64_t>(slot / bs) * c.block_stride_bytes);
    }
  }
}

// A token's list row (list_row_of: resolved once, then base[i * step]) reads the same entries as
// list_entry, for dense lists with padded or transposed strides and several seq_q, and for CSR
// lists.
TEST(CommonIndex, ListRowMatchesListEntry) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<int32_t> pool(1 << 14);
  for (int32_t& v : pool) v = static_cast<int32_t>(rng() & 0x7fffffff) - (1 << 30);
  struct dense_shape {
    int64_t batch, seq_q, width, stride_b, stride_s, stride_k;
  };
  // Row-major, padded rows, k-major (stride_k > 1), and a single token per batch entry.
  for (const dense_shape& d : {dense_shape{3, 2, 7, 14, 7, 1}, dense_shape{2, 3, 5, 48, 16, 1},
                               dense_shape{2, 2, 6, 2, 1, 4}, dense_shape{5, 1, 9, 11, 0, 1}}) {
    dsv4_mod_index_list l{};
    l.indices = pool.data();
    l.format = DSV4_INDEX_DENSE;
    l.width = static_cast<int32_t>(d.width);
    l.stride_b = d.stride_b;
    l.stride_s = d.stride_s;
    l.stride_k = d.stride_k;
    for (int64_t t = 0; t < d.batch * d.seq_q; ++t) {
      const dsv4::list_row r = dsv4::list_row_of(l, t, d.seq_q);
      for (int64_t i = 0; i < d.width; ++i) {
        ASSERT_EQ(r.base[i * r.step], dsv4::list_entry(l, t, d.seq_q, i))
            << "t " << t << " i " << i;
      }
    }
  }
  std::vector<int32_t> indptr = {0, 3, 3, 10, 17, 18};
  dsv4_mod_index_list csr{};
  csr.indices = pool.data() + 5;
  csr.format = DSV4_INDEX_CSR;
  csr.width = 7;
  csr.indptr = indptr.data();
  csr.num_entries = 18;
  for (int64_t t = 0; t + 1 < static_cast<int64_t>(indptr.size()); ++t) {
    const dsv4::list_row r = dsv4::list_row_of(csr, t, 1);
    for (int64_t i = 0; i < indptr[t + 1] - indptr[t]; ++i) {
      ASSERT_EQ(r.base[i * r.step], dsv4::list_entry(csr, t, 1, i)) << "t " << t << " i " << i;
    }
  }
}

}  // namespace
