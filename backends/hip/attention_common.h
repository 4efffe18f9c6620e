// What the attention kernels share (their geometry is geometry.h): the block's work item, the
// candidate counts, the Q load, the chunk's row addresses and their dequantisation (layout.h's byte
// maps, codec.h's values: the rows equal dequant_entry's bit for bit), and the end of a head row
// (out / lse / max_logits, or a split's partials).
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "kernels.h"

namespace dsv4 {
namespace hip {

// Whether this device compilation has CDNA's matrix instructions (the MFMA kernel's real body).
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define DSV4_HIP_HAVE_MFMA 1
#else
#define DSV4_HIP_HAVE_MFMA 0
#endif

// The kernel families' entry points (attention.hip, attention_mfma.hip); attention_launch in
// attention.hip dispatches to them.
hipError_t simt_attention_configure(int heads_per_cta, int head_dim_qk, int* blocks_per_cu);
hipError_t simt_attention_launch(const attention_params& p, hipStream_t stream);
hipError_t mfma_attention_configure(int heads_per_cta, int head_dim_qk, int* blocks_per_cu);
hipError_t mfma_attention_launch(const attention_params& p, hipStream_t stream);

// Work items of a launch, one block each: (token, head group, key split) triples.
DSV4_HD int64_t item_count(const attention_params& p) {
  return static_cast<int64_t>(p.num_tokens) * p.head_groups * p.num_splits;
}

#if defined(DSV4_DEVICE_CODE)

struct block_item {
  int64_t token;
  int group;
  int split;
};

DSV4_DEV block_item block_item_of(const attention_params& p, int64_t block) {
  block_item b;
  b.split = static_cast<int>(block % p.num_splits);
  b.group = static_cast<int>((block / p.num_splits) % p.head_groups);
  b.token = block / (static_cast<int64_t>(p.num_splits) * p.head_groups);
  return b;
}

// The candidate count of list li (main 0, extra 1) of token t: its row count (index.h: width or CSR
// row, capped by the optional lengths), capped by the run's width; 0 without a list or a cache.
DSV4_DEV int32_t list_count(const attention_params& p, int64_t t, int li) {
  int64_t n = 0;
  if (p.list[li].indices != nullptr && p.cache[li].base != nullptr) {
    n = list_row_count(p.list[li], t, p.seq_q);
    n = n < p.width[li] ? n : p.width[li];
  }
  return static_cast<int32_t>(n);
}

// Q of heads [head0, head0 + hg) of token t as fp32 rows of `stride` (zero rows past the run's
// heads; e4m3 q widened exactly). Eight elements per thread and batch: their loads first, then the
// shared-memory stores (one global latency per batch, not one per element).
DSV4_DEV void load_q(const attention_params& p, int64_t t, int head0, int hg, int dqk, int stride,
                     float* q_s, int tid, int threads) {
  constexpr int kB = 8;
  for (int u0 = tid; u0 < hg * dqk; u0 += kB * threads) {
    uint32_t raw[kB];
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const int u = u0 + i * threads;
      const int h = head0 + u / dqk;
      raw[i] = 0u;
      if (u < hg * dqk && h < p.num_heads) {
        const int64_t off = token_offset(p.q, t, p.seq_q, h) + u % dqk;
        raw[i] = p.q_is_fp8 ? static_cast<const uint8_t*>(p.q.data)[off]
                            : static_cast<const uint16_t*>(p.q.data)[off];
      }
    }
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const int u = u0 + i * threads;
      if (u >= hg * dqk) continue;
      const int h = head0 + u / dqk;
      float v = 0.0f;
      if (h < p.num_heads)
        v = p.q_is_fp8 ? fp8_e4m3_to_f32(static_cast<uint8_t>(raw[i]))
                       : bf16_to_f32(static_cast<uint16_t>(raw[i]));
      q_s[(u / dqk) * stride + u % dqk] = v;
    }
  }
}

// Threads < kc resolve the rows of list li's positions [pos0, pos0 + kc) of token t.
DSV4_DEV void resolve_rows(const attention_params& p, int64_t t, int li, int pos0, int count,
                           int kc, chunk_rows* rows, int tid) {
  if (tid >= kc) return;
  const dsv4_mod_cache& cache = p.cache[li];
  const int64_t pos = pos0 + tid;
  const int32_t idx = pos < count ? list_entry(p.list[li], t, p.seq_q, pos) : -1;
  chunk_rows r{nullptr, nullptr};
  if (slot_is_valid(idx, cache)) {
    int64_t e;
    const uint8_t* block = slot_block_base(cache, idx, &e);
    r.src = block + entry_data_offset(cache.layout, e);
    r.scales = block + v4_scale_offset(cache.block_size, e);
  }
  rows[tid] = r;
}

// ------------------------------------------------------------------------------------------------
// Row dequantisation, 8 dims at a time.

template <int N>
DSV4_DEV void load_words(const uint8_t* src, bool aligned, uint32_t* w) {
  static_assert(N == 2 || N == 4, "8 or 16 bytes");
  if (aligned) {
    if constexpr (N == 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(src);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(src);
      w[0] = v.x, w[1] = v.y;
    }
    return;
  }
  for (int i = 0; i < N; ++i)
    w[i] = static_cast<uint32_t>(src[4 * i]) | (static_cast<uint32_t>(src[4 * i + 1]) << 8) |
           (static_cast<uint32_t>(src[4 * i + 2]) << 16) |
           (static_cast<uint32_t>(src[4 * i + 3]) << 24);
}

// Whether FP8 words (of the cache's flavour) hold a byte whose value the fast conversions below do
// not produce: an e4m3fn NaN (magnitude 0x7f) or the FNUZ NaN (0x80).
template <int N>
DSV4_DEV bool fp8_words_have_nan(const uint32_t* w, bool fnuz) {
  uint32_t bad = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (fnuz) {
      const uint32_t x = w[i] ^ 0x80808080u;  // a 0x80 byte becomes a zero byte
      bad |= (x - 0x01010101u) & ~x & 0x80808080u;
    } else {
      bad |= ((w[i] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    }
  }
  return bad != 0;
}

// FP8 byte b moved into fp32 bits: its e4m3fn value times 2^-120 exactly (an fp32 subnormal for
// the FP8 subnormals, so the device must keep fp32 subnormals: HIP's and CUDA's default). An FNUZ
// byte (no NaN) is half the e4m3fn value of its bits.
DSV4_DEV float fp8_times_2m120(uint32_t b) {
  return f32_from_bits(((b & 0x7fu) << 20) | ((b & 0x80u) << 24));
}

// 8 FP8 bytes times 2^(e - 127) (a UE8M0 scale byte; 127 for the per-tensor layout), each product
// rounded to bf16: round_to_bf16(fp8_to_f32(b, fnuz) * ue8m0_to_f32(e)). Exact fast path for
// NaN-free bytes and scales whose products are normal bf16 numbers (every scale the writer
// produces), the shared codec otherwise.
DSV4_DEV void fp8x8_pow2(const uint32_t* w, uint32_t e, bool fnuz, float* out) {
  const int32_t ee = static_cast<int32_t>(e) - (fnuz ? 1 : 0);
  if (ee >= 10 && ee <= 134 && !fp8_words_have_nan<2>(w, fnuz)) {
#if DSV4_HIP_HW_FP8
    if (!fnuz) {
      const float mul = f32_from_bits(static_cast<uint32_t>(ee) << 23);  // 2^(ee - 127)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t h2 = e4m3x2_to_f16x2(static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2))));
        out[2 * i] = half_bits_to_float(static_cast<uint16_t>(h2)) * mul;
        out[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(h2 >> 16)) * mul;
      }
      return;
    }
#endif
    const float mul = f32_from_bits(static_cast<uint32_t>(ee + 120) << 23);  // 2^(ee - 7)
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = fp8_times_2m120((w[i / 4] >> (8 * (i % 4))) & 0xffu) * mul;
    return;
  }
  const float s = ue8m0_to_f32(static_cast<uint8_t>(e));
  for (int i = 0; i < 8; ++i)
    out[i] = round_to_bf16(fp8_to_f32(static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4))), fnuz) * s);
}

// 8 FP8 bytes times an fp32 scale (656 B layout), rounded to bf16, as dequant_entry computes them.
DSV4_DEV void fp8x8_scaled(const uint32_t* w, float s, bool fnuz, float* out) {
  if (!fp8_words_have_nan<2>(w, fnuz)) {
    const float unit = f32_from_bits((fnuz ? 246u : 247u) << 23);  // 2^119 / 2^120
#pragma unroll
    for (int i = 0; i < 8; ++i)
      out[i] = round_to_bf16(fp8_times_2m120((w[i / 4] >> (8 * (i % 4))) & 0xffu) * unit * s);
    return;
  }
  for (int i = 0; i < 8; ++i)
    out[i] = round_to_bf16(fp8_to_f32(static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4))), fnuz) * s);
}

// 8 bf16 / fp16 values (16 bytes) widened.
DSV4_DEV void bf16x8(const uint32_t* w, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = f32_from_bits(w[i] << 16);
    out[2 * i + 1] = f32_from_bits(w[i] & 0xffff0000u);
  }
}
DSV4_DEV void fp16x8(const uint32_t* w, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = half_bits_to_float(static_cast<uint16_t>(w[i]));
    out[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(w[i] >> 16));
  }
}

// One 8-dim group of a row as loaded, before conversion: up to 16 data bytes and its scale (584 B
// layout: the UE8M0 byte; 656 B layout: the fp32 scale's bits). Splitting the load from the
// conversion lets a thread issue all its loads of a chunk before its first shared-memory store:
// the rows are reached through generic pointers, which the compiler may not move past a store.
struct raw8 {
  uint32_t w[4];
  uint32_t scale;
};

// The bytes of dims [d0, d0 + 8) of a valid row of `cache`.
DSV4_DEV void load_raw8(const dsv4_mod_cache& cache, const chunk_rows& row, int d0, bool aligned,
                        raw8* r) {
  switch (cache.layout) {
    case DSV4_KV_LAYOUT_BF16:
    case DSV4_KV_LAYOUT_FP16:
      load_words<4>(row.src + 2 * d0, aligned, r->w);
      return;
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      if (d0 >= kNopeDim) {
        load_words<4>(row.src + kNopeDim + 2 * (d0 - kNopeDim), aligned, r->w);
      } else {
        load_words<2>(row.src + d0, aligned, r->w);
        r->scale = row.scales[d0 / kV4TileDim];
      }
      return;
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      if (d0 >= kHeadDim) {
        load_words<4>(row.src + kHeadDim + 4 * kV32Tiles + 2 * (d0 - kHeadDim), aligned, r->w);
      } else {
        memcpy(&r->scale, row.src + kHeadDim + 4 * (d0 / kV32TileDim), sizeof r->scale);
        load_words<2>(row.src + d0, aligned, r->w);
      }
      return;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      load_words<2>(row.src + d0, aligned, r->w);
      return;
    default:
      return;
  }
}

// The values of dims [d0, d0 + 8) from their bytes (dequant_entry's values).
DSV4_DEV void convert_raw8(const dsv4_mod_cache& cache, const raw8& r, int d0, float* out) {
  const bool fnuz = (cache.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0;
  switch (cache.layout) {
    case DSV4_KV_LAYOUT_BF16:
      bf16x8(r.w, out);
      return;
    case DSV4_KV_LAYOUT_FP16:
      fp16x8(r.w, out);
      return;
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      if (d0 >= kNopeDim)
        bf16x8(r.w, out);
      else
        fp8x8_pow2(r.w, r.scale, fnuz, out);
      return;
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      if (d0 >= kHeadDim)
        bf16x8(r.w, out);
      else
        fp8x8_scaled(r.w, f32_from_bits(r.scale), fnuz, out);
      return;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      fp8x8_pow2(r.w, 127u, fnuz, out);
      return;
    default:
      for (int i = 0; i < 8; ++i) out[i] = 0.0f;
      return;
  }
}

// Dims [d0, d0 + 8) of a valid row of `cache` (dequant_entry's values).
DSV4_DEV void dequant8(const dsv4_mod_cache& cache, const chunk_rows& row, int d0, bool aligned,
                       float* out) {
  raw8 r{{0u, 0u, 0u, 0u}, 0u};
  load_raw8(cache, row, d0, aligned, &r);
  convert_raw8(cache, r, d0, out);
}

// The chunk's KC rows as fp32 [KC][stride] (invalid rows zero, so they add nothing and a NaN in an
// unreferenced row never leaks), 8 dims per work unit, NT threads. Each thread takes its units in
// as few batches as fit in registers (at most 9 units, so one batch from 128 threads up): first
// every load of the batch, then the conversions and the shared-memory stores. One gather latency
// per batch, not one per unit.
template <int KC, int DQK, int NT>
DSV4_DEV void stage_rows_f32(const dsv4_mod_cache& cache, const chunk_rows* rows, int stride,
                             bool aligned, float* k_s, int tid) {
  constexpr int kGroups = DQK / 8;
  constexpr int kUnits = KC * kGroups;
  constexpr int kPer = (kUnits + NT - 1) / NT;  // units per thread
  constexpr int kBatches = (kPer + 8) / 9;      // ceil(kPer / 9)
  constexpr int kBatch = (kPer + kBatches - 1) / kBatches;
  // Batches stay a loop (the inner loops unroll, so raw[] lives in registers): unrolling the
  // batches too is more code than clang's AMDGPU unroller accepts for the small-block kernels.
#pragma unroll 1
  for (int b0 = 0; b0 < kBatches * kBatch; b0 += kBatch) {
    raw8 raw[kBatch];
    bool valid[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int u = tid + (b0 + i) * NT;
      raw[i] = raw8{{0u, 0u, 0u, 0u}, 0u};
      valid[i] = false;
      if (b0 + i < kPer && u < kUnits) {
        const chunk_rows row = rows[u / kGroups];
        if (row.src != nullptr) {
          valid[i] = true;
          load_raw8(cache, row, (u % kGroups) * 8, aligned, &raw[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int u = tid + (b0 + i) * NT;
      if (b0 + i >= kPer || u >= kUnits) continue;
      const int d0 = (u % kGroups) * 8;
      float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      if (valid[i]) convert_raw8(cache, raw[i], d0, v);
      float* dst = k_s + (u / kGroups) * stride + d0;
      *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
}

// N consecutive floats from 4N-byte aligned shared memory.
template <int N>
DSV4_DEV void load_floats(const float* src, float* out) {
  if constexpr (N >= 4) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(src + i);
      out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = src[i];
  }
}

// ------------------------------------------------------------------------------------------------
// The end of a head row: this thread's 8 dims of O (unnormalised, running max m in the log2
// domain, sum l; l == 0: no valid key) for head h of the block's token, and with `stats` its lse /
// max_logits. One split: out = bf16(O / l * sink factor). Several: the normalised partial and its
// lse / max logit for merge_launch.
constexpr float kLn2 = 0.6931471805599453f;

// Dims [d, d + 8) of an out row at element offset `off`, in the plan's out_dtype.
DSV4_DEV void store_out8(const attention_params& p, int64_t off, const float* v) {
  if (p.out_f32) {
    float* out = static_cast<float*>(p.out.data) + off;
    if ((reinterpret_cast<uintptr_t>(out) & 15u) == 0) {
      *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(out + 4) = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      for (int i = 0; i < 8; ++i) out[i] = v[i];
    }
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(p.out.data) + off;
  uint32_t w[4];
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<uint32_t>(f32_to_bf16(v[2 * i])) |
           (static_cast<uint32_t>(f32_to_bf16(v[2 * i + 1])) << 16);
  if ((reinterpret_cast<uintptr_t>(out) & 15u) == 0) {
    *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = static_cast<uint16_t>(w[i]);
      out[2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
    }
  }
}

DSV4_DEV void finish_row(const attention_params& p, const block_item& item, int h, float m, float l,
                         int dim0, const float* o, bool stats) {
  if (h >= p.num_heads) return;
  const int64_t t = item.token;
  const bool empty = l == 0.0f;
  const float lse = empty ? INFINITY : (m + log2f(l)) * kLn2;
  if (p.num_splits == 1) {
    float f = 0.0f;
    if (!empty)
      f = (p.attn_sink != nullptr ? sink_factor(p.attn_sink[h], lse) : 1.0f) / l *
          p.values.multiplier[0];
    float v[8];
    for (int j = 0; j < 8; ++j) v[j] = o[j] * f;
    store_out8(p, token_offset(p.out, t, p.seq_q, h) + dim0, v);
    if (!stats) return;
    if (p.lse.data != nullptr)
      static_cast<float*>(p.lse.data)[token_offset(p.lse, t, p.seq_q, h)] = lse;
    if (p.max_logits.data != nullptr)
      static_cast<float*>(p.max_logits.data)[token_offset(p.max_logits, t, p.seq_q, h)] =
          empty ? -INFINITY : m * kLn2;
    return;
  }
  const int64_t row = (t * p.num_splits + item.split) * p.num_heads + h;
  if (!empty) {  // an empty part's O is never read (merge_weight 0)
    const float f = p.values.multiplier[0] / l;
    float* dst = p.partial_o + row * kHeadDim + dim0;
    *reinterpret_cast<float4*>(dst) = make_float4(o[0] * f, o[1] * f, o[2] * f, o[3] * f);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(o[4] * f, o[5] * f, o[6] * f, o[7] * f);
  }
  if (stats) {
    p.partial_lse[row] = lse;
    p.partial_max[row] = empty ? -INFINITY : m * kLn2;
  }
}

#endif  // DSV4_DEVICE_CODE

}  // namespace hip
}  // namespace dsv4
