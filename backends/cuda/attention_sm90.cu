// Sparse MLA attention for Hopper (sm_90a): warp-specialised, wgmma, 64 heads per CTA.
//
// One CTA = one (token, key split, 64-head group); 384 threads in three warpgroups:
//   WG2 (producer): gathers the chunk's key rows (64 list positions) from the caches into
//       registers (one row's loads in flight while another row converts), dequantises FP8 rows to
//       bf16 and stores them into one of two K buffers (128-byte swizzled wgmma layout); bf16 rows
//       are copied there with cp.async. A per-buffer mbarrier pair (full / empty) hands buffers
//       over.
//   WG0: S = Q K^T (wgmma m64n64k16, Q and K from shared memory), online softmax in registers,
//       P (bf16) to shared memory for WG1, O[:, 0:256] += P V with P straight from registers.
//   WG1: O[:, 256:512] += P V with P from shared memory (alpha from WG0 rescales O first).
//   In FP8 split runs WG0 issues the next chunk's S right behind its P·V (kOverlapS), and the
//   consumers prefetch the second chunk's rows into L2 while they wait for the first.
// V is the K buffer itself read as an MN-major operand (the same bytes, no transpose).
// For 65..128 heads over FP8 caches two CTAs (the two head groups of a token and split) form a
// cluster: each producer dequantises half of every chunk and writes it into both CTAs' buffers
// (asynchronous stores into the peer's shared memory, counted by a transaction barrier there), so
// each key row is gathered and converted once for all 128 heads.
// Numerics match attention.cu: logits scaled in fp32 (base 2), P rounded to bf16, fp32 O and sums.
#include <cuda.h>          // CUtensorMap
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <type_traits>
#if defined(DSV4_SM90_TRACE)
#include <cstdio>
#include <vector>
#endif

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

constexpr int kRows = 64;                            // heads per CTA (the wgmma M)
constexpr int kThreads = 384;                        // three warpgroups
constexpr int kPBytes = kRows * kAtomBytes;          // P: 64 heads x 64 keys bf16 (8 KB)
constexpr int kStageRowBytes = 256 * 2;              // one warpgroup's bf16 output row (256 dims)
constexpr int kStageBytes = kRows * kStageRowBytes;  // one warpgroup's output staging (32 KB)

// Shared-memory map (offsets from a 1024-byte aligned base).
struct sm90_map {
  static constexpr int q = 0;
  static constexpr int k = q + kOperandBytes;          // two K buffers
  static constexpr int p = k + 2 * kOperandBytes;      // two P buffers
  static constexpr int alpha = p + 2 * kPBytes;        // [2][64] fp32
  static constexpr int valid = alpha + 2 * kRows * 4;  // [2][64] uint32 flags
  static constexpr int fin = valid + 2 * kKeys * 4;    // [2 work-item parities] row_fin
  static constexpr int bars =
      fin + 2 * 4 * kRows * 4;                 // full[2], empty[2], remote[2], q (8 bytes each)
  static constexpr int counts = bars + 7 * 8;  // list counts [2]
  static constexpr int total = counts + 16;
};
static_assert(2 * kStageBytes <= kOperandBytes,
              "both warpgroups' output staging fits in the Q tile");
constexpr size_t kSmemBytes = sm90_map::total + 1024;  // + alignment slack

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Per-row results of a work item, from WG0 to the epilogues of both warpgroups, and the sink
// logits of its heads: one copy per parity of the CTA's work-item count k, so a persistent CTA's
// next item can be prepared while the epilogue reads this one's.
struct row_fin {
  float* m;     // [64] running max (log2 domain)
  float* l;     // [64] sum
  float* f;     // [64] output factor (sink, 1 / l)
  float* sink;  // [64] sink logits (-inf: none)
};
__device__ __forceinline__ row_fin fin_rows(const cta_state& st, int k) {
  float* base = reinterpret_cast<float*>(st.smem + sm90_map::fin) + (k & 1) * 4 * kRows;
  return {base, base + kRows, base + 2 * kRows, base + 3 * kRows};
}
// A CTA's work items: blockIdx.x, then every gridDim.x-th. Persistent CTAs (a grid smaller than
// the item count) need the tensor-map Q, which WG0 loads for the next item during this one.
// item_state: the CTA state `st` (set to its first item by cta_begin) set to its k-th item. In
// persistent kernels blockIdx / gridDim are read by volatile asm so that every call recomputes the
// item: kept live across the chunk loop, its fields cost the warpgroups registers they do not have
// (spills). The other kernels keep the first item's fields (no 64-bit divisions in the epilogue).
template <bool kPersistent>
__device__ __forceinline__ cta_state item_state(const attention_params& p, const cta_state& st,
                                                int k) {
  if constexpr (!kPersistent) return st;
  uint32_t cta, grid;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta));
  asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(grid));
  cta_state s = st;
  set_item(s, p, cta + static_cast<int64_t>(k) * grid, kRows);
  return s;
}
// Whether the CTA has a work item after its k-th. Only the persistent kernels loop over items (the
// loop costs the warpgroups registers: a kernel of one item per CTA is compiled without it).
template <bool kPersistent>
__device__ __forceinline__ bool has_next_item(const attention_params& p, const cta_state& st,
                                              int k) {
  if constexpr (!kPersistent) return false;
  return st.q_tma && cta_has_item(p, k + 1);
}
// The first item's list counts (read at the CTA's start), for item_walk.
__device__ __forceinline__ const int32_t* first_counts(const cta_state& st) {
  return reinterpret_cast<const int32_t*>(st.smem + sm90_map::counts);
}
// Runs run(k, i0) for the CTA's items k = 0, 1, ...: i0 is the CTA's chunk count before item k, run
// returns it after.
template <bool kPersistent, class Run>
__device__ __forceinline__ void for_each_item(const attention_params& p, const cta_state& st,
                                              Run&& run) {
  int i0 = 0;
  for (int k = 0;; ++k) {
    i0 = run(k, i0);
    if (!has_next_item<kPersistent>(p, st, k)) break;
  }
}
// The sink logits of the CTA's heads for work item parity k (threads 0..63; padding heads -inf).
__device__ __forceinline__ void store_sinks(const attention_params& p, const cta_state& st, int k,
                                            int tid) {
  const int h = st.head0 + tid;
  fin_rows(st, k).sink[tid] = tile_head_sink(p, h);
}

// Q tile of token t, heads head0.. (eight tensor-map boxes of 64 dims x 64 heads; padding heads
// read as zeros) into shared memory, completing on q_bar; or only into L2 (`prefetch`, no barrier).
__device__ __forceinline__ void load_q_tile(const cta_state& st, const CUtensorMap* q_map,
                                            int64_t t, int head0, const attention_params& p,
                                            bool prefetch) {
  const token_coord tc = split_token(t, p.seq_q);
  if (!prefetch) mbar_arrive_expect_tx(st.q_bar, kOperandBytes);
#pragma unroll
  for (int col = 0; col < kHeadDim / 64; ++col) {
    if (prefetch) {
      tma_prefetch_4d(q_map, 64 * col, head0, static_cast<int>(tc.s), static_cast<int>(tc.b));
    } else {
      tma_load_4d(st.base + sm90_map::q + col * kColBytes, q_map, 64 * col, head0,
                  static_cast<int>(tc.s), static_cast<int>(tc.b), st.q_bar);
    }
  }
}

// Byte offset of 16-byte unit `unit` (of 32) of row r in one warpgroup's bf16 output staging (64
// rows x 256 dims): units XORed with r % 8, so both the fragment writes and the row reads are
// conflict-free without padding.
__device__ __forceinline__ uint32_t stage_offset(int r, int unit) {
  return static_cast<uint32_t>(r * kStageRowBytes + ((unit ^ (r & 7)) << 4));
}

// A thread's two output dims of 8-dim block j in accumulator row half h (row0 + 8 h), normalised,
// as a bf16 pair.
__device__ __forceinline__ uint32_t out_pair(const float* o, int j, int h, float factor) {
  return pack_bf16(o[4 * j + 2 * h] * factor, o[4 * j + 2 * h + 1] * factor);
}

// Transposes v (4 x 4 words over the lanes of a quad, tig = lane % 4): lane tig's v[q] becomes
// lane q's v[tig]. Two butterfly steps (lane distance 2, then 1), each swapping the half of v whose
// index bit differs from the lane's.
__device__ __forceinline__ void quad_transpose(uint32_t* v, int tig) {
#pragma unroll
  for (int bit = 2; bit >= 1; bit >>= 1) {
    const bool hi = (tig & bit) != 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int lo_q = bit == 2 ? i : 2 * i;  // slot pair (lo_q, lo_q + bit)
      const uint32_t send = hi ? v[lo_q] : v[lo_q + bit];
      const uint32_t got = __shfl_xor_sync(0xffffffffu, send, bit);
      if (hi) {
        v[lo_q] = got;
      } else {
        v[lo_q + bit] = got;
      }
    }
  }
}

// Normalises (sink) and writes this warpgroup's half of O, or its split partials. WG0 has
// published the item's final row max, sum and factors in fin_rows(k) before the barrier.
// kStaged: O goes through this warpgroup's half of the Q tile (no longer read once both
// warpgroups are past the barrier) so that every store writes whole rows; persistent CTAs, whose
// next Q may be loading already, write straight from the accumulators (single-item CTAs would
// lose 2-3 % that way on an H200).
template <bool kSplit, bool kStaged>
__device__ __forceinline__ void epilogue(const attention_params& p, const cta_state& st, int k,
                                         int wg, int tid, int row0, int tig, const float* o) {
  const row_fin fin = fin_rows(st, k);
  const float* m_fin = fin.m;
  const float* l_fin = fin.l;
  const float* f_fin = fin.f;
  // Split partials of a single-item CTA: each warpgroup stores its own and WG0 has written the row
  // stats from registers, so neither waits for the other (0.3 us of a 128-head b=2 run, H200).
  constexpr bool kAlone = kSplit && kStaged;
  if constexpr (!kAlone)
    named_sync(3, 256);  // final m / l / factors visible; every wgmma is complete
  if (tid == 0) trace::header(trace::kEpiBar);
  const int dim0 = wg * 256;
  const int64_t t = st.t;
  if constexpr (!kSplit) {
    const int rows = min(kRows, p.num_heads - st.head0);
    if constexpr (kStaged) {
      uint8_t* stage = st.smem + sm90_map::q + wg * kStageBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + 8 * h;
        const float factor = f_fin[r];
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          *reinterpret_cast<uint32_t*>(stage + stage_offset(r, j) + 4 * tig) =
              out_pair(o, j, h, factor);
        }
      }
      named_sync(5 + wg, 128);  // this warpgroup's staging is complete
      if (tid == 0) trace::header(trace::kEpiStaged);
      // Thread: unit wtid % 32 of rows wtid / 32 + 4m (one warp writes one row's 512 bytes).
      const int wtid = tid % 128;
      const int unit = wtid % 32;
      const int64_t out0 = token_offset(p.out, t, p.seq_q, st.head0) + dim0 + 8 * unit;
#pragma unroll 4
      for (int r = wtid / 32; r < rows; r += 4) {
        store_out_at(p, out0 + r * p.out.stride_h,
                     *reinterpret_cast<const uint4*>(stage + stage_offset(r, unit)));
      }
    } else {
      // Straight from the accumulators: a quad's four threads hold 2 dims each of 8-dim blocks
      // 4m..4m+3 of a row; after a 4 x 4 transpose in the quad thread tig holds block 4m + tig
      // whole, so each thread stores 16 bytes and a warp 64 contiguous bytes of each of 8 rows.
      const int64_t out0 = token_offset(p.out, t, p.seq_q, st.head0) + dim0 + 8 * tig;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + 8 * h;
        const float factor = f_fin[r];
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          uint32_t v[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) v[q] = out_pair(o, 4 * m + q, h, factor);
          quad_transpose(v, tig);
          if (r < rows)
            store_out_at(p, out0 + r * p.out.stride_h + 32 * m, make_uint4(v[0], v[1], v[2], v[3]));
        }
      }
    }
    if (tid < rows) write_row_stats(p, t, st.head0 + tid, m_fin[tid], l_fin[tid]);
  } else {
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = st.head0 + row0 + 8 * h;
      if (head >= p.num_heads) continue;
      float* po = p.partial_o + (pbase + head) * kHeadDim + dim0;
#pragma unroll
      for (int j = 0; j < 32; j += 2) {
        // Persistent kernels (kStaged false) have no registers for the wide stores.
        store_partial_pair<kStaged>(po, 8 * j, tig, o[4 * j + 2 * h], o[4 * j + 2 * h + 1],
                                    o[4 * j + 4 + 2 * h], o[4 * j + 4 + 2 * h + 1]);
      }
    }
    if (!kAlone && tid < kRows && st.head0 + tid < p.num_heads) {
      store_split_stats(p, pbase + st.head0 + tid, m_fin[tid], l_fin[tid]);
    }
  }
}

// Waits until buffer b holds the chunk: this CTA's producer has stored its rows (full barrier)
// and, in a CTA pair, the peer's asynchronous stores of the other half have landed (remote
// barrier). Data that did not come through this CTA's generic-proxy stores and proxy fence
// (cp.async copies, the peer's stores) is ordered before the tensor cores' reads by a proxy fence.
template <int CLUSTER, bool kCopied>
__device__ __forceinline__ void wait_chunk(const cta_state& st, int b, uint32_t parity) {
  mbar_wait(st.full_bar + 8 * b, parity);
  if constexpr (CLUSTER > 1) mbar_wait(st.remote_bar + 8 * b, parity);
  if constexpr (kCopied || CLUSTER > 1) fence_proxy_async();
}

// Tells the producers of the cluster that buffer b is consumed by this thread: every consumer
// thread arrives on its own CTA's barrier (its reads of the flags and alpha ordered before); in a
// CTA pair lane 0 of each warp also arrives on the peer's once the warp's lanes are done.
template <int CLUSTER>
__device__ __forceinline__ void release_buffer(const cta_state& st, int b) {
  mbar_arrive(st.empty_bar + 8 * b);
  if constexpr (CLUSTER > 1) {
    __syncwarp();
    mbar_arrive_remote(st.empty_bar + 8 * b, st.peer, (threadIdx.x & 31) == 0);
  }
}
// Empty-barrier arrivals per chunk: 256 local consumer threads + 8 warps of the peer CTA.
template <int CLUSTER>
constexpr uint32_t kEmptyArrivals = 256u + 8u * (CLUSTER - 1);

// A consumer's O accumulators (its 256 dims of rows row0 and row0 + 8) times the rows' factors.
__device__ __forceinline__ void scale_o_rows(float* o, float a0, float a1) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    o[4 * j + 0] *= a0;
    o[4 * j + 1] *= a0;
    o[4 * j + 2] *= a1;
    o[4 * j + 3] *= a1;
  }
}

// WG0: S = Q K^T, softmax, P to WG1, O[:, 0:256] += P V.
// kCopied: the buffers were filled by cp.async (completed on the full barrier; see wait_chunk).
// kValueScale: the per-tensor FP8 layout scales P by the list's kv_scale (1 for the other layouts).
// The CTA's k-th work item (st0: the CTA's state): i0 chunks ran before it (buffer / barrier
// phases continue from there). Returns the CTA's chunk count after it. (WG0 has no registers to
// spare: WG1 prepares the next item's Q and sinks.)
template <bool kSplit, int CLUSTER, bool kPersistent, bool kCopied, bool kValueScale, bool kOverlap,
          bool kF16>
__device__ __forceinline__ int consumer0_item(const attention_params& p, const cta_state& st0,
                                              int tid, int i0, int k) {
  const cta_state st = item_state<kPersistent>(p, st0, k);
  const chunk_walk walk = item_walk(p, st, k, first_counts(st));
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int tig = lane % 4;
  const int row0 = warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // this thread's share of the row sums
  const uint32_t q_desc = desc_lo(st.base + sm90_map::q, 16);
  const uint32_t k_desc0 = desc_lo(st.base + sm90_map::k, 16);  // K-major (S = Q K^T)
  // A tensor-map Q: wait even without chunks (the staged epilogue reuses the Q tile, and q_bar must
  // complete each phase before the next item's load).
  if (st.q_tma) {
    mbar_wait(st.q_bar, k & 1);
    if (tid == 0) trace::header(trace::kQReady);
  }
  const uint32_t v_desc0 = desc_lo(st.base + sm90_map::k, kColBytes);  // MN-major (P V)
  // S = Q K^T of the chunk in buffer b over 512 dims: 32 k-steps of 16 (4 per 64-dim column, 32
  // bytes apart), committed as one group.
  float s[32];
  auto issue_s = [&](uint32_t k_desc) {
    wgmma_fence_operands32(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const uint32_t off = (ks / 4) * kColBytes + (ks % 4) * 32;
      wgmma_m64n64_ss<kF16>(s, desc_at(q_desc, off), desc_at(k_desc, off), ks > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  // This thread's 16 key flags of buffer b (bit 2j + e: key 8j + 2 tig + e).
  auto key_flags = [&](int b) {
    const uint2* valid =
        reinterpret_cast<const uint2*>(st.smem + sm90_map::valid) + b * (kKeys / 2);
    uint32_t f = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint2 v = valid[4 * j + tig];
      f |= (v.x != 0 ? 1u : 0u) << (2 * j);
      f |= (v.y != 0 ? 1u : 0u) << (2 * j + 1);
    }
    return f;
  };
  // Softmax of the chunk in buffer b (list li; its S in s; flags: key_flags(b)), P and alpha to
  // WG1, and this warpgroup's P·V issued and committed. The exps (MUFU, 16 lanes a cycle per SM)
  // set its pace, so what precedes the first one is kept short (flags in a register, unscaled
  // logits, maxima as trees), and the bf16 kernels, which have registers to spare, rescale O on the
  // FMA pipe while the exps run (with the register budgets of kRegs: 4.5 % off bf16 decode and 2 %
  // off prefill on an H200).
  auto softmax_pv = [&](int b, int li, int ig, uint32_t v_desc, uint32_t flags) {
    // Online softmax (base 2). s[4j + {0,1}]: row0, keys 8j + 2 tig + {0,1}; s[4j + {2,3}]: row0
    // + 8. The logits stay unscaled until the exponent: max(scl x) = scl max(x) for scl > 0.
    const float scl = p.logit_scale_log2[li];
    const float vs = kValueScale ? p.value_scale[li] : 1.0f;
    float mx[2][8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool v0 = (flags >> (2 * j)) & 1u;
      const bool v1 = (flags >> (2 * j + 1)) & 1u;
      s[4 * j + 0] = v0 ? s[4 * j + 0] : -INFINITY;
      s[4 * j + 1] = v1 ? s[4 * j + 1] : -INFINITY;
      s[4 * j + 2] = v0 ? s[4 * j + 2] : -INFINITY;
      s[4 * j + 3] = v1 ? s[4 * j + 3] : -INFINITY;
      mx[0][j] = fmaxf(s[4 * j + 0], s[4 * j + 1]);
      mx[1][j] = fmaxf(s[4 * j + 2], s[4 * j + 3]);
    }
#pragma unroll
    for (int w = 4; w > 0; w /= 2) {
#pragma unroll
      for (int j = 0; j < w; ++j) {
        mx[0][j] = fmaxf(mx[0][j], mx[0][j + w]);
        mx[1][j] = fmaxf(mx[1][j], mx[1][j + w]);
      }
    }
    float a[2];
    float m_use[2];  // the max the exps subtract
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = mx[h][0];
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const softmax_step step = online_softmax_step(m_run[h], m * scl);
      a[h] = step.alpha;
      m_use[h] = step.m_use;
    }
    if constexpr (kCopied) scale_o_rows(o, a[0], a[1]);
    uint32_t pk[16];  // P as bf16 pairs: pk[2j] row0, pk[2j+1] row0 + 8 (keys 8j + 2 tig)
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float e0 = softmax_p(s[4 * j + 2 * h], scl, m_use[h]);
        const float e1 = softmax_p(s[4 * j + 2 * h + 1], scl, m_use[h]);
        sum[h] += e0 + e1;
        if constexpr (kF16) {
          pk[2 * j + h] = pack_f16(e0 * vs, e1 * vs);
        } else {
          const __nv_bfloat162 v = __floats2bfloat162_rn(e0 * vs, e1 * vs);  // RNE
          pk[2 * j + h] = *reinterpret_cast<const uint32_t*>(&v);
        }
      }
    }
    l_run[0] = softmax_sum(l_run[0], a[0], sum[0]);
    l_run[1] = softmax_sum(l_run[1], a[1], sum[1]);
    // P and alpha for WG1 (P is read through the async proxy: fence before the barrier).
    uint8_t* pbuf = st.smem + sm90_map::p + b * kPBytes;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<uint32_t*>(pbuf + sw128(row0, j) + 4 * tig) = pk[2 * j];
      *reinterpret_cast<uint32_t*>(pbuf + sw128(row0 + 8, j) + 4 * tig) = pk[2 * j + 1];
    }
    float* alpha = reinterpret_cast<float*>(st.smem + sm90_map::alpha) + b * kRows;
    if (tig == 0) {
      alpha[row0] = a[0];
      alpha[row0 + 8] = a[1];
    }
    fence_proxy_async();
    named_arrive(1 + b, 256);
    if (tid == 0) trace::chunk(ig, trace::kWg0P);
    // O[:, 0:256] = alpha O + P V (P from registers: the S accumulator layout is the A layout). The
    // FP8 kernels rescale only here: O, S and P live at once spill there.
    if constexpr (!kCopied) scale_o_rows(o, a[0], a[1]);
    wgmma_fence_operands128(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma_m64n256_rs_tb<kF16>(o, pk + 4 * kk, desc_at(v_desc, kk * 16 * kAtomBytes), 1);
    }
    wgmma_commit();
  };
  int ig = i0;  // the CTA's chunk count: buffer and phase
  if constexpr (!kOverlap) {
    for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++ig) {
      const int b = ig & 1;
      const int li = walk.list_of(c);
      const uint32_t k_desc = k_desc0 + b * (kOperandBytes >> 4);
      const uint32_t v_desc = v_desc0 + b * (kOperandBytes >> 4);
      wait_chunk<CLUSTER, kCopied>(st, b, (ig >> 1) & 1);
      if (tid == 0) trace::chunk(ig, trace::kWg0Full);
      issue_s(k_desc);
      // bf16 kernels read the key flags while S runs (held across the wait, the register costs the
      // FP8 kernels spills).
      uint32_t flags = kCopied ? key_flags(b) : 0u;
      wgmma_wait0();
      wgmma_fence_operands32(s);
      if (tid == 0) trace::chunk(ig, trace::kWg0Qk);
      if constexpr (!kCopied) flags = key_flags(b);
      softmax_pv(b, li, ig, v_desc, flags);
      wgmma_wait0();
      wgmma_fence_operands128(o);
      release_buffer<CLUSTER>(st, b);
      if (tid == 0) trace::chunk(ig, trace::kWg0Pv);
    }
  } else {
    // Each pass issues the next chunk's S right behind this chunk's P·V: the tensor cores go from
    // one to the other without waiting for this warpgroup's release and the next full barrier.
    int c = walk.next_active(st.c_begin);
    if (c < walk.c_end) {
      wait_chunk<CLUSTER, kCopied>(st, ig & 1, (ig >> 1) & 1);
      if (tid == 0) trace::chunk(ig, trace::kWg0Full);
      issue_s(k_desc0 + (ig & 1) * (kOperandBytes >> 4));
      wgmma_wait0();
      wgmma_fence_operands32(s);
    }
    for (; c < walk.c_end; ++ig) {
      const int b = ig & 1;
      const int c_next = walk.next_active(c + 1);
      if (tid == 0) trace::chunk(ig, trace::kWg0Qk);
      softmax_pv(b, walk.list_of(c), ig, v_desc0 + b * (kOperandBytes >> 4), key_flags(b));
      // One branch holds every wait of the groups in flight (ptxas serialises the wgmma when it
      // cannot see a wait on every path).
      if (c_next < walk.c_end) {
        wait_chunk<CLUSTER, kCopied>(st, b ^ 1, ((ig + 1) >> 1) & 1);
        if (tid == 0) trace::chunk(ig + 1, trace::kWg0Full);
        issue_s(k_desc0 + (b ^ 1) * (kOperandBytes >> 4));
        wgmma_wait1();  // this chunk's P·V (the older group) is done; the next S may still run
        wgmma_fence_operands128(o);
        release_buffer<CLUSTER>(st, b);
        if (tid == 0) trace::chunk(ig, trace::kWg0Pv);
        wgmma_wait0();
        wgmma_fence_operands32(s);
      } else {
        wgmma_wait0();
        wgmma_fence_operands128(o);
        release_buffer<CLUSTER>(st, b);
        if (tid == 0) trace::chunk(ig, trace::kWg0Pv);
      }
      c = c_next;
    }
  }
  if (tid == 0) {
    trace::header(trace::kWg0Epi);
#if defined(DSV4_SM90_TRACE)
    if (uint32_t* r = trace::record()) r[trace::kChunksRun] = static_cast<uint32_t>(ig - i0);
#endif
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if constexpr (kSplit && !kPersistent) {
    // The split's row stats straight from registers: the warpgroups store their partials without
    // meeting at the epilogue's barrier.
    if (tig == 0) {
      const int64_t pbase = (st.t * p.num_splits + st.split) * p.num_heads;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int head = st.head0 + row0 + 8 * h;
        if (head < p.num_heads) store_split_stats(p, pbase + head, m_run[h], l_run[h]);
      }
    }
  } else if (tig == 0) {
    const row_fin fin = fin_rows(st, k);
    fin.m[row0] = m_run[0];
    fin.m[row0 + 8] = m_run[1];
    fin.l[row0] = l_run[0];
    fin.l[row0 + 8] = l_run[1];
    fin.f[row0] = row_output_factor_sink(fin.sink[row0], m_run[0], l_run[0], p.out_scale);
    fin.f[row0 + 8] = row_output_factor_sink(fin.sink[row0 + 8], m_run[1], l_run[1], p.out_scale);
  }
  epilogue<kSplit, !kPersistent>(p, item_state<kPersistent>(p, st0, k), k, 0, tid, row0, tig, o);
  if (tid == 0) {
    trace::header(trace::kWg0End);
#if defined(DSV4_SM90_TRACE)
    if (uint32_t* r = trace::record()) r[trace::kGlobalEnd] = trace::global_ns();
#endif
  }
  return ig;
}

// WG1: O[:, 256:512] += P V with P and alpha from WG0.
// st0, i0, k and the result: as for consumer0_item. With a next item (persistent CTAs), one thread
// prefetches its Q into L2 at the start and loads it into the Q tile once WG0's last S of this item
// is done (WG0 has published the last chunk's P; the epilogue leaves the Q tile alone), and 64
// threads store its sinks.
template <bool kSplit, int CLUSTER, bool kPersistent, bool kCopied, bool kF16>
__device__ __forceinline__ int consumer1_item(const attention_params& p, const cta_state& st0,
                                              int tid, int i0, int k, const CUtensorMap* q_map) {
  const cta_state st = item_state<kPersistent>(p, st0, k);
  const chunk_walk walk = item_walk(p, st, k, first_counts(st));
  const bool next = has_next_item<kPersistent>(p, st0, k);
  auto load_next_q = [&](bool prefetch) {
    if (next && tid == 128) {
      const cta_state ns = item_state<kPersistent>(p, st0, k + 1);
      load_q_tile(st0, q_map, ns.t, ns.head0, p, prefetch);
    }
  };
  load_next_q(true);
  const int wtid = tid - 128;
  const int warp = wtid / 32;
  const int lane = tid % 32;
  const int row0 = warp * 16 + lane / 4;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  const uint32_t p_desc0 = desc_lo(st.base + sm90_map::p, 16);
  const uint32_t v_desc0 =
      desc_lo(st.base + sm90_map::k + 4 * kColBytes, kColBytes);  // dims 256..511
  int ig = i0;  // the CTA's chunk count: buffer and phase
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++ig) {
    const int b = ig & 1;
    const uint32_t p_desc = p_desc0 + b * (kPBytes >> 4);
    const uint32_t v_desc = v_desc0 + b * (kOperandBytes >> 4);
    wait_chunk<CLUSTER, kCopied>(st, b, (ig >> 1) & 1);
    named_sync(1 + b, 256);  // P and alpha of this chunk are ready
    if (kPersistent && walk.next_active(c + 1) >= walk.c_end)
      load_next_q(false);  // WG0's last S is done
    if (wtid == 0) trace::chunk(ig, trace::kWg1P);
    const float* alpha = reinterpret_cast<const float*>(st.smem + sm90_map::alpha) + b * kRows;
    scale_o_rows(o, alpha[row0], alpha[row0 + 8]);
    wgmma_fence_operands128(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma_m64n256_ss_tb<kF16>(o, desc_at(p_desc, kk * 32), desc_at(v_desc, kk * 16 * kAtomBytes),
                                1);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands128(o);
    release_buffer<CLUSTER>(st, b);
    if (wtid == 0) trace::chunk(ig, trace::kWg1Pv);
  }
  // The next item's sinks into the other copy (the epilogue's barrier orders them before WG0's
  // reads).
  if (next && wtid < kRows) store_sinks(p, item_state<kPersistent>(p, st0, k + 1), k + 1, wtid);
  epilogue<kSplit, !kPersistent>(p, item_state<kPersistent>(p, st0, k), k, 1, tid, row0, lane % 4,
                                 o);
  // An item without chunks: its Q was never read, but the next load may only start once WG0 has
  // waited for this one (it has, past the epilogue's barrier): a barrier two phases ahead of a
  // waiter looks like one that has not moved.
  if (ig == i0) load_next_q(false);
  if (wtid == 0) trace::header(trace::kWg1End);
  return ig;
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// WG0 issues the next chunk's S right behind this chunk's P·V: FP8 split runs of single-item CTAs
// (two or three chunks each). S, P and O are then live at once, so WG0 takes 16 registers from the
// producer. There it takes 0.3 us more off a 128-head b=2 run than the split epilogue alone (H200).
// Everywhere else it is slower (bf16 decode 15-19 %, prefill 16-21 %, CONFIG2 b=64 15 %;
// docs/tried.md, W6): WG1's P·V already covers WG0's gap before S, and the early S likely queues
// ahead of that P·V and delays the buffer's release.
template <uint32_t L, bool kPersistent, bool kSplit>
constexpr bool kOverlapS = kSplit && !kPersistent && !layout_copied(L);
// Register budgets of WG0, WG1 and the producer (setmaxnreg).
// The bf16 producer only issues cp.async: its registers go to WG0, whose softmax (consumer0_item)
// spills at 192 / 160 / 152 (prefill then 12 % slower on an H200).
template <uint32_t L, bool kPersistent, bool kSplit>
constexpr int kRegs[3] = {layout_copied(L)                    ? 240
                          : kOverlapS<L, kPersistent, kSplit> ? 208
                                                              : 192,
                          160,
                          layout_copied(L)                    ? 104
                          : kOverlapS<L, kPersistent, kSplit> ? 136
                                                              : 152};

// Consumer threads prefetch the rows of a split CTA's second chunk (FP8 caches; bf16 rows are
// copied by cp.async, two chunks at once from the start): 0.1-0.2 us off a 128-head b=2 run on an
// H200; prefetching the first chunk's rows as well gains nothing more.
template <uint32_t L, bool kPersistent, bool kSplit>
constexpr bool kPrefetchRows = kSplit && !kPersistent && !layout_copied(L);

// L: the layout of both caches (one layout per kernel: a loop that dispatches between layouts
// keeps every layout's addressing live at once and spills).
// kPersistent: a grid smaller than the work items (tensor-map Q), each CTA looping over items.
// kSplit: the run has key splits (p.num_splits > 1): the epilogue writes partials, else the output.
// One form per epilogue, so that runs without splits carry no partial-store code: with both behind
// a test of num_splits, 128-head bf16 decode ran 1.6 % slower on an H200, and prefill 64 heads
// 1.2 % slower.
template <uint32_t L, int CLUSTER, bool kPersistent, bool kSplit>
// q_map (q_tma != 0): Q as [batch][s_q][heads][512] bf16 boxes of 64 dims x 64 heads in the
// kernel's 128B swizzle (heads past the end read as zeros), loaded by the tensor-memory
// accelerator.
__global__ void __launch_bounds__(kThreads, 1)
    attention_sm90_kernel(const __grid_constant__ attention_params p,
                          const __grid_constant__ CUtensorMap q_map, int q_tma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  cta_state st;
  cta_begin(st, smem_raw, p, kRows);
  int32_t* counts = reinterpret_cast<int32_t*>(st.smem + sm90_map::counts);
  st.full_bar = st.base + sm90_map::bars;
  st.empty_bar = st.full_bar + 16;
  st.remote_bar = st.full_bar + 32;
  st.q_bar = st.full_bar + 48;
  const int tid = threadIdx.x;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0u;
  st.peer = rank ^ 1u;
  const int64_t t = st.t;

  const int c_end = split_end(p, st);
  // The producer rows of its first two jobs (see producer_copy / producer_convert).
  const bool pairs = CLUSTER > 1 && !layout_copied(L);
  const int r0 = 8 * ((tid % 128) / 32) + (tid & 7);
  const int row_pair = static_cast<int>(rank) * 32 + r0;
  const int rows[2] = {pairs ? row_pair : r0, pairs ? row_pair : 32 + r0};
  first_jobs first{};
  if (tid >= 256) first = speculate_first(p, t, st.c_begin, c_end, rows, pairs);
  if (tid < 2) store_list_count(p, t, tid, counts);
  if (tid == 32) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(st.full_bar + 8 * b, kFullArrivals<L>);
      mbar_init(st.remote_bar + 8 * b, 1);
      mbar_init(st.empty_bar + 8 * b, kEmptyArrivals<CLUSTER>);
    }
    mbar_init(st.q_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (CLUSTER > 1) {
    cluster_sync();  // barriers initialised in both CTAs before any remote arrive
  } else {
    __syncthreads();
  }
  if (tid == 0) trace::header(trace::kInit);
  // Q tile (64 heads, swizzled; padding heads zero) while the producer already gathers the first
  // chunk: eight tensor-map loads (one thread; WG0 waits for them before its first S) or, for fp8
  // or unaligned q, 16-byte units by the consumers (cp.async when aligned).
  st.q_tma = q_tma != 0;
  if (tid < 256) {
    // Sink logits of the CTA's heads (padding heads -inf), read by WG0 once the loop is done.
    if (tid < kRows) store_sinks(p, st, 0, tid);
    if (st.q_tma) {
      if (tid == 0) {
        load_q_tile(st, &q_map, t, st.head0, p, false);
        trace::header(trace::kQIssued);
      }
    } else {
      // Thread: 16-byte unit tid % 64 of rows tid / 64 + 4m.
      const int k = tid % 64;
      const int64_t q0 = token_offset(p.q, t, p.seq_q, st.head0);
      for (int r = tid / 64; r < kRows; r += 4) {
        load_q_unit<row_format<L>::kF16>(p, st.smem + sm90_map::q + sw128(r, k),
                                         q0 + r * p.q.stride_h + 8 * k,
                                         st.head0 + r >= p.num_heads);
      }
      cp_async_commit();
      if (tid == 0) trace::header(trace::kQIssued);
      cp_async_wait_all();
      fence_proxy_async();
    }
    named_sync(4, 256);  // the sink logits (and a consumer-loaded Q) are visible
    if (tid == 0 && !st.q_tma) trace::header(trace::kQReady);
  }
  // Split runs give a CTA few chunks, and the producer issues the second chunk's row loads only
  // behind the first's. Consumer threads, idle until the first chunk, pull this CTA's rows of the
  // later chunks into L2 meanwhile (one bulk prefetch per row), so that those loads hit L2.
  if constexpr (kPrefetchRows<L, kPersistent, kSplit>) {
    constexpr int kPrefetchFirst = 1;   // chunks skipped (the producer's first)
    constexpr int kPrefetchChunks = 1;  // chunks prefetched
    constexpr int kRowsPerChunk = CLUSTER > 1 ? kKeys / 2 : kKeys;
    if (tid < kPrefetchChunks * kRowsPerChunk) {
      const chunk_walk walk = item_walk(p, st, 0, first_counts(st));
      int c = walk.next_active(st.c_begin);
      for (int j = 0; j < kPrefetchFirst + tid / kRowsPerChunk; ++j) c = walk.next_active(c + 1);
      const int row = static_cast<int>(rank) * (kKeys - kRowsPerChunk) + tid % kRowsPerChunk;
      int32_t idx[1];
      load_chunk_indices<1>(walk, c, entry_per_call{p, t}, &row, idx);
      const uint8_t* src = nullptr;
      const uint8_t* sc = nullptr;
      if (idx[0] >= 0) resolve_index<L>(p, walk.list_of(c), idx[0], &src, &sc);
      if (src != nullptr) {
        using F = row_format<L>;
        bulk_prefetch_l2(src, 64 * (F::kFp8Groups + F::kRopeGroups));
        if constexpr (F::kV4) prefetch_l2(sc);
      }
    }
  }

  const int wg = tid / 128;
  // One branch per warpgroup role, so each keeps its own register budget (setmaxnreg). The CTA
  // holds 3 x 168 registers per thread slot (the launch bound); the budgets must not exceed that
  // sum, or the increase waits forever. Each role walks the CTA's work items alike.
  if (wg == 0) {
    set_max_registers_inc<kRegs<L, kPersistent, kSplit>[0]>();
    for_each_item<kPersistent>(p, st, [&](int k, int i0) {
      constexpr bool kValueScale = L == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
      constexpr bool kOverlap = kOverlapS<L, kPersistent, kSplit>;
      return consumer0_item<kSplit, CLUSTER, kPersistent, row_format<L>::kCopied, kValueScale,
                            kOverlap, row_format<L>::kF16>(p, st, tid, i0, k);
    });
  } else if (wg == 1) {
    set_max_registers_dec<kRegs<L, kPersistent, kSplit>[1]>();
    for_each_item<kPersistent>(p, st, [&](int k, int i0) {
      return consumer1_item<kSplit, CLUSTER, kPersistent, row_format<L>::kCopied,
                            row_format<L>::kF16>(p, st, tid, i0, k, &q_map);
    });
  } else {
    set_max_registers_dec<kRegs<L, kPersistent, kSplit>[2]>();
    for_each_item<kPersistent>(p, st, [&](int k, int i0) {
      const cta_state s = item_state<kPersistent>(p, st, k);
      const chunk_walk w = item_walk(p, s, k, first_counts(s));
      // Later items: their first jobs' list entries, loaded while the counts are in flight.
      if (k > 0) first = speculate_first(p, s.t, s.c_begin, w.c_end, rows, pairs);
      const first_jobs& f = first;
      if constexpr (row_format<L>::kCopied) {
        return i0 +
               producer_copy<L, sm90_map, false>(p, s, w, f, 0, (tid % 128) / 32, tid % 32, i0);
      } else {
        return i0 + producer_convert<L, sm90_map, CLUSTER, (CLUSTER > 1)>(
                        p, s, w, f, static_cast<int>(rank), (tid % 128) / 32, tid % 32, i0);
      }
    });
  }
  if constexpr (CLUSTER > 1) cluster_sync();  // the peer may still arrive on / write to this CTA
#endif                                        // __CUDA_ARCH_FEAT_SM90_ALL
}

// CTA pairs share the dequantised chunks of FP8 caches; 16-bit rows need no conversion, so each
// CTA of a 128-head token copies its own (cp.async) and no cluster is formed.
template <uint32_t L>
constexpr bool kPairs = !layout_copied(L);
// Persistent CTAs load each next Q by tensor map, which copies bf16 q as it is: fp16 kernels,
// whose Q is converted on its way into shared memory, have no persistent form.
template <uint32_t L>
constexpr bool kPersistentForm = L != DSV4_KV_LAYOUT_FP16;

// Sets the shared-memory limit of layout L's kernels of cluster size CLUSTER (one item per CTA or
// persistent, each with both epilogues).
template <uint32_t L, int CLUSTER>
cudaError_t configure_kernels(int bytes) {
  const void* kernels[4] = {
      reinterpret_cast<const void*>(attention_sm90_kernel<L, CLUSTER, false, false>),
      reinterpret_cast<const void*>(attention_sm90_kernel<L, CLUSTER, false, true>), nullptr,
      nullptr};
  if constexpr (kPersistentForm<L>) {
    kernels[2] = reinterpret_cast<const void*>(attention_sm90_kernel<L, CLUSTER, true, false>);
    kernels[3] = reinterpret_cast<const void*>(attention_sm90_kernel<L, CLUSTER, true, true>);
  }
  for (const void* k : kernels) {
    if (k == nullptr) continue;
    const cudaError_t err =
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}
// Launches layout L's kernel of cluster size CLUSTER for run p (cfg: its grid).
template <uint32_t L, int CLUSTER>
cudaError_t launch_kernel(const attention_params& p, const CUtensorMap& q_map, int q_tma,
                          bool persistent, const cudaLaunchConfig_t* cfg) {
  const bool split = p.num_splits > 1;
  if (persistent) {
    if constexpr (kPersistentForm<L>) {
      return split ? cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, CLUSTER, true, true>, p,
                                        q_map, q_tma)
                   : cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, CLUSTER, true, false>, p,
                                        q_map, q_tma);
    } else {
      return cudaErrorInvalidValue;
    }
  }
  return split ? cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, CLUSTER, false, true>, p, q_map,
                                    q_tma)
               : cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, CLUSTER, false, false>, p, q_map,
                                    q_tma);
}
template <uint32_t L>
cudaError_t configure_layout(int bytes) {
  const cudaError_t err = configure_kernels<L, 1>(bytes);
  if (err != cudaSuccess || !kPairs<L>) return err;
  return configure_kernels < L, kPairs<L> ? 2 : 1 > (bytes);
}

void set_cluster_pairs(cudaLaunchConfig_t* cfg, cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = 2;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

// Launches run p as the planner chose (planner.cpp choose_run): CTA pairs where p.cluster_ctas is
// 2, p.launch_ctas persistent CTAs where p.persistent says (they need the tensor-map Q), and as a
// programmatic dependent of the token order's kernel where p.token_order is set.
template <uint32_t L>
cudaError_t launch_layout(const attention_params& p, const CUtensorMap& q_map, int q_tma,
                          cudaLaunchConfig_t* cfg) {
  const bool pairs = p.cluster_ctas == 2;
  const bool persistent = p.persistent != 0;
  if ((pairs && !kPairs<L>) || (persistent && q_tma == 0)) return cudaErrorInvalidValue;
  cfg->gridDim.x = static_cast<unsigned>(p.launch_ctas);
  cudaLaunchAttribute attr[2];
  if (pairs) set_cluster_pairs(cfg, attr);
  // An ordered run follows the order's kernel: its CTAs launch while it runs (cta_begin waits).
  if (p.token_order != nullptr) add_programmatic_dependency(cfg, attr);
  if (!pairs) return launch_kernel<L, 1>(p, q_map, q_tma, persistent, cfg);
  return launch_kernel < L, kPairs<L> ? 2 : 1 > (p, q_map, q_tma, persistent, cfg);
}

// The driver's tensor-map encoder (through the runtime: no link against libcuda), nullptr when the
// driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky; clear it for the caller's next check
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The run's bf16 Q as the kernel's tensor map: dims (512, heads, s_q, batch), boxes of 64 dims x
// 64 heads with the 128B swizzle, or nothing (false) where Q does not qualify (fp8, unaligned) or
// the driver cannot encode it; the kernel then loads Q itself. Host-only work, no device calls.
// `strides` receives the byte strides of dims 1..3 (a dimension of size 1 is never stepped along:
// it gets a stride the encoder accepts).
bool q_map_strides(const attention_params& p, cuuint64_t dims[4], cuuint64_t strides[3]) {
  if (p.q_is_fp8 || !p.q_aligned16 || p.head_dim_qk != kHeadDim || p.num_tokens % p.seq_q != 0 ||
      p.cache[0].layout == DSV4_KV_LAYOUT_FP16)  // fp16 kernels convert q as they load it
    return false;
  dims[0] = static_cast<cuuint64_t>(kHeadDim);
  dims[1] = static_cast<cuuint64_t>(p.num_heads);
  dims[2] = static_cast<cuuint64_t>(p.seq_q);
  dims[3] = static_cast<cuuint64_t>(p.num_tokens / p.seq_q);
  const int64_t elem_strides[3] = {p.q.stride_h, p.q.stride_s, p.q.stride_b};
  int64_t extent = kHeadDim * 2;  // bytes spanned by the dimensions below
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = dims[i + 1] == 1 ? extent : elem_strides[i] * 2;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t{1} << 40)) return false;
    strides[i] = static_cast<cuuint64_t>(bytes);
    extent = bytes * static_cast<int64_t>(dims[i + 1]);
  }
  return true;
}
bool encode_q_map(const attention_params& p, CUtensorMap* map) {
  cuuint64_t dims[4];
  cuuint64_t strides[3];
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr || !q_map_strides(p, dims, strides)) return false;
  cuuint32_t box[4] = {64, static_cast<cuuint32_t>(kRows), 1, 1};
  cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, p.q.data, dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

#if defined(DSV4_SM90_TRACE)
namespace trace_host {
uint32_t* buf = nullptr;  // device buffer of kMaxCtas records
constexpr uint32_t kMaxCtas = 16384;
uint32_t last_ctas = 0;
}  // namespace trace_host

uint32_t* sm90_trace_buffer() {
  if (trace_host::buf == nullptr) {
    const size_t bytes = size_t(trace_host::kMaxCtas) * trace::kSlots * 4;
    if (cudaMalloc(&trace_host::buf, bytes) != cudaSuccess) return nullptr;
    cudaMemset(trace_host::buf, 0, bytes);
  }
  return trace_host::buf;
}
uint32_t sm90_trace_launch(int64_t ctas) {
  trace_host::last_ctas =
      static_cast<uint32_t>(ctas < trace_host::kMaxCtas ? ctas : trace_host::kMaxCtas);
  return trace_host::last_ctas;
}
#endif

namespace {

// The kernel table's hooks (kernels.h).
bool wgmma_serves(int cc_major, int head_dim_qk, uint32_t main_layout, uint32_t extra_layout) {
  return cc_major == 9 && head_dim_qk == kHeadDim && sm90_layouts(main_layout, extra_layout);
}

bool wgmma_compiled() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, attention_sm90_kernel<DSV4_KV_LAYOUT_BF16, 1, false, false>) !=
      cudaSuccess) {
    return false;
  }
  // Machine code built for sm_90a reports PTX 9.0; a JIT of the compute_80 PTX (no wgmma)
  // reports 8.0.
  return attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
}

size_t wgmma_smem_bytes(const kernel_config&) { return kSmemBytes; }

cudaError_t wgmma_configure(const kernel_config&) {
  tensor_map_encoder();  // resolved once, at plan creation rather than in the first run
#if defined(DSV4_SM90_TRACE)
  if (const cudaError_t terr = trace::attach(); terr != cudaSuccess) return terr;
#endif
  return for_each_sm90_layout(
      [](auto l) { return configure_layout<decltype(l)::value>(static_cast<int>(kSmemBytes)); });
}

// CTAs the device holds at once: resident[0] single, resident[1] in pairs.
cudaError_t wgmma_occupancy(const kernel_config&, int sm_count, int* ctas_per_sm, int resident[2]) {
  // Every layout's kernel has the same block size and shared memory: the FP8 584 B ones stand in.
  constexpr uint32_t L = DSV4_KV_LAYOUT_FP8_V4_584B;
  *ctas_per_sm = 1;
  int per_sm = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, attention_sm90_kernel<L, 1, true, false>, kThreads, kSmemBytes);
  if (err != cudaSuccess) return err;
  resident[0] = per_sm * sm_count;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cudaLaunchAttribute attr[1];
  set_cluster_pairs(&cfg, attr);
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, attention_sm90_kernel<L, 2, true, false>, &cfg);
  resident[1] = 2 * clusters;
  return err;
}

// The token order's kernel where p.token_order asks for it, the attention kernel, and the combine
// of its splits.
cudaError_t wgmma_launch(const attention_params& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.head_groups < 1 || p.head_groups > 2) return cudaErrorInvalidValue;
  if (p.token_order != nullptr) {
    const cudaError_t oerr = token_order_launch(p, const_cast<int32_t*>(p.token_order), stream);
    if (oerr != cudaSuccess) return oerr;
  }
  cudaLaunchConfig_t cfg = cta_grid_config(p, kThreads, kSmemBytes, stream);
  CUtensorMap q_map{};
  const int q_tma = encode_q_map(p, &q_map) ? 1 : 0;
  const cudaError_t err = with_sm90_layout(p.cache[0].layout, [&](auto l) {
    return launch_layout<decltype(l)::value>(p, q_map, q_tma, &cfg);
  });
  if (err != cudaSuccess || p.num_splits == 1) return err;
  return combine_launch(p, stream);
}

}  // namespace

bool q_map_applies(const attention_params& p) {
  cuuint64_t dims[4];
  cuuint64_t strides[3];
  return tensor_map_encoder() != nullptr && q_map_strides(p, dims, strides);
}

const kernel_family kWgmmaKernels = {"wgmma",          wgmma_serves,    wgmma_compiled,
                                     wgmma_smem_bytes, wgmma_configure, wgmma_occupancy,
                                     wgmma_launch};

}  // namespace cuda
}  // namespace dsv4

#if defined(DSV4_SM90_TRACE)
// Writes the records of the last traced launch: a header (CTAs, slots per CTA, clock rate in kHz)
// and then CTAs x slots uint32 stamps. Returns 0 on success.
extern "C" __attribute__((visibility("default"))) int dsv4_cuda_sm90_trace_dump(const char* path) {
  using namespace dsv4::cuda;
  if (trace_host::buf == nullptr || trace_host::last_ctas == 0) return 1;
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  std::vector<uint32_t> host(size_t(trace_host::last_ctas) * trace::kSlots);
  if (cudaMemcpy(host.data(), trace_host::buf, host.size() * 4, cudaMemcpyDeviceToHost) !=
      cudaSuccess)
    return 3;
  int khz = 0;
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  FILE* out = std::fopen(path, "wb");
  if (out == nullptr) return 4;
  const uint32_t head[3] = {trace_host::last_ctas, static_cast<uint32_t>(trace::kSlots),
                            static_cast<uint32_t>(khz)};
  std::fwrite(head, 4, 3, out);
  std::fwrite(host.data(), 4, host.size(), out);
  std::fclose(out);
  return 0;
}
#endif
