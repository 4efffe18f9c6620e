// KV-cache layout byte maps (spec section 3), written once for every backend: where an entry's
// data and scales live inside a block, block geometry, row dequantisation and the vLLM quantiser.
#pragma once

#include <stdint.h>

#include "codec.h"
#include "dsv4/dsv4_types.h"
#include "hd.h"

namespace dsv4 {

constexpr int kHeadDim = 512;      // d_v, and d_qk of every DSV4 layout
constexpr int kNopeDim = 448;      // FP8 part of the 584 B layout
constexpr int kRopeDim = 64;       // bf16 tail
constexpr int kV4TileDim = 64;     // UE8M0 quantisation tile (584 B layout)
constexpr int kV4Tiles = 7;        // 448 / 64
constexpr int kV4DataBytes = 576;  // per-entry data stride inside a block (448 + 128)
constexpr int kV4ScaleBytes = 8;   // 7 scale bytes + 1 pad
constexpr int kV4TokenBytes = 584;
constexpr int kV32HeadDimQK = 576;
constexpr int kV32TokenBytes = 656;  // 512 fp8 + 4 fp32 + 64 bf16
constexpr int kV32TileDim = 128;
constexpr int kV32Tiles = 4;
constexpr float kFp8Max = 448.0f;

DSV4_HD bool layout_is_known(uint32_t layout) {
  return layout == DSV4_KV_LAYOUT_BF16 || layout == DSV4_KV_LAYOUT_FP8_V4_584B ||
         layout == DSV4_KV_LAYOUT_FP8_V32_656B || layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR ||
         layout == DSV4_KV_LAYOUT_FP16;
}

// The per-tensor FP8 layout's raw e4m3 values times the cache's kv_scale are its true values
// (spec 3.4: out = kv_scale x sum_j softmax_j x v8_j); every other layout dequantises to true
// values.
DSV4_HD float layout_value_multiplier(uint32_t layout, float kv_scale) {
  return layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR ? kv_scale : 1.0f;
}

// How every backend applies the lists' value multipliers (kv_scale of a per-tensor FP8 cache, 1
// for every other layout; spec 3.4: out = kv_scale x sum_j softmax_j x v8_j, per list).
//
// Kernels whose P·V takes P in fp32 weight each key's P by its list's multiplier: the product
// rounds at 2^-24. Kernels that round P to bf16/fp16 must not weight P: that rounds the weight as
// well, and where one key dominates a row it cost up to 2^-8 of the row's output, beyond spec 2.4's
// tolerances. They keep P unweighted and O in the value units of the main list, switching it to
// the extra list's for the extra list's keys (value_units): lists come main first, then extra, a
// chunk of keys never holds both lists when the multipliers differ (`mixed`), so O changes units
// at most twice per item, in fp32. The output factor is then the main list's multiplier. The plan
// bounds the multipliers' ratio (kMaxValueMultiplierRatio), so that no conversion overflows.
struct list_value_scales {
  float multiplier[2];  // [0] main list, [1] extra list (the main one's without an extra cache)
  float main_to_extra;  // multiplier[0] / multiplier[1]
  float extra_to_main;  // multiplier[1] / multiplier[0]
  int32_t mixed;        // the multipliers differ: the lists never share a chunk
};
DSV4_HD list_value_scales list_value_scales_of(uint32_t main_layout, float main_kv_scale,
                                               uint32_t extra_layout, float extra_kv_scale) {
  list_value_scales v;
  v.multiplier[0] = layout_value_multiplier(main_layout, main_kv_scale);
  v.multiplier[1] = extra_layout == DSV4_KV_LAYOUT_NONE
                        ? v.multiplier[0]
                        : layout_value_multiplier(extra_layout, extra_kv_scale);
  v.main_to_extra = v.multiplier[0] / v.multiplier[1];
  v.extra_to_main = v.multiplier[1] / v.multiplier[0];
  v.mixed = v.multiplier[0] != v.multiplier[1] ? 1 : 0;
  return v;
}
// The largest ratio of the two caches' value multipliers a plan accepts (2^64 either way).
constexpr float kMaxValueMultiplierRatio = 18446744073709551616.0f;

// The value units of an item's running O: the list of its latest chunk (0 before the first).
struct value_units {
  int list = 0;
  // The factor on O's alpha for a chunk of list `li` (main_to_extra on entering the extra list).
  DSV4_HD float enter(const list_value_scales& v, int li) {
    const float f = li == list ? 1.0f : li == 1 ? v.main_to_extra : v.extra_to_main;
    list = li;
    return f;
  }
  // The factor that takes O back to the main list's units at the item's end (1: nothing to do).
  DSV4_HD float to_main(const list_value_scales& v) const {
    return list != 0 ? v.extra_to_main : 1.0f;
  }
};

// Layouts whose entries hold FP8 bytes (the only ones DSV4_KV_CACHE_FLAG_FP8_FNUZ applies to).
DSV4_HD bool layout_is_fp8(uint32_t layout) {
  return layout == DSV4_KV_LAYOUT_FP8_V4_584B || layout == DSV4_KV_LAYOUT_FP8_V32_656B ||
         layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
}

// Every cache flag this library knows.
constexpr uint32_t kKnownCacheFlags = DSV4_KV_CACHE_FLAG_FP8_FNUZ;

DSV4_HD int layout_bytes_per_token(uint32_t layout) {
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
    case DSV4_KV_LAYOUT_FP16:
      return 2 * kHeadDim;
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      return kV4TokenBytes;
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      return kV32TokenBytes;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return kHeadDim;
    default:
      return 0;
  }
}

// Dims a key of this layout holds (q . k runs over these).
DSV4_HD int layout_head_dim_qk(uint32_t layout) {
  return layout == DSV4_KV_LAYOUT_FP8_V32_656B ? kV32HeadDimQK : kHeadDim;
}

// Smallest legal block stride for `block_size` entries (FlashMLA pads 584 B blocks to 576 B units).
DSV4_HD int64_t layout_min_block_bytes(uint32_t layout, int64_t block_size) {
  if (layout == DSV4_KV_LAYOUT_FP8_V4_584B) {
    const int64_t content = block_size * kV4TokenBytes;
    return (content + kV4DataBytes - 1) / kV4DataBytes * kV4DataBytes;
  }
  return block_size * layout_bytes_per_token(layout);
}

// Alignment (bytes) of a cache's block base that kernels may assume (spec 12.3): 16 for the FP8
// layouts with in-cache scales, else 1 (the element-size rule of every tensor applies on top).
DSV4_HD int64_t layout_base_alignment(uint32_t layout) {
  return layout == DSV4_KV_LAYOUT_FP8_V4_584B || layout == DSV4_KV_LAYOUT_FP8_V32_656B ? 16 : 1;
}

// Byte offset, inside its block, of entry e's data (for every layout).
DSV4_HD int64_t entry_data_offset(uint32_t layout, int64_t e) {
  return layout == DSV4_KV_LAYOUT_FP8_V4_584B ? e * kV4DataBytes
                                              : e * layout_bytes_per_token(layout);
}

// 584 B layout: byte offset, inside its block, of entry e's 8 scale bytes.
DSV4_HD int64_t v4_scale_offset(int64_t block_size, int64_t e) {
  return block_size * kV4DataBytes + e * kV4ScaleBytes;
}

// Address of slot `slot` in a cache whose block 0 is at `base`.
struct slot_address {
  int64_t block;
  int64_t entry;
};
DSV4_HD slot_address split_slot(int64_t slot, int64_t block_size) {
  return slot_address{slot / block_size, slot % block_size};
}

// Dequantises one cache entry to fp32, every FP8 product rounded to bf16 (spec 3.2: the products
// are bf16-exact for every scale the writer produces, so this equals FlashMLA's bf16 multiply).
// out receives layout_head_dim_qk(layout) values. Per-tensor FP8 returns the raw e4m3 values; the
// caller applies kv_scale to logits and outputs (that is how the fused kernels fold it). `flags`:
// the cache's DSV4_KV_CACHE_FLAG_* (the FP8 flavour).
DSV4_HD void dequant_entry(uint32_t layout, uint32_t flags, const uint8_t* block_base,
                           int64_t block_size, int64_t e, float* out) {
  const uint8_t* p = block_base + entry_data_offset(layout, e);
  const bool fnuz = (flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0;
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16: {
      for (int d = 0; d < kHeadDim; ++d)
        out[d] = bf16_to_f32(static_cast<uint16_t>(p[2 * d] | (p[2 * d + 1] << 8)));
      break;
    }
    case DSV4_KV_LAYOUT_FP16: {
      for (int d = 0; d < kHeadDim; ++d)
        out[d] = fp16_to_f32(static_cast<uint16_t>(p[2 * d] | (p[2 * d + 1] << 8)));
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      const uint8_t* sc = block_base + v4_scale_offset(block_size, e);
      for (int k = 0; k < kV4Tiles; ++k) {
        const float s = ue8m0_to_f32(sc[k]);
        for (int j = 0; j < kV4TileDim; ++j) {
          const int d = k * kV4TileDim + j;
          out[d] = round_to_bf16(fp8_to_f32(p[d], fnuz) * s);
        }
      }
      const uint8_t* r = p + kNopeDim;
      for (int j = 0; j < kRopeDim; ++j)
        out[kNopeDim + j] = bf16_to_f32(static_cast<uint16_t>(r[2 * j] | (r[2 * j + 1] << 8)));
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      for (int k = 0; k < kV32Tiles; ++k) {
        float s;
        memcpy(&s, p + kHeadDim + 4 * k, sizeof s);
        for (int j = 0; j < kV32TileDim; ++j) {
          const int d = k * kV32TileDim + j;
          out[d] = round_to_bf16(fp8_to_f32(p[d], fnuz) * s);
        }
      }
      const uint8_t* r = p + kHeadDim + 4 * kV32Tiles;
      for (int j = 0; j < kRopeDim; ++j)
        out[kHeadDim + j] = bf16_to_f32(static_cast<uint16_t>(r[2 * j] | (r[2 * j + 1] << 8)));
      break;
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR: {
      for (int d = 0; d < kHeadDim; ++d) out[d] = fp8_to_f32(p[d], fnuz);
      break;
    }
    default:
      break;
  }
}

// Quantises one row into entry e of a block, exactly as vLLM's writers do.
//   584 B (spec 3.2): x = bf16(values); per 64-dim tile e = ceil(log2(max(amax,1e-4)/448)),
//                     byte = clamp(e+127, 0, 255), q = e4m3_satfinite(clamp(x * 2^-e, +-448)),
//                     pad byte 0, RoPE dims stored as bf16.
//   bf16 (3.3):       bf16(values).
//   fp16 (12.1):      fp16(values), RNE, beyond +-65504 -> +-inf.
//   per-tensor (3.4): e4m3_satfinite(clamp(values * (1/kv_scale), +-448)) from the fp32 values.
//   656 B (3.5):      x = bf16(values); per 128-dim tile scale = 2^ceil(log2(max(amax/448, 1e-4)))
//                     stored as fp32, q = e4m3(x / scale); RoPE dims 512..575 as bf16.
// `values` holds layout_head_dim_qk(layout) fp32 values.
DSV4_HD void quantize_entry(uint32_t layout, uint8_t* block_base, int64_t block_size, int64_t e,
                            const float* values, float kv_scale) {
  uint8_t* p = block_base + entry_data_offset(layout, e);
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16: {
      for (int d = 0; d < kHeadDim; ++d) {
        const uint16_t h = f32_to_bf16(values[d]);
        p[2 * d] = static_cast<uint8_t>(h & 0xff);
        p[2 * d + 1] = static_cast<uint8_t>(h >> 8);
      }
      break;
    }
    case DSV4_KV_LAYOUT_FP16: {
      for (int d = 0; d < kHeadDim; ++d) {
        const uint16_t h = f32_to_fp16(values[d]);
        p[2 * d] = static_cast<uint8_t>(h & 0xff);
        p[2 * d + 1] = static_cast<uint8_t>(h >> 8);
      }
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      uint8_t* sc = block_base + v4_scale_offset(block_size, e);
      for (int k = 0; k < kV4Tiles; ++k) {
        float amax = 0.0f;
        for (int j = 0; j < kV4TileDim; ++j) {
          const float a = round_to_bf16(values[k * kV4TileDim + j]);
          const float m = a < 0 ? -a : a;
          amax = m > amax ? m : amax;
        }
        amax = amax > 1e-4f ? amax : 1e-4f;
        int ex = ceil_log2(amax / kFp8Max);
        int byte = ex + 127;
        byte = byte < 0 ? 0 : (byte > 255 ? 255 : byte);
        ex = byte - 127;
        const float inv = (ex >= -126 && ex <= 127) ? exp2_int(-ex) : 0.0f;
        for (int j = 0; j < kV4TileDim; ++j) {
          float x = round_to_bf16(values[k * kV4TileDim + j]) * inv;
          x = x > kFp8Max ? kFp8Max : (x < -kFp8Max ? -kFp8Max : x);
          p[k * kV4TileDim + j] = f32_to_fp8_e4m3(x);
        }
        sc[k] = static_cast<uint8_t>(byte);
      }
      sc[kV4Tiles] = 0;
      uint8_t* r = p + kNopeDim;
      for (int j = 0; j < kRopeDim; ++j) {
        const uint16_t h = f32_to_bf16(values[kNopeDim + j]);
        r[2 * j] = static_cast<uint8_t>(h & 0xff);
        r[2 * j + 1] = static_cast<uint8_t>(h >> 8);
      }
      break;
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      for (int k = 0; k < kV32Tiles; ++k) {
        float amax = 0.0f;
        for (int j = 0; j < kV32TileDim; ++j) {
          const float a = round_to_bf16(values[k * kV32TileDim + j]);
          const float m = a < 0 ? -a : a;
          amax = m > amax ? m : amax;
        }
        float t = amax / kFp8Max;
        t = t > 1e-4f ? t : 1e-4f;
        const int ex = ceil_log2(t);
        const float scale = exp2_int(ex);
        const float inv = exp2_int(-ex);
        for (int j = 0; j < kV32TileDim; ++j) {
          float x = round_to_bf16(values[k * kV32TileDim + j]) * inv;
          x = x > kFp8Max ? kFp8Max : (x < -kFp8Max ? -kFp8Max : x);
          p[k * kV32TileDim + j] = f32_to_fp8_e4m3(x);
        }
        memcpy(p + kHeadDim + 4 * k, &scale, sizeof scale);
      }
      uint8_t* r = p + kHeadDim + 4 * kV32Tiles;
      for (int j = 0; j < kRopeDim; ++j) {
        const uint16_t h = f32_to_bf16(values[kHeadDim + j]);
        r[2 * j] = static_cast<uint8_t>(h & 0xff);
        r[2 * j + 1] = static_cast<uint8_t>(h >> 8);
      }
      break;
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR: {
      const float inv = 1.0f / kv_scale;
      for (int d = 0; d < kHeadDim; ++d) {
        float x = values[d] * inv;
        x = x > kFp8Max ? kFp8Max : (x < -kFp8Max ? -kFp8Max : x);
        p[d] = f32_to_fp8_e4m3(x);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace dsv4
