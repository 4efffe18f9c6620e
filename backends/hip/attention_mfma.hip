// Sparse MLA attention on CDNA matrix cores (v_mfma_f32_16x16x16_bf16: gfx90a, gfx94x; wave64).
// The SIMT kernel's block structure (attention.hip: one block per (token, head group, key split),
// 16-key chunks of one list, rows dequantised once per block by attention_common.h) with the two
// products on the matrix cores: bf16 operands, fp32 accumulation, P rounded to bf16 before P V as
// FlashMLA does. Four wavefronts; a head group of HG = 16, 32 or 64 heads is HG / 16 head tiles,
// each served by WP = 64 / HG wavefronts that split Q K^T's head dimension (their partial S added
// in shared memory) and P V's value dimension. Q stays in registers as MFMA A fragments; the rows
// sit in shared memory twice, as rows (K for Q K^T) and transposed (V for P V), so every fragment
// is one 8-byte load. Outside gfx90a / gfx94x code objects (and the emulator) the kernel is an
// empty stub the planner never picks (the traits kernel reports no matrix cores there).
// clang-format off
#include "platform.h"  // first: HIP declares device memcpy before the shared headers use it
// clang-format on
#include <math.h>

#include "attention_common.h"
#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "kernels.h"

namespace dsv4 {
namespace hip {
namespace {

constexpr int kWaves = kMfmaThreads / 64;

template <int HG, int DQK>
struct mfma_shape {
  static constexpr int kKC = kChunkKeys;
  static constexpr int kTiles = HG / 16;                // head tiles
  static constexpr int kWP = kWaves / kTiles;           // wavefronts per head tile
  static constexpr int kQkSteps = DQK / 16 / kWP;       // Q K^T k-steps per wavefront
  static constexpr int kPvTiles = kHeadDim / 16 / kWP;  // 16-dim O tiles per wavefront
  static constexpr int kQS = DQK + 8;                   // bf16 row stride of the rows
  static constexpr int kTS = kKC + 8;                   // bf16 row stride of V^T and P
  static_assert(kTiles * kWP == kWaves && kQkSteps * 16 * kWP == DQK, "wavefront tiling");
};

#if DSV4_HIP_HAVE_MFMA || defined(DSV4_HIP_EMULATOR)

// D = A B + C on one 16x16x16 bf16 tile (operand layout: emu.h, mfma_16x16x16_bf16).
DSV4_DEV void mfma_tile(const uint16_t* a, const uint16_t* b, float* c) {
#if defined(DSV4_HIP_EMULATOR)
  float d[4];
  emu::mfma_16x16x16_bf16(a, b, c, d);
  for (int i = 0; i < 4; ++i) c[i] = d[i];
#else
  typedef short short4_t __attribute__((ext_vector_type(4)));
  typedef float float4_t __attribute__((ext_vector_type(4)));
  short4_t av, bv;
  float4_t cv;
  for (int i = 0; i < 4; ++i) {
    av[i] = static_cast<short>(a[i]);
    bv[i] = static_cast<short>(b[i]);
    cv[i] = c[i];
  }
  cv = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, cv, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c[i] = cv[i];
#endif
}

DSV4_DEV void load4_bf16(const uint16_t* src, uint16_t* out) {
  const uint2 v = *reinterpret_cast<const uint2*>(src);
  out[0] = static_cast<uint16_t>(v.x), out[1] = static_cast<uint16_t>(v.x >> 16);
  out[2] = static_cast<uint16_t>(v.y), out[3] = static_cast<uint16_t>(v.y >> 16);
}

// The chunk's rows as bf16 rows k_s [kc][kQS] and their V part transposed kt_s [512][kTS].
// Every value is bf16-exact (the planner keeps fp16 caches off this kernel), so truncation is
// exact.
template <int DQK>
DSV4_DEV void stage_rows_bf16(const dsv4_mod_cache& cache, const chunk_rows* rows, bool aligned,
                              uint16_t* k_s, uint16_t* kt_s, int qs, int ts, int tid) {
  constexpr int groups = DQK / 8;
  for (int u = tid; u < kChunkKeys * groups; u += kMfmaThreads) {
    const int r = u / groups;
    const int d0 = (u % groups) * 8;
    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const chunk_rows row = rows[r];
    if (row.src != nullptr) dequant8(cache, row, d0, aligned, v);
    uint32_t w[4];
    for (int i = 0; i < 4; ++i)
      w[i] = (f32_bits(v[2 * i]) >> 16) | (f32_bits(v[2 * i + 1]) & 0xffff0000u);
    *reinterpret_cast<uint4*>(k_s + r * qs + d0) = make_uint4(w[0], w[1], w[2], w[3]);
    if (d0 < kHeadDim) {
      for (int i = 0; i < 8; ++i)
        kt_s[(d0 + i) * ts + r] = static_cast<uint16_t>(f32_bits(v[i]) >> 16);
    }
  }
}

template <int HG, int DQK>
__global__ void DSV4_KERNEL_BOUNDS(kMfmaThreads) attention_mfma_kernel(const attention_params p) {
  using S = mfma_shape<HG, DQK>;
  constexpr int KC = S::kKC;
  constexpr int QS = S::kQS;
  constexpr int TS = S::kTS;
  constexpr smem_map map = make_smem_map(HG, DQK, kernel_family::mfma);
  DSV4_DYNAMIC_SMEM(smem);
  uint16_t* k_s = reinterpret_cast<uint16_t*>(smem + map.k);
  uint16_t* kt_s = reinterpret_cast<uint16_t*>(smem + map.kt);
  float* s_s = reinterpret_cast<float*>(smem + map.s);  // [kWP][HG][KC] partial logits
  uint16_t* p_s = reinterpret_cast<uint16_t*>(smem + map.p);
  float* m_s = reinterpret_cast<float*>(smem + map.m);
  float* l_s = reinterpret_cast<float*>(smem + map.l);
  float* alpha_s = reinterpret_cast<float*>(smem + map.alpha);
  chunk_rows* rows = reinterpret_cast<chunk_rows*>(smem + map.rows);
  int32_t* counts = reinterpret_cast<int32_t*>(smem + map.counts);

  const int tid = threadIdx.x;
  const int lane = tid % 64;
  const int wave = tid / 64;
  const int tile = wave / S::kWP;  // head tile
  const int part = wave % S::kWP;  // its share of the head dimension (Q K^T) and value dims (P V)
  const block_item item = block_item_of(p, blockIdx.x);
  const int64_t t = item.token;
  const int head0 = item.group * HG;

  if (tid < 2) counts[tid] = list_count(p, t, tid);
  // The softmax row of this thread (TPR threads per head row): its running max and sum live in
  // registers (every thread of the row computes the same values), m_s / l_s only at the end.
  constexpr int kTPR = kMfmaThreads / HG;
  float m_run = -INFINITY;
  float l_run = 0.0f;
  // Q as A fragments: row (head) tile * 16 + lane % 16, dims 4 * (lane / 16) .. + 3 of each
  // 16-dim step of this wavefront's part.
  uint16_t qa[S::kQkSteps][4];
  {
    const int h = head0 + tile * 16 + lane % 16;
#pragma unroll
    for (int s = 0; s < S::kQkSteps; ++s) {
      const int d = (part * S::kQkSteps + s) * 16 + 4 * (lane / 16);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = 0.0f;
        if (h < p.num_heads) {
          const int64_t off = token_offset(p.q, t, p.seq_q, h) + d + i;
          v = p.q_is_fp8 ? fp8_e4m3_to_f32(static_cast<const uint8_t*>(p.q.data)[off])
                         : bf16_to_f32(static_cast<const uint16_t*>(p.q.data)[off]);
        }
        qa[s][i] = static_cast<uint16_t>(f32_bits(v) >> 16);  // bf16 / e4m3 values: exact
      }
    }
  }
  float o[S::kPvTiles][4];
#pragma unroll
  for (int n = 0; n < S::kPvTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  __syncthreads();

  const int c_begin = item.split * p.chunks_per_split;
  const int c_total = p.chunks[0] + p.chunks[1];
  const int c_end = c_begin + p.chunks_per_split < c_total ? c_begin + p.chunks_per_split : c_total;
  value_units units;
  for (int c = c_begin; c < c_end; ++c) {
    const int li = c < p.chunks[0] ? 0 : 1;
    const int pos0 = (c < p.chunks[0] ? c : c - p.chunks[0]) * KC;
    if (pos0 >= counts[li]) continue;  // block-uniform

    resolve_rows(p, t, li, pos0, counts[li], KC, rows, tid);
    __syncthreads();
    stage_rows_bf16<DQK>(p.cache[li], rows, p.aligned16 != 0, k_s, kt_s, QS, TS, tid);
    __syncthreads();

    // Partial S of this wavefront's head tile over its dims: D[head][key], lane holds heads
    // 4 * (lane / 16) .. + 3 of key lane % 16.
    {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int s = 0; s < S::kQkSteps; ++s) {
        uint16_t b[4];
        const int d = (part * S::kQkSteps + s) * 16 + 4 * (lane / 16);
        load4_bf16(k_s + (lane % 16) * QS + d, b);
        mfma_tile(qa[s], b, acc);
      }
      float* sp = s_s + (part * HG + tile * 16) * KC;
#pragma unroll
      for (int i = 0; i < 4; ++i) sp[(4 * (lane / 16) + i) * KC + lane % 16] = acc[i];
    }
    __syncthreads();

    // Online softmax (base 2): TPR threads per head row over the summed partials.
    {
      constexpr int TPR = kTPR;
      constexpr int KPT = KC / TPR;
      const int r = tid / TPR;
      const int k0 = (tid % TPR) * KPT;
      const float scale = p.logit_scale_log2[li];
      float sv[KPT];
      float cmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < S::kWP; ++w) v += s_s[(w * HG + r) * KC + k0 + j];
        sv[j] = rows[k0 + j].src != nullptr ? v * scale : -INFINITY;
        cmax = fmaxf(cmax, sv[j]);
      }
#pragma unroll
      for (int off = TPR / 2; off > 0; off /= 2) cmax = fmaxf(cmax, shfl_xor(cmax, off));
      const float m_old = m_run;
      const float m_new = fmaxf(m_old, cmax);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        const float e = exp2f(sv[j] - m_use);
        sum += e;
        p_s[r * TS + k0 + j] = f32_to_bf16(e);  // RNE, as FlashMLA rounds P (never weighted)
      }
#pragma unroll
      for (int off = TPR / 2; off > 0; off /= 2) sum += shfl_xor(sum, off);
      const float alpha = exp2f(m_old - m_use);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (tid % TPR == 0) alpha_s[r] = alpha;
    }
    __syncthreads();

    // O = alpha O + P V on this wavefront's head tile and value dims.
    {
      const float to_units = units.enter(p.values, li);  // O's value units (common/layout.h)
      float alpha[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) alpha[i] = alpha_s[tile * 16 + 4 * (lane / 16) + i] * to_units;
      uint16_t a[4];
      load4_bf16(p_s + (tile * 16 + lane % 16) * TS + 4 * (lane / 16), a);
#pragma unroll
      for (int n = 0; n < S::kPvTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] *= alpha[i];
        uint16_t b[4];
        const int d = (part * S::kPvTiles + n) * 16 + lane % 16;
        load4_bf16(kt_s + d * TS + 4 * (lane / 16), b);
        mfma_tile(a, b, o[n]);
      }
    }
  }
  const float to_main = units.to_main(p.values);  // O back to the main list's value units
  if (to_main != 1.0f) {
#pragma unroll
    for (int n = 0; n < S::kPvTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] *= to_main;
  }
  if (tid % kTPR == 0) {
    m_s[tid / kTPR] = m_run;
    l_s[tid / kTPR] = l_run;
  }
  __syncthreads();

  // O tile n holds dims (part * kPvTiles + n) * 16 + lane % 16 of heads 4 * (lane / 16) .. + 3.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = tile * 16 + 4 * (lane / 16) + i;
    const int h = head0 + r;
    if (h >= p.num_heads) continue;
    const float m = m_s[r];
    const float l = l_s[r];
    const bool empty = l == 0.0f;
    const float lse = empty ? INFINITY : (m + log2f(l)) * kLn2;
    const bool stats = part == 0 && lane % 16 == 0;
    if (p.num_splits == 1) {
      float f = 0.0f;
      if (!empty)
        f = (p.attn_sink != nullptr ? sink_factor(p.attn_sink[h], lse) : 1.0f) / l *
            p.values.multiplier[0];
      const int64_t off = token_offset(p.out, t, p.seq_q, h) + part * S::kPvTiles * 16 + lane % 16;
#pragma unroll
      for (int n = 0; n < S::kPvTiles; ++n) {
        if (p.out_f32) {
          static_cast<float*>(p.out.data)[off + n * 16] = o[n][i] * f;
        } else {
          static_cast<uint16_t*>(p.out.data)[off + n * 16] = f32_to_bf16(o[n][i] * f);
        }
      }
      if (stats && p.lse.data != nullptr)
        static_cast<float*>(p.lse.data)[token_offset(p.lse, t, p.seq_q, h)] = lse;
      if (stats && p.max_logits.data != nullptr)
        static_cast<float*>(p.max_logits.data)[token_offset(p.max_logits, t, p.seq_q, h)] =
            empty ? -INFINITY : m * kLn2;
    } else {
      const int64_t prow = (t * p.num_splits + item.split) * p.num_heads + h;
      if (!empty) {
        float* dst = p.partial_o + prow * kHeadDim;
#pragma unroll
        for (int n = 0; n < S::kPvTiles; ++n)
          dst[(part * S::kPvTiles + n) * 16 + lane % 16] = o[n][i] / l * p.values.multiplier[0];
      }
      if (stats) {
        p.partial_lse[prow] = lse;
        p.partial_max[prow] = empty ? -INFINITY : m * kLn2;
      }
    }
  }
}

#else

// Code objects without matrix cores carry a stub: the planner never launches it there.
template <int HG, int DQK>
__global__ void DSV4_KERNEL_BOUNDS(kMfmaThreads) attention_mfma_kernel(const attention_params) {}

#endif

template <int HG, int DQK>
hipError_t mfma_configure_one(int* blocks_per_cu) {
  const size_t smem = make_smem_map(HG, DQK, kernel_family::mfma).total;
  const hipError_t err = dsv4_hip_allow_smem(attention_mfma_kernel<HG, DQK>, smem);
  *blocks_per_cu = dsv4_hip_blocks_per_cu(attention_mfma_kernel<HG, DQK>, kMfmaThreads, smem);
  return err;
}

template <int HG>
hipError_t mfma_configure(int head_dim_qk, int* blocks_per_cu) {
  return head_dim_qk == kV32HeadDimQK ? mfma_configure_one<HG, kV32HeadDimQK>(blocks_per_cu)
                                      : mfma_configure_one<HG, kHeadDim>(blocks_per_cu);
}

template <int HG>
hipError_t mfma_launch(const attention_params& p, hipStream_t stream) {
  const size_t smem = make_smem_map(HG, p.head_dim_qk, kernel_family::mfma).total;
  const dim3 grid(static_cast<unsigned>(item_count(p)));
  if (p.head_dim_qk == kV32HeadDimQK)
    return dsv4_hip_launch(attention_mfma_kernel<HG, kV32HeadDimQK>, grid, dim3(kMfmaThreads), smem,
                           stream, p);
  return dsv4_hip_launch(attention_mfma_kernel<HG, kHeadDim>, grid, dim3(kMfmaThreads), smem,
                         stream, p);
}

}  // namespace

hipError_t mfma_attention_configure(int heads_per_cta, int head_dim_qk, int* blocks_per_cu) {
  switch (heads_per_cta) {
    case 16:
      return mfma_configure<16>(head_dim_qk, blocks_per_cu);
    case 32:
      return mfma_configure<32>(head_dim_qk, blocks_per_cu);
    case 64:
      return mfma_configure<64>(head_dim_qk, blocks_per_cu);
    default:
      return hipErrorInvalidValue;
  }
}

hipError_t mfma_attention_launch(const attention_params& p, hipStream_t stream) {
  switch (p.heads_per_cta) {
    case 16:
      return mfma_launch<16>(p, stream);
    case 32:
      return mfma_launch<32>(p, stream);
    case 64:
      return mfma_launch<64>(p, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace hip
}  // namespace dsv4
