// Sparse MLA attention on CUDA tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate).
//
// One CTA = one (token, head group, key split). A head group is 16, 32 or 64 heads (1, 2 or 4 mma
// row tiles) so a gathered key row is dequantised once and shared by all heads of the group. Keys
// come in chunks of 64 list positions; each chunk belongs to one list (main or extra) and so to one
// cache. Per chunk (four CTA barriers):
//   raw rows (cp.async, issued one chunk ahead) -> dequantise to bf16 in shared memory
//   S = Q K^T (warps: head tile x key group; 16-head tiles also split the head dimension in two)
//   -> online softmax in fp32 (base 2) on the S registers -> P (bf16, shared memory)
//   O += P V (warps: up to two head tiles x a slice of the 512 value dims), O in fp32 registers.
// 64-key chunks use 16 warps (64-head tiles: O = 64 registers per thread), the 32-key variant 4.
// With one split the CTA applies the sink and writes out / lse / max_logits (through shared memory,
// 16-byte stores); with several it writes (O, max, sum) partials that the combine kernel merges.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <type_traits>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dsv4 {
namespace cuda {
namespace {

constexpr int kSRowPad = 4;  // fp32 S rows: 68 floats
constexpr int kBf16Pad = 8;  // bf16 rows padded by 16 bytes: ldmatrix without bank conflicts

__host__ __device__ constexpr size_t align16(size_t x) { return (x + 15) / 16 * 16; }

// Shared-memory map of one CTA (byte offsets), identical on host and device. The raw-row stage,
// the only region whose size depends on the caches, comes last so that every other offset is a
// compile-time constant in the kernel (fewer live registers).
struct smem_map {
  size_t q, k, s, p, m, l, alpha, m_next, red_max, red_sum, row_src, row_scale, next_idx, stage,
      total;
};

__host__ __device__ constexpr smem_map make_smem_map(int head_tiles, int dqk, size_t stage_bytes,
                                                     int chunk) {
  const size_t rows = static_cast<size_t>(head_tiles) * kMmaRows;
  const size_t qk_stride = static_cast<size_t>(dqk + kBf16Pad) * 2;
  smem_map m{};
  m.q = 0;
  m.k = m.q + align16(rows * qk_stride);
  // fp32 S only where Q K^T splits the head dimension (the parts are added in shared memory);
  // otherwise the softmax runs on the Q K^T registers and exchanges per-warp row maxima and sums.
  const int ks = attention_qk_dim_splits(head_tiles, chunk);
  const size_t key_groups =
      static_cast<size_t>(attention_warps(head_tiles, chunk) / head_tiles / ks);
  m.s = m.k + align16(chunk * qk_stride);
  m.p = m.s + (ks > 1 ? align16(ks * rows * (chunk + kSRowPad) * sizeof(float)) : 0);
  m.m = m.p + align16(rows * (chunk + kBf16Pad) * 2);
  m.l = m.m + align16(rows * sizeof(float));
  m.alpha = m.l + align16(rows * sizeof(float));
  m.m_next = m.alpha + align16(rows * sizeof(float));
  m.red_max = m.m_next + align16(rows * sizeof(float));
  m.red_sum = m.red_max + align16(key_groups * rows * sizeof(float));
  m.row_src = m.red_sum + align16(key_groups * rows * sizeof(float));
  m.row_scale = m.row_src + 2 * chunk * sizeof(const uint8_t*);
  m.next_idx = m.row_scale + 2 * chunk * sizeof(const uint8_t*);
  m.stage = m.next_idx + align16(chunk * sizeof(int32_t));
  m.total = m.stage + align16(stage_bytes);
  return m;
}

// ------------------------------------------------------------------------------------------------
// Dequantisation of 8 consecutive dims [d0, d0+8) of entry `row` of a staged pseudo-block (the
// chunk's raw rows stored with the layout's own in-block byte map for a block of `chunk`
// entries). Values come from the shared codecs, so they are bit-identical to dequant_entry.
__device__ __forceinline__ uint4 dequant8(uint32_t layout, const uint8_t* stage, int chunk, int row,
                                          int d0) {
  const uint8_t* p = stage + entry_data_offset(layout, row);
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
    case DSV4_KV_LAYOUT_FP16:  // fp16 bits, for the fp16 kernels' tensor cores
      return *reinterpret_cast<const uint4*>(p + 2 * d0);
    case DSV4_KV_LAYOUT_FP8_V4_584B: {
      if (d0 >= kNopeDim)
        return *reinterpret_cast<const uint4*>(p + kNopeDim + 2 * (d0 - kNopeDim));
      const uint8_t* sc = stage + v4_scale_offset(chunk, row);
      return fp8x8_to_bf16x8_pow2(*reinterpret_cast<const uint2*>(p + d0), sc[d0 / kV4TileDim]);
    }
    case DSV4_KV_LAYOUT_FP8_V32_656B: {
      if (d0 >= kHeadDim) {
        return *reinterpret_cast<const uint4*>(p + kHeadDim + 4 * kV32Tiles + 2 * (d0 - kHeadDim));
      }
      const float s = *reinterpret_cast<const float*>(p + kHeadDim + 4 * (d0 / kV32TileDim));
      return fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(p + d0), s);
    }
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return fp8x8_to_bf16x8_pow2(*reinterpret_cast<const uint2*>(p + d0), 127u);  // scale 1
    default:
      return make_uint4(0, 0, 0, 0);
  }
}

// ------------------------------------------------------------------------------------------------
// Per-layout chunk staging and dequantisation, with every size a compile-time constant.
template <uint32_t L>
struct stage_geometry {
  // 16-byte units of an entry's data part, and whether 8 scale bytes follow elsewhere (584 B).
  static constexpr int data_units =
      (L == DSV4_KV_LAYOUT_FP8_V4_584B                        ? kV4DataBytes
       : L == DSV4_KV_LAYOUT_BF16 || L == DSV4_KV_LAYOUT_FP16 ? 2 * kHeadDim
       : L == DSV4_KV_LAYOUT_FP8_V32_656B                     ? kV32TokenBytes
                                                              : kHeadDim) /
      16;
  static constexpr bool has_scales = L == DSV4_KV_LAYOUT_FP8_V4_584B;
};

// Calls f(std::integral_constant<uint32_t, layout>) for the layouts a DQK kernel serves (F16: the
// fp16 layout, which the plan's caches then both hold).
template <int DQK, bool F16, class F>
__device__ __forceinline__ void dispatch_layout(uint32_t layout, F&& f) {
  if constexpr (F16) {
    f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP16>{});
  } else if constexpr (DQK == kV32HeadDimQK) {
    f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_V32_656B>{});
  } else {
    switch (layout) {
      case DSV4_KV_LAYOUT_BF16:
        f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_BF16>{});
        break;
      case DSV4_KV_LAYOUT_FP8_V4_584B:
        f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_V4_584B>{});
        break;
      default:
        f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>{});
        break;
    }
  }
}

// Copies the raw rows (source pointers per row, nullptr = skip) into the stage pseudo-block. One
// warp per row, lanes over the row's 16-byte units, so row validity is warp-uniform. The aligned
// (usual) path is kept free of the byte-copy fallback: predicated fallback code issued with every
// row and made this loop a fifth of the kernel's issue slots (ncu source counters).
template <uint32_t L, int WARPS, int CHUNK>
__device__ __forceinline__ void stage_rows(uint8_t* stage, const uint8_t* const* rows,
                                           const uint8_t* const* scales, bool aligned, int warp,
                                           int lane) {
  using geo = stage_geometry<L>;
  static_assert(CHUNK % WARPS == 0, "stage tiling");
  if (aligned) {
#pragma unroll
    for (int i = 0; i < CHUNK / WARPS; ++i) {
      const int row = warp + i * WARPS;
      const uint8_t* src = rows[row];
      if (src == nullptr) continue;
      uint8_t* dst = stage + entry_data_offset(L, row);
#pragma unroll
      for (int k = lane; k < geo::data_units; k += 32) cp_async16(dst + 16 * k, src + 16 * k);
      // 584 B rows: 36 data units leave lanes 4..31 idle in the second round; the last takes the
      // scales.
      if (geo::has_scales && lane == 31)
        cp_async8(stage + v4_scale_offset(CHUNK, row), scales[row]);
    }
    return;
  }
  for (int row = warp; row < CHUNK; row += WARPS) {
    const uint8_t* src = rows[row];
    if (src == nullptr) continue;
    uint8_t* dst = stage + entry_data_offset(L, row);
    for (int k = lane; k < geo::data_units; k += 32) {
      for (int b = 0; b < 16; ++b) dst[16 * k + b] = src[16 * k + b];
    }
    if (geo::has_scales && lane == 31) {
      const uint8_t* sc = scales[row];
      uint8_t* sdst = stage + v4_scale_offset(CHUNK, row);
      for (int b = 0; b < kV4ScaleBytes; ++b) sdst[b] = sc[b];
    }
  }
}

// Dequantises the staged chunk into K (bf16 rows of QS elements); invalid rows become zero. One
// warp per row, lanes over its 8-dim groups.
template <uint32_t L, int DQK, int QS, int WARPS, int CHUNK>
__device__ __forceinline__ void dequant_chunk(const uint8_t* stage, __nv_bfloat16* k_s,
                                              const uint8_t* const* rows, int warp, int lane) {
  constexpr int groups = DQK / 8;
  for (int row = warp; row < CHUNK; row += WARPS) {
    const bool valid = rows[row] != nullptr;
    __nv_bfloat16* dst = k_s + row * QS;
#pragma unroll
    for (int gi = lane; gi < groups; gi += 32) {
      const uint4 v = valid ? dequant8(L, stage, CHUNK, row, gi * 8) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst + gi * 8) = v;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// The kernel's steps (attention_kernel below): each is inlined where the kernel calls it.

// The Q tile of token t, heads head0.. (HT rows of DQK dims, qk_stride apart) into shared memory:
// bf16 (e4m3 widened exactly; fp16 for F16), padding heads zero. Aligned bf16 rows go by cp.async
// (completed with the first chunk's stage); otherwise one warp per head row.
template <int HT, int DQK, int kThreads, bool F16>
__device__ __forceinline__ void load_q_tile(const attention_params& p, __nv_bfloat16* q_s,
                                            int64_t t, int head0, int tid, int warp, int lane) {
  constexpr int kWarps = kThreads / 32;
  constexpr int dqk = DQK;
  constexpr int qk_stride = DQK + kBf16Pad;
  if (!F16 && p.q_aligned16) {
    const int units = dqk / 8;
    for (int u = tid; u < HT * units; u += kThreads) {
      const int r = u / units;
      const int k = u % units;
      const int h = head0 + r;
      uint16_t* dst = reinterpret_cast<uint16_t*>(q_s) + r * qk_stride + 8 * k;
      if (h < p.num_heads) {
        cp_async16(
            dst, static_cast<const uint16_t*>(p.q.data) + token_offset(p.q, t, p.seq_q, h) + 8 * k);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  } else {
    for (int r = warp; r < HT; r += kWarps) {
      const int h = head0 + r;
      uint16_t* dst = reinterpret_cast<uint16_t*>(q_s) + r * qk_stride;
      if (h >= p.num_heads) {
        for (int d = lane; d < dqk; d += 32) dst[d] = 0;
        continue;
      }
      const int64_t off = token_offset(p.q, t, p.seq_q, h);
      if (p.q_is_fp8) {
        const uint8_t* src = static_cast<const uint8_t*>(p.q.data) + off;
        for (int d = lane; d < dqk; d += 32) dst[d] = f32_to_bf16(fp8_e4m3_to_f32(src[d]));
      } else if constexpr (F16) {
        const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + off;
        for (int d = lane; d < dqk; d += 32) dst[d] = f32_to_fp16(bf16_to_f32(src[d]));
      } else {
        const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + off;
        for (int d = lane; d < dqk; d += 32) dst[d] = src[d];
      }
    }
  }
}

// The CTA's end, once every warp sees the final m / l: with one split, the normalised rows (sink
// applied) through a bf16 tile in the free K buffer (o_s) to 16-byte global stores, and lse /
// max_logits; with several, the split's partials (O, max, sum).
template <int HT, int PT, int NV, int kThreads>
__device__ __forceinline__ void finish_rows(const attention_params& p, const float (&o)[PT][NV][4],
                                            __nv_bfloat16* o_s, const float* m_s, const float* l_s,
                                            int64_t t, int split, int head0, int pv_tile0, int dim0,
                                            int tid, int lane) {
  const int g = lane / 4;
  const int tig = lane % 4;
  if (p.num_splits == 1) {
    // Normalised rows (sink applied) -> bf16 tile in the free K buffer -> 16-byte global stores.
    constexpr int OS = kHeadDim + kBf16Pad;
#pragma unroll
    for (int rh = 0; rh < 2 * PT; ++rh) {
      const int j = rh / 2;
      const int half = rh % 2;
      const int r = (pv_tile0 + j) * 16 + g + 8 * half;
      const int h = head0 + r;
      const float factor = row_output_factor(p, h, m_s[r], l_s[r]);
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int d = dim0 + n * 8 + 2 * tig;
        *reinterpret_cast<uint32_t*>(o_s + r * OS + d) =
            pack_bf16(o[j][n][2 * half] * factor, o[j][n][2 * half + 1] * factor);
      }
    }
    __syncthreads();
    constexpr int kUnits = kHeadDim / 8;
    for (int u = tid; u < HT * kUnits; u += kThreads) {
      const int r = u / kUnits;
      const int d = (u % kUnits) * 8;
      const int h = head0 + r;
      if (h >= p.num_heads) continue;
      store_out(p, t, h, d, *reinterpret_cast<const uint4*>(o_s + r * OS + d));
    }
    if (tid < HT && head0 + tid < p.num_heads)
      write_row_stats(p, t, head0 + tid, m_s[tid], l_s[tid]);
  } else {
    const int64_t base = (t * p.num_splits + split) * p.num_heads;
#pragma unroll
    for (int rh = 0; rh < 2 * PT; ++rh) {
      const int j = rh / 2;
      const int half = rh % 2;
      const int h = head0 + (pv_tile0 + j) * 16 + g + 8 * half;
      if (h >= p.num_heads) continue;
      float* po = p.partial_o + (base + h) * kHeadDim;
      static_assert(NV % 2 == 0, "n-tile pairs");
#pragma unroll
      for (int n = 0; n < NV; n += 2) {
        store_partial_pair(po, dim0 + n * 8, tig, o[j][n][2 * half], o[j][n][2 * half + 1],
                           o[j][n + 1][2 * half], o[j][n + 1][2 * half + 1]);
      }
    }
    if (tid < HT && head0 + tid < p.num_heads)
      store_split_stats(p, base + head0 + tid, m_s[tid], l_s[tid]);
  }
}

// ------------------------------------------------------------------------------------------------
// The attention kernel. HT = 16 * HEAD_TILES heads per CTA; DQK = 512 or 576 (V3.2 layout); F16:
// caches of the fp16 layout, multiplied as fp16 (Q converted to fp16, P rounded to fp16).
template <int HEAD_TILES, int DQK, int CHUNK, bool F16 = false>
__global__ void __launch_bounds__(attention_warps(HEAD_TILES, CHUNK) * 32, 1)
    attention_kernel(const attention_params p) {
  constexpr int kWarps = attention_warps(HEAD_TILES, CHUNK);
  constexpr int kThreads = kWarps * 32;
  constexpr int HT = HEAD_TILES * kMmaRows;
  constexpr int G = kWarps / HEAD_TILES;                          // warps per head tile
  constexpr int KS = attention_qk_dim_splits(HEAD_TILES, CHUNK);  // head-dim parts of Q K^T
  constexpr int GK = G / KS;                                      // key groups of Q K^T
  constexpr int NT = CHUNK / 8 / GK;                              // S n-tiles (8 keys) per warp
  // P V: each warp takes PT head tiles (A fragments) against one slice of V, so a V fragment feeds
  // PT mmas (64-head tiles: 2 x 64 dims per warp read a third less shared memory than 1 x 128).
  constexpr int PT = HEAD_TILES >= 2 ? 2 : 1;
  constexpr int GV = kWarps / (HEAD_TILES / PT);  // value-dim groups
  constexpr int NV = kHeadDim / 8 / GV;           // O n-tiles (8 dims) per warp
  static_assert(NT >= 1 && NV >= 2 && (DQK / 16) % KS == 0, "warp tiling");
  constexpr int TPR = kThreads / HT;  // softmax threads per head row
  constexpr int KPT = CHUNK / TPR;    // keys per softmax thread

  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int qk_stride = DQK + kBf16Pad;                           // bf16 elements
  constexpr smem_map map = make_smem_map(HEAD_TILES, DQK, 0, CHUNK);  // offsets only: stage is last
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem + map.q);
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(smem + map.k);
  uint8_t* stage = smem + map.stage;
  float* s_s = reinterpret_cast<float*>(smem + map.s);
  __nv_bfloat16* p_s = reinterpret_cast<__nv_bfloat16*>(smem + map.p);
  float* m_s = reinterpret_cast<float*>(smem + map.m);
  float* l_s = reinterpret_cast<float*>(smem + map.l);
  float* alpha_s = reinterpret_cast<float*>(smem + map.alpha);
  float* m_next_s = reinterpret_cast<float*>(smem + map.m_next);    // running max after this chunk
  float* red_max_s = reinterpret_cast<float*>(smem + map.red_max);  // [key group][row] chunk maxima
  float* red_sum_s = reinterpret_cast<float*>(smem + map.red_sum);  // [key group][row] sums of P
  const uint8_t** row_src = reinterpret_cast<const uint8_t**>(smem + map.row_src);
  const uint8_t** row_scale = reinterpret_cast<const uint8_t**>(smem + map.row_scale);
  int32_t* next_idx_s =
      reinterpret_cast<int32_t*>(smem + map.next_idx);  // entries of the chunk after next
  __shared__ int32_t counts[2];  // candidate counts of the main and the extra list

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Lets the combine kernel (a programmatic dependent launch) start its launch now; it still
  // waits for this whole grid to finish (griddepcontrol.wait) before reading the partials.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t cta = blockIdx.x;
  const int split = static_cast<int>(cta % p.num_splits);
  const int group = static_cast<int>((cta / p.num_splits) % p.head_groups);
  const int64_t t = cta / (static_cast<int64_t>(p.num_splits) * p.head_groups);
  const int head0 = group * HT;

  if (tid < 2) counts[tid] = list_count(p, t, tid);  // list_count: device_common.cuh
  load_q_tile<HT, DQK, kThreads, F16>(p, q_s, t, head0, tid, warp, lane);
  if (tid < HT) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
    alpha_s[tid] = 1.0f;
  }
  __syncthreads();

  const int total_chunks = p.chunks[0] + p.chunks[1];
  const int c_begin = split * p.chunks_per_split;
  const int c_end = min(total_chunks, c_begin + p.chunks_per_split);
  auto chunk_list = [&](int c) { return c < p.chunks[0] ? 0 : 1; };
  auto chunk_pos0 = [&](int c) { return (c < p.chunks[0] ? c : c - p.chunks[0]) * CHUNK; };
  auto next_active = [&](int c) {
    while (c < c_end && chunk_pos0(c) >= counts[chunk_list(c)]) ++c;
    return c;
  };

  // Reads the list entry of this thread's row of chunk c (-1 when beyond the row's count); the
  // global load is issued early so its latency hides behind other work.
  auto load_index = [&](int c) -> int32_t {
    if (tid >= CHUNK || c >= c_end) return -1;
    const int li = chunk_list(c);
    const int64_t pos = chunk_pos0(c) + tid;
    return pos < counts[li] ? list_entry(p.list[li], t, p.seq_q, pos) : -1;
  };
  // Resolves the rows of chunk c into source pointers (nullptr = not a valid candidate).
  auto resolve_rows = [&](int c, int parity, int32_t idx) {
    if (tid < CHUNK) {
      const dsv4_mod_cache& cache = p.cache[chunk_list(c)];
      const uint8_t* src = nullptr;
      const uint8_t* sc = nullptr;
      if (slot_is_valid(idx, cache)) {
        int64_t e;
        const uint8_t* block = slot_block_base(cache, idx, &e);
        src = block + entry_data_offset(cache.layout, e);
        sc = block + v4_scale_offset(cache.block_size, e);
      }
      row_src[parity * CHUNK + tid] = src;
      row_scale[parity * CHUNK + tid] = sc;
    }
  };
  // Copies the raw rows of chunk c (resolved under `parity`) into the stage.
  auto issue_stage = [&](int c, int parity) {
    dispatch_layout<DQK, F16>(p.cache[chunk_list(c)].layout, [&](auto tag) {
      stage_rows<decltype(tag)::value, kWarps, CHUNK>(stage, row_src + parity * CHUNK,
                                                      row_scale + parity * CHUNK, p.aligned16 != 0,
                                                      warp, lane);
    });
    cp_async_commit();
  };

  // Q K^T: head tile mt, key group (and head-dim part) wg. P V / O accumulators: rows (g, g+8) of
  // head tiles [pv_tile0, pv_tile0 + PT), value dims [dim0, dim0 + 8*NV).
  const int mt = warp % HEAD_TILES;
  const int wg = warp / HEAD_TILES;
  const int g = lane / 4;
  const int tig = lane % 4;
  const int pv_tile0 = (warp % (HEAD_TILES / PT)) * PT;
  const int dim0 = (warp / (HEAD_TILES / PT)) * NV * 8;
  float o[PT][NV][4];
#pragma unroll
  for (int j = 0; j < PT; ++j)
#pragma unroll
    for (int n = 0; n < NV; ++n) o[j][n][0] = o[j][n][1] = o[j][n][2] = o[j][n][3] = 0.0f;

  // List entries are read two chunks ahead: chunk c's iteration loads c+2's entries into a
  // register and parks them in next_idx_s after its Q K^T, where c+1's iteration resolves them, so
  // no global latency sits between two barriers (and no register stays live through P V).
  int c = next_active(c_begin);
  int parity = 0;
  int c_next = c_end;
  if (c >= c_end) cp_async_wait_all();  // no chunk: Q is not used, but drain its copies
  if (c < c_end) {
    resolve_rows(c, parity, load_index(c));
    c_next = next_active(c + 1);
    if (tid < CHUNK) next_idx_s[tid] = load_index(c_next);
    __syncthreads();
    issue_stage(c, parity);
  }
  while (c < c_end) {
    const int li = chunk_list(c);
    const uint32_t layout = p.cache[li].layout;
    cp_async_wait_all();
    __syncthreads();  // stage complete; previous chunk's P / K reads finished
    // Dequantise the stage into K (invalid rows are zero so they add nothing, NaN never leaks).
    dispatch_layout<DQK, F16>(layout, [&](auto tag) {
      dequant_chunk<decltype(tag)::value, DQK, qk_stride, kWarps, CHUNK>(
          stage, k_s, row_src + parity * CHUNK, warp, lane);
    });
    if (c_next < c_end) resolve_rows(c_next, parity ^ 1, tid < CHUNK ? next_idx_s[tid] : -1);
    __syncthreads();  // K ready, stage free, next rows resolved
    if (c_next < c_end) issue_stage(c_next, parity ^ 1);
    const int c_after = next_active(c_next + 1);
    const int32_t after_idx = load_index(c_after);

    // S = Q K^T for head tile mt, keys [key0, key0 + 8*NT), head dims of part `kpart` (of KS).
    // sr: scaled, masked logits of this warp's fragment (rows g, g+8; keys key + {0, 1}).
    const int key0 = (wg % GK) * NT * 8;
    float sr[NT][4];
    {
      const int kpart = wg / GK;
      constexpr int KSTEPS = DQK / 16 / KS;
      // AS independent accumulator sets (summed at the end) keep >= 2 mma chains per warp in flight
      // (four warps per scheduler; 64-head tiles have no registers to spare beyond that).
      constexpr int AS = NT == 1 ? 2 : 1;
      float accs[AS][NT][4];
#pragma unroll
      for (int a4 = 0; a4 < AS; ++a4)
#pragma unroll
        for (int n = 0; n < NT; ++n)
          accs[a4][n][0] = accs[a4][n][1] = accs[a4][n][2] = accs[a4][n][3] = 0.0f;
      const __nv_bfloat16* qa =
          q_s + (mt * 16 + (lane % 16)) * qk_stride + (lane / 16) * 8 + kpart * KSTEPS * 16;
      const __nv_bfloat16* kb =
          (NT == 1 ? k_s + (key0 + (lane & 7)) * qk_stride + ((lane >> 3) & 1) * 8
                   : k_s + (key0 + (lane & 7) + ((lane >> 4) << 3)) * qk_stride +
                         ((lane >> 3) & 1) * 8) +
          kpart * KSTEPS * 16;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
        float(*acc)[4] = accs[ks % AS];
        uint32_t a[4];
        ldmatrix_x4(a, qa + ks * 16);
        if constexpr (NT == 1) {
          uint32_t b[2];
          ldmatrix_x2(b, kb + ks * 16);
          mma_16816<F16>(acc[0], a, b[0], b[1]);
        } else {
#pragma unroll
          for (int np = 0; np < NT / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, kb + np * 16 * qk_stride + ks * 16);
            mma_16816<F16>(acc[2 * np], a, b[0], b[1]);
            mma_16816<F16>(acc[2 * np + 1], a, b[2], b[3]);
          }
        }
      }
      float(*acc)[4] = accs[0];
#pragma unroll
      for (int a4 = 1; a4 < AS; ++a4)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[n][i] += accs[a4][n][i];
      const float scl = p.logit_scale_log2[li];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int key = key0 + n * 8 + 2 * tig;
        const bool v0 = row_src[parity * CHUNK + key] != nullptr;
        const bool v1 = row_src[parity * CHUNK + key + 1] != nullptr;
        sr[n][0] = v0 ? acc[n][0] * scl : -INFINITY;
        sr[n][1] = v1 ? acc[n][1] * scl : -INFINITY;
        sr[n][2] = v0 ? acc[n][2] * scl : -INFINITY;
        sr[n][3] = v1 ? acc[n][3] * scl : -INFINITY;
      }
      if constexpr (KS == 1) {
        // This warp's maxima of rows g and g+8 (the 4 lanes of a row share them by shuffles).
        float mlo = -INFINITY;
        float mhi = -INFINITY;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          mlo = fmaxf(mlo, fmaxf(sr[n][0], sr[n][1]));
          mhi = fmaxf(mhi, fmaxf(sr[n][2], sr[n][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
          mlo = fmaxf(mlo, __shfl_xor_sync(0xffffffffu, mlo, off));
          mhi = fmaxf(mhi, __shfl_xor_sync(0xffffffffu, mhi, off));
        }
        if (tig == 0) {
          red_max_s[wg * HT + mt * 16 + g] = mlo;
          red_max_s[wg * HT + mt * 16 + g + 8] = mhi;
        }
      } else {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          float* r0 =
              s_s + (kpart * HT + mt * 16 + g) * (CHUNK + kSRowPad) + key0 + n * 8 + 2 * tig;
          float* r1 = r0 + 8 * (CHUNK + kSRowPad);
          r0[0] = sr[n][0];
          r0[1] = sr[n][1];
          r1[0] = sr[n][2];
          r1[1] = sr[n][3];
        }
      }
    }
    if (tid < CHUNK) next_idx_s[tid] = after_idx;  // read by the next iteration's resolve_rows
    __syncthreads();

    if constexpr (KS == 1) {
      // Online softmax (base 2) on the registers: every warp derives the new running max of its
      // rows from the key groups' maxima, writes its P fragment and its row sums; threads < HT
      // publish max and alpha (m_s itself changes only after the next barrier: others read it
      // here).
      const float vs = p.value_scale[li];
      float m_use[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + g + 8 * half;
        float m_new = m_s[row];
#pragma unroll
        for (int w = 0; w < GK; ++w) m_new = fmaxf(m_new, red_max_s[w * HT + row]);
        m_use[half] = softmax_max_use(m_new);
      }
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int key = key0 + n * 8 + 2 * tig;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float e0 = softmax_p(sr[n][2 * half], m_use[half]);
          const float e1 = softmax_p(sr[n][2 * half + 1], m_use[half]);
          sum[half] += e0 + e1;
          __nv_bfloat16* pp = p_s + (mt * 16 + g + 8 * half) * (CHUNK + kBf16Pad) + key;
          if constexpr (F16) {
            *reinterpret_cast<uint32_t*>(pp) = pack_f16(e0 * vs, e1 * vs);
          } else {
            *reinterpret_cast<__nv_bfloat162*>(pp) =
                __floats2bfloat162_rn(e0 * vs, e1 * vs);  // RNE, as f32_to_bf16
          }
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int off = 1; off < 4; off *= 2)
          sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], off);
        if (tig == 0) red_sum_s[wg * HT + mt * 16 + g + 8 * half] = sum[half];
      }
      if (tid < HT) {
        const float m_old = m_s[tid];
        float m_new = m_old;
#pragma unroll
        for (int w = 0; w < GK; ++w) m_new = fmaxf(m_new, red_max_s[w * HT + tid]);
        m_next_s[tid] = m_new;
        alpha_s[tid] = softmax_alpha(m_old, m_new);
      }
    } else {
      // Online softmax (base 2) over the summed S parts: TPR threads per head row, each KPT keys.
      const int row = tid / TPR;
      const int sub = tid % TPR;
      const float* srow = s_s + row * (CHUNK + kSRowPad) + sub * KPT;
      float sv[KPT];
      float cmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        sv[j] = srow[j];
#pragma unroll
        for (int part = 1; part < KS; ++part) sv[j] += srow[part * HT * (CHUNK + kSRowPad) + j];
        cmax = fmaxf(cmax, sv[j]);
      }
#pragma unroll
      for (int off = TPR / 2; off > 0; off /= 2)
        cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, off));
      // The step's parts apart: alpha only where it is stored, once the exps are issued.
      const float m_old = m_s[row];
      const float m_new = fmaxf(m_old, cmax);
      const float m_use = softmax_max_use(m_new);
      const float vs = p.value_scale[li];
      float sum = 0.0f;
      __nv_bfloat16* prow = p_s + row * (CHUNK + kBf16Pad) + sub * KPT;
#pragma unroll
      for (int j = 0; j < KPT; j += 2) {
        const float e0 = softmax_p(sv[j], m_use);
        const float e1 = softmax_p(sv[j + 1], m_use);
        sum += e0 + e1;
        if constexpr (F16) {
          *reinterpret_cast<uint32_t*>(prow + j) = pack_f16(e0 * vs, e1 * vs);
        } else {
          const __nv_bfloat162 pv = __floats2bfloat162_rn(e0 * vs, e1 * vs);  // RNE
          *reinterpret_cast<__nv_bfloat162*>(prow + j) = pv;
        }
      }
#pragma unroll
      for (int off = TPR / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      __syncwarp();
      if (sub == 0) {
        const float alpha = softmax_alpha(m_old, m_new);
        alpha_s[row] = alpha;
        l_s[row] = softmax_sum(l_s[row], alpha, sum);
        m_s[row] = m_new;
      }
    }
    __syncthreads();
    if constexpr (KS == 1) {
      if (tid < HT) {  // running sum and max (read again only after the next chunk's barriers)
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < GK; ++w) sum += red_sum_s[w * HT + tid];
        l_s[tid] = softmax_sum(l_s[tid], alpha_s[tid], sum);
        m_s[tid] = m_next_s[tid];
      }
    }

    // O = alpha * O + P V for head tiles [pv_tile0, pv_tile0 + PT), value dims [dim0, dim0 + 8*NV).
    {
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        const float alo = alpha_s[(pv_tile0 + j) * 16 + g];
        const float ahi = alpha_s[(pv_tile0 + j) * 16 + g + 8];
#pragma unroll
        for (int n = 0; n < NV; ++n) {
          o[j][n][0] *= alo;
          o[j][n][1] *= alo;
          o[j][n][2] *= ahi;
          o[j][n][3] *= ahi;
        }
      }
      const __nv_bfloat16* pa =
          p_s + (pv_tile0 * 16 + (lane % 16)) * (CHUNK + kBf16Pad) + (lane / 16) * 8;
      const __nv_bfloat16* vb =
          k_s + ((lane & 7) + ((lane >> 3) & 1) * 8) * qk_stride + dim0 + (lane >> 4) * 8;
#pragma unroll
      for (int ks = 0; ks < CHUNK / 16; ++ks) {
        uint32_t a[PT][4];
#pragma unroll
        for (int j = 0; j < PT; ++j) ldmatrix_x4(a[j], pa + j * 16 * (CHUNK + kBf16Pad) + ks * 16);
#pragma unroll
        for (int np = 0; np < NV / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vb + ks * 16 * qk_stride + np * 16);
#pragma unroll
          for (int j = 0; j < PT; ++j) {
            mma_16816<F16>(o[j][2 * np], a[j], b[0], b[1]);
            mma_16816<F16>(o[j][2 * np + 1], a[j], b[2], b[3]);
          }
        }
      }
    }
    c = c_next;
    c_next = c_after;
    parity ^= 1;
  }
  __syncthreads();  // final m / l visible to every warp

  finish_rows<HT, PT, NV, kThreads>(p, o, k_s, m_s, l_s, t, split, head0, pv_tile0, dim0, tid,
                                    lane);
}

// Sum (kMax false) or max of v over the CTA's 128 threads (red: 4 floats of shared memory).
template <bool kMax>
__device__ __forceinline__ float cta128_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, u) : v + u;
  }
  __syncthreads();  // red is free (a previous reduction's reads are done)
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  return kMax ? fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]))
              : (red[0] + red[1]) + (red[2] + red[3]);
}

constexpr int kCombineFastSplits = 12;  // splits the one-pass merge handles (every small run)
constexpr int kCombineWeights =
    1024;  // splits whose weights the general merge holds (more: recomputed)
// acc += w * one split's 4 dims of partial O.
__device__ __forceinline__ void combine_add(float* acc, float4 v, float w) {
  acc[0] += v.x * w;
  acc[1] += v.y * w;
  acc[2] += v.z * w;
  acc[3] += v.w * w;
}
// The merged row's partial unit at d (dims as partial_unit_lane maps them), normalised (sink), and
// its lse / max_logits (thread 0).
__device__ __forceinline__ void combine_finish(const attention_params& p, int64_t t, int h, int d,
                                               const float* acc, float m, float l) {
  const float factor = row_output_factor(p, h, m, l);
  const int d0 = partial_unit_first_dim(d);
  store_out(p, t, h, d0, pack_bf16(acc[0] * factor, acc[1] * factor));
  store_out(p, t, h, d0 + 8, pack_bf16(acc[2] * factor, acc[3] * factor));
  if (threadIdx.x == 0) write_row_stats(p, t, h, m, l);
}
// Merges the partials of one (token, head) when there are at most kCombineFastSplits splits (every
// small run): each thread loads every split's (max, sum) pair itself (the same addresses across the
// CTA: one L2 round trip, served to all warps) next to its 4 dims of every split's partial O, so
// the whole merge waits on a single round trip, with no shared memory and no barriers: against the
// general merge, 2-7 % off every b=2 case on an H200. Landing the same loads in shared memory by
// cp.async (30 registers instead of ~100, so more CTAs resident) was slower: the merge waits on its
// own chain, not on how many CTAs wait at once (docs/tried.md, C5 and C9).
__device__ __forceinline__ void combine_row_few(const attention_params& p, int64_t t, int h,
                                                const float* ml, int64_t ml_step, const float* po,
                                                int64_t o_step, int d) {
  const int S = p.num_splits;
  float4 v[kCombineFastSplits];
  float2 stat[kCombineFastSplits];
#pragma unroll
  for (int s = 0; s < kCombineFastSplits; ++s) {
    if (s < S) {
      v[s] = __ldcg(reinterpret_cast<const float4*>(po + s * o_step));
      stat[s] = __ldcg(reinterpret_cast<const float2*>(ml + s * ml_step));
    }
  }
  float m = -INFINITY;
#pragma unroll
  for (int s = 0; s < kCombineFastSplits; ++s) {
    if (s < S) m = fmaxf(m, stat[s].x);
  }
  const float m_use = softmax_max_use(m);
  float l = 0.0f;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < kCombineFastSplits; ++s) {
    if (s >= S) break;
    const float w = split_weight(stat[s].x, stat[s].y, m_use);
    if (w < 0.0f) continue;  // the split saw no valid key: its partial O is zero
    l += stat[s].y * w;
    combine_add(acc, v[s], w);
  }
  combine_finish(p, t, h, d, acc, m, l);
}

// Merges the partials of one (token, head) when there are more than kCombineFastSplits splits:
// every split's (max, sum) is read in parallel (one split per thread), the weights go through
// shared memory, and the partial O loads are unrolled so that many are in flight.
__device__ __forceinline__ void combine_row_many(const attention_params& p, int64_t t, int h,
                                                 const float* ml, int64_t ml_step, const float* po,
                                                 int64_t o_step, int d) {
  const int S = p.num_splits;
  __shared__ float weight[kCombineWeights];
  __shared__ float red[4];
  // Partial O: eight splits' loads in flight at a time, the first eight issued before the weights
  // are known. (A slot whose weight turns out unused is read all the same: it lies inside the
  // partials of this run's splits, and its values are never used.)
  constexpr int kBatch = 8;
  float4 v[kBatch];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (s0 + k < S) v[k] = *reinterpret_cast<const float4*>(po + (s0 + k) * o_step);
    }
  };
  load_batch(0);
  float m = -INFINITY;
  for (int s = threadIdx.x; s < S; s += 128) m = fmaxf(m, ml[s * ml_step]);
  m = cta128_reduce<true>(m, red);
  const float m_use = softmax_max_use(m);
  auto weight_of = [&](int s) { return split_weight(ml[s * ml_step], ml[s * ml_step + 1], m_use); };
  float l = 0.0f;
  for (int s = threadIdx.x; s < S; s += 128) {
    const float w = weight_of(s);
    if (s < kCombineWeights) weight[s] = w;
    l += ml[s * ml_step + 1] * (w < 0.0f ? 0.0f : w);
  }
  l = cta128_reduce<false>(l, red);  // its barriers also publish the weights
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (l != 0.0f) {
    for (int s0 = 0; s0 < S; s0 += kBatch) {
      if (s0 > 0) load_batch(s0);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int s = s0 + k;
        if (s >= S) break;
        const float w = s < kCombineWeights ? weight[s] : weight_of(s);
        if (w < 0.0f) continue;  // the split saw no valid key: its partial O is zero
        combine_add(acc, v[k], w);
      }
    }
  }
  combine_finish(p, t, h, d, acc, m, l);
}

// Merges the split partials of one (token, head): 128 threads x 4 dims. Two kernels, so that the
// one-pass merge's CTAs (kFew) carry neither the general merge's registers nor its shared memory.
template <bool kFew>
__global__ void __launch_bounds__(128) combine_kernel(const attention_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::
                   : "memory");  // the attention grid's partials are complete
#endif
  const int64_t th = blockIdx.x;
  const int h = static_cast<int>(th % p.num_heads);
  const int64_t t = th / p.num_heads;
  const int S = p.num_splits;
  const float* ml = p.partial_ml + (t * S * p.num_heads + h) * 2;
  const int64_t ml_step = static_cast<int64_t>(p.num_heads) * 2;
  const int d = threadIdx.x * 4;
  const float* po = p.partial_o + (t * S * p.num_heads + h) * kHeadDim + d;
  const int64_t o_step = static_cast<int64_t>(p.num_heads) * kHeadDim;
  if constexpr (kFew) {
    combine_row_few(p, t, h, ml, ml_step, po, o_step, d);
  } else {
    combine_row_many(p, t, h, ml, ml_step, po, o_step, d);
  }
}

template <int HEAD_TILES, int CHUNK>
cudaError_t launch_tiles(const attention_params& p, size_t smem, cudaStream_t stream) {
  const int64_t ctas = item_count(p);
  constexpr int threads = attention_warps(HEAD_TILES, CHUNK) * 32;
  if (p.cache[0].layout == DSV4_KV_LAYOUT_FP16) {
    attention_kernel<HEAD_TILES, kHeadDim, CHUNK, true>
        <<<static_cast<unsigned>(ctas), threads, smem, stream>>>(p);
  } else if (p.head_dim_qk == kV32HeadDimQK) {
    attention_kernel<HEAD_TILES, kV32HeadDimQK, CHUNK>
        <<<static_cast<unsigned>(ctas), threads, smem, stream>>>(p);
  } else {
    attention_kernel<HEAD_TILES, kHeadDim, CHUNK>
        <<<static_cast<unsigned>(ctas), threads, smem, stream>>>(p);
  }
  return cudaGetLastError();
}

template <int HEAD_TILES, int CHUNK>
cudaError_t configure_tiles(int bytes) {
  cudaError_t err = cudaFuncSetAttribute(attention_kernel<HEAD_TILES, kHeadDim, CHUNK>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(attention_kernel<HEAD_TILES, kHeadDim, CHUNK, true>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(attention_kernel<HEAD_TILES, kV32HeadDimQK, CHUNK>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

size_t attention_smem_bytes(int head_tiles, int head_dim_qk, size_t stage_bytes, int chunk) {
  return make_smem_map(head_tiles, head_dim_qk, stage_bytes, chunk).total;
}

template <int HEAD_TILES, int CHUNK>
int resident_ctas(const kernel_config& c, size_t smem) {
  int n = 0;
  const int threads = attention_warps(HEAD_TILES, CHUNK) * 32;
  const cudaError_t err =
      c.layout == DSV4_KV_LAYOUT_FP16
          ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, attention_kernel<HEAD_TILES, kHeadDim, CHUNK, true>, threads, smem)
      : c.head_dim_qk == kV32HeadDimQK
          ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, attention_kernel<HEAD_TILES, kV32HeadDimQK, CHUNK>, threads, smem)
          : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, attention_kernel<HEAD_TILES, kHeadDim, CHUNK>, threads, smem);
  return err == cudaSuccess && n > 0 ? n : 1;
}

int attention_ctas_per_sm(const kernel_config& c, size_t smem_bytes) {
  if (c.chunk == kSmallChunkKeys) return resident_ctas<1, kSmallChunkKeys>(c, smem_bytes);
  switch (c.head_tiles) {
    case 1:
      return resident_ctas<1, kChunkKeys>(c, smem_bytes);
    case 2:
      return resident_ctas<2, kChunkKeys>(c, smem_bytes);
    default:
      return resident_ctas<4, kChunkKeys>(c, smem_bytes);
  }
}

// The kernel table's hooks (kernels.h).
bool mma_serves(int cc_major, int head_dim_qk, uint32_t main_layout, uint32_t extra_layout) {
  const bool dims = head_dim_qk == kHeadDim || head_dim_qk == kV32HeadDimQK;
  return cc_major >= 8 && dims && layout_is_known(main_layout) &&
         (extra_layout == DSV4_KV_LAYOUT_NONE || layout_is_known(extra_layout));
}
bool mma_compiled() { return true; }  // sm_80..89 and every later GPU run its PTX
size_t mma_smem_bytes(const kernel_config& c) {
  return attention_smem_bytes(c.head_tiles, c.head_dim_qk, c.stage_bytes, c.chunk);
}
cudaError_t mma_configure(const kernel_config& c) {
  const int bytes = static_cast<int>(mma_smem_bytes(c));
  if (c.chunk == kSmallChunkKeys)
    return c.head_tiles == 1 ? configure_tiles<1, kSmallChunkKeys>(bytes) : cudaErrorInvalidValue;
  switch (c.head_tiles) {
    case 1:
      return configure_tiles<1, kChunkKeys>(bytes);
    case 2:
      return configure_tiles<2, kChunkKeys>(bytes);
    case 4:
      return configure_tiles<4, kChunkKeys>(bytes);
    default:
      return cudaErrorInvalidValue;
  }
}
cudaError_t mma_occupancy(const kernel_config& c, int sm_count, int* ctas_per_sm, int resident[2]) {
  *ctas_per_sm = attention_ctas_per_sm(c, mma_smem_bytes(c));
  resident[0] = resident[1] = 0;  // no persistent form
  return cudaSuccess;
}

// The attention kernel and, when num_splits > 1, the combine kernel.
cudaError_t mma_launch(const attention_params& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  const size_t smem_bytes = attention_smem_bytes(p.head_tiles, p.head_dim_qk,
                                                 static_cast<size_t>(p.stage_bytes), p.chunk_keys);
  cudaError_t err;
  if (p.chunk_keys == kSmallChunkKeys) {
    if (p.head_tiles != 1) return cudaErrorInvalidValue;
    err = launch_tiles<1, kSmallChunkKeys>(p, smem_bytes, stream);
  } else {
    switch (p.head_tiles) {
      case 1:
        err = launch_tiles<1, kChunkKeys>(p, smem_bytes, stream);
        break;
      case 2:
        err = launch_tiles<2, kChunkKeys>(p, smem_bytes, stream);
        break;
      case 4:
        err = launch_tiles<4, kChunkKeys>(p, smem_bytes, stream);
        break;
      default:
        return cudaErrorInvalidValue;
    }
  }
  if (err != cudaSuccess || p.num_splits == 1) return err;
  return combine_launch(p, stream);
}

}  // namespace

const kernel_family kMmaKernels = {"mma",         mma_serves,    mma_compiled, mma_smem_bytes,
                                   mma_configure, mma_occupancy, mma_launch};

cudaError_t combine_launch(const attention_params& p, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  const bool few = p.num_splits <= kCombineFastSplits;
  if (!p.dependent_combine) {
    if (few) {
      combine_kernel<true><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
    } else {
      combine_kernel<false><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
    }
    return cudaGetLastError();
  }
  // Programmatic dependent launch: the combine grid's launch overlaps the attention grid's tail
  // (small runs, where the combine matters, are launch-latency bound).
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  add_programmatic_dependency(&cfg, attr);
  return few ? cudaLaunchKernelEx(&cfg, combine_kernel<true>, p)
             : cudaLaunchKernelEx(&cfg, combine_kernel<false>, p);
}

}  // namespace cuda
}  // namespace dsv4
