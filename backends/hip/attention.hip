// Sparse MLA attention, portable SIMT kernel (fp32 FMAs on every device; the CDNA matrix-core
// kernel is attention_mfma.hip). One block = one (token, head group, key split); a head group is
// HG heads, so a gathered key row is dequantised once and shared by all of them. Keys come in
// chunks of kChunkKeys list positions of one list (main or extra, so of one cache). Per chunk:
//   resolve the rows' addresses (index.h) -> load a thread's bytes of them, all at once, then
//   dequantise them to fp32 in shared memory (layout.h's byte maps, codec.h's values) ->
//   S = Q K^T: each thread an 8-head x 4-key register tile over a sixteenth of the head
//   dimension, the sixteen partial tiles summed by a lane reduce-scatter -> online softmax (base
//   2, fp32) -> O = alpha O + P V: each thread an 8-head x 8-dim tile of O in registers.
// Q and the chunk's rows live in shared memory as fp32, so the inner loops are loads of float4 and
// FMAs. One split writes out / lse / max_logits (sink applied); several leave normalised partials
// that merge.hip combines with the shared merge rule. Wave-size agnostic: lanes cooperate only in
// aligned groups of at most 16 (the reduce-scatter and the softmax rows).
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

// The thread tiling of a head group of HG heads over DQK-dim keys.
template <int HG, int DQK>
struct simt_shape {
  static constexpr int kKC = kChunkKeys;
  static constexpr int kRH = HG < 8 ? HG : 8;              // heads per thread tile (Q K^T and P V)
  static constexpr int kThreads = HG / kRH * 64;           // 64 threads per tile of kRH heads
  static constexpr int kRK = 4;                            // keys per Q K^T thread tile
  static constexpr int kTiles = (HG / kRH) * (kKC / kRK);  // Q K^T thread tiles
  static constexpr int kDS = kThreads / kTiles;            // lanes splitting a tile's dims
  static constexpr int kD4 = DQK / 4 / kDS;                // float4 steps per lane
  static constexpr int kAcc = kRH * kRK;
  // Blocks per SM the register allocation must allow on NVIDIA: 16 heads take 68 KB of shared
  // memory, so 3 blocks fit 227 KB; the batched staging would otherwise take 254 registers (2).
  static constexpr int kMinBlocks = HG == 16 ? 3 : 1;
  static_assert(kDS == 16 && (DQK / 4) % kDS == 0, "Q K^T tiling");
  static_assert(kThreads == HG / kRH * (kHeadDim / 8), "P V tiling: 8 dims per thread");
};

// ------------------------------------------------------------------------------------------------
// The reduce-scatter of the Q K^T partial tiles: lanes l .. l + 15 (same tile, dims split 16 ways)
// each hold N partial sums; afterwards lane l + j holds the full sums of N / 16 of them (N >= 16),
// namely entries j * N / 16 + i, or all N lanes' sums of entry j >> (4 - log2 N) (N < 16).
template <int N>
DSV4_DEV void reduce_scatter16(float* acc, int lane16) {
  int n = N;
#pragma unroll
  for (int width = 8; width >= 1; width /= 2) {
    const bool upper = (lane16 & width) != 0;
    if (n >= 2) {
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        if (i >= n / 2) break;
        const float send = upper ? acc[i] : acc[i + n / 2];
        const float keep = upper ? acc[i + n / 2] : acc[i];
        acc[i] = keep + shfl_xor(send, width);
      }
      n /= 2;
    } else {
      acc[0] += shfl_xor(acc[0], width);
    }
  }
}

template <int HG, int DQK>
__global__ void DSV4_KERNEL_BOUNDS_MIN((simt_shape<HG, DQK>::kThreads),
                                       (simt_shape<HG, DQK>::kMinBlocks))
    attention_simt_kernel(const attention_params p) {
  using S = simt_shape<HG, DQK>;
  constexpr int KC = S::kKC;
  constexpr int NT = S::kThreads;
  constexpr int RH = S::kRH;
  constexpr int RK = S::kRK;
  constexpr int QS = DQK + kRowPad;
  constexpr smem_map map = make_smem_map(HG, DQK, kernel_family::simt);
  DSV4_DYNAMIC_SMEM(smem);
  float* q_s = reinterpret_cast<float*>(smem + map.q);
  float* k_s = reinterpret_cast<float*>(smem + map.k);
  float* s_s = reinterpret_cast<float*>(smem + map.s);  // [HG][KC] logits, log2 domain
  float* p_s = reinterpret_cast<float*>(smem + map.p);  // [KC][HG] probabilities
  float* m_s = reinterpret_cast<float*>(smem + map.m);
  float* l_s = reinterpret_cast<float*>(smem + map.l);
  float* alpha_s = reinterpret_cast<float*>(smem + map.alpha);
  chunk_rows* rows = reinterpret_cast<chunk_rows*>(smem + map.rows);
  int32_t* counts = reinterpret_cast<int32_t*>(smem + map.counts);

  const int tid = threadIdx.x;
  const block_item item = block_item_of(p, blockIdx.x);
  const int64_t t = item.token;
  const int head0 = item.group * HG;

  if (tid < 2) counts[tid] = list_count(p, t, tid);
  load_q(p, t, head0, HG, DQK, QS, q_s, tid, NT);
  __syncthreads();

  // Q K^T roles: tile (RH heads x RK keys), lane16 = which sixteenth of the dims.
  const int lane16 = tid % S::kDS;
  const int tile = tid / S::kDS;
  const int qk_key0 = (tile % (KC / RK)) * RK;
  const int qk_head0 = (tile / (KC / RK)) * RH;
  // P V roles: head tile pv_head0 .. + RH, dims pv_dim0 .. + 8.
  const int pv_head0 = (tid / 64) * RH;
  const int pv_dim0 = (tid % 64) * 8;
  // Softmax roles: TPR threads per head row, KPT keys each. The row's running max and sum live in
  // registers: after the butterfly reductions every thread of the row holds the same values, so no
  // thread reads m / l from shared memory while the row's first thread rewrites them (the race of
  // run 1: a read of m_s by every thread of the row against the leader's write in the same chunk).
  constexpr int TPR = NT / HG < KC ? NT / HG : KC;
  constexpr int KPT = KC / TPR;
  const int sm_row = tid / TPR < HG ? tid / TPR : HG - 1;  // spare threads shadow the last row
  const bool sm_owner = tid / TPR < HG;
  const bool sm_lead = sm_owner && tid % TPR == 0;
  const int sm_key0 = (tid % TPR) * KPT;
  float m_run = -INFINITY;  // running max, log2 domain
  float l_run = 0.0f;       // running sum
  float o[RH][8];
#pragma unroll
  for (int a = 0; a < RH; ++a)
#pragma unroll
    for (int j = 0; j < 8; ++j) o[a][j] = 0.0f;

  const int c_begin = item.split * p.chunks_per_split;
  const int c_total = p.chunks[0] + p.chunks[1];
  const int c_end = c_begin + p.chunks_per_split < c_total ? c_begin + p.chunks_per_split : c_total;
  value_units units;
  for (int c = c_begin; c < c_end; ++c) {
    const int li = c < p.chunks[0] ? 0 : 1;
    const int pos0 = (c < p.chunks[0] ? c : c - p.chunks[0]) * KC;
    if (pos0 >= counts[li]) continue;  // block-uniform: past this token's candidates

    resolve_rows(p, t, li, pos0, counts[li], KC, rows, tid);
    __syncthreads();  // rows resolved; the previous chunk's P V is done with k_s
    stage_rows_f32<KC, DQK, NT>(p.cache[li], rows, QS, p.aligned16 != 0, k_s, tid);
    __syncthreads();  // K ready

    // ---- S = Q K^T -------------------------------------------------------------------------
    float acc[S::kAcc];
#pragma unroll
    for (int i = 0; i < S::kAcc; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < S::kD4; ++i) {
      const int d = 4 * (lane16 + i * S::kDS);  // interleaved: the 16 lanes read 256 B in a row
      float4 kv[RK];
#pragma unroll
      for (int b = 0; b < RK; ++b)
        kv[b] = *reinterpret_cast<const float4*>(k_s + (qk_key0 + b) * QS + d);
#pragma unroll
      for (int a = 0; a < RH; ++a) {
        const float4 qv = *reinterpret_cast<const float4*>(q_s + (qk_head0 + a) * QS + d);
#pragma unroll
        for (int b = 0; b < RK; ++b) {
          float v = acc[a * RK + b];
          v = fmaf(qv.x, kv[b].x, v);
          v = fmaf(qv.y, kv[b].y, v);
          v = fmaf(qv.z, kv[b].z, v);
          v = fmaf(qv.w, kv[b].w, v);
          acc[a * RK + b] = v;
        }
      }
    }
    reduce_scatter16<S::kAcc>(acc, lane16);
    {
      const float scale = p.logit_scale_log2[li];
      constexpr int kOwn = S::kAcc >= 16 ? S::kAcc / 16 : 1;
#pragma unroll
      for (int i = 0; i < kOwn; ++i) {
        int e;  // entry of the tile this lane now holds in full
        if constexpr (S::kAcc >= 16) {
          e = lane16 * kOwn + i;
        } else {
          constexpr int kShift = S::kAcc == 8 ? 1 : S::kAcc == 4 ? 2 : S::kAcc == 2 ? 3 : 4;
          if ((lane16 & ((1 << kShift) - 1)) != 0) break;  // duplicates of a lower lane's sum
          e = lane16 >> kShift;
        }
        const int key = qk_key0 + e % RK;
        const int head = qk_head0 + e / RK;
        s_s[head * KC + key] = rows[key].src != nullptr ? acc[i] * scale : -INFINITY;
      }
    }
    __syncthreads();  // S ready

    // ---- online softmax (base 2) -------------------------------------------------------------
    {
      const int r = sm_row;
      const int k0 = sm_key0;
      float sv[KPT];
      float cmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        sv[j] = s_s[r * KC + k0 + j];
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
        if (sm_owner) p_s[(k0 + j) * HG + r] = e;
      }
#pragma unroll
      for (int off = TPR / 2; off > 0; off /= 2) sum += shfl_xor(sum, off);
      const float alpha = exp2f(m_old - m_use);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (sm_lead) alpha_s[r] = alpha;  // read after the barrier below; rewritten 3 barriers later
    }
    __syncthreads();  // P and alpha ready

    // ---- O = alpha O + P V -------------------------------------------------------------------
    const float to_units = units.enter(p.values, li);  // O's value units (common/layout.h)
#pragma unroll
    for (int a = 0; a < RH; ++a) {
      const float alpha = alpha_s[pv_head0 + a] * to_units;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[a][j] *= alpha;
    }
#pragma unroll 4
    for (int k = 0; k < KC; ++k) {
      float pk[RH];
      load_floats<RH>(p_s + k * HG + pv_head0, pk);
      const float4 v0 = *reinterpret_cast<const float4*>(k_s + k * QS + pv_dim0);
      const float4 v1 = *reinterpret_cast<const float4*>(k_s + k * QS + pv_dim0 + 4);
#pragma unroll
      for (int a = 0; a < RH; ++a) {
        o[a][0] = fmaf(pk[a], v0.x, o[a][0]);
        o[a][1] = fmaf(pk[a], v0.y, o[a][1]);
        o[a][2] = fmaf(pk[a], v0.z, o[a][2]);
        o[a][3] = fmaf(pk[a], v0.w, o[a][3]);
        o[a][4] = fmaf(pk[a], v1.x, o[a][4]);
        o[a][5] = fmaf(pk[a], v1.y, o[a][5]);
        o[a][6] = fmaf(pk[a], v1.z, o[a][6]);
        o[a][7] = fmaf(pk[a], v1.w, o[a][7]);
      }
    }
  }
  const float to_main = units.to_main(p.values);  // O back to the main list's value units
  if (to_main != 1.0f) {
#pragma unroll
    for (int a = 0; a < RH; ++a)
#pragma unroll
      for (int j = 0; j < 8; ++j) o[a][j] *= to_main;
  }
  if (sm_lead) {
    m_s[sm_row] = m_run;
    l_s[sm_row] = l_run;
  }
  __syncthreads();  // final m / l visible

#pragma unroll
  for (int a = 0; a < RH; ++a) {
    const int r = pv_head0 + a;
    finish_row(p, item, head0 + r, m_s[r], l_s[r], pv_dim0, o[a], tid % 64 == 0);
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Host side: shared memory, configuration, launch.
namespace {

template <int HG>
hipError_t simt_configure(int head_dim_qk, int* blocks_per_cu) {
  const int threads = simt_shape<HG, kHeadDim>::kThreads;
  const size_t smem = make_smem_map(HG, head_dim_qk, kernel_family::simt).total;
  hipError_t err;
  if (head_dim_qk == kV32HeadDimQK) {
    err = dsv4_hip_allow_smem(attention_simt_kernel<HG, kV32HeadDimQK>, smem);
    *blocks_per_cu =
        dsv4_hip_blocks_per_cu(attention_simt_kernel<HG, kV32HeadDimQK>, threads, smem);
  } else {
    err = dsv4_hip_allow_smem(attention_simt_kernel<HG, kHeadDim>, smem);
    *blocks_per_cu = dsv4_hip_blocks_per_cu(attention_simt_kernel<HG, kHeadDim>, threads, smem);
  }
  return err;
}

template <int HG>
hipError_t simt_launch(const attention_params& p, hipStream_t stream) {
  const size_t smem = make_smem_map(HG, p.head_dim_qk, kernel_family::simt).total;
  const dim3 grid(static_cast<unsigned>(item_count(p)));
  const dim3 block(simt_shape<HG, kHeadDim>::kThreads);
  if (p.head_dim_qk == kV32HeadDimQK)
    return dsv4_hip_launch(attention_simt_kernel<HG, kV32HeadDimQK>, grid, block, smem, stream, p);
  return dsv4_hip_launch(attention_simt_kernel<HG, kHeadDim>, grid, block, smem, stream, p);
}

}  // namespace

hipError_t simt_attention_configure(int heads_per_cta, int head_dim_qk, int* blocks_per_cu) {
  switch (heads_per_cta) {
    case 1:
      return simt_configure<1>(head_dim_qk, blocks_per_cu);
    case 2:
      return simt_configure<2>(head_dim_qk, blocks_per_cu);
    case 4:
      return simt_configure<4>(head_dim_qk, blocks_per_cu);
    case 8:
      return simt_configure<8>(head_dim_qk, blocks_per_cu);
    case 16:
      return simt_configure<16>(head_dim_qk, blocks_per_cu);
    case 32:
      return simt_configure<32>(head_dim_qk, blocks_per_cu);
    default:
      return hipErrorInvalidValue;
  }
}

hipError_t simt_attention_launch(const attention_params& p, hipStream_t stream) {
  switch (p.heads_per_cta) {
    case 1:
      return simt_launch<1>(p, stream);
    case 2:
      return simt_launch<2>(p, stream);
    case 4:
      return simt_launch<4>(p, stream);
    case 8:
      return simt_launch<8>(p, stream);
    case 16:
      return simt_launch<16>(p, stream);
    case 32:
      return simt_launch<32>(p, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace hip
}  // namespace dsv4

// ------------------------------------------------------------------------------------------------
// Family dispatch, the split combine, and the device traits.
namespace dsv4 {
namespace hip {
namespace {

// The code object's own view of the device it was built for.
#if defined(__gfx90a__)
#define DSV4_HIP_ARCH 0x90a
#elif defined(__gfx940__)
#define DSV4_HIP_ARCH 0x940
#elif defined(__gfx941__)
#define DSV4_HIP_ARCH 0x941
#elif defined(__gfx942__)
#define DSV4_HIP_ARCH 0x942
#elif defined(__gfx1030__)
#define DSV4_HIP_ARCH 0x1030
#elif defined(__gfx1100__)
#define DSV4_HIP_ARCH 0x1100
#else
#define DSV4_HIP_ARCH 0
#endif

__global__ void DSV4_KERNEL_BOUNDS(64) traits_kernel(device_traits* out) {
  if (threadIdx.x != 0) return;
  device_traits t;
  t.wave_size = warpSize;
#if defined(DSV4_HIP_EMULATOR)
  t.mfma = emu::props().mfma ? 1 : 0;
#else
  t.mfma = DSV4_HIP_HAVE_MFMA;
#endif
  t.arch = DSV4_HIP_ARCH;
  t.checksum = t.wave_size + 7 * t.mfma + t.arch;
  *out = t;
}

}  // namespace

hipError_t attention_configure(kernel_family f, int heads_per_cta, int head_dim_qk,
                               int* blocks_per_cu) {
  return f == kernel_family::mfma
             ? mfma_attention_configure(heads_per_cta, head_dim_qk, blocks_per_cu)
             : simt_attention_configure(heads_per_cta, head_dim_qk, blocks_per_cu);
}

hipError_t attention_launch(kernel_family f, const attention_params& p, hipStream_t stream) {
  if (p.num_tokens <= 0) return hipSuccess;
  const hipError_t err = f == kernel_family::mfma ? mfma_attention_launch(p, stream)
                                                  : simt_attention_launch(p, stream);
  if (err != hipSuccess || p.num_splits == 1) return err;
  const int64_t h = p.num_heads;
  const int64_t s = p.num_splits;
  merge_params m{};
  m.num_parts = p.num_splits;
  m.num_tokens = p.num_tokens;
  m.seq_q = p.seq_q;
  m.num_heads = p.num_heads;
  m.out_parts = p.partial_o;
  m.out_parts_f32 = 1;
  m.part_stride_p = h * kHeadDim;
  m.part_stride_t = s * h * kHeadDim;
  m.part_stride_h = kHeadDim;
  m.lse_parts = p.partial_lse;
  m.lse_stride_p = h;
  m.lse_stride_t = s * h;
  m.lse_stride_h = 1;
  m.max_parts = p.partial_max;
  m.attn_sink = p.attn_sink;
  m.out_f32 = p.out_f32;
  m.out = p.out;
  m.lse = p.lse;
  m.max_logits = p.max_logits;
  return merge_launch(m, stream);
}

hipError_t query_device_traits(device_traits* out) {
#if defined(DSV4_HIP_EMULATOR)
  return dsv4_hip_launch(traits_kernel, dim3(1), dim3(64), 0, nullptr, out);
#else
  device_traits* d = nullptr;
  hipError_t err = hipMalloc(reinterpret_cast<void**>(&d), sizeof *d);
  if (err != hipSuccess) return err;
  err = dsv4_hip_launch(traits_kernel, dim3(1), dim3(64), 0, nullptr, d);
  if (err == hipSuccess) err = hipMemcpy(out, d, sizeof *d, hipMemcpyDeviceToHost);
  const hipError_t free_err = hipFree(d);
  return err != hipSuccess ? err : free_err;
#endif
}

}  // namespace hip
}  // namespace dsv4
