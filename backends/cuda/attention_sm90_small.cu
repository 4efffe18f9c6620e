// Sparse MLA attention for Hopper (sm_90a) with few heads (1..32): two converting producer
// warpgroups feed one consumer warpgroup.
//
// A key row costs the same gather and dequantisation for 8 heads as for 64, while the tensor-core
// work shrinks with the heads; the 64-head kernel's single producer warpgroup (one warp per
// scheduler, latency-bound) sets its pace. Here two producer warpgroups split every chunk, and the
// consumer's tensor-core work is sized to 16 or 32 heads instead of wgmma's 64 rows.
//
// One CTA = one (token, key split, group of 16 * MT heads); 384 threads:
//   WG1, WG2 (producers, sm90_pipeline.cuh): rows 0..31 and 32..63 of every 64-key chunk, gathered,
//       dequantised (FP8) or copied (bf16) into one of two K buffers (the 128B-swizzled layout of
//       the 64-head kernel); full / empty mbarriers hand the buffers over. FP8 rows come by the
//       bulk-copy engine into a raw stage two chunks ahead, and the producers convert from there
//       (producer_stage): the copies take no issue slots and the tensor cores barely slow them. A
//       32-head tile's Q leaves no room for whole rows: its stage holds the FP8 bytes only, and the
//       rope goes by cp.async straight into the K buffer.
//   WG0 (consumer, warps w = 0..3), by tile width:
//     8 heads (1..8 heads on a 16-head tile's CTA; mma.sync, transposed: small_consumer_h8):
//       S^T = K Q^T for keys 16w..16w+15 with Q^T in registers, O^T[128w..128w+127] += V^T P^T.
//       Half the mma of a padded 16-head tile and no Q reads per chunk (6 % faster on an H200).
//     16 heads (mma.sync): S = Q K^T for keys 16w..16w+15 of the chunk and every head (m16n8k16,
//       operands by ldmatrix); the chunk's row maxima meet in shared memory; P (bf16) to shared
//       memory; O[:, 128w..128w+127] += P V (V: the same buffer, ldmatrix.trans).
//     32 heads (wgmma, transposed): wgmma's 64 rows are the chunk's keys (S^T = K Q^T) and 64-dim
//       blocks of the value (O^T = V^T P^T), its N the 32 heads, every operand read from shared
//       memory by the tensor cores. Warp w holds keys 16w..16w+15 of S^T, so a head's chunk maximum
//       meets over the warp's lanes and then the four warps in shared memory; P^T (bf16,
//       [head][key], 128B-swizzled) goes to shared memory by stmatrix.trans (2 stores, not 16).
//       With mma.sync, 32 heads would load Q, K and V fragments by ldmatrix for two m-tiles every
//       chunk; 16-head tiles keep mma.sync, as wgmma was slower there (docs/tried.md, S1).
// Persistent CTAs (16-head tiles; runs of one split with at least three waves of uniform work
// items, FP8 rows staged): one CTA per SM runs items blockIdx.x, + gridDim.x, ... in turn. The
// producers' chunk stream crosses from item to item (chunk_stream), so the next item's first rows
// are copied while this item's last chunks are computed; the consumer's buffer phases go on across
// items, so later items skip a CTA's cold start. Numerics match the other kernels: logits scaled in
// fp32 (base 2), P rounded to bf16, fp32 O and sums (each thread keeps the sum over its keys; the
// parts are added once at the end).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <type_traits>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "device_common.cuh"
#include "kernels.h"
#include "sm90_pipeline.cuh"
#include "wgmma_ops.cuh"

namespace dsv4 {
namespace cuda {
namespace {

constexpr int kSmallThreads = 384;
constexpr int kMaxRows = 32;  // heads per CTA: 16 * MT, MT <= 2
constexpr int kStageStride =
    (kHeadDim + 8) * 2;  // bf16 Q (16-head tiles) / output staging row, 16 bytes of padding
constexpr int kPStride =
    (kKeys + 8) * 2;  // bf16 P row of 16-head tiles (64 keys), 16 bytes of padding

// Shared-memory map (offsets from a 1024-byte aligned base); k, valid, counts and the stage as the
// producers expect them. p: P (16 heads: padded rows) or P^T (32 heads: 64-key rows of 128 bytes,
// swizzled). q: the Q tile (16 heads: padded rows; 32 heads: 128B-swizzled in 64-dim columns of 32
// rows, the B operand of S^T), later the output staging; it comes last but for the staged
// producers' raw rows, so that 16-head tiles leave room for them (producer_stage).
struct small_map {
  static constexpr int k = 0;  // two K buffers
  static constexpr int p = k + 2 * kOperandBytes;
  static constexpr int p_bytes = kMaxRows * kAtomBytes;
  static constexpr int valid = p + p_bytes;  // [2][64] uint32 flags
  static constexpr int red_max =
      valid + 2 * kKeys * 4;  // 4 x 32 fp32: [warp][row] (mma.sync), [head][warp] (wgmma)
  static constexpr int red_sum = red_max + 4 * kMaxRows * 4;  // the same for the sums
  static constexpr int sink = red_sum + 4 * kMaxRows * 4;     // [32] fp32 sink logits (-inf: none)
  static constexpr int bars = sink + kMaxRows * 4;            // full[2], empty[2] (8 bytes each)
  static constexpr int counts = bars + 4 * 8;                 // list counts [2] (+ scratch)
  static constexpr int stage_bars = counts + 16;              // producer_stage's slot barriers
  static constexpr int q = (stage_bars + kRawStageBars * 8 + 1023) / 1024 * 1024;
  static constexpr int q_bytes[2] = {(16 * kStageStride + 1023) / 1024 * 1024,
                                     (32 * kStageStride + 1023) / 1024 * 1024};
  static_assert(kMaxRows * kHeadDim * 2 <= q_bytes[1] && 16 * kPStride <= p_bytes,
                "Q and P fit their regions");
};
// The staged producers' raw rows follow the Q tile of the tile width (32 heads: FP8 bytes only).
template <int MT>
struct small_stage_map : small_map {
  using raw = raw_stage<MT == 2>;
  static constexpr int stage = q + q_bytes[MT - 1];
};
// Dynamic shared memory of a tile of 16 MT heads (+ alignment slack): 152 KB for 16 heads, 168 KB
// for 32; with the staged producers 226 KB for both.
template <int MT>
constexpr size_t small_smem_bytes(bool staged) {
  using S = small_stage_map<MT>;
  return (staged ? S::stage + S::raw::kBytes : small_map::q + small_map::q_bytes[MT - 1]) + 1024;
}
static_assert(small_smem_bytes<1>(true) <= 227 * 1024 && small_smem_bytes<2>(true) <= 227 * 1024,
              "the staged tiles fit a Hopper SM's shared memory");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Named barriers of the consumer warpgroup (0 is __syncthreads).
constexpr int kBarMax = 1;    // every warp's chunk maxima are stored
constexpr int kBarP = 2;      // every warp's P is stored
constexpr int kBarSum = 3;    // every warp's sums are stored (and its last Q K^T is done)
constexpr int kBarStage = 4;  // the output staging is complete

// Row r of a [warp][row] exchange buffer (red_max / red_sum of the mma.sync consumers, kMaxRows
// per warp) combined over the four consumer warps, pairs first.
template <class Op>
__device__ __forceinline__ float over_warps(const float* red, int r, Op op) {
  return op(op(red[r], red[kMaxRows + r]), op(red[2 * kMaxRows + r], red[3 * kMaxRows + r]));
}
__device__ __forceinline__ float fmax_op(float a, float b) { return fmaxf(a, b); }

// Waits until the consumer's chunk i is in its K buffer (i % 2, the full barrier's phase (i / 2) %
// 2) and returns that buffer's shared-window address: every consumer's side of the hand-over.
__device__ __forceinline__ uint32_t wait_for_chunk(const cta_state& st, int i, int tid) {
  const int b = i & 1;
  mbar_wait(st.full_bar + 8 * b, (i >> 1) & 1);
  if (tid == 0) trace::chunk(i, trace::kWg0Full);
  return st.base + small_map::k + b * kOperandBytes;
}

// Trace builds: the consumer's loop is over after `chunks` chunks.
__device__ __forceinline__ void trace_loop_end([[maybe_unused]] int chunks) {
  trace::header(trace::kWg0Epi);
#if defined(DSV4_SM90_TRACE)
  if (uint32_t* r = trace::record()) r[trace::kChunksRun] = static_cast<uint32_t>(chunks);
#endif
}

// The consumer's last step without splits: the `rows` real heads of its staged bf16 output rows
// (kStageStride apart, complete) out as whole rows, 16 bytes per thread and step.
__device__ __forceinline__ void store_staged_rows(const attention_params& p, const cta_state& st,
                                                  const uint8_t* stage, int rows, int tid) {
  const int64_t out0 = token_offset(p.out, st.t, p.seq_q, st.head0);
  for (int u = tid; u < rows * (kHeadDim / 8); u += 128) {
    const int r = u / (kHeadDim / 8);
    const int d = 8 * (u % (kHeadDim / 8));
    store_out_at(p, out0 + r * p.out.stride_h + d,
                 *reinterpret_cast<const uint4*>(stage + r * kStageStride + 2 * d));
  }
  if (tid == 0) trace::header(trace::kEpiStaged);
}

// WG0 of a 16-head tile (mma.sync). kValueScale: P times the per-tensor FP8 value scale. kF16: fp16
// rows, Q and P (the fp16 layout).
template <bool kValueScale, bool kF16>
__device__ __forceinline__ int small_consumer_mma(const attention_params& p, const cta_state& st,
                                                  const chunk_walk& walk, int tid, int i0) {
  constexpr int MT = 1;  // 16-row m-tiles (heads 16 mt + r)
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int tig = lane % 4;
  float o[MT][16][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < 16; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][n][e] = 0.0f;
  float m_run[MT][2];
  float l_run[MT][2];  // this thread's share of the row sums (its keys)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
  // ldmatrix row addresses. A operands (Q, P; padded rows): lane l reads row l % 16, columns
  // 8 (l / 16) onwards of each 16 x 16 tile. K (S = Q K^T, B operand): matrix j = l / 8 holds keys
  // 8 (j / 2) .. of this warp's 16 and dims 8 (j % 2) .. of the k-step. V (P V, transposed B):
  // matrix j holds keys 8 (j % 2) .. of the k-step and dims 8 (j / 2) .. of the n-tile pair. In the
  // 128B swizzle a 16-byte unit u of row r sits at (u ^ (r % 8)) within its 128-byte row, r % 8 = l
  // % 8 here: the four XOR patterns a lane needs are computed once.
  const int j = lane / 8;
  const uint32_t q_lane = st.base + small_map::q + (lane % 16) * kStageStride + (lane / 16) * 16;
  const uint32_t p_lane = st.base + small_map::p + (lane % 16) * kPStride + (lane / 16) * 16;
  uint32_t k_lane[4], v_lane[4];
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    k_lane[x] =
        (16 * warp + 8 * (j / 2) + lane % 8) * kAtomBytes + (((2 * x + j % 2) ^ (lane % 8)) << 4);
    v_lane[x] = 2 * warp * kColBytes + (8 * (j % 2) + lane % 8) * kAtomBytes +
                (((2 * x + j / 2) ^ (lane % 8)) << 4);
  }
  float* red_max = reinterpret_cast<float*>(st.smem + small_map::red_max);
  uint8_t* pbuf = st.smem + small_map::p;
  int i = i0;  // the CTA's chunks so far: buffer and barrier phases go on from there
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const int li = walk.list_of(c);
    const uint32_t kbuf = wait_for_chunk(st, i, tid);
    // S = Q K^T: 32 k-steps of 16 dims; s[mt][nt]: keys 16 warp + 8 nt + 2 tig + {0, 1}, rows g / g
    // + 8. Even and odd k-steps accumulate apart (four dependent mma chains, not two).
    constexpr int kChains = 2;
    float sc[kChains][MT][2][4];
#pragma unroll
    for (int ch = 0; ch < kChains; ++ch)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[ch][mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      uint32_t kf[4];
      ldmatrix_x4(kf, kbuf + (ks / 4) * kColBytes + k_lane[ks % 4]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        ldmatrix_x4(a, q_lane + mt * 16 * kStageStride + ks * 32);
        mma_16816<kF16>(sc[ks % kChains][mt][0], a, kf[0], kf[1]);
        mma_16816<kF16>(sc[ks % kChains][mt][1], a, kf[2], kf[3]);
      }
    }
    float(&s)[MT][2][4] = sc[0];
#pragma unroll
    for (int ch = 1; ch < kChains; ++ch)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] += sc[ch][mt][nt][e];
    if (tid == 0)
      trace::chunk_after(i, trace::kWg0Qk, __float_as_uint(s[0][0][0]),
                         smem_addr(st.smem + small_map::counts + 8));
    // Online softmax (base 2) over the chunk: warp maxima of each row, then the chunk's.
    const float scl = p.logit_scale_log2[li];
    const float vs = kValueScale ? p.value_scale[li] : 1.0f;
    const uint32_t* valid =
        reinterpret_cast<const uint32_t*>(st.smem + small_map::valid) + b * kKeys;
    bool key_ok[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) key_ok[nt][e] = valid[16 * warp + 8 * nt + 2 * tig + e] != 0;
    float mx[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[mt][h] = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = s[mt][nt][2 * h + e];
            v = key_ok[nt][e] ? v * scl : -INFINITY;
            mx[mt][h] = fmaxf(mx[mt][h], v);
          }
        mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 1));
        mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 2));
        if (tig == 0) red_max[warp * kMaxRows + 16 * mt + g + 8 * h] = mx[mt][h];
      }
    }
    named_sync(kBarMax, 128);
    float alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        const softmax_step step =
            online_softmax_step(m_run[mt][h], over_warps(red_max, r, fmax_op));
        alpha[mt][h] = step.alpha;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const float e0 = softmax_p(s[mt][nt][2 * h], step.m_use);
          const float e1 = softmax_p(s[mt][nt][2 * h + 1], step.m_use);
          sum += e0 + e1;
          *reinterpret_cast<uint32_t*>(pbuf + r * kPStride + (16 * warp + 8 * nt + 2 * tig) * 2) =
              pack_p<kF16>(e0 * vs, e1 * vs);
        }
        l_run[mt][h] = softmax_sum(l_run[mt][h], alpha[mt][h], sum);
      }
    }
    named_sync(kBarP, 128);
    if (tid == 0) trace::chunk(i, trace::kWg0P);
      // O[:, 128 warp + 8 n + 2 tig + {0, 1}] = alpha O + P V: 4 k-steps of 16 keys x 8 n-tile
      // pairs.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        o[mt][n][0] *= alpha[mt][0];
        o[mt][n][1] *= alpha[mt][0];
        o[mt][n][2] *= alpha[mt][1];
        o[mt][n][3] *= alpha[mt][1];
      }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], p_lane + mt * 16 * kPStride + kk * 32);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, kbuf + (np / 4) * kColBytes + kk * 16 * kAtomBytes + v_lane[np % 4]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<kF16>(o[mt][2 * np], a[mt], vf[0], vf[1]);
          mma_16816<kF16>(o[mt][2 * np + 1], a[mt], vf[2], vf[3]);
        }
      }
    }
    mbar_arrive(st.empty_bar + 8 * b);  // this thread's reads of buffer b and its flags are done
    if (tid == 0)
      trace::chunk_after(i, trace::kWg0Pv, __float_as_uint(o[0][15][3]),
                         smem_addr(st.smem + small_map::counts + 8));
  }
  if (tid == 0) trace_loop_end(i);

  // Row sums: the quad's, then the four warps' (every warp's m_run is the same).
  float* red_sum = reinterpret_cast<float*>(st.smem + small_map::red_sum);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (tig == 0) red_sum[warp * kMaxRows + 16 * mt + g + 8 * h] = l;
    }
  named_sync(kBarSum, 128);
  // In warp order (over_warps adds pairs first): the sums these tiles have always had.
  auto row_sum = [&](int r) {
    return red_sum[r] + red_sum[kMaxRows + r] + red_sum[2 * kMaxRows + r] +
           red_sum[3 * kMaxRows + r];
  };
  const float* sink = reinterpret_cast<const float*>(st.smem + small_map::sink);
  const int rows = min(16 * MT, p.num_heads - st.head0);
  const int64_t t = st.t;
  if (p.num_splits == 1) {
    // O * factor as bf16 into the Q tile (every warp's last Q K^T is done), then whole rows out.
    uint8_t* stage = st.smem + small_map::q;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        const float l = row_sum(r);
        const float factor = row_output_factor_sink(sink[r], m_run[mt][h], l, p.out_scale);
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          *reinterpret_cast<uint32_t*>(stage + r * kStageStride +
                                       (128 * warp + 8 * n + 2 * tig) * 2) =
              pack_bf16(o[mt][n][2 * h] * factor, o[mt][n][2 * h + 1] * factor);
        }
        if (warp == 0 && tig == 0 && r < rows) write_row_stats(p, t, st.head0 + r, m_run[mt][h], l);
      }
    named_sync(kBarStage, 128);
    store_staged_rows(p, st, stage, rows, tid);
  } else {
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads + st.head0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        if (r >= rows) continue;
        float* po = p.partial_o + (pbase + r) * kHeadDim + 128 * warp;
#pragma unroll
        for (int n = 0; n < 16; n += 2) {
          store_partial_pair(po, 8 * n, tig, o[mt][n][2 * h], o[mt][n][2 * h + 1],
                             o[mt][n + 1][2 * h], o[mt][n + 1][2 * h + 1]);
        }
        if (warp == 0 && tig == 0) store_split_stats(p, pbase + r, m_run[mt][h], row_sum(r));
      }
  }
  return i;
}

// WG0 of an 8-head tile (1..8 heads; mma.sync, transposed). A 16-head tile's m16 rows would leave
// half of every mma and Q read idle, so here the chunk's keys are the rows: S^T = K Q^T with n8 the
// heads, Q^T held in registers (read from shared memory once), and O^T = V^T P^T with warp w's
// dims 128w..128w+127 as eight m16 tiles. Per warp and chunk: 32 mma and 32 ldmatrix for S^T (keys
// 16w..16w+15), 32 mma and 34 ldmatrix for O^T, against 64 + 64 and 64 + 36 on a 16-head tile.
// Accumulators: S^T s[2h + e] is key 16w + g + 8h, head 2 tig + e; O^T o[mt][2h + e] is dim
// 128w + 16mt + g + 8h, head 2 tig + e: a thread's two heads are the same in both, as in the
// 32-head wgmma consumer. kValueScale: P times the per-tensor FP8 value scale.
// q_rows: the byte offset of its Q rows in the Q tile; after_q: called once every thread holds
// Q^T (persistent CTAs load the next item's Q into the tile then).
template <bool kValueScale, bool kF16, class AfterQ>
__device__ __forceinline__ int small_consumer_h8(const attention_params& p, const cta_state& st,
                                                 const chunk_walk& walk, int tid, int i0,
                                                 uint32_t q_rows, AfterQ&& after_q) {
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int tig = lane % 4;
  const int j = lane / 8;  // the 8x8 matrix this lane addresses in an x4 ldmatrix
  // Q^T as B fragments of the 32 k-steps: matrix j of load x is heads 0..7, dims 32x + 8j..
  uint32_t qf[kHeadDim / 16][2];
  {
    const uint32_t q_lane = st.base + small_map::q + q_rows + (lane % 8) * kStageStride + j * 16;
#pragma unroll
    for (int x = 0; x < kHeadDim / 32; ++x) {
      uint32_t r[4];
      ldmatrix_x4(r, q_lane + x * 64);
      qf[2 * x][0] = r[0];
      qf[2 * x][1] = r[1];
      qf[2 * x + 1][0] = r[2];
      qf[2 * x + 1][1] = r[3];
    }
  }
  after_q();
  float o[8][4];
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[mt][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f,
                    0.0f};  // this thread's share of the head sums (its two keys of each chunk)
  // ldmatrix row addresses in the 128B swizzle (unit u of row r at (u ^ (r % 8)) << 4; r % 8 = lane
  // % 8 below). K as the A operand of S^T: matrix j holds keys 16 warp + 8 (j % 2).. and dims
  // 8 (j / 2).. of the k-step. V^T (ldmatrix.trans) as the A operand of O^T: matrix j holds keys
  // 8 (j / 2).. of the k-step and dims 8 (j % 2).. of the m-tile.
  uint32_t k_lane[4], v_lane[4];
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    k_lane[x] =
        (16 * warp + 8 * (j % 2) + lane % 8) * kAtomBytes + (((2 * x + j / 2) ^ (lane % 8)) << 4);
    v_lane[x] = 2 * warp * kColBytes + (8 * (j / 2) + lane % 8) * kAtomBytes +
                (((2 * x + j % 2) ^ (lane % 8)) << 4);
  }
  // P as [head][key] bf16 rows (kPStride apart): B fragments of O^T by ldmatrix, matrix j of load y
  // holding heads 0..7 and keys 32y + 8j..
  const uint32_t p_lane = st.base + small_map::p + (lane % 8) * kPStride + j * 16;
  uint8_t* pbuf = st.smem + small_map::p;
  float* red_max = reinterpret_cast<float*>(st.smem + small_map::red_max);
  const int key0 = 16 * warp + g;  // this thread's keys: key0 and key0 + 8
  int i = i0;  // the CTA's chunks so far: buffer and barrier phases go on from there
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const int li = walk.list_of(c);
    const uint32_t kbuf = wait_for_chunk(st, i, tid);
    // S^T over 512 dims: 32 k-steps in four independent mma chains.
    constexpr int kChains = 4;
    float sc[kChains][4];
#pragma unroll
    for (int ch = 0; ch < kChains; ++ch)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[ch][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, kbuf + (ks / 4) * kColBytes + k_lane[ks % 4]);
      mma_16816<kF16>(sc[ks % kChains], a, qf[ks][0], qf[ks][1]);
    }
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = (sc[0][e] + sc[1][e]) + (sc[2][e] + sc[3][e]);
    if (tid == 0)
      trace::chunk_after(i, trace::kWg0Qk, __float_as_uint(s[0]),
                         smem_addr(st.smem + small_map::counts + 8));
    // Online softmax (base 2) per head; the logits stay unscaled until the exponent (scl > 0). A
    // head's maximum: this thread's two keys, the warp's eight key lanes g, then the four warps.
    const float scl = p.logit_scale_log2[li];
    const float vs = kValueScale ? p.value_scale[li] : 1.0f;
    const uint32_t* valid =
        reinterpret_cast<const uint32_t*>(st.smem + small_map::valid) + b * kKeys;
    const bool ok0 = valid[key0] != 0;
    const bool ok1 = valid[key0 + 8] != 0;
    float mx[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[e] = ok0 ? s[e] : -INFINITY;
      s[2 + e] = ok1 ? s[2 + e] : -INFINITY;
      mx[e] = fmaxf(s[e], s[2 + e]);
#pragma unroll
      for (int x = 4; x < 32; x *= 2) mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], x));
    }
    if (g == 0)
      *reinterpret_cast<float2*>(red_max + warp * kMaxRows + 2 * tig) = make_float2(mx[0], mx[1]);
    named_sync(kBarMax, 128);
    float alpha[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int hd = 2 * tig + e;
      const softmax_step step =
          online_softmax_step(m_run[e], over_warps(red_max, hd, fmax_op) * scl);
      alpha[e] = step.alpha;
      const float p0 = softmax_p(s[e], scl, step.m_use);
      const float p1 = softmax_p(s[2 + e], scl, step.m_use);
      l_run[e] = softmax_sum(l_run[e], alpha[e], p0 + p1);
      if constexpr (kF16) {
        uint16_t* prow = reinterpret_cast<uint16_t*>(pbuf + hd * kPStride);
        prow[key0] = p_bits<true>(p0 * vs);
        prow[key0 + 8] = p_bits<true>(p1 * vs);
      } else {
        __nv_bfloat16* prow = reinterpret_cast<__nv_bfloat16*>(pbuf + hd * kPStride);
        prow[key0] = __float2bfloat16_rn(p0 * vs);
        prow[key0 + 8] = __float2bfloat16_rn(p1 * vs);
      }
    }
    named_sync(kBarP, 128);
    if (tid == 0) trace::chunk(i, trace::kWg0P);
      // O^T = alpha O^T + V^T P^T: 4 k-steps of 16 keys x 8 m-tiles of 16 dims.
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      o[mt][0] *= alpha[0];
      o[mt][1] *= alpha[1];
      o[mt][2] *= alpha[0];
      o[mt][3] *= alpha[1];
    }
#pragma unroll
    for (int y = 0; y < kKeys / 32; ++y) {
      uint32_t pf[4];
      ldmatrix_x4(pf, p_lane + y * 64);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int kk = 2 * y + h;
#pragma unroll
        for (int mt = 0; mt < 8; ++mt) {
          uint32_t va[4];
          ldmatrix_x4_trans(va,
                            kbuf + (mt / 4) * kColBytes + kk * 16 * kAtomBytes + v_lane[mt % 4]);
          mma_16816<kF16>(o[mt], va, pf[2 * h], pf[2 * h + 1]);
        }
      }
    }
    mbar_arrive(st.empty_bar + 8 * b);  // this thread's reads of buffer b and its flags are done
    if (tid == 0)
      trace::chunk_after(i, trace::kWg0Pv, __float_as_uint(o[7][3]),
                         smem_addr(st.smem + small_map::counts + 8));
  }
  if (tid == 0) trace_loop_end(i);

  // Head sums: the warp's lanes g, then the four warps (every thread's m_run of a head is the
  // same).
  float* red_sum = reinterpret_cast<float*>(st.smem + small_map::red_sum);
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int x = 4; x < 32; x *= 2) l_run[e] += __shfl_xor_sync(0xffffffffu, l_run[e], x);
  if (g == 0)
    *reinterpret_cast<float2*>(red_sum + warp * kMaxRows + 2 * tig) =
        make_float2(l_run[0], l_run[1]);
  named_sync(kBarSum, 128);
  const float* sink = reinterpret_cast<const float*>(st.smem + small_map::sink);
  const int rows = min(8, p.num_heads - st.head0);
  const int64_t t = st.t;
  float lsum[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int hd = 2 * tig + e;
    lsum[e] = over_warps(red_sum, hd, [](float a, float b) { return a + b; });
  }
  if (p.num_splits == 1) {
    // O^T * factor as bf16 into staging rows [head][dim] over the Q tile (Q is in registers), then
    // whole rows out.
    uint8_t* stage = st.smem + small_map::q;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int hd = 2 * tig + e;
      const float factor = row_output_factor_sink(sink[hd], m_run[e], lsum[e], p.out_scale);
      __nv_bfloat16* srow =
          reinterpret_cast<__nv_bfloat16*>(stage + hd * kStageStride) + 128 * warp + g;
#pragma unroll
      for (int mt = 0; mt < 8; ++mt) {
        srow[16 * mt] = __float2bfloat16_rn(o[mt][e] * factor);
        srow[16 * mt + 8] = __float2bfloat16_rn(o[mt][2 + e] * factor);
      }
      if (warp == 0 && g == 0 && hd < rows) write_row_stats(p, t, st.head0 + hd, m_run[e], lsum[e]);
    }
    named_sync(kBarStage, 128);
    store_staged_rows(p, st, stage, rows, tid);
  } else {
    // Unnormalised O rows in the partials' unit map (partial_unit_lane), as the wgmma consumer.
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads + st.head0;
    const int unit_pos = 4 * partial_unit_lane(g / 2) + g % 2;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int hd = 2 * tig + e;
      if (hd >= rows) continue;
      float* po = p.partial_o + (pbase + hd) * kHeadDim + 128 * warp + unit_pos;
#pragma unroll
      for (int mt = 0; mt < 8; ++mt) {
        po[16 * mt] = o[mt][e];
        po[16 * mt + 2] = o[mt][2 + e];
      }
      if (warp == 0 && g == 0) store_split_stats(p, pbase + hd, m_run[e], lsum[e]);
    }
  }
  return i;
}

// Byte offset of unit `unit` (8 dims) of Q row (head) `row` in the 32-row swizzled tile.
__device__ __forceinline__ uint32_t q_tile_offset(int row, int unit) {
  return static_cast<uint32_t>((unit >> 3) * (kMaxRows * kAtomBytes) + row * kAtomBytes +
                               (((unit & 7) ^ (row & 7)) << 4));
}

// The wgmma consumer's per-warp reductions over keys. A thread holds 8 heads (k = 2j + e: head
// 8j + 2 tig + e) and the 8 lanes g of a tig share them. A reduce-scatter halves the heads a lane
// carries each round (4 + 2 + 1 shuffles, not 3 per head: 4 % off 32 heads at b=64 on an H200);
// lane g ends with the warp's result for head k = warp_head(g, tig), returned.
__device__ __forceinline__ int scatter_k(int g) {
  return 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
}
__device__ __forceinline__ int warp_head(int g, int tig) {
  return 8 * (scatter_k(g) / 2) + 2 * tig + scatter_k(g) % 2;
}
template <class Op>
__device__ __forceinline__ float reduce_scatter_heads(float (&v)[8], int g, Op op) {
#pragma unroll
  for (int half = 4, bit = 0; half >= 1; half /= 2, ++bit) {
    const bool upper = (g >> bit) & 1;  // this lane keeps the upper half of what it carries
#pragma unroll
    for (int m = 0; m < half; ++m) {
      const float give = upper ? v[m] : v[m + half];
      const float keep = upper ? v[m + half] : v[m];
      v[m] = op(keep, __shfl_xor_sync(0xffffffffu, give, 4 << bit));
    }
  }
  return v[0];
}

// WG0 of a 32-head tile (wgmma, transposed). kValueScale: P times the per-tensor FP8 value scale.
// Accumulator layout (m64nNH): d[4j + 2h + e] is row 16 warp + g + 8h (a key of S^T, a dim of an
// O^T block) and column 8j + 2 tig + e (a head): every array below indexed [j][e] is this thread's
// heads, the same in S^T and O^T.
template <bool kValueScale, bool kF16>
__device__ __forceinline__ int small_consumer_wgmma(const attention_params& p, const cta_state& st,
                                                    const chunk_walk& walk, int tid, int i0) {
  constexpr int NH = kMaxRows;
  constexpr int NJ = NH / 8;    // 8-head column tiles
  constexpr int NACC = NH / 2;  // accumulators of one m64nNH tile
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int tig = lane % 4;
  float o[8][NACC];  // O^T: dims 64 mb + 16 warp + g + 8h
#pragma unroll
  for (int mb = 0; mb < 8; ++mb)
#pragma unroll
    for (int i = 0; i < NACC; ++i) o[mb][i] = 0.0f;
  float m_run[NJ][2];
  float l_run[NJ][2];  // this thread's share of the head sums (its two keys of each chunk)
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      m_run[j][e] = -INFINITY;
      l_run[j][e] = 0.0f;
    }
  const uint32_t q_desc = desc_lo(st.base + small_map::q, 16);
  const uint32_t p_desc = desc_lo(st.base + small_map::p, 16);
  const uint32_t p_base = st.base + small_map::p;
  float* red_max = reinterpret_cast<float*>(st.smem + small_map::red_max);
  const int key0 = 16 * warp + g;  // this thread's keys: key0 and key0 + 8
  int i = i0;  // the CTA's chunks so far: buffer and barrier phases go on from there
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const int li = walk.list_of(c);
    const uint32_t kaddr = wait_for_chunk(st, i, tid);
    const uint32_t k_desc = desc_lo(kaddr, 16);         // K-major (S^T = K Q^T)
    const uint32_t v_desc = desc_lo(kaddr, kColBytes);  // MN-major (O^T = V^T P^T)
    // S^T = K Q^T over 512 dims: 32 k-steps of 16 (4 per 64-dim column, 32 bytes apart).
    float s[NACC];
    wgmma_fence_operands16(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      wgmma_m64n32_ss<kF16>(s, desc_at(k_desc, (ks / 4) * kColBytes + (ks % 4) * 32),
                            desc_at(q_desc, (ks / 4) * (NH * kAtomBytes) + (ks % 4) * 32),
                            ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    const uint32_t* valid =
        reinterpret_cast<const uint32_t*>(st.smem + small_map::valid) + b * kKeys;
    const bool ok0 = valid[key0] != 0;
    const bool ok1 = valid[key0 + 8] != 0;
    wgmma_wait0();
    wgmma_fence_operands16(s);
    if (tid == 0) trace::chunk(i, trace::kWg0Qk);
    // Online softmax (base 2) per head; the logits stay unscaled until the exponent
    // (max(scl x) = scl max(x) for scl > 0). A head's maximum: this thread's two keys, the warp's
    // eight key pairs (lanes g), then the four warps.
    const float scl = p.logit_scale_log2[li];
    const float vs = kValueScale ? p.value_scale[li] : 1.0f;
    float mx[NJ * 2];
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + e] = ok0 ? s[4 * j + e] : -INFINITY;
        s[4 * j + 2 + e] = ok1 ? s[4 * j + 2 + e] : -INFINITY;
        mx[2 * j + e] = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
      }
    red_max[4 * warp_head(g, tig) + warp] =
        reduce_scatter_heads(mx, g, [](float a, float b) { return fmaxf(a, b); });
    named_sync(kBarMax, 128);
    float alpha[NJ][2];
    float pe[NJ][2][2];  // exponentials [head block j][key0 + 8h][head 8j + 2 tig + e]
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int hd = 8 * j + 2 * tig + e;
        const float4 mw = *reinterpret_cast<const float4*>(red_max + 4 * hd);  // the four warps'
        const float m_chunk = fmaxf(fmaxf(mw.x, mw.y), fmaxf(mw.z, mw.w));
        const softmax_step step = online_softmax_step(m_run[j][e], m_chunk * scl);
        alpha[j][e] = step.alpha;
        pe[j][0][e] = softmax_p(s[4 * j + e], scl, step.m_use);
        pe[j][1][e] = softmax_p(s[4 * j + 2 + e], scl, step.m_use);
        l_run[j][e] = softmax_sum(l_run[j][e], alpha[j][e], pe[j][0][e] + pe[j][1][e]);
      }
      // P^T[head][key] (bf16, RNE as f32_to_bf16), the 128B swizzle of a 64-key row: the thread's
      // values are mma fragments of 8x8 blocks (keys 16 warp + 8h.., heads 8j..), stored
      // transposed, two blocks of heads per instruction (16 two-byte stores before).
#pragma unroll
    for (int x = 0; x < NJ / 2; ++x) {
      uint32_t frag[4];
#pragma unroll
      for (int m = 0; m < 4; ++m)
        frag[m] = pack_p<kF16>(pe[2 * x + m / 2][m % 2][0] * vs, pe[2 * x + m / 2][m % 2][1] * vs);
      // Lane 8m + c addresses row c of block m = 2 (j - 2x) + h: head hd, keys 16 warp + 8h...
      const int hd = 8 * (2 * x + lane / 16) + lane % 8;
      const int unit = 2 * warp + (lane / 8) % 2;
      stmatrix_x4_trans(p_base + hd * kAtomBytes + ((unit ^ (hd % 8)) << 4), frag);
    }
    // The tensor cores read P^T through the async proxy.
    fence_proxy_async();
    named_sync(kBarP, 128);
    if (tid == 0) trace::chunk(i, trace::kWg0P);
      // O^T = alpha O^T + V^T P^T: 4 k-steps of 16 keys (2 KB apart) x 8 dim blocks (8 KB apart).
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) o[mb][4 * j + 2 * h + e] *= alpha[j][e];
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands16(o[mb]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
      for (int mb = 0; mb < 8; ++mb)
        wgmma_m64n32_ss_ta<kF16>(o[mb], desc_at(v_desc, mb * kColBytes + kk * 16 * kAtomBytes),
                                 desc_at(p_desc, kk * 32), 1);
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands16(o[mb]);
    mbar_arrive(st.empty_bar +
                8 * b);  // this thread's reads of buffer b, its flags and P^T are done
    if (tid == 0)
      trace::chunk_after(i, trace::kWg0Pv, __float_as_uint(o[7][NACC - 1]),
                         smem_addr(st.smem + small_map::counts + 8));
  }
  if (tid == 0) trace_loop_end(i);

  // Head sums: the warp's lanes g, then the four warps (every thread's m_run of a head is the
  // same).
  float* red_sum = reinterpret_cast<float*>(st.smem + small_map::red_sum);
  {
    float l[NJ * 2];
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) l[2 * j + e] = l_run[j][e];
    red_sum[4 * warp_head(g, tig) + warp] =
        reduce_scatter_heads(l, g, [](float a, float b) { return a + b; });
  }
  named_sync(kBarSum, 128);
  const float* sink = reinterpret_cast<const float*>(st.smem + small_map::sink);
  const int rows = min(NH, p.num_heads - st.head0);
  const int64_t t = st.t;
  float lsum[NJ][2];
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int hd = 8 * j + 2 * tig + e;
      const float4 lw = *reinterpret_cast<const float4*>(red_sum + 4 * hd);
      lsum[j][e] = lw.x + lw.y + lw.z + lw.w;
    }
  if (p.num_splits == 1) {
    // O^T * factor as bf16 into the staging rows [head][dim] (over the Q tile: every S^T is done),
    // then whole rows out.
    uint8_t* stage = st.smem + small_map::q;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int hd = 8 * j + 2 * tig + e;
        const float factor = row_output_factor_sink(sink[hd], m_run[j][e], lsum[j][e], p.out_scale);
#pragma unroll
        for (int mb = 0; mb < 8; ++mb)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int d = 64 * mb + key0 + 8 * h;
            *reinterpret_cast<__nv_bfloat16*>(stage + hd * kStageStride + 2 * d) =
                __float2bfloat16_rn(o[mb][4 * j + 2 * h + e] * factor);
          }
        if (warp == 0 && g == 0 && hd < rows)
          write_row_stats(p, t, st.head0 + hd, m_run[j][e], lsum[j][e]);
      }
    named_sync(kBarStage, 128);
    store_staged_rows(p, st, stage, rows, tid);
  } else {
    // Unnormalised O rows in the partials' unit map (partial_unit_lane): dims G + 2k + {0, 1} and
    // G + 8 + 2k + {0, 1} of a 16-dim group G sit at G + 4 partial_unit_lane(k) + {0..3}.
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads + st.head0;
    const int unit_pos = 4 * partial_unit_lane(g / 2) + g % 2;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int hd = 8 * j + 2 * tig + e;
        if (hd >= rows) continue;
        float* po = p.partial_o + (pbase + hd) * kHeadDim + 16 * warp + unit_pos;
#pragma unroll
        for (int mb = 0; mb < 8; ++mb) {
          po[64 * mb] = o[mb][4 * j + e];
          po[64 * mb + 2] = o[mb][4 * j + 2 + e];
        }
        if (warp == 0 && g == 0) store_split_stats(p, pbase + hd, m_run[j][e], lsum[j][e]);
      }
  }
  return i;
}

// Full-barrier arrivals per chunk: both producer warpgroups (a bf16 producer thread arrives twice,
// and so does a staged producer whose stage holds the FP8 bytes only: its rope copies land there).
template <uint32_t L, int MT, bool kStaged>
constexpr uint32_t kSmallFullArrivals =
    2 * kFullArrivals<L>*(kStaged&& small_stage_map<MT>::raw::kNopeOnly ? 2u : 1u);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Register budgets per warpgroup role (setmaxnreg), by tile: a 32-head consumer holds 128 of O^T,
// and 232 / 136 is where ptxas spills least (and the fastest of the budgets tried on an H200).
// The three must not exceed the launch bound's 3 x 168: setmaxnreg.inc only takes what the other
// roles' setmaxnreg.dec released, and would wait forever.
template <int MT>
struct small_regs {
  static constexpr int kConsumer = MT == 1 ? 200 : 232;
  static constexpr int kProducer = MT == 1 ? 152 : 136;
  static_assert(kConsumer + 2 * kProducer <= 3 * 168, "register budgets within the launch bound's");
};

// MT: 16-head tiles per CTA (NH = 16 MT heads). kStaged: FP8 rows gathered by the bulk-copy engine
// into a raw stage (producer_stage; small_staged_applies), else loaded by the producers
// (producer_convert). kH8: a 16-head tile's CTA serving at most 8 heads with small_consumer_h8
// (attention_params::small_heads8). kPersistent (16-head tiles of staged rows, one key split;
// planner.cpp choose_run): a grid smaller than the work items, each CTA running its items
// in turn (cta_item). The producers copy the next item's first rows while the consumer finishes
// this one. At an item change the 8-head consumer finds the next Q already in the Q tile; the
// 16-head consumer loads it (prefetched into the L2 when the item began), and the sinks where the
// head group changes, over the output staging.
template <uint32_t L, int MT, bool kStaged, bool kH8 = false, bool kPersistent = false>
__global__ void __launch_bounds__(kSmallThreads, 1)
    attention_sm90_small_kernel(const __grid_constant__ attention_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kStaged || small_staged_applies(MT, L),
                "staged rows: FP8 layouts (32-head tiles: 584 B)");
  static_assert(!kH8 || MT == 1, "8-head CTAs use the 16-head tile's shared memory");
  static_assert(!kPersistent || (kStaged && small_persistent_applies(MT, L)),
                "persistent CTAs: 16-head tiles of staged rows");
  constexpr int NH = 16 * MT;
  extern __shared__ uint8_t smem_raw[];
  cta_state st{};
  cta_begin(st, smem_raw, p, NH);
  int32_t* counts = reinterpret_cast<int32_t*>(st.smem + small_map::counts);
  st.full_bar = st.base + small_map::bars;
  st.empty_bar = st.full_bar + 16;
  const int tid = threadIdx.x;
  const int64_t t = st.t;
  const int c_end = split_end(p, st);
  const int wg = tid / 128;
  const int half = wg - 1;  // producers: which 32 rows of each chunk
  first_jobs first{};
  if (wg > 0) {
    const int row = 32 * half + 8 * ((tid % 128) / 32) + (tid & 7);
    const int rows[2] = {row, row};
    // FP8: slot 1 is the next chunk's row (half chunks); bf16 copies one row per chunk.
    first = speculate_first(p, t, st.c_begin, c_end, rows, !row_format<L>::kCopied);
  }
  if (tid < 2) store_list_count(p, t, tid, counts);
  if (tid == 32) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(st.full_bar + 8 * b, kSmallFullArrivals<L, MT, kStaged>);
      mbar_init(st.empty_bar + 8 * b, 128);
    }
    if constexpr (kStaged) {
      for (int b = 0; b < kRawStageBars; ++b)
        mbar_init(st.base + small_map::stage_bars + 8 * b, kRawRowsPerWarp);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // The sink logits of item state s's heads (padding heads -inf), read by the consumer's epilogue.
  auto store_sinks = [&](const cta_state& s) {
    if (tid < NH) {
      const int h = s.head0 + tid;
      reinterpret_cast<float*>(st.smem + small_map::sink)[tid] = tile_head_sink(p, h);
    }
  };
  store_sinks(st);
  __syncthreads();
  const chunk_walk walk{p, counts[0], counts[1], c_end};
  if (wg == 0) {
    set_max_registers_inc<small_regs<MT>::kConsumer>();
    // Issues the copies of rows (heads) 0..rows-1 of item state s's Q (padding heads zero) into the
    // Q tile, from padded row row0 on (16-head tiles; the 32-head tile is swizzled): unit tid % 64
    // of rows tid / 64 + 2m.
    auto issue_q = [&](const cta_state& s, int row0, int rows) {
      const int unit = tid % 64;
      const int64_t q0 = token_offset(p.q, s.t, p.seq_q, s.head0);
      for (int r = tid / 64; r < rows; r += 2) {
        const uint32_t off =
            MT == 1 ? (row0 + r) * kStageStride + 16 * unit : q_tile_offset(r, unit);
        load_q_unit<row_format<L>::kF16>(p, st.smem + small_map::q + off,
                                         q0 + r * p.q.stride_h + 8 * unit,
                                         s.head0 + r >= p.num_heads);
      }
      cp_async_commit();
    };
    // Q of item state s, all NH rows, complete for every consumer thread.
    auto load_q = [&](const cta_state& s) {
      issue_q(s, 0, NH);
      cp_async_wait_all();
      if constexpr (MT == 2)
        fence_proxy_async();     // the tensor cores read Q through the async proxy
      named_sync(kBarSum, 128);  // Q is complete (the barrier is free until the end of the loop)
    };
    load_q(st);
    if (tid == 0) trace::header(trace::kQReady);
    constexpr bool kValueScale = L == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
    constexpr bool kF16 = row_format<L>::kF16;
    // 8-head persistent CTAs hold Q^T in registers: item k + 1's Q goes into rows 8..15 of the Q
    // tile (padding rows of an 8-head tile) as soon as every thread holds item k's, and lands while
    // item k runs; the epilogue stages rows 0..7. (Loaded at the item change, the next Q and sinks
    // held the consumer ~15 k cycles per item while every SM streamed rows.) Their one head group
    // keeps its sinks.
    constexpr bool kNextQ = kH8 && kPersistent;
    constexpr uint32_t kNextQRows = 8 * kStageStride;  // rows 8..15, in bytes
    auto load_next_q = [&](int k) {
      named_sync(kBarStage, 128);  // every thread's Q^T of item k - 1 is loaded (from rows 8..15)
      if (cta_has_item(p, k)) issue_q(cta_item_state(p, st, k, NH), 8, 8);
    };
    auto consume = [&](const cta_state& s, const chunk_walk& w, int k, int i0) {
      if constexpr (kNextQ) {
        return small_consumer_h8<kValueScale, kF16>(p, s, w, tid, i0, k == 0 ? 0u : kNextQRows,
                                                    [&] { load_next_q(k + 1); });
      } else if constexpr (kH8) {
        return small_consumer_h8<kValueScale, kF16>(p, s, w, tid, i0, 0u, [] {});
      } else if constexpr (MT == 1) {
        return small_consumer_mma<kValueScale, kF16>(p, s, w, tid, i0);
      } else {
        return small_consumer_wgmma<kValueScale, kF16>(p, s, w, tid, i0);
      }
    };
    // Persistent CTAs of 16 heads (Q read every chunk): item k's Q rows into the L2 (one 128-byte
    // line per thread) while the item before it runs.
    auto prefetch_q = [&](int k) {
      if (!cta_has_item(p, k)) return;
      const cta_state n = cta_item_state(p, st, k, NH);
      const int line = p.q_is_fp8 ? 128 : 64;  // elements per line
      const int lines = kHeadDim / line;
      for (int u = tid; u < NH * lines; u += 128) {
        if (n.head0 + u / lines >= p.num_heads) continue;
        const int64_t off = token_offset(p.q, n.t, p.seq_q, n.head0) + (u / lines) * p.q.stride_h +
                            (u % lines) * line;
        prefetch_l2(static_cast<const uint8_t*>(p.q.data) + off * (p.q_is_fp8 ? 1 : 2));
      }
    };
    // The CTA's items (one unless persistent): item k > 0 starts once the previous epilogue is done
    // with the staging rows (over Q) and the sinks.
    for (int k = 0, i = 0;; ++k) {
      const cta_state s = k == 0 ? st : cta_item_state(p, st, k, NH);
      const chunk_walk w =
          k == 0 ? walk : item_walk(p, s, k, counts);  // the first: the producers' walk
      if (k > 0) {
        if constexpr (kNextQ) {
          cp_async_wait_all();
          named_sync(kBarStage, 128);  // the Q rows copied during the previous item are visible
        } else {
          named_sync(kBarStage, 128);
          if (p.head_groups > 1) store_sinks(s);  // sinks depend on the head group only
          load_q(s);                              // its barrier also publishes the sinks
        }
      }
      if constexpr (kPersistent && !kNextQ) prefetch_q(k + 1);
      i = consume(s, w, k, i);
      if (!kPersistent || !cta_has_item(p, k + 1)) break;
    }
    if (tid == 0) {
      trace::header(trace::kWg0End);
#if defined(DSV4_SM90_TRACE)
      if (uint32_t* r = trace::record()) r[trace::kGlobalEnd] = trace::global_ns();
#endif
    }
  } else {
    set_max_registers_dec<small_regs<MT>::kProducer>();
    if constexpr (row_format<L>::kCopied) {
      producer_copy<L, small_map, true>(p, st, walk, first, half, (tid % 128) / 32, tid % 32);
    } else if constexpr (kStaged) {
      producer_stage<L, small_stage_map<MT>, kPersistent>(p, st, walk, first, half,
                                                          (tid % 128) / 32, tid % 32);
    } else {
      producer_convert<L, small_map, 1, true>(p, st, walk, first, half, (tid % 128) / 32, tid % 32);
    }
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Calls f(kernel, MT, staged, h8, persistent) for every instantiation of the kernel over layout L,
// until one fails: the one list that configuring (all) and launching (the plan's) both walk.
template <uint32_t L, class F>
cudaError_t for_each_small_kernel(F&& f) {
  auto tile = [&](auto mt, auto staged) {
    constexpr int MT = decltype(mt)::value;
    constexpr bool kStaged = decltype(staged)::value;
    cudaError_t err = f(attention_sm90_small_kernel<L, MT, kStaged>, MT, kStaged, false, false);
    if constexpr (MT == 1) {
      if (err == cudaSuccess)
        err = f(attention_sm90_small_kernel<L, 1, kStaged, true>, 1, kStaged, true, false);
    }
    if constexpr (kStaged && small_persistent_applies(MT, L)) {
      if (err == cudaSuccess)
        err = f(attention_sm90_small_kernel<L, 1, true, false, true>, 1, true, false, true);
      if (err == cudaSuccess)
        err = f(attention_sm90_small_kernel<L, 1, true, true, true>, 1, true, true, true);
    }
    return err;
  };
  using one = std::integral_constant<int, 1>;
  using two = std::integral_constant<int, 2>;
  cudaError_t err = tile(one{}, std::false_type{});
  if (err == cudaSuccess) err = tile(two{}, std::false_type{});
  if constexpr (small_staged_applies(1, L)) {
    if (err == cudaSuccess) err = tile(one{}, std::true_type{});
  }
  if constexpr (small_staged_applies(2, L)) {
    if (err == cudaSuccess) err = tile(two{}, std::true_type{});
  }
  return err;
}

// The kernel of run p: its tile width, staged rows, the 8-head consumer and persistent CTAs as the
// planner chose them (attention_params::small_staged, small_heads8, persistent).
template <uint32_t L>
cudaError_t launch_small(const attention_params& p, cudaLaunchConfig_t cfg) {
  const bool staged = p.small_staged != 0;
  const bool h8 = p.small_heads8 != 0;
  const bool persistent = p.persistent != 0;
  cfg.gridDim.x = static_cast<unsigned>(p.launch_ctas);
  bool launched = false;
  const cudaError_t err =
      for_each_small_kernel<L>([&](auto kernel, int mt, bool s, bool k8, bool pers) {
        if (launched || mt != p.head_tiles || s != staged || k8 != h8 || pers != persistent)
          return cudaSuccess;
        launched = true;
        return cudaLaunchKernelEx(&cfg, kernel, p);
      });
  return err != cudaSuccess ? err : launched ? cudaSuccess : cudaErrorInvalidValue;
}

// The kernel table's hooks (kernels.h).
bool small_serves(int cc_major, int head_dim_qk, uint32_t main_layout, uint32_t extra_layout) {
  return cc_major == 9 && head_dim_qk == kHeadDim && sm90_layouts(main_layout, extra_layout);
}

bool small_compiled() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, attention_sm90_small_kernel<DSV4_KV_LAYOUT_BF16, 1, false>) !=
      cudaSuccess)
    return false;
  // Machine code built for sm_90a reports PTX 9.0; a JIT of the compute_80 PTX reports 8.0.
  return attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
}

// Dynamic shared memory of `head_tiles` tiles of `layout`, with the staged producers if `staged`
// asks for them where they apply.
size_t smem_for(int head_tiles, uint32_t layout, bool staged) {
  const bool s = staged && small_staged_applies(head_tiles, layout);
  return head_tiles == 2 ? small_smem_bytes<2>(s) : small_smem_bytes<1>(s);
}
size_t small_smem(const kernel_config& c) { return smem_for(c.head_tiles, c.layout, c.staged); }

cudaError_t small_configure(const kernel_config&) {
#if defined(DSV4_SM90_TRACE)
  if (const cudaError_t terr = trace::attach(); terr != cudaSuccess) return terr;
#endif
  return for_each_sm90_layout([](auto l) {
    constexpr uint32_t L = decltype(l)::value;
    return for_each_small_kernel<L>([](auto kernel, int mt, bool staged, bool, bool) {
      return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem_for(mt, L, staged)));
    });
  });
}

// The persistent CTAs the device holds at once of a configuration with a persistent form (staged
// 16-head tiles of FP8 rows); 0 elsewhere.
cudaError_t small_occupancy(const kernel_config& c, int sm_count, int* ctas_per_sm,
                            int resident[2]) {
  *ctas_per_sm = 1;
  resident[0] = resident[1] = 0;
  if (!c.staged || !small_persistent_applies(c.head_tiles, c.layout)) return cudaSuccess;
  const size_t smem = smem_for(c.head_tiles, c.layout, true);
  return with_sm90_layout(c.layout, [&](auto l) {
    constexpr uint32_t L = decltype(l)::value;
    return for_each_small_kernel<L>([&](auto kernel, int mt, bool staged, bool h8, bool pers) {
      if (mt != c.head_tiles || !staged || h8 || !pers) return cudaSuccess;
      int per_sm = 0;
      const cudaError_t err =
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSmallThreads, smem);
      resident[0] = per_sm * sm_count;
      return err;
    });
  });
}

// The kernel and, when num_splits > 1, the combine kernel.
cudaError_t small_launch(const attention_params& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.head_tiles < 1 || p.head_tiles > 2) return cudaErrorInvalidValue;
  if (p.small_heads8 != 0 && (p.head_tiles != 1 || p.num_heads > 8)) return cudaErrorInvalidValue;
  const size_t smem = smem_for(p.head_tiles, p.cache[0].layout, p.small_staged != 0);
  const cudaLaunchConfig_t cfg = cta_grid_config(p, kSmallThreads, smem, stream);
  const cudaError_t err = with_sm90_layout(
      p.cache[0].layout, [&](auto l) { return launch_small<decltype(l)::value>(p, cfg); });
  if (err != cudaSuccess || p.num_splits == 1) return err;
  return combine_launch(p, stream);
}

}  // namespace

const kernel_family kSmallKernels = {"sm90-mma",      small_serves,    small_compiled, small_smem,
                                     small_configure, small_occupancy, small_launch};

}  // namespace cuda
}  // namespace dsv4
