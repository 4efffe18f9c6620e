// Device helpers shared by the CUDA attention kernels: PTX wrappers (shared-memory addresses,
// cp.async) and FP8 -> bf16 conversion of 8 values at a time. Values always equal the shared
// codecs' (backends/common/codec.h): round_to_bf16(fp8_e4m3_to_f32(b) * scale).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common/codec.h"
#include "common/index.h"
#include "kernels.h"

namespace dsv4 {
namespace cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem_addr(dst)),
               "l"(src));
}
// The L2 policy of gathered cache rows (attention_params::stream_rows): evict_first when a run
// reads most rows once (decode), so they, not lines other kernels wrote, are the L2's first victims
// (a dirty victim costs a write-back); evict_normal when tokens share rows (prefill).
__device__ __forceinline__ uint64_t row_l2_policy(bool streamed) {
  uint64_t first, normal;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(first));
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(normal));
  return streamed ? first : normal;
}
// 16 bytes, or 16 zero bytes when !fill (src is then not read), under an L2 policy.
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, bool fill,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
      "l"(src), "r"(fill ? 16 : 0), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

// ldmatrix (8x8 b16 matrices, one row address per lane) and the m16n8k16 bf16 mma.
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The same from a shared-window address (addresses computed once, offsets added as immediates).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col); bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with fp16 inputs (the fp16 row layout: fp16 K and V, fp16 Q and P).
__device__ __forceinline__ void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The tensor cores' element type: bf16, or fp16 (kF16) for caches of the fp16 layout.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (kF16) {
    mma_f16(d, a, b0, b1);
  } else {
    mma_bf16(d, a, b0, b1);
  }
}

// Two fp32 rounded to bf16 (RNE, as the codec's f32_to_bf16; NaN stays NaN): one hardware
// instruction on sm_80+, the shared codec elsewhere.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
#endif
}

// Two fp32 rounded to fp16 (RNE, as the codec's f32_to_fp16).
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// A pair of probabilities in the tensor cores' element type.
template <bool kF16>
__device__ __forceinline__ uint32_t pack_p(float lo, float hi) {
  if constexpr (kF16) {
    return pack_f16(lo, hi);
  } else {
    return pack_bf16(lo, hi);
  }
}
// One probability in it (16 bits).
template <bool kF16>
__device__ __forceinline__ uint16_t p_bits(float x) {
  if constexpr (kF16) {
    return __half_as_ushort(__float2half_rn(x));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
}
// Eight bf16 q values as fp16 (fp16 plans multiply fp16 Q with fp16 rows): exact for |q| in
// [2^-14, 65504]; smaller values keep fp16's subnormal step 2^-24, larger ones overflow (DSV4's
// q is RMS-normed per head: |q| <= sqrt(512)).
__device__ __forceinline__ uint4 bf16x8_to_f16x8(uint4 v) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = pack_f16(__uint_as_float(w[i] << 16), __uint_as_float(w[i] & 0xffff0000u));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 8 e4m3 bytes times a scale, each product rounded to bf16: round_to_bf16(fp8_e4m3_to_f32(b) * s).
// sm_89+ converts pairs in hardware (e4m3 -> f16 is exact, f16 -> f32 exact, then the same fp32
// product and RNE narrowing), elsewhere the shared codec; the values are identical (NaN payloads
// aside).
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 raw, float scale) {
  const uint32_t w[2] = {raw.x, raw.y};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = w[i / 2];
    const int sh = (i % 2) * 16;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h2;
    const uint16_t pair = static_cast<uint16_t>(word >> sh);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
    const float a =
        __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xffffu))) * scale;
    const float b = __half2float(__ushort_as_half(static_cast<unsigned short>(h2 >> 16))) * scale;
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    o[i] = *reinterpret_cast<const uint32_t*>(&v);
#else
    const float a = fp8_e4m3_to_f32(static_cast<uint8_t>(word >> sh)) * scale;
    const float b = fp8_e4m3_to_f32(static_cast<uint8_t>(word >> (sh + 8))) * scale;
    o[i] = pack_bf16(a, b);
#endif
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Whether fp8x8_to_bf16x8_pow2_fast is exact for a UE8M0 byte e: products of e4m3 values with
// 2^(e - 127) are normal bf16 numbers for 10 <= e <= 134 (results in [2^-126, 2^16)).
__device__ __forceinline__ bool pow2_scale_is_fast(uint32_t e) { return e - 10u <= 124u; }

// 8 e4m3 bytes (no NaN) times the power of two 2^(e - 127) (pow2_scale_is_fast(e); e = 127 is
// scale 1), with integer operations and one bf16 multiply per pair. Bits s.eeee.mmm moved to bf16
// bits s.0000eeee.mmm0000 are the value times 2^-120 exactly (normals and subnormals alike); the
// bf16 product with 2^(e - 7) is then exact, so the values equal the codec's.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8_pow2_fast(uint2 raw, uint32_t e) {
  const uint32_t m16 = (e + 120u) << 7;  // bf16 bits of 2^(e - 7)
  const uint32_t mul_bits = m16 | (m16 << 16);
  const __nv_bfloat162 mul = *reinterpret_cast<const __nv_bfloat162*>(&mul_bits);
  const uint32_t w[2] = {raw.x, raw.y};
  uint32_t o[4];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    // Per word: the bytes' magnitudes (the same masked word as pow2_fast_is_exact's, which the
    // compiler may share when both are inlined together), and their signs moved to bit 3.
    const uint32_t mag = w[k] & 0x7f7f7f7fu;
    const uint32_t sgn = (w[k] >> 4) & 0x08080808u;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Byte 2h + j of mag and of sgn into the low and high byte of 16-bit lane j; shifted left by
      // 4 the sign lands on bit 15 and the magnitude on bits 4..10: three operations per pair
      // (permute, shift, multiply) where masking the sign and the magnitude apart took five.
      const uint32_t bits = __byte_perm(mag, sgn, h ? 0x7362u : 0x5140u) << 4;
      const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits), mul);
      o[2 * k + h] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Whether fp8x8_to_bf16x8_pow2_fast is exact for the `n` words at `w` with UE8M0 byte e: a scale
// in its range and no NaN byte. (w & 0x7f) + 1 per byte never carries and sets bit 7 exactly for
// NaN bytes, so the words' sums are OR-ed and masked once (three-input LOP3s).
template <int N>
__device__ __forceinline__ bool pow2_fast_is_exact(const uint32_t* w, uint32_t e) {
  uint32_t nan = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) nan |= (w[i] & 0x7f7f7f7fu) + 0x01010101u;
  return pow2_scale_is_fast(e) && (nan & 0x80808080u) == 0u;
}

// The same for any UE8M0 byte and NaN bytes: the fast path where it is exact, else fp32.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8_pow2(uint2 raw, uint32_t e) {
  const uint32_t w[2] = {raw.x, raw.y};
  if (!pow2_fast_is_exact<2>(w, e)) {
    return fp8x8_to_bf16x8(raw, ue8m0_to_f32(static_cast<uint8_t>(e)));
  }
  return fp8x8_to_bf16x8_pow2_fast(raw, e);
}

// 2^x as one MUFU.EX2, subnormal results flushed to 0. exp2f (no fast-math) is ex2.approx.f32,
// whose subnormal handling adds instructions around the MUFU in every softmax (2 % of a 128-head
// b=2 run and 1 % of prefill on an H200). A term below 2^-126 weighs nothing beside the row
// maximum's 1; every softmax term, rescale factor and split weight goes through here.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ------------------------------------------------------------------------------------------------
// The online softmax (base 2), written once for every consumer. A row's state is its running max
// (log2 domain, scaled logits; -inf before its first valid key) and its running sum (of the row,
// or of this thread's keys where the parts are added at the end). Each chunk folds its max into
// the state; what the row held (its sum and O) is rescaled by alpha, and the chunk's probabilities
// are 2^(logit - m_use).

// The max a row's exponentials subtract when its running max is m: m, or 0 while the row has no
// valid key (every logit -inf: 2^(-inf - 0) = 0, where -inf - -inf would be NaN).
__device__ __forceinline__ float softmax_max_use(float m) { return m == -INFINITY ? 0.0f : m; }
// The factor of what a row held when its running max moves from m_old to m_new.
__device__ __forceinline__ float softmax_alpha(float m_old, float m_new) {
  return exp2_ftz(m_old - softmax_max_use(m_new));
}
struct softmax_step {
  float alpha;  // the factor of the row's previous sum and O
  float m_use;  // the max this chunk's exponentials subtract (softmax_max_use)
};
// Folds a chunk's max m_chunk (scaled logits) into the row's running max m_run.
__device__ __forceinline__ softmax_step online_softmax_step(float& m_run, float m_chunk) {
  const float m_new = fmaxf(m_run, m_chunk);
  const float m_use = softmax_max_use(m_new);
  const softmax_step st{exp2_ftz(m_run - m_use), m_use};
  m_run = m_new;
  return st;
}
// A probability: 2^(logit - m_use) of a scaled logit, or of an unscaled one times its scale.
__device__ __forceinline__ float softmax_p(float logit, float m_use) {
  return exp2_ftz(logit - m_use);
}
__device__ __forceinline__ float softmax_p(float raw, float scale, float m_use) {
  return exp2_ftz(fmaf(raw, scale, -m_use));
}
// The row's running sum after a chunk whose probabilities add up to chunk_sum.
__device__ __forceinline__ float softmax_sum(float l, float alpha, float chunk_sum) {
  return l * alpha + chunk_sum;
}

// ------------------------------------------------------------------------------------------------
// The candidate counts every attention kernel walks its chunks by.

// The candidate count of list li (main 0, extra 1) of token t: its row count (index.h: width or CSR
// row, capped by the optional lengths), capped by the run's width; 0 without a list or a cache.
__device__ __forceinline__ int32_t list_count(const attention_params& p, int64_t t, int li) {
  int64_t n = 0;
  if (p.list[li].indices != nullptr && p.cache[li].base != nullptr) {
    n = list_row_count(p.list[li], t, p.seq_q);
    n = n < p.width[li] ? n : p.width[li];
  }
  return static_cast<int32_t>(n);
}

// ------------------------------------------------------------------------------------------------
// Finishing a (token, head) row: every attention kernel and the split combine end the same way.
constexpr float kLn2 = 0.6931471805599453f;

// Factor for the unnormalised O of a row from its running max m (log2 domain), sum l, its head's
// sink logit (-inf: no sink, factor 1 / l exactly) and the run's common value factor
// (attention_params::out_scale); 0 for an empty row (no valid key).
__device__ __forceinline__ float row_output_factor_sink(float sink, float m, float l,
                                                        float out_scale) {
  if (l == 0.0f) return 0.0f;
  const float lse = (m + log2f(l)) * kLn2;
  const float sink_factor = 1.0f / (1.0f + expf(sink - lse));
  return sink_factor / l * out_scale;
}
// The sink logit of head h (-inf without sinks).
__device__ __forceinline__ float head_sink(const attention_params& p, int h) {
  return p.attn_sink != nullptr ? p.attn_sink[h] : -INFINITY;
}
// The same for row h of a CTA's head tile: -inf for a padding row past the run's heads.
__device__ __forceinline__ float tile_head_sink(const attention_params& p, int h) {
  return h < p.num_heads ? head_sink(p, h) : -INFINITY;
}
// The same for head h of the run; 0 for padding heads.
__device__ __forceinline__ float row_output_factor(const attention_params& p, int h, float m,
                                                   float l) {
  if (h >= p.num_heads) return 0.0f;
  return row_output_factor_sink(head_sink(p, h), m, l, p.out_scale);
}

// Split partials of O (attention_params::partial_o) keep each row's dims in 16-dim groups of four
// 16-byte units: unit u of group G holds dims G + 2k, G + 2k + 1, G + 8 + 2k, G + 9 + 2k with
// k = partial_unit_lane(u), which is what lane k of an mma accumulator quad holds of two adjacent
// 8-dim n-tiles. So every kernel stores one float4 per pair of n-tiles, a warp writing 64
// contiguous bytes of each of its 8 rows per instruction; with float2 stores (32 bytes per row)
// twice the instructions, which cost 2-5 % of a 128-head b = 2 run on an H200.
// The map is its own inverse (lane k's unit is partial_unit_lane(k)).
__host__ __device__ constexpr int partial_unit_lane(int u) { return ((u & 1) << 1) | (u >> 1); }
// The first dim of the unit at float offset d (a multiple of 4) of a partial row: the unit holds
// dims first, first + 1, first + 8, first + 9.
__host__ __device__ constexpr int partial_unit_first_dim(int d) {
  return (d & ~15) + 2 * partial_unit_lane((d >> 2) & 3);
}
static_assert(partial_unit_first_dim(4) == 4 && partial_unit_first_dim(8) == 2 &&
                  partial_unit_first_dim(28) == 22,
              "unit 1 is lane 2's, unit 2 lane 1's");
// Stores lane `lane`'s dims of n-tiles n and n + 1 (the first at dim g0, a multiple of 16) of a
// partial row: a0, a1 of tile n, b0, b1 of tile n + 1. kWide false: the same unit as two 8-byte
// stores (kernels whose registers are too tight for the wide form: it spills there).
template <bool kWide = true>
__device__ __forceinline__ void store_partial_pair(float* row, int g0, int lane, float a0, float a1,
                                                   float b0, float b1) {
  float* unit = row + g0 + 4 * partial_unit_lane(lane);
  if constexpr (kWide) {
    *reinterpret_cast<float4*>(unit) = make_float4(a0, a1, b0, b1);
  } else {
    *reinterpret_cast<float2*>(unit) = make_float2(a0, a1);
    *reinterpret_cast<float2*>(unit + 2) = make_float2(b0, b1);
  }
}

// The weight of a key split's partial (O, sum) in the merge of a row's splits: 2^(ms - m_use), with
// ms the split's running max, ls its sum and m_use the merged max (0 when it is -inf); -1 marks a
// split that saw no valid key (sum and O exactly 0: merges skip it). The test is the sum, not the
// max: a split whose only valid keys had NaN logits also has ms -inf (fmaxf drops NaN), but a NaN
// sum and O, which weigh 2^-inf = 0 and carry the NaN into the row (0 * NaN), as the reference
// does.
__device__ __forceinline__ float split_weight(float ms, float ls, float m_use) {
  return ls == 0.0f ? -1.0f : exp2_ftz(ms - m_use);
}

// A split's final row max and sum (the combine's weights) for partial row `row`.
__device__ __forceinline__ void store_split_stats(const attention_params& p, int64_t row, float m,
                                                  float l) {
  float* pml = p.partial_ml + row * 2;
  pml[0] = m;
  pml[1] = l;
}

// lse and max_logits of (t, h) when requested (empty row: +inf / -inf).
__device__ __forceinline__ void write_row_stats(const attention_params& p, int64_t t, int h,
                                                float m, float l) {
  const bool empty = l == 0.0f;
  if (p.lse.data != nullptr) {
    static_cast<float*>(p.lse.data)[token_offset(p.lse, t, p.seq_q, h)] =
        empty ? INFINITY : (m + log2f(l)) * kLn2;
  }
  if (p.max_logits.data != nullptr) {
    static_cast<float*>(p.max_logits.data)[token_offset(p.max_logits, t, p.seq_q, h)] =
        empty ? -INFINITY : m * kLn2;
  }
}

// Finished bf16 outputs (8 in a uint4, 4 in a uint2, 2 in a uint32_t) at element offset `off` of
// out: one store when out rows are 16-byte aligned, else element by element.
template <class V>
__device__ __forceinline__ void store_out_at(const attention_params& p, int64_t off, V v) {
  uint16_t* out = static_cast<uint16_t*>(p.out.data) + off;
  if (p.out_aligned16) {
    *reinterpret_cast<V*>(out) = v;
  } else {
    const uint16_t* e = reinterpret_cast<const uint16_t*>(&v);
    for (int i = 0; i < static_cast<int>(sizeof(V) / 2); ++i) out[i] = e[i];
  }
}
// The same for dims [d, d + 8) or [d, d + 4) of (t, h).
template <class V>
__device__ __forceinline__ void store_out(const attention_params& p, int64_t t, int h, int d, V v) {
  store_out_at(p, token_offset(p.out, t, p.seq_q, h) + d, v);
}

}  // namespace cuda
}  // namespace dsv4
