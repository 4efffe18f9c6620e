// Number codecs shared by every backend: bf16, fp16, FP8 e4m3 (OCP e4m3fn and FNUZ) and UE8M0
// scales.
// Bit-exact, branch-light, host/device. Written once; never re-implement these in a backend.
#pragma once

#include <stdint.h>
#include <string.h>

#include "hd.h"

namespace dsv4 {

DSV4_HD uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

DSV4_HD float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 is the top half of an fp32; widening is exact.
DSV4_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Round-to-nearest-even narrowing; NaN stays a quiet NaN with its sign.
DSV4_HD uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Rounds an fp32 to the nearest bf16 value, returned as fp32.
DSV4_HD float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// IEEE binary16 -> fp32, exact (subnormals, infinities, NaN payload kept in its top bits).
DSV4_HD float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    // subnormal: man * 2^-24, exact in fp32
    const float mag = static_cast<float>(man) * (1.0f / 16777216.0f);
    return f32_from_bits(f32_bits(mag) | sign);
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round-to-nearest-even narrowing to binary16; beyond the largest finite value (65504) rounds to
// +-inf, as ggml's and every hardware conversion does; NaN stays a quiet NaN.
DSV4_HD uint16_t f32_to_fp16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (a < 0x38800000u) {                                               // < 2^-14: subnormal range
    const float v = f32_from_bits(a) * 16777216.0f;                    // exact, in [0, 1024)
    uint32_t i = static_cast<uint32_t>(v);
    const float frac = v - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;  // i == 1024 is the min normal
    return static_cast<uint16_t>(sign | i);
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // RNE to 10 mantissa bits
  return static_cast<uint16_t>(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3ffu));
}

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; S.1111.111 is NaN; max 448.
DSV4_HD float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  if (exp == 0xfu && man == 0x7u) return f32_from_bits(sign | 0x7fc00000u);
  if (exp == 0) {
    // subnormal: man * 2^-9, exact in fp32
    const float mag = static_cast<float>(man) * (1.0f / 512.0f);
    return f32_from_bits(f32_bits(mag) | sign);
  }
  return f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

// e4m3 FNUZ (ROCm's flavour on gfx942): exponent bias 8, no infinities, no negative zero: 0x80 is
// the only NaN; every other byte is half the e4m3fn value of the same bits (max 240).
DSV4_HD float fp8_e4m3fnuz_to_f32(uint8_t b) {
  if (b == 0x80u) return f32_from_bits(0x7fc00000u);
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  if (exp == 0) {
    // subnormal: man * 2^-10, exact in fp32
    const float mag = static_cast<float>(man) * (1.0f / 1024.0f);
    return f32_from_bits(f32_bits(mag) | sign);
  }
  return f32_from_bits(sign | ((exp + 119u) << 23) | (man << 20));
}

// An FP8 cache byte in the cache's flavour (fnuz: DSV4_KV_CACHE_FLAG_FP8_FNUZ).
DSV4_HD float fp8_to_f32(uint8_t b, bool fnuz) {
  return fnuz ? fp8_e4m3fnuz_to_f32(b) : fp8_e4m3_to_f32(b);
}

// Saturating round-to-nearest-even encoding (the "satfinite" cvt): |x| beyond 448 -> 448,
// NaN -> 0x7f. Matches torch's float8_e4m3fn cast for every in-range value.
DSV4_HD uint8_t f32_to_fp8_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (also +-inf)
  if (a < 0x3c800000u) {                                            // < 2^-6: subnormal range
    const float v = f32_from_bits(a) * 512.0f;                      // exact, in [0, 8)
    uint32_t i = static_cast<uint32_t>(v);
    const float frac = v - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;  // i == 8 is the min normal
    return static_cast<uint8_t>(sign | i);
  }
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // RNE to 3 mantissa bits
  const uint32_t exp = (r >> 23) - 120u;
  const uint32_t man = (r >> 20) & 0x7u;
  if (exp > 15u || (exp == 15u && man == 7u)) return static_cast<uint8_t>(sign | 0x7eu);
  return static_cast<uint8_t>(sign | (exp << 3) | man);
}

// UE8M0 scale byte -> 2^(b-127) as fp32 (0xff is NaN; 0 is the fp32 subnormal 2^-127).
DSV4_HD float ue8m0_to_f32(uint8_t b) {
  if (b == 0xffu) return f32_from_bits(0x7fc00000u);
  if (b == 0) return f32_from_bits(0x00400000u);
  return f32_from_bits(static_cast<uint32_t>(b) << 23);
}

// 2^e for an integer exponent in the normal fp32 range, exact.
DSV4_HD float exp2_int(int e) { return f32_from_bits(static_cast<uint32_t>(e + 127) << 23); }

// ceil(log2(v)) for a finite v > 0, computed exactly from the bits (no libm rounding surprises).
DSV4_HD int ceil_log2(float v) {
  const uint32_t u = f32_bits(v);
  int e = static_cast<int>((u >> 23) & 0xffu);
  uint32_t man = u & 0x7fffffu;
  if (e == 0) {  // subnormal: normalise
    int shift = 0;
    while ((man & 0x800000u) == 0) {
      man <<= 1;
      ++shift;
    }
    e = 1 - shift;
    man &= 0x7fffffu;
  }
  return (e - 127) + (man != 0 ? 1 : 0);
}

}  // namespace dsv4
