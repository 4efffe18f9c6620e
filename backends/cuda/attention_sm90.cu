// Sparse MLA attention for Hopper (sm_90a): warp-specialised, wgmma, 64 heads per CTA.
//
// One CTA = one (token, key split, 64-head group); 384 threads in three warpgroups:
//   WG2 (producer): gathers the chunk's key rows (64 list positions) from the caches into
//       registers (one row's loads in flight while another row converts), dequantises FP8 rows to
//       bf16 and stores them into one of two K buffers (128-byte swizzled wgmma layout); bf16 rows
//       are copied there with cp.async. A per-buffer mbarrier pair (full / empty) hands buffers over.
//   WG0: S = Q K^T (wgmma m64n64k16, Q and K from shared memory), online softmax in registers,
//       P (bf16) to shared memory for WG1, O[:, 0:256] += P V with P straight from registers.
//   WG1: O[:, 256:512] += P V with P from shared memory (alpha from WG0 rescales O first).
// V is the K buffer itself read as an MN-major operand (the same bytes, no transpose).
// For 65..128 heads over FP8 caches two CTAs (the two head groups of a token and split) form a
// cluster: each producer dequantises half of every chunk and writes it into both CTAs' buffers
// (asynchronous stores into the peer's shared memory, counted by a transaction barrier there), so
// each key row is gathered and converted once for all 128 heads.
// Numerics match attention.cu: logits scaled in fp32 (base 2), P rounded to bf16, fp32 O and sums.
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
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
constexpr int kStageRowBytes = 256 * 2;           // one warpgroup's bf16 output row (256 dims)
constexpr int kStageBytes = kRows * kStageRowBytes;  // one warpgroup's output staging (32 KB)

// Shared-memory map (offsets from a 1024-byte aligned base).
struct sm90_map {
  static constexpr int q = 0;
  static constexpr int k = q + kOperandBytes;              // two K buffers
  static constexpr int p = k + 2 * kOperandBytes;          // two P buffers
  static constexpr int alpha = p + 2 * kPBytes;            // [2][64] fp32
  static constexpr int valid = alpha + 2 * kRows * 4;      // [2][64] uint32 flags
  static constexpr int m_fin = valid + 2 * kKeys * 4;      // [64] fp32
  static constexpr int l_fin = m_fin + kRows * 4;          // [64] fp32
  static constexpr int f_fin = l_fin + kRows * 4;          // [64] fp32 output factor (sink, 1 / l)
  static constexpr int sink = f_fin + kRows * 4;           // [64] fp32 sink logits (-inf: none)
  static constexpr int bars = sink + kRows * 4;            // full[2], empty[2], remote[2], q (8 bytes each)
  static constexpr int counts = bars + 7 * 8;              // list counts [2]
  static constexpr int total = counts + 16;
};
static_assert(2 * kStageBytes <= kOperandBytes, "both warpgroups' output staging fits in the Q tile");
constexpr size_t kSmemBytes = sm90_map::total + 1024;      // + alignment slack

// Timeline tracing for tuning (build with -DDSV4_SM90_TRACE; never in shipped builds): each role's
// first thread stamps the SM clock at the steps of every chunk into a per-CTA record, read back by
// dsv4_cuda_sm90_trace_dump (scripts/gpu/trace_sm90.py summarises it).
namespace trace {
constexpr int kHeader = 16;     // smid, start clock, startup / epilogue stamps
constexpr int kPerChunk = 12;   // stamps per chunk (enum step)
constexpr int kChunks = 48;
[[maybe_unused]] constexpr int kSlots = kHeader + kPerChunk * kChunks;
enum step : int {
  kProdTop, kProdEmpty, kProdData, kProdFull,  // FP8 producer: chunk start, buffer free, data in, handed over
  kWg0Full, kWg0Qk, kWg0P, kWg0Pv,             // WG0: buffer ready, S done, P published, O done
  kWg1P, kWg1Pv,                               // WG1: P ready, O done
};
enum header : int {
  kSm, kStart, kQReady, kWg0Epi, kWg0End, kWg1End, kProdEnd, kChunksRun,
  kInit, kQIssued, kEpiBar, kEpiStaged, kGlobalStart, kGlobalEnd,
};
#if defined(DSV4_SM90_TRACE)
__device__ uint32_t* g_buf;
__device__ uint32_t g_ctas;
[[maybe_unused]] __device__ __forceinline__ uint32_t clock32() {
  uint32_t c;
  asm volatile("mov.u32 %0, %%clock;\n" : "=r"(c)::"memory");
  return c;
}
[[maybe_unused]] __device__ __forceinline__ uint32_t global_ns() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;\n" : "=r"(t)::"memory");
  return t;
}
__device__ __forceinline__ uint32_t* record() {
  return g_buf != nullptr && blockIdx.x < g_ctas ? g_buf + static_cast<size_t>(blockIdx.x) * kSlots : nullptr;
}
[[maybe_unused]] __device__ __forceinline__ void header(int slot) {
  if (uint32_t* r = record()) r[slot] = clock32();
}
[[maybe_unused]] __device__ __forceinline__ void chunk(int i, int s) {
  if (uint32_t* r = record(); r != nullptr && i < kChunks) r[kHeader + i * kPerChunk + s] = clock32();
}
// Stamps once `dep` (a loaded value) has arrived: the volatile shared store waits for it.
[[maybe_unused]] __device__ __forceinline__ void chunk_after(int i, int s, uint32_t dep, uint32_t scratch) {
  asm volatile("st.volatile.shared.u32 [%0], %1;\n" ::"r"(scratch), "r"(dep) : "memory");
  chunk(i, s);
}
#else
[[maybe_unused]] __device__ __forceinline__ void header(int) {}
[[maybe_unused]] __device__ __forceinline__ void chunk(int, int) {}
[[maybe_unused]] __device__ __forceinline__ void chunk_after(int, int, uint32_t, uint32_t) {}
#endif
}  // namespace trace

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Row formats the producer handles (one kernel per layout).
template <uint32_t L>
struct row_format {
  static constexpr bool kBf16 = L == DSV4_KV_LAYOUT_BF16;
  static constexpr bool kV4 = L == DSV4_KV_LAYOUT_FP8_V4_584B;
  static constexpr int kFp8Groups = kBf16 ? 0 : (kV4 ? kNopeDim : kHeadDim) / 64;  // 64 fp8 bytes each
  static constexpr int kRopeGroups = kV4 ? 2 * kRopeDim / 64 : 0;                  // 64 bf16 bytes each
  static constexpr int kRopeUnit0 = kNopeDim / 8;                                  // first rope unit
  static_assert(kBf16 || (kFp8Groups * 64 + kRopeGroups * 32 == kHeadDim && kV4 == (kRopeGroups > 0) &&
                          kRopeUnit0 * 8 == kNopeDim),
                "an FP8 row is its fp8 groups (64 dims each) and rope groups (32 dims each)");
};

// Byte offset of 16-byte unit `unit` (8 dims) of row `row` in a 128B-swizzled 64-row operand:
// 64-dim columns of 8 KB, rows of 128 bytes, the unit's position XORed with row % 8 (the
// hardware's Swizzle<3,4,3> on a 1024-byte aligned base).
__device__ __forceinline__ uint32_t sw128(int row, int unit) {
  return static_cast<uint32_t>((unit >> 3) * kColBytes + row * kAtomBytes + (((unit & 7) ^ (row & 7)) << 4));
}

// wgmma shared-memory descriptor, 128-byte swizzle. K-major operands ignore `lbo`; MN-major ones
// use it as the stride between 64-element column blocks; the stride between 8-row groups is 1024
// bytes for every operand here, so the high word is a constant and only the low word (start address
// in 16-byte units, lbo) is computed. The address field cannot carry out inside shared memory.
constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo) {
  return ((addr & 0x3ffffu) >> 4) | (((lbo >> 4) & 0x3fffu) << 16);
}
// The descriptor of the operand whose low word is `lo`, `bytes` further on.
__device__ __forceinline__ uint64_t desc_at(uint32_t lo, uint32_t bytes) {
  return (static_cast<uint64_t>(kDescHi) << 32) | (lo + (bytes >> 4));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
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
// CCTL.IVALL was a third of the stall samples). The peer's rows arrive by st.async, whose
// completion the remote barrier's transaction count tracks.
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
// Asynchronous stores into the peer CTA's shared memory (addresses from map_remote), each counted
// as bytes of the peer's transaction barrier `bar` (also a peer address): no fence, no waiting.
__device__ __forceinline__ void st_async16(uint32_t addr, uint4 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   addr),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async4(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(addr), "r"(v),
               "r"(bar)
               : "memory");
}
// Arrives on this CTA's `bar` and adds `bytes` to the transaction bytes its phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Tensor-map (TMA) load of the box at coordinates (x, y, z, w) into this CTA's shared memory at
// `dst`, completing as transaction bytes on `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, int w,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
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
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The chunk sequence of one CTA: chunks of the main list, then of the extra list, restricted to
// this split's range and skipping chunks past a list's candidate count. Every role walks it alike.
// The counts live in registers (read once from shared memory): the producer consults them for
// every row it loads.
struct chunk_walk {
  const attention_params& p;
  int count0, count1;  // candidate counts of the main and the extra list
  int c_end;
  __device__ int list_of(int c) const { return c < p.chunks[0] ? 0 : 1; }
  __device__ int count(int li) const { return li == 0 ? count0 : count1; }
  __device__ int pos0(int c) const { return (c < p.chunks[0] ? c : c - p.chunks[0]) * kKeys; }
  __device__ int next_active(int c) const {
    while (c < c_end && pos0(c) >= count(list_of(c))) ++c;
    return c;
  }
};

// Producer lane map: thread (warp w, lane l) owns rows r = row_base + 32 k + 8 w + (l & 7) of every
// chunk (k < 2 / CLUSTER; row_base = 32 rank in a CTA pair) and the 16-byte piece q = l >> 3 of each
// 64-byte group of those rows. A warp instruction reads 8 rows x 64 contiguous bytes; its 16-byte
// shared stores fall 4 per bank group of the 128B swizzle (conflict-free); every load of a thread's
// rows is in flight at once (one memory round trip per chunk, none spent on shuffles).

// One thread's share of one FP8 row: 16 fp8 bytes of each group, 16 rope bytes of each rope group,
// the row's 8 UE8M0 bytes (584 B layout; the per-tensor layout has scale 1, applied to the logits).
template <uint32_t L>
struct row_share {
  uint4 fp8[row_format<L>::kFp8Groups > 0 ? row_format<L>::kFp8Groups : 1];
  uint4 rope[row_format<L>::kRopeGroups > 0 ? row_format<L>::kRopeGroups : 1];
  uint2 scales;
};

__device__ __forceinline__ uint2 ld_nc8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// An invalid row (src nullptr) becomes zeros with scale 1, which convert to bf16 zeros.
template <uint32_t L>
__device__ __forceinline__ void load_share(row_share<L>& r, const uint8_t* src, const uint8_t* sc, int q) {
  using F = row_format<L>;
  if (src == nullptr) {
#pragma unroll
    for (int g = 0; g < F::kFp8Groups; ++g) r.fp8[g] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int g = 0; g < F::kRopeGroups; ++g) r.rope[g] = make_uint4(0, 0, 0, 0);
    r.scales = make_uint2(0x7f7f7f7fu, 0x7f7f7f7fu);
    return;
  }
#pragma unroll
  for (int g = 0; g < F::kFp8Groups; ++g) r.fp8[g] = ld_nc16(src + 64 * g + 16 * q);
#pragma unroll
  for (int g = 0; g < F::kRopeGroups; ++g) r.rope[g] = ld_nc16(src + kNopeDim + 64 * g + 16 * q);
  if constexpr (F::kV4) r.scales = ld_nc8(sc);
}

// Where a producer thread writes a chunk: this CTA's buffer and, in a CTA pair, the peer's
// buffer and the peer's transaction barrier its asynchronous stores count on.
struct chunk_dst {
  uint8_t* local;
  uint32_t remote;
  uint32_t remote_bar;
};
// One 16-byte unit at byte offset `off` of this CTA's buffer and, in a CTA pair, the peer's (unless
// `to_peer` is false: a unit redone later by fix_groups reaches the peer once, as its barrier
// counts bytes).
template <int CLUSTER>
__device__ __forceinline__ void put_unit(const chunk_dst& d, uint32_t off, uint4 v, bool to_peer = true) {
  *reinterpret_cast<uint4*>(d.local + off) = v;
  if constexpr (CLUSTER > 1) {
    if (to_peer) st_async16(d.remote + off, v, d.remote_bar);
  }
}

// A thread's 16-byte units of one row sit at 4 positions of the 128B swizzle, the same in every
// 64-dim column: units 2q, 2q + 1 (an fp8 group's 16 bytes -> 32 bf16 bytes) and units q, 4 + q
// (16-byte pieces of bf16 data: rope groups, bf16 rows). Offsets within column 0 (add the column
// times kColBytes), computed once per row so the hot loops add immediates only.
struct row_slots {
  uint32_t pair[2];
  uint32_t quad[2];
};
__device__ __forceinline__ row_slots make_row_slots(int row, int q) {
  row_slots s;
  s.pair[0] = sw128(row, 2 * q);
  s.pair[1] = sw128(row, 2 * q + 1);
  s.quad[0] = sw128(row, q);
  s.quad[1] = sw128(row, 4 + q);
  return s;
}

// UE8M0 byte of 64-dim group g (584 B layout); the per-tensor layout's scale is 1 (127).
template <uint32_t L>
__device__ __forceinline__ uint32_t group_scale(uint2 scales, int g) {
  if constexpr (!row_format<L>::kV4) return 127u;
  return ((g < 4 ? scales.x : scales.y) >> (8 * (g % 4))) & 0xffu;
}

// Dequantises and stores a thread's share of a row with the integer path;
// returns the groups where that path is not exact (NaN bytes, scales near the ends of the range),
// which fix_groups redoes afterwards. Keeping that rare path out of the unrolled loop keeps the
// kernel small (and free of calls, which would cost the consumers their register budgets).
template <uint32_t L, int CLUSTER>
__device__ __forceinline__ uint32_t store_share(const row_share<L>& r, const row_slots& slot, const chunk_dst& d) {
  using F = row_format<L>;
  uint32_t inexact = 0;
#pragma unroll
  for (int g = 0; g < F::kFp8Groups; ++g) {
    const uint4& w = r.fp8[g];
    const uint32_t e = group_scale<L>(r.scales, g);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    const bool exact = pow2_fast_is_exact<4>(words, e);
    inexact |= exact ? 0u : 1u << g;
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[0], fp8x8_to_bf16x8_pow2_fast(make_uint2(w.x, w.y), e), exact);
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[1], fp8x8_to_bf16x8_pow2_fast(make_uint2(w.z, w.w), e), exact);
  }
#pragma unroll
  for (int g = 0; g < F::kRopeGroups; ++g) put_unit<CLUSTER>(d, F::kRopeUnit0 / 8 * kColBytes + slot.quad[g], r.rope[g]);
  return inexact;
}

// Rewrites the `inexact` groups of a thread's share of `row` through fp32 (reloading their bytes).
template <uint32_t L, int CLUSTER>
__device__ __forceinline__ void fix_groups(uint32_t inexact, const uint8_t* src, uint2 scales, const row_slots& slot,
                                           int q, const chunk_dst& d) {
#pragma unroll 1
  for (; inexact != 0u; inexact &= inexact - 1u) {
    const int g = __ffs(inexact) - 1;
    const uint4 w = ld_nc16(src + 64 * g + 16 * q);
    const float s = ue8m0_to_f32(static_cast<uint8_t>(group_scale<L>(scales, g)));
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[0], fp8x8_to_bf16x8(make_uint2(w.x, w.y), s));
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[1], fp8x8_to_bf16x8(make_uint2(w.z, w.w), s));
  }
}

// Arrives on `bar` once every cp.async this thread issued so far has landed (the barrier's count
// includes these arrivals: .noinc).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Resolves list entry `idx` (a slot of list li's cache) to its row and scale pointers; nullptr when
// the candidate is not valid (spec 2.3).
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

// The list entries of chunk c at this thread's rows (-1 past the candidate count).
template <int N>
__device__ __forceinline__ void load_chunk_indices(const attention_params& p, const chunk_walk& walk, int c, int64_t t,
                                                   const int* rows, int32_t* idx) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    idx[k] = -1;
    if (c < walk.c_end) {
      const int li = walk.list_of(c);
      const int pos = walk.pos0(c) + rows[k];
      if (pos < walk.count(li)) idx[k] = list_entry(p.list[li], t, p.seq_q, pos);
    }
  }
}

// A producer thread's first two jobs (chunk, row) and their list entries, loaded at the kernel
// start before the list counts are known: for dense lists any position inside the row is in bounds,
// so the chain "count -> entry -> row" of a CTA's first chunk becomes "entry -> row". The entries
// are masked by the counts once they are known (first_entry); c = -1 marks a job not speculated.
struct first_jobs {
  int c[2];
  int row[2];
  int32_t idx[2];
};
__device__ __forceinline__ first_jobs speculate_first(const attention_params& p, int64_t t, int c_begin, int c_end,
                                                      const int* rows, bool alternate_chunks) {
  first_jobs f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = c_begin + (alternate_chunks ? j : 0);
    f.c[j] = -1;
    f.row[j] = rows[j];
    f.idx[j] = -1;
    if (c >= c_end) continue;
    const int li = c < p.chunks[0] ? 0 : 1;
    const int pos = (li == 0 ? c : c - p.chunks[0]) * kKeys + rows[j];
    const dsv4_mod_index_list& l = p.list[li];
    if (l.indices == nullptr || l.format != DSV4_INDEX_DENSE || p.cache[li].base == nullptr) continue;
    f.c[j] = c;
    if (pos < l.width) f.idx[j] = list_entry(l, t, p.seq_q, pos);
  }
  return f;
}
// The list entry of job j (chunk c, this thread's row): the speculated one when it matches,
// masked by the list's count, else a fresh load.
__device__ __forceinline__ int32_t first_entry(const attention_params& p, const chunk_walk& walk, int64_t t,
                                               const first_jobs& f, int j, int c) {
  if (c == f.c[j]) {
    const int li = walk.list_of(c);
    return walk.pos0(c) + f.row[j] < walk.count(li) ? f.idx[j] : -1;
  }
  int32_t idx[1];
  load_chunk_indices<1>(p, walk, c, t, &f.row[j], idx);
  return idx[0];
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
  uint32_t remote_bar;           // CTA pairs: [b] at + 8b, the peer's rows of buffer b (transaction bytes)
  uint32_t q_bar;                // the Q tile's tensor-map loads (transaction bytes)
  bool q_tma;                    // Q comes by tensor map (WG0 waits on q_bar), else by the consumers
};

// Full-barrier arrivals per chunk: every producer thread of the CTA; a bf16 producer thread arrives
// twice (its stores of the valid flags, and its cp.async copies landing). In a CTA pair the peer's
// half of the chunk arrives on the remote barrier instead: kPeerBytes of asynchronous stores (32
// bf16 rows and their valid flags), expected by this CTA's producer once per chunk.
template <uint32_t L>
constexpr uint32_t kFullArrivals = row_format<L>::kBf16 ? 256u : 128u;
constexpr uint32_t kPeerBytes = 32u * (kHeadDim * 2 + 4);

// The bf16 producer (lane map above): rows are copied into the swizzled buffer with cp.async
// (zero-filled for invalid rows) and the copies complete on the full barrier, so nothing here waits
// on memory; the next chunk's list entries load while this one is copied.
template <uint32_t L>
__device__ __forceinline__ void producer_copy(const attention_params& p, const cta_state& st, const chunk_walk& walk,
                                              const first_jobs& first, int warp, int lane) {
  constexpr int kTok = 2;
  const int q = lane >> 3;
  int rows[kTok];
  row_slots slots[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    rows[k] = 32 * k + 8 * warp + (lane & 7);
    slots[k] = make_row_slots(rows[k], q);
  }
  int c = walk.next_active(st.c_begin);
  int32_t idx[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) idx[k] = first_entry(p, walk, st.t, first, k, c);
  for (int i = 0; c < walk.c_end; ++i) {
    const int c_next = walk.next_active(c + 1);
    const int li = walk.list_of(c);
    const int b = i & 1;
    const uint32_t parity = ((i >> 1) & 1) ^ 1;  // the first use of a buffer does not wait
    const uint8_t* src[kTok];
    const uint8_t* sc[kTok];
#pragma unroll
    for (int k = 0; k < kTok; ++k) resolve_index(p, li, idx[k], &src[k], &sc[k]);
    load_chunk_indices<kTok>(p, walk, c_next, st.t, rows, idx);
    mbar_wait(st.empty_bar + 8 * b, parity);  // the buffer (and its flags) of two chunks ago is consumed
    const uint32_t kaddr = st.base + sm90_map::k + b * kOperandBytes;
    uint32_t* valid = reinterpret_cast<uint32_t*>(st.smem + sm90_map::valid) + b * kKeys;
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      const bool ok = src[k] != nullptr;
      const uint8_t* row_src = ok ? src[k] : p.cache[li].base;  // not read when zero-filling
#pragma unroll
      for (int j = 0; j < kHeadDim / 8 / 4; ++j) {
        const int unit = 4 * j + q;  // column j / 2, slot quad[j % 2]
        cp_async16_zfill(kaddr + (j / 2) * kColBytes + slots[k].quad[j % 2], row_src + (ok ? 16 * unit : 0), ok);
      }
      if (q == 0) valid[rows[k]] = ok ? 1u : 0u;
    }
    cp_async_arrive(st.full_bar + 8 * b);
    mbar_arrive(st.full_bar + 8 * b);
    c = c_next;
  }
}

// The FP8 producer: a software pipeline over row jobs (one row of one chunk per thread), two in
// flight in registers. Slot s holds the job being converted while the other slot's loads are in
// flight, so each row's memory latency hides behind the conversion of another:
//   one row per chunk and thread (kTok 2, single CTA): slot s = row s of every chunk;
//   CTA pairs (kTok 1): slot s = the thread's row of every other chunk (s = chunk parity).
// A slot's next job is issued as soon as its data is stored; list entries load one job ahead.
template <uint32_t L, int CLUSTER>
struct convert_slot {
  int c;                    // chunk of the job in the registers (>= walk.c_end: none)
  int32_t idx_next;         // list entry of the slot's next job
  const uint8_t* src;       // row (nullptr: invalid candidate)
  const uint8_t* sc;        // its UE8M0 scales
  row_share<L> share;       // the row's bytes (this thread's pieces)
};

template <uint32_t L, int CLUSTER>
__device__ __forceinline__ void producer_convert(const attention_params& p, const cta_state& st,
                                                 const chunk_walk& walk, const first_jobs& first, uint32_t rank,
                                                 int warp, int lane) {
  constexpr int kTok = 2 / CLUSTER;  // rows per chunk and thread
  const int q = lane >> 3;
  const bool leader = warp == 0 && lane == 0;
  const bool stamp = leader;  // trace builds only
  int rows[2];
  row_slots slots[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    rows[s] = (CLUSTER > 1 ? static_cast<int>(rank) * 32 : 32 * s) + 8 * warp + (lane & 7);
    slots[s] = make_row_slots(rows[s], q);
  }
  // A slot's chunk stream: every chunk (kTok 2) or every other one (kTok 1).
  auto advance = [&](int c) {
    c = walk.next_active(c + 1);
    return kTok == 2 ? c : walk.next_active(c + 1);
  };
  auto entry = [&](int c, int row) {
    int32_t idx[1];
    load_chunk_indices<1>(p, walk, c, st.t, &row, idx);
    return idx[0];
  };
  // Issues the loads of slot j's job for chunk c (its entry already in idx_next) and the entry load
  // of the job after it.
  auto issue = [&](convert_slot<L, CLUSTER>& j, int c, int row) {
    j.c = c;
    j.src = nullptr;
    j.sc = nullptr;
    if (c < walk.c_end) resolve_index(p, walk.list_of(c), j.idx_next, &j.src, &j.sc);
    load_share<L>(j.share, j.src, j.sc, q);
    j.idx_next = entry(advance(c), row);
  };
  convert_slot<L, CLUSTER> js[2];
  const int c0 = walk.next_active(st.c_begin);
  const int c1 = kTok == 2 ? c0 : walk.next_active(c0 + 1);
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int c = s == 0 ? c0 : c1;
    js[s].idx_next = first_entry(p, walk, st.t, first, s, c);
    issue(js[s], c, rows[s]);
  }
  // Converts slot s's job into chunk i's buffer, hands the buffer over when it is the chunk's last
  // job, then issues the slot's next job.
  auto process = [&](int s, int i) {
    convert_slot<L, CLUSTER>& j = js[s];
    const int b = i & 1;
    uint32_t* valid = reinterpret_cast<uint32_t*>(st.smem + sm90_map::valid) + b * kKeys;
    chunk_dst d{st.smem + sm90_map::k + b * kOperandBytes, 0u, 0u};
    if constexpr (CLUSTER > 1) {
      d.remote = map_remote(smem_addr(d.local), st.peer);
      d.remote_bar = map_remote(st.remote_bar + 8 * b, st.peer);
    }
    if (kTok == 1 || s == 0) {
      if (stamp) trace::chunk(i, trace::kProdTop);
      mbar_wait(st.empty_bar + 8 * b, ((i >> 1) & 1) ^ 1);  // the first use of a buffer does not wait
      // Buffer b's previous phase is complete (its consumers waited for it): expect the peer's rows.
      if (CLUSTER > 1 && leader) mbar_arrive_expect_tx(st.remote_bar + 8 * b, kPeerBytes);
      if (stamp) {
        trace::chunk(i, trace::kProdEmpty);
        trace::chunk_after(i, trace::kProdData, j.share.fp8[0].x ^ j.share.rope[0].x,
                           smem_addr(st.smem + sm90_map::counts + 8));
      }
    }
    const uint32_t ok = j.src != nullptr ? 1u : 0u;
    if (q == 0) {
      valid[rows[s]] = ok;
      if constexpr (CLUSTER > 1) st_async4(map_remote(smem_addr(valid + rows[s]), st.peer), ok, d.remote_bar);
    }
    const uint32_t inexact = store_share<L, CLUSTER>(j.share, slots[s], d);
    if (inexact != 0u) fix_groups<L, CLUSTER>(inexact, j.src, j.share.scales, slots[s], q, d);
    if (kTok == 1 || s == 1) {
      // The tensor cores read the buffers through the async proxy; the peer's copy of this half
      // completes on its remote barrier.
      fence_proxy_async();
      mbar_arrive(st.full_bar + 8 * b);
      if (stamp) trace::chunk(i, trace::kProdFull);
    }
    issue(j, advance(j.c), rows[s]);
  };
  for (int i = 0; js[0].c < walk.c_end;) {
    process(0, i);
    if (kTok == 1) ++i;
    if (js[1].c >= walk.c_end) break;
    process(1, i);
    ++i;
  }
  if (stamp) trace::header(trace::kProdEnd);
}

// Byte offset of 16-byte unit `unit` (of 32) of row r in one warpgroup's bf16 output staging (64 rows
// x 256 dims): units XORed with r % 8, so both the fragment writes and the row reads are
// conflict-free without padding.
__device__ __forceinline__ uint32_t stage_offset(int r, int unit) {
  return static_cast<uint32_t>(r * kStageRowBytes + ((unit ^ (r & 7)) << 4));
}

// Normalises (sink) and writes this warpgroup's half of O, or its split partials. WG0 has
// published the final row max and sum in m_fin / l_fin before the barrier. Each warpgroup stages
// its own half in its own half of the Q tile (no longer read once both warpgroups are past the
// barrier: WG0's last S = Q K^T is complete before it arrives), so the only cross-warpgroup
// ordering is m_fin / l_fin.
__device__ __forceinline__ void epilogue(const attention_params& p, const cta_state& st, int wg, int tid, int row0,
                                         int tig, const float* o) {
  const float* m_fin = reinterpret_cast<const float*>(st.smem + sm90_map::m_fin);
  const float* l_fin = reinterpret_cast<const float*>(st.smem + sm90_map::l_fin);
  const float* f_fin = reinterpret_cast<const float*>(st.smem + sm90_map::f_fin);
  named_sync(3, 256);  // final m / l / factors visible; every wgmma of both warpgroups is complete
  if (tid == 0) trace::header(trace::kEpiBar);
  const int dim0 = wg * 256;
  const int wtid = tid % 128;
  const int64_t t = st.t;
  if (p.num_splits == 1) {
    uint8_t* stage = st.smem + sm90_map::q + wg * kStageBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 8 * h;
      const float factor = f_fin[r];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<uint32_t*>(stage + stage_offset(r, j) + 4 * tig) =
            pack_bf16(o[4 * j + 2 * h] * factor, o[4 * j + 2 * h + 1] * factor);
      }
    }
    named_sync(5 + wg, 128);  // this warpgroup's staging is complete
    if (tid == 0) trace::header(trace::kEpiStaged);
    // Thread: unit wtid % 32 of rows wtid / 32 + 4m (one warp writes one row's 512 bytes).
    const int unit = wtid % 32;
    const int rows = min(kRows, p.num_heads - st.head0);
    const int64_t out0 = token_offset(p.out, t, p.seq_q, st.head0) + dim0 + 8 * unit;
#pragma unroll 4
    for (int r = wtid / 32; r < rows; r += 4) {
      store_out8_at(p, out0 + r * p.out.stride_h, *reinterpret_cast<const uint4*>(stage + stage_offset(r, unit)));
    }
    if (tid < rows) write_row_stats(p, t, st.head0 + tid, m_fin[tid], l_fin[tid]);
  } else {
    const int64_t pbase = (t * p.num_splits + st.split) * p.num_heads;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = st.head0 + row0 + 8 * h;
      if (head >= p.num_heads) continue;
      float* po = p.partial_o + (pbase + head) * kHeadDim + dim0 + 2 * tig;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(po + 8 * j) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
    }
    if (tid < kRows && st.head0 + tid < p.num_heads) {
      float* pml = p.partial_ml + (pbase + st.head0 + tid) * 2;
      pml[0] = m_fin[tid];
      pml[1] = l_fin[tid];
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
    if ((threadIdx.x & 31) == 0) mbar_arrive_remote(st.empty_bar + 8 * b, st.peer);
  }
}
// Empty-barrier arrivals per chunk: 256 local consumer threads + 8 warps of the peer CTA.
template <int CLUSTER>
constexpr uint32_t kEmptyArrivals = 256u + 8u * (CLUSTER - 1);

// WG0: S = Q K^T, softmax, P to WG1, O[:, 0:256] += P V.
// kCopied: the buffers were filled by cp.async (completed on the full barrier; see wait_chunk).
// kValueScale: the per-tensor FP8 layout scales P by the list's kv_scale (1 for the other layouts).
template <int CLUSTER, bool kCopied, bool kValueScale>
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
  const uint32_t q_desc = desc_lo(st.base + sm90_map::q, 16);
  const uint32_t k_desc0 = desc_lo(st.base + sm90_map::k, 16);         // K-major (S = Q K^T)
  // A tensor-map Q: wait even without chunks, as the epilogue reuses the Q tile.
  if (st.q_tma) {
    mbar_wait(st.q_bar, 0);
    if (tid == 0) trace::header(trace::kQReady);
  }
  const uint32_t v_desc0 = desc_lo(st.base + sm90_map::k, kColBytes);  // MN-major (P V)
  int i = 0;
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const int li = walk.list_of(c);
    const uint32_t k_desc = k_desc0 + b * (kOperandBytes >> 4);
    const uint32_t v_desc = v_desc0 + b * (kOperandBytes >> 4);
    wait_chunk<CLUSTER, kCopied>(st, b, (i >> 1) & 1);
    if (tid == 0) trace::chunk(i, trace::kWg0Full);
    // S = Q K^T over 512 dims: 32 k-steps of 16 (4 per 64-dim column, 32 bytes apart).
    float s[32];
    wgmma_fence_operands32(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const uint32_t off = (ks / 4) * kColBytes + (ks % 4) * 32;
      wgmma_m64n64_ss(s, desc_at(q_desc, off), desc_at(k_desc, off), ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands32(s);
    if (tid == 0) trace::chunk(i, trace::kWg0Qk);
    // Online softmax (base 2). s[4j + {0,1}]: row0, keys 8j + 2 tig + {0,1}; s[4j + {2,3}]: row0 + 8.
    const float scl = p.logit_scale_log2[li];
    const float vs = kValueScale ? p.value_scale[li] : 1.0f;
    const uint32_t* valid = reinterpret_cast<const uint32_t*>(st.smem + sm90_map::valid) + b * kKeys;
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
    if (tid == 0) trace::chunk(i, trace::kWg0P);
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
      wgmma_m64n256_rs_tb(o, pk + 4 * kk, desc_at(v_desc, kk * 16 * kAtomBytes), 1);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands128(o);
    release_buffer<CLUSTER>(st, b);
    if (tid == 0) trace::chunk(i, trace::kWg0Pv);
  }
  if (tid == 0) {
    trace::header(trace::kWg0Epi);
#if defined(DSV4_SM90_TRACE)
    if (uint32_t* r = trace::record()) r[trace::kChunksRun] = static_cast<uint32_t>(i);
#endif
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if (tig == 0) {
    float* m_fin = reinterpret_cast<float*>(st.smem + sm90_map::m_fin);
    float* l_fin = reinterpret_cast<float*>(st.smem + sm90_map::l_fin);
    float* f_fin = reinterpret_cast<float*>(st.smem + sm90_map::f_fin);
    const float* sink = reinterpret_cast<const float*>(st.smem + sm90_map::sink);
    m_fin[row0] = m_run[0];
    m_fin[row0 + 8] = m_run[1];
    l_fin[row0] = l_run[0];
    l_fin[row0 + 8] = l_run[1];
    f_fin[row0] = row_output_factor_sink(sink[row0], m_run[0], l_run[0]);
    f_fin[row0 + 8] = row_output_factor_sink(sink[row0 + 8], m_run[1], l_run[1]);
  }
  epilogue(p, st, 0, tid, row0, tig, o);
  if (tid == 0) {
    trace::header(trace::kWg0End);
#if defined(DSV4_SM90_TRACE)
    if (uint32_t* r = trace::record()) r[trace::kGlobalEnd] = trace::global_ns();
#endif
  }
}

// WG1: O[:, 256:512] += P V with P and alpha from WG0.
template <int CLUSTER, bool kCopied>
__device__ __forceinline__ void consumer1(const attention_params& p, const cta_state& st, const chunk_walk& walk,
                                          int tid) {
  const int wtid = tid - 128;
  const int warp = wtid / 32;
  const int lane = tid % 32;
  const int row0 = warp * 16 + lane / 4;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  const uint32_t p_desc0 = desc_lo(st.base + sm90_map::p, 16);
  const uint32_t v_desc0 = desc_lo(st.base + sm90_map::k + 4 * kColBytes, kColBytes);  // dims 256..511
  int i = 0;
  for (int c = walk.next_active(st.c_begin); c < walk.c_end; c = walk.next_active(c + 1), ++i) {
    const int b = i & 1;
    const uint32_t p_desc = p_desc0 + b * (kPBytes >> 4);
    const uint32_t v_desc = v_desc0 + b * (kOperandBytes >> 4);
    wait_chunk<CLUSTER, kCopied>(st, b, (i >> 1) & 1);
    named_sync(1 + b, 256);  // P and alpha of this chunk are ready
    if (wtid == 0) trace::chunk(i, trace::kWg1P);
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
      wgmma_m64n256_ss_tb(o, desc_at(p_desc, kk * 32), desc_at(v_desc, kk * 16 * kAtomBytes), 1);
    }
    wgmma_commit();
    wgmma_wait0();
    wgmma_fence_operands128(o);
    release_buffer<CLUSTER>(st, b);
    if (wtid == 0) trace::chunk(i, trace::kWg1Pv);
  }
  epilogue(p, st, 1, tid, row0, lane % 4, o);
  if (wtid == 0) trace::header(trace::kWg1End);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// L: the layout of both caches (one layout per kernel: a loop that dispatches between layouts
// keeps every layout's addressing live at once and spills).
template <uint32_t L, int CLUSTER>
// q_map (q_tma != 0): Q as [batch][s_q][heads][512] bf16 boxes of 64 dims x 64 heads in the kernel's
// 128B swizzle (heads past the end read as zeros), loaded by the tensor-memory accelerator.
__global__ void __launch_bounds__(kThreads, 1) attention_sm90_kernel(const __grid_constant__ attention_params p,
                                                                     const __grid_constant__ CUtensorMap q_map,
                                                                     int q_tma) {
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
  st.remote_bar = st.full_bar + 32;
  st.q_bar = st.full_bar + 48;

  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int tid = threadIdx.x;
#if defined(DSV4_SM90_TRACE)
  if (tid == 0) {
    if (uint32_t* r = trace::record()) {
      uint32_t sm;
      asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
      r[trace::kSm] = sm;
      r[trace::kGlobalStart] = trace::global_ns();
    }
    trace::header(trace::kStart);
  }
#endif
  const int64_t cta = blockIdx.x;
  const int group = static_cast<int>(cta % p.head_groups);
  st.split = static_cast<int>((cta / p.head_groups) % p.num_splits);
  st.t = cta / (static_cast<int64_t>(p.head_groups) * p.num_splits);
  st.head0 = group * kRows;
  st.c_begin = st.split * p.chunks_per_split;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0u;
  st.peer = rank ^ 1u;
  const int64_t t = st.t;

  const int total_chunks = p.chunks[0] + p.chunks[1];
  const int c_end = min(total_chunks, st.c_begin + p.chunks_per_split);
  first_jobs first{};
  if (tid >= 256) {
    // The producer rows of its first two jobs (see producer_copy / producer_convert).
    const int w = (tid % 128) / 32;
    const int r0 = 8 * w + (tid & 7);
    const bool pairs = CLUSTER > 1 && !row_format<L>::kBf16;
    const int rows[2] = {pairs ? static_cast<int>(rank) * 32 + r0 : r0, pairs ? static_cast<int>(rank) * 32 + r0 : 32 + r0};
    first = speculate_first(p, t, st.c_begin, c_end, rows, pairs);
  }
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
    if (tid < kRows) {
      const int h = st.head0 + tid;
      reinterpret_cast<float*>(st.smem + sm90_map::sink)[tid] = h < p.num_heads ? head_sink(p, h) : -INFINITY;
    }
    if (st.q_tma) {
      if (tid == 0) {
        const token_coord tc = split_token(t, p.seq_q);
        mbar_arrive_expect_tx(st.q_bar, kOperandBytes);
#pragma unroll
        for (int col = 0; col < kHeadDim / 64; ++col) {
          tma_load_4d(st.base + sm90_map::q + col * kColBytes, &q_map, 64 * col, st.head0, static_cast<int>(tc.s),
                      static_cast<int>(tc.b), st.q_bar);
        }
        trace::header(trace::kQIssued);
      }
    } else {
      // Thread: 16-byte unit tid % 64 of rows tid / 64 + 4m.
      const int k = tid % 64;
      const int64_t q0 = token_offset(p.q, t, p.seq_q, st.head0);
      for (int r = tid / 64; r < kRows; r += 4) {
        const int h = st.head0 + r;
        uint8_t* dst = st.smem + sm90_map::q + sw128(r, k);
        const int64_t off = q0 + r * p.q.stride_h + 8 * k;  // elements
        if (h >= p.num_heads) {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        } else if (p.q_is_fp8) {
          const uint8_t* src = static_cast<const uint8_t*>(p.q.data) + off;
          uint2 raw;
          uint8_t* rb = reinterpret_cast<uint8_t*>(&raw);
          for (int i = 0; i < 8; ++i) rb[i] = src[i];
          *reinterpret_cast<uint4*>(dst) = fp8x8_to_bf16x8_pow2(raw, 127u);
        } else {
          const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + off;
          if (p.q_aligned16) {
            cp_async16(dst, src);
          } else {
            uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
            for (int i = 0; i < 8; ++i) d16[i] = src[i];
          }
        }
      }
      cp_async_commit();
      if (tid == 0) trace::header(trace::kQIssued);
      cp_async_wait_all();
      fence_proxy_async();
    }
    named_sync(4, 256);  // the sink logits (and a consumer-loaded Q) are visible
    if (tid == 0 && !st.q_tma) trace::header(trace::kQReady);
  }

  const chunk_walk walk{p, counts[0], counts[1], c_end};
  const int wg = tid / 128;
  // One branch per warpgroup role, so each keeps its own register budget (setmaxnreg). The CTA
  // holds 3 x 168 registers per thread slot (the launch bound); the budgets must not exceed that
  // sum, or the increase waits forever.
  if (wg == 0) {
    set_max_registers_inc<192>();
    consumer0<CLUSTER, row_format<L>::kBf16, L == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>(p, st, walk, tid);
  } else if (wg == 1) {
    set_max_registers_dec<160>();
    consumer1<CLUSTER, row_format<L>::kBf16>(p, st, walk, tid);
  } else {
    set_max_registers_dec<152>();
    if constexpr (row_format<L>::kBf16) {
      producer_copy<L>(p, st, walk, first, (tid % 128) / 32, tid % 32);
    } else {
      producer_convert<L, CLUSTER>(p, st, walk, first, rank, (tid % 128) / 32, tid % 32);
    }
  }
  if constexpr (CLUSTER > 1) cluster_sync();  // the peer may still arrive on / write to this CTA
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// CTA pairs share the dequantised chunks of FP8 caches; bf16 rows need no conversion, so each CTA
// of a 128-head token copies its own (cp.async) and no cluster is formed.
template <uint32_t L>
constexpr bool kPairs = L != DSV4_KV_LAYOUT_BF16;

template <uint32_t L>
cudaError_t configure_layout(int bytes) {
  cudaError_t err = cudaFuncSetAttribute(attention_sm90_kernel<L, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess || !kPairs<L>) return err;
  return cudaFuncSetAttribute(attention_sm90_kernel<L, kPairs<L> ? 2 : 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes);
}

template <uint32_t L>
cudaError_t launch_layout(const attention_params& p, const CUtensorMap& q_map, int q_tma, cudaLaunchConfig_t* cfg) {
  if (p.head_groups == 1 || !kPairs<L>) return cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, 1>, p, q_map, q_tma);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
  return cudaLaunchKernelEx(cfg, attention_sm90_kernel<L, kPairs<L> ? 2 : 1>, p, q_map, q_tma);
}

// The driver's tensor-map encoder (through the runtime: no link against libcuda), nullptr when the
// driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky; clear it for the caller's next check
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Encodes the run's bf16 Q as the kernel's tensor map (host-only work, no device calls): dims
// (512, heads, s_q, batch), boxes of 64 dims x 64 heads with the 128B swizzle. False when Q does
// not qualify (fp8, unaligned) or the driver cannot encode it; the kernel then loads Q itself.
bool encode_q_map(const attention_params& p, CUtensorMap* map) {
  if (p.q_is_fp8 || !p.q_aligned16 || p.head_dim_qk != kHeadDim || p.num_tokens % p.seq_q != 0) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(kHeadDim), static_cast<cuuint64_t>(p.num_heads),
                        static_cast<cuuint64_t>(p.seq_q), static_cast<cuuint64_t>(p.num_tokens / p.seq_q)};
  const int64_t elem_strides[3] = {p.q.stride_h, p.q.stride_s, p.q.stride_b};
  cuuint64_t strides[3];
  int64_t extent = kHeadDim * 2;  // bytes spanned by the dimensions below
  for (int i = 0; i < 3; ++i) {
    // A dimension of size 1 is never stepped along: give it a stride the encoder accepts.
    const int64_t bytes = dims[i + 1] == 1 ? extent : elem_strides[i] * 2;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t{1} << 40)) return false;
    strides[i] = static_cast<cuuint64_t>(bytes);
    extent = bytes * static_cast<int64_t>(dims[i + 1]);
  }
  cuuint32_t box[4] = {64, static_cast<cuuint32_t>(kRows), 1, 1};
  cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, p.q.data, dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
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

#if defined(DSV4_SM90_TRACE)
namespace trace_host {
uint32_t* buf = nullptr;   // device buffer of kMaxCtas records
constexpr uint32_t kMaxCtas = 16384;
uint32_t last_ctas = 0;
}  // namespace trace_host
#endif

cudaError_t attention_sm90_configure() {
  tensor_map_encoder();  // resolved once, at plan creation rather than in the first run
#if defined(DSV4_SM90_TRACE)
  if (trace_host::buf == nullptr) {
    const size_t bytes = size_t(trace_host::kMaxCtas) * trace::kSlots * 4;
    if (cudaMalloc(&trace_host::buf, bytes) != cudaSuccess) return cudaErrorMemoryAllocation;
    cudaMemset(trace_host::buf, 0, bytes);
    cudaMemcpyToSymbol(trace::g_buf, &trace_host::buf, sizeof trace_host::buf);
  }
#endif
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
#if defined(DSV4_SM90_TRACE)
  // Tracing only: the record count travels by a synchronous copy (not graph-capturable).
  const uint32_t traced = static_cast<uint32_t>(ctas < trace_host::kMaxCtas ? ctas : trace_host::kMaxCtas);
  if (traced != trace_host::last_ctas) {
    trace_host::last_ctas = traced;
    cudaMemcpyToSymbol(trace::g_ctas, &traced, sizeof traced);
  }
#endif
  CUtensorMap q_map{};
  const int q_tma = encode_q_map(p, &q_map) ? 1 : 0;
  cudaError_t err;
  switch (p.cache[0].layout) {
    case DSV4_KV_LAYOUT_FP8_V4_584B: err = launch_layout<DSV4_KV_LAYOUT_FP8_V4_584B>(p, q_map, q_tma, &cfg); break;
    case DSV4_KV_LAYOUT_BF16: err = launch_layout<DSV4_KV_LAYOUT_BF16>(p, q_map, q_tma, &cfg); break;
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      err = launch_layout<DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>(p, q_map, q_tma, &cfg);
      break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || p.num_splits == 1) return err;
  return combine_launch(p, stream);
}

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
  if (cudaMemcpy(host.data(), trace_host::buf, host.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
  int khz = 0;
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  FILE* out = std::fopen(path, "wb");
  if (out == nullptr) return 4;
  const uint32_t head[3] = {trace_host::last_ctas, static_cast<uint32_t>(trace::kSlots), static_cast<uint32_t>(khz)};
  std::fwrite(head, 4, 3, out);
  std::fwrite(host.data(), 4, host.size(), out);
  std::fclose(out);
  return 0;
}
#endif
