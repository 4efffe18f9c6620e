// Sparse MLA attention for Hopper (sm_90a): warp-specialised, wgmma, 64 heads per CTA.
//
// One CTA = one (token, key split, 64-head group); 384 threads in three warpgroups:
//   WG2 (producer): gathers the chunk's key rows (64 list positions) from the caches into
//       registers, dequantises them to bf16 and stores them into one of two K buffers (128-byte
//       swizzled wgmma layout); a per-buffer mbarrier pair (full / empty) hands buffers over.
//   WG0: S = Q K^T (wgmma m64n64k16, Q and K from shared memory), online softmax in registers,
//       P (bf16) to shared memory for WG1, O[:, 0:256] += P V with P straight from registers.
//   WG1: O[:, 256:512] += P V with P from shared memory (alpha from WG0 rescales O first).
// V is the K buffer itself read as an MN-major operand (the same bytes, no transpose).
// For 65..128 heads two CTAs (the two head groups of a token and split) form a cluster: each
// producer dequantises half of every chunk and writes it into both CTAs' buffers (distributed
// shared memory), so each key row is gathered and converted once for all 128 heads.
// Numerics match attention.cu: logits scaled in fp32 (base 2), P rounded to bf16, fp32 O and sums.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <type_traits>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "device_common.cuh"
#include "kernels.h"
#include "wgmma_ops.cuh"

namespace dsv4 {
namespace cuda {
namespace {

constexpr int kRows = 64;                          // heads per CTA (the wgmma M)
constexpr int kKeys = 64;                          // list positions per chunk
constexpr int kThreads = 384;                      // three warpgroups
constexpr int kAtomBytes = 128;                    // one swizzle row: 64 bf16
constexpr int kColBytes = kRows * kAtomBytes;      // one 64-dim column of a 64-row operand (8 KB)
constexpr int kOperandBytes = (kHeadDim / 64) * kColBytes;  // Q or one K buffer (64 KB)
constexpr int kPBytes = kRows * kAtomBytes;        // P: 64 heads x 64 keys bf16 (8 KB)
constexpr int kOutStride = 2 * kHeadDim + 16;      // bf16 output staging row (padded: no bank conflicts)

// Shared-memory map (offsets from a 1024-byte aligned base).
struct sm90_map {
  static constexpr int q = 0;
  static constexpr int k = q + kOperandBytes;              // two K buffers
  static constexpr int p = k + 2 * kOperandBytes;          // two P buffers
  static constexpr int alpha = p + 2 * kPBytes;            // [2][64] fp32
  static constexpr int valid = alpha + 2 * kRows * 4;      // [2][64] bytes
  static constexpr int m_fin = valid + 2 * kKeys;          // [64] fp32
  static constexpr int l_fin = m_fin + kRows * 4;          // [64] fp32
  static constexpr int bars = l_fin + kRows * 4;           // full[2], empty[2] (8 bytes each)
  static constexpr int counts = bars + 4 * 8;              // list counts [2]
  static constexpr int total = counts + 16;
};
static_assert(kRows * kOutStride <= 2 * kOperandBytes, "output staging fits in the K buffers");
constexpr size_t kSmemBytes = sm90_map::total + 1024;      // + alignment slack

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Byte offset of 16-byte unit `unit` (8 dims) of row `row` in a 128B-swizzled 64-row operand:
// 64-dim columns of 8 KB, rows of 128 bytes, the unit's position XORed with row % 8 (the
// hardware's Swizzle<3,4,3> on a 1024-byte aligned base).
__device__ __forceinline__ uint32_t sw128(int row, int unit) {
  return static_cast<uint32_t>((unit >> 3) * kColBytes + row * kAtomBytes + (((unit & 7) ^ (row & 7)) << 4));
}

// wgmma shared-memory descriptor, 128-byte swizzle. K-major operands ignore `lbo`; MN-major ones
// use it as the stride between 64-element column blocks; `sbo` is the stride between 8-row groups.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_cluster() {
  asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Arrives on the barrier at the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// Default (CTA-scope) semantics: an acquire at cluster scope invalidates L1 on every wait (ncu:
// CCTL.IVALL was a third of the stall samples). Remote writes are ordered by the writer's proxy fence
// and its arrive on this CTA's barrier.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t map_remote(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_remote16(uint32_t addr, uint4 v) {
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void st_remote8(uint32_t addr, uint8_t v) {
  asm volatile("st.shared::cluster.u8 [%0], %1;\n" ::"r"(addr), "h"(static_cast<uint16_t>(v)) : "memory");
}
template <int N>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint4 ld_nc16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The chunk sequence of one CTA: chunks of the main list, then of the extra list, restricted to
// this split's range and skipping chunks past a list's candidate count. Every role walks it alike.
struct chunk_walk {
  const attention_params& p;
  const int32_t* counts;
  int c_end;
  __device__ int list_of(int c) const { return c < p.chunks[0] ? 0 : 1; }
  __device__ int pos0(int c) const { return (c < p.chunks[0] ? c : c - p.chunks[0]) * kKeys; }
  __device__ int next_active(int c) const {
    while (c < c_end && pos0(c) >= counts[list_of(c)]) ++c;
    return c;
  }
};

// Producer: each warp converts whole rows, lanes over contiguous 16-byte pieces of the row (one
// or two coalesced loads per lane) and each lane writes 2 of the row's 64 swizzled 16-byte units
// (8 lanes fill one 128-byte swizzle row: no bank conflicts). Per layout, lane l holds:
//   584 B FP8: lanes 0-27 the 16 fp8 bytes of dims [16l, 16l+16) (UE8M0 tile l/4), lanes 28-31 two
//              16-byte pieces of the bf16 rope (dims 448 + 16(l-28) ...);
//   per-tensor FP8: the 16 fp8 bytes of dims [16l, 16l+16) (scale 1, applied to the logits);
//   bf16: units l and l + 32.
struct row_piece {
  uint4 a, b;
  uint32_t e;  // UE8M0 exponent byte (FP8 layouts)
};

template <uint32_t L>
__device__ __forceinline__ void load_piece(row_piece& r, const uint8_t* src, const uint8_t* sc, int lane) {
  if constexpr (L == DSV4_KV_LAYOUT_FP8_V4_584B) {
    if (lane < 28) {
      r.a = ld_nc16(src + 16 * lane);
      r.e = __ldg(sc + lane / 4);
    } else {
      r.a = ld_nc16(src + kNopeDim + 32 * (lane - 28));
      r.b = ld_nc16(src + kNopeDim + 32 * (lane - 28) + 16);
    }
  } else if constexpr (L == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
    r.a = ld_nc16(src + 16 * lane);
    r.e = 127u;
  } else {
    r.a = ld_nc16(src + 16 * lane);
    r.b = ld_nc16(src + 512 + 16 * lane);
  }
}

// Two fp8x8 halves of a 16-byte piece -> two bf16 units (the integer path when exact).
__device__ __forceinline__ void convert_piece(const uint4& w, uint32_t e, uint4* u0, uint4* u1) {
  const uint2 lo = make_uint2(w.x, w.y);
  const uint2 hi = make_uint2(w.z, w.w);
  if (pow2_scale_is_fast(e) && (e4m3x4_has_nan(w.x) | e4m3x4_has_nan(w.y) | e4m3x4_has_nan(w.z) |
                                e4m3x4_has_nan(w.w)) == 0u) {
    *u0 = fp8x8_to_bf16x8_pow2_fast(lo, e);
    *u1 = fp8x8_to_bf16x8_pow2_fast(hi, e);
  } else {
    const float scale = ue8m0_to_f32(static_cast<uint8_t>(e));
    *u0 = fp8x8_to_bf16x8(lo, scale);
    *u1 = fp8x8_to_bf16x8(hi, scale);
  }
}

// Stores a lane's two units of `row` (zeros for an invalid row) into the buffer(s): `local` is this
// CTA's buffer, `remote` (CLUSTER > 1) the peer's shared::cluster address of the same buffer.
template <uint32_t L, int CLUSTER>
__device__ __forceinline__ void store_piece(const row_piece& r, bool valid, int row, int lane, uint8_t* local,
                                            uint32_t remote) {
  int unit0, unit1;
  uint4 u0 = make_uint4(0, 0, 0, 0);
  uint4 u1 = u0;
  if constexpr (L == DSV4_KV_LAYOUT_BF16) {
    unit0 = lane;
    unit1 = lane + 32;
    if (valid) {
      u0 = r.a;
      u1 = r.b;
    }
  } else {
    unit0 = 2 * lane;
    unit1 = 2 * lane + 1;
    if (valid) {
      if (L == DSV4_KV_LAYOUT_FP8_V4_584B && lane >= 28) {
        u0 = r.a;
        u1 = r.b;
      } else {
        convert_piece(r.a, r.e, &u0, &u1);
      }
    }
  }
  const uint32_t off0 = sw128(row, unit0);
  const uint32_t off1 = sw128(row, unit1);
  *reinterpret_cast<uint4*>(local + off0) = u0;
  *reinterpret_cast<uint4*>(local + off1) = u1;
  if constexpr (CLUSTER > 1) {
    st_remote16(remote + off0, u0);
    st_remote16(remote + off1, u1);
  }
}

// Resolves list position `pos` of token t (count = the list's candidate count) to its row and
// scale pointers; nullptr when the candidate is not valid (spec 2.3).
__device__ __forceinline__ void resolve_index(const attention_params& p, int li, int32_t idx, const uint8_t** src,
                                              const uint8_t** sc) {
  *src = nullptr;
  *sc = nullptr;
  const dsv4_mod_cache& cache = p.cache[li];
  if (!slot_is_valid(idx, cache)) return;
  int32_t e;
  const uint8_t* block = slot_block_base32(cache, idx, &e);
  *src = block + entry_data_offset(cache.layout, e);
  *sc = block + v4_scale_offset(cache.block_size, e);
}

// The list entry of chunk c at the position of this lane's row (-1 past the candidate count or for
// lanes beyond the warp's rows).
__device__ __forceinline__ int32_t load_chunk_index(const attention_params& p, const chunk_walk& walk, int c,
                                                    int64_t t, int row) {
  if (c >= walk.c_end) return -1;
  const int li = walk.list_of(c);
  const int pos = walk.pos0(c) + row;
  return pos < walk.counts[li] ? list_entry(p.list[li], t, p.seq_q, pos) : -1;
}

// One chunk: the warp's RPW rows in batches of 8 (loads of a batch in flight together).
template <uint32_t L, int CLUSTER, int RPW>
__device__ __forceinline__ void produce_chunk(const attention_params& p, int li, int32_t idx, int lane, int row0,
                                              uint8_t* kbuf, uint32_t kbuf_remote, uint8_t* valid,
                                              uint32_t valid_remote, uint32_t empty_bar, uint32_t empty_parity) {
  // Lane j < RPW resolves row row0 + j; rows are broadcast to the whole warp below.
  const uint8_t* my_src;
  const uint8_t* my_sc;
  resolve_index(p, li, idx, &my_src, &my_sc);
  constexpr int kBatch = 8;
#pragma unroll
  for (int b0 = 0; b0 < RPW; b0 += kBatch) {
    row_piece r[kBatch];
    bool ok[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const uint8_t* src = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_src), b0 + j));
      const uint8_t* sc = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_sc), b0 + j));
      ok[j] = src != nullptr;
      if (ok[j]) load_piece<L>(r[j], src, sc, lane);
    }
    if (b0 == 0) {
      mbar_wait(empty_bar, empty_parity);  // the buffer (and its flags) of two chunks ago is consumed
      if (lane < RPW) {
        valid[row0 + lane] = my_src != nullptr ? 1 : 0;
        if constexpr (CLUSTER > 1) st_remote8(valid_remote + row0 + lane, my_src != nullptr ? 1 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) store_piece<L, CLUSTER>(r[j], ok[j], row0 + b0 + j, lane, kbuf, kbuf_remote);
  }
}

// What every role of one CTA knows.
struct cta_state {
  uint8_t* smem;   // 1024-byte aligned base (generic)
  uint32_t base;   // the same, as a shared-window address
  int64_t t;       // token
  int split;
  int head0;       // first head of this CTA's group
  int c_begin;
  uint32_t peer;   // cluster: the other CTA's rank
  uint32_t full_bar, empty_bar;  // [b] at + 8b
};

// The producer warpgroup: warp w converts rows [row_base + w RPW, + RPW) of every chunk; the list
// entries of the next chunk are loaded while the current one is converted.
template <uint32_t L, int CLUSTER>
__device__ __forceinline__ void producer(const attention_params& p, const cta_state& st, const chunk_walk& walk,
                                         uint32_t rank, int warp, int lane) {
  constexpr int kRpw = kKeys / CLUSTER / 4;  // rows per warp: 16, or 8 in a CTA pair
  const int row0 = (CLUSTER > 1 ? static_cast<int>(rank) * (kKeys / 2) : 0) + warp * kRpw;
  const int my_row = row0 + (lane < kRpw ? lane : 0);
  int c = walk.next_active(st.c_begin);
  int32_t idx = lane < kRpw ? load_chunk_index(p, walk, c, st.t, my_row) : -1;
  for (int i = 0; c < walk.c_end; ++i) {
    const int c_next = walk.next_active(c + 1);
    const int32_t idx_next = lane < kRpw ? load_chunk_index(p, walk, c_next, st.t, my_row) : -1;
    const int b = i & 1;
    const uint32_t parity = ((i >> 1) & 1) ^ 1;  // the first use of a buffer does not wait
    uint8_t* kbuf = st.smem + sm90_map::k + b * kOperandBytes;
    uint8_t* valid = st.smem + sm90_map::valid + b * kKeys;
    const uint32_t kbuf_remote = CLUSTER > 1 ? map_remote(smem_addr(kbuf), st.peer) : 0u;
    const uint32_t valid_remote = CLUSTER > 1 ? map_remote(smem_addr(valid), st.peer) : 0u;
    produce_chunk<L, CLUSTER, kRpw>(p, walk.list_of(c), idx, lane, row0, kbuf, kbuf_remote, valid, valid_remote,
                                    st.empty_bar + 8 * b, parity);
    // The tensor cores read the buffers through the async proxy.
    if constexpr (CLUSTER > 1) {
      fence_proxy_async_cluster();
      mbar_arrive(st.full_bar + 8 * b);
      mbar_arrive_remote(st.full_bar + 8 * b, st.peer);
    } else {
      fence_proxy_async();
      mbar_arrive(st.full_bar + 8 * b);
    }
    c = c_next;
    idx = idx_next;
  }
}

// Normalises (sink) and writes this warpgroup's half of O, or its split partials. WG0 has
// published the final row max and sum in m_fin / l_fin before the first barrier.
__device__ __forceinline__ void epilogue(const attention_params& p, const cta_state& st, int wg, int tid, int row0,
                                         int tig, const float* o) {
  const float* m_fin = reinterpret_cast<const float*>(st.smem + sm90_map::m_fin);
  const float* l_fin = reinterpret_cast<const float*>(st.smem + sm90_map::l_fin);
  named_sync(3, 256);  // final m / l visible; every wgmma of both warpgroups is complete
  const int dim0 = wg * 256;
  const int64_t t = st.t;
  if (p.num_splits == 1) {
    uint8_t* stage = st.smem + sm90_map::k;  // the K buffers are free now
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 8 * h;
      const int head = st.head0 + r;
      const float factor = row_output_factor(p, head, m_fin[r], l_fin[r]);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int d = dim0 + 8 * j + 2 * tig;
        *reinterpret_cast<uint32_t*>(stage + r * kOutStride + 2 * d) =
            pack_bf16(o[4 * j + 2 * h] * factor, o[4 * j + 2 * h + 1] * factor);
      }
    }
    named_sync(3, 256);
    constexpr int kUnits = kHeadDim / 8;
    for (int u = tid; u < kRows * kUnits; u += 256) {
      const int r = u / kUnits;
      const int d = (u % kUnits) * 8;
      const int head = st.head0 + r;
      if (head >= p.num_heads) continue;
      store_out8(p, t, head, d, *reinterpret_cast<const uint4*>(stage + r * kOutStride + 2 * d));
    }
    if (tid < kRows && st.head0 + tid < p.num_heads) write_row_stats(p, t, st.head0 + tid, m_fin[tid], l_fin[tid]);
  } else {
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = st.head0 + row0 + 8 * h;
      if (head >= p.num_heads) continue;
      float* po = p.partial_o + (pbase + head) * kHeadDim;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int d = dim0 + 8 * j + 2 * tig;
        *reinterpret_cast<float2*>(po + d) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
    }
    if (tid < kRows && st.head0 + tid < p.num_heads) {
      float* pml = p.partial_ml + (pbase + st.head0 + tid) * 2;
      pml[0] = m_fin[tid];
      pml[1] = l_fin[tid];
    }
  }
}

// Tells the producers of the cluster that buffer b is consumed by this warpgroup.
template <int CLUSTER>
__device__ __forceinline__ void release_buffer(const cta_state& st, int b, int wtid) {
  if (wtid == 0) {
    mbar_arrive(st.empty_bar + 8 * b);
    if constexpr (CLUSTER > 1) mbar_arrive_remote(st.empty_bar + 8 * b, st.peer);
  }
}

// WG0: S = Q K^T, softmax, P to WG1, O[:, 0:256] += P V.
template <int CLUSTER>
__device__ __forceinline__ void consumer0(const attention_params& p, const cta_state& st, const chunk_walk& walk,
                                          int tid) {
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
  const uint32_t q_base = st.base + sm90_map::q;
  int i = 0;
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const int li = walk.list_of(c);
    const uint32_t k_base = st.base + sm90_map::k + b * kOperandBytes;
    mbar_wait(st.full_bar + 8 * b, (i >> 1) & 1);
    // S = Q K^T over 512 dims: 32 k-steps of 16 (4 per 64-dim column, 32 bytes apart).
    float s[32];
    wgmma_fence_operands32(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const uint32_t off = (ks / 4) * kColBytes + (ks % 4) * 32;
      wgmma_m64n64_ss(s, smem_desc(q_base + off, 16, 1024), smem_desc(k_base + off, 16, 1024), ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands32(s);
    // Online softmax (base 2). s[4j + {0,1}]: row0, keys 8j + 2 tig + {0,1}; s[4j + {2,3}]: row0 + 8.
    const float scl = p.logit_scale_log2[li];
    const float vs = p.value_scale[li];
    const uint8_t* valid = st.smem + sm90_map::valid + b * kKeys;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int key = 8 * j + 2 * tig;
      const bool v0 = valid[key] != 0;
      const bool v1 = valid[key + 1] != 0;
      s[4 * j + 0] = v0 ? s[4 * j + 0] * scl : -INFINITY;
      s[4 * j + 1] = v1 ? s[4 * j + 1] * scl : -INFINITY;
      s[4 * j + 2] = v0 ? s[4 * j + 2] * scl : -INFINITY;
      s[4 * j + 3] = v1 ? s[4 * j + 3] * scl : -INFINITY;
      mx[0] = fmaxf(mx[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float a[2];
    float m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
      a[h] = exp2f(m_run[h] - m_use[h]);
      m_run[h] = m_new;
    }
    uint32_t pk[16];  // P as bf16 pairs: pk[2j] row0, pk[2j+1] row0 + 8 (keys 8j + 2 tig)
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float e0 = exp2f(s[4 * j + 2 * h] - m_use[h]);
        const float e1 = exp2f(s[4 * j + 2 * h + 1] - m_use[h]);
        sum[h] += e0 + e1;
        const __nv_bfloat162 v = __floats2bfloat162_rn(e0 * vs, e1 * vs);  // RNE, as f32_to_bf16
        pk[2 * j + h] = *reinterpret_cast<const uint32_t*>(&v);
      }
    }
    l_run[0] = l_run[0] * a[0] + sum[0];
    l_run[1] = l_run[1] * a[1] + sum[1];
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
    // O[:, 0:256] = alpha O + P V (P from registers: the S accumulator layout is the A layout).
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= a[0];
      o[4 * j + 1] *= a[0];
      o[4 * j + 2] *= a[1];
      o[4 * j + 3] *= a[1];
    }
    wgmma_fence_operands128(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma_m64n256_rs_tb(o, pk + 4 * kk, smem_desc(k_base + kk * 16 * kAtomBytes, kColBytes, 1024), 1);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands128(o);
    release_buffer<CLUSTER>(st, b, tid);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if (tig == 0) {
    float* m_fin = reinterpret_cast<float*>(st.smem + sm90_map::m_fin);
    float* l_fin = reinterpret_cast<float*>(st.smem + sm90_map::l_fin);
    m_fin[row0] = m_run[0];
    m_fin[row0 + 8] = m_run[1];
    l_fin[row0] = l_run[0];
    l_fin[row0 + 8] = l_run[1];
  }
  epilogue(p, st, 0, tid, row0, tig, o);
}

// WG1: O[:, 256:512] += P V with P and alpha from WG0.
template <int CLUSTER>
__device__ __forceinline__ void consumer1(const attention_params& p, const cta_state& st, const chunk_walk& walk,
                                          int tid) {
  const int wtid = tid - 128;
  const int warp = wtid / 32;
  const int lane = tid % 32;
  const int row0 = warp * 16 + lane / 4;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  int i = 0;
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const uint32_t k_base = st.base + sm90_map::k + b * kOperandBytes;
    const uint32_t p_base = st.base + sm90_map::p + b * kPBytes;
    mbar_wait(st.full_bar + 8 * b, (i >> 1) & 1);
    named_sync(1 + b, 256);  // P and alpha of this chunk are ready
    const float* alpha = reinterpret_cast<const float*>(st.smem + sm90_map::alpha) + b * kRows;
    const float a0 = alpha[row0];
    const float a1 = alpha[row0 + 8];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
    wgmma_fence_operands128(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma_m64n256_ss_tb(o, smem_desc(p_base + kk * 32, 16, 1024),
                          smem_desc(k_base + 4 * kColBytes + kk * 16 * kAtomBytes, kColBytes, 1024), 1);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands128(o);
    release_buffer<CLUSTER>(st, b, wtid);
  }
  epilogue(p, st, 1, tid, row0, lane % 4, o);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// L: the layout of both caches (one layout per kernel: a loop that dispatches between layouts
// keeps every layout's addressing live at once and spills).
template <uint32_t L, int CLUSTER>
__global__ void __launch_bounds__(kThreads, 1) attention_sm90_kernel(const __grid_constant__ attention_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  cta_state st;
  // Swizzled operands need a 1024-byte aligned base.
  const uint32_t raw_addr = smem_addr(smem_raw);
  st.smem = smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);
  st.base = smem_addr(st.smem);
  int32_t* counts = reinterpret_cast<int32_t*>(st.smem + sm90_map::counts);
  st.full_bar = st.base + sm90_map::bars;
  st.empty_bar = st.full_bar + 16;

  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int tid = threadIdx.x;
  const int64_t cta = blockIdx.x;
  const int group = static_cast<int>(cta % p.head_groups);
  st.split = static_cast<int>((cta / p.head_groups) % p.num_splits);
  st.t = cta / (static_cast<int64_t>(p.head_groups) * p.num_splits);
  st.head0 = group * kRows;
  st.c_begin = st.split * p.chunks_per_split;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0u;
  st.peer = rank ^ 1u;
  const int64_t t = st.t;

  if (tid < 2) {
    int64_t n = 0;
    if (p.list[tid].indices != nullptr && p.cache[tid].base != nullptr) {
      n = list_row_count(p.list[tid], t, p.seq_q);
      n = n < p.width[tid] ? n : p.width[tid];
    }
    counts[tid] = static_cast<int32_t>(n);
  }
  if (tid == 32) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(st.full_bar + 8 * b, 128 * CLUSTER);  // every producer thread of the cluster
      mbar_init(st.empty_bar + 8 * b, 2 * CLUSTER);   // one thread per consumer warpgroup of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q tile (64 heads, swizzled; padding heads zero): 16-byte units, cp.async when aligned.
  {
    constexpr int units = kHeadDim / 8;
    for (int u = tid; u < kRows * units; u += kThreads) {
      const int r = u / units;
      const int k = u % units;
      const int h = st.head0 + r;
      uint8_t* dst = st.smem + sm90_map::q + sw128(r, k);
      if (h >= p.num_heads) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      } else if (p.q_is_fp8) {
        const uint8_t* src = static_cast<const uint8_t*>(p.q.data) + token_offset(p.q, t, p.seq_q, h) + 8 * k;
        uint2 raw;
        uint8_t* rb = reinterpret_cast<uint8_t*>(&raw);
        for (int i = 0; i < 8; ++i) rb[i] = src[i];
        *reinterpret_cast<uint4*>(dst) = fp8x8_to_bf16x8_pow2(raw, 127u);
      } else {
        const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + token_offset(p.q, t, p.seq_q, h) + 8 * k;
        if (p.q_aligned16) {
          cp_async16(dst, src);
        } else {
          uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
          for (int i = 0; i < 8; ++i) d16[i] = src[i];
        }
      }
    }
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();
  }
  if constexpr (CLUSTER > 1) {
    cluster_sync();  // barriers initialised in both CTAs before any remote arrive
  } else {
    __syncthreads();
  }

  const int total_chunks = p.chunks[0] + p.chunks[1];
  const chunk_walk walk{p, counts, min(total_chunks, st.c_begin + p.chunks_per_split)};
  const int wg = tid / 128;
  // One branch per warpgroup role, so each keeps its own register budget (setmaxnreg). The CTA
  // holds 3 x 168 registers per thread slot (the launch bound); the budgets must not exceed that
  // sum, or the increase waits forever.
  if (wg == 0) {
    set_max_registers_inc<192>();
    consumer0<CLUSTER>(p, st, walk, tid);
  } else if (wg == 1) {
    set_max_registers_dec<160>();
    consumer1<CLUSTER>(p, st, walk, tid);
  } else {
    set_max_registers_dec<152>();
    producer<L, CLUSTER>(p, st, walk, rank, (tid % 128) / 32, tid % 32);
  }
  if constexpr (CLUSTER > 1) cluster_sync();  // the peer may still arrive on / write to this CTA
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <uint32_t L>
cudaError_t configure_layout(int bytes) {
  cudaError_t err = cudaFuncSetAttribute(attention_sm90_kernel<L, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(attention_sm90_kernel<L, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <uint32_t L>
cudaError_t launch_layout(const attention_params& p, cudaLaunchConfig_t* cfg) {
  if (p.head_groups == 1) return cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, 1>, p);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
  return cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, 2>, p);
}

}  // namespace

size_t attention_sm90_smem_bytes() { return kSmemBytes; }

bool attention_sm90_layouts(uint32_t main_layout, uint32_t extra_layout) {
  const bool known = main_layout == DSV4_KV_LAYOUT_FP8_V4_584B || main_layout == DSV4_KV_LAYOUT_BF16 ||
                     main_layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
  return known && (extra_layout == DSV4_KV_LAYOUT_NONE || extra_layout == main_layout);
}

bool attention_sm90_compiled() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, attention_sm90_kernel<DSV4_KV_LAYOUT_BF16, 1>) != cudaSuccess) return false;
  // Machine code built for sm_90a reports PTX 9.0; a JIT of the compute_80 PTX (no wgmma) reports 8.0.
  return attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
}

cudaError_t attention_sm90_configure() {
  const int bytes = static_cast<int>(kSmemBytes);
  cudaError_t err = configure_layout<DSV4_KV_LAYOUT_FP8_V4_584B>(bytes);
  if (err == cudaSuccess) err = configure_layout<DSV4_KV_LAYOUT_BF16>(bytes);
  if (err == cudaSuccess) err = configure_layout<DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>(bytes);
  return err;
}

cudaError_t attention_sm90_launch(const attention_params& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.head_groups < 1 || p.head_groups > 2) return cudaErrorInvalidValue;
  const int64_t ctas = static_cast<int64_t>(p.num_tokens) * p.head_groups * p.num_splits;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaError_t err;
  switch (p.cache[0].layout) {
    case DSV4_KV_LAYOUT_FP8_V4_584B: err = launch_layout<DSV4_KV_LAYOUT_FP8_V4_584B>(p, &cfg); break;
    case DSV4_KV_LAYOUT_BF16: err = launch_layout<DSV4_KV_LAYOUT_BF16>(p, &cfg); break;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR: err = launch_layout<DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>(p, &cfg); break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || p.num_splits == 1) return err;
  return combine_launch(p, stream);
}

}  // namespace cuda
}  // namespace dsv4
