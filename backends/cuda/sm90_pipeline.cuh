// Pieces shared by the Hopper (sm_90a) attention kernels: attention_sm90.cu (33..128 heads, wgmma)
// and attention_sm90_small.cu (1..32 heads, mma.sync). PTX wrappers (mbarriers, cluster stores,
// tensor maps, setmaxnreg), the chunk walk, and the producer warpgroups that gather, dequantise
// and hand over 64-key chunks in the 128B-swizzled K buffer layout that both kernels read.
// Everything has internal linkage: each kernel file includes its own copy.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
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
#if defined(DSV4_SM90_TRACE)
// Timeline records of both kernel files live in one device buffer (attention_sm90.cu).
uint32_t* sm90_trace_buffer();             // allocated on first use; nullptr on failure
uint32_t sm90_trace_launch(int64_t ctas);  // notes a launch's CTA count; returns the records kept
#endif
namespace {

constexpr int kKeys = 64;                   // list positions per chunk
constexpr int kAtomBytes = 128;             // one swizzle row: 64 bf16
constexpr int kColBytes = 64 * kAtomBytes;  // one 64-dim column of a 64-row operand (8 KB)
constexpr int kOperandBytes =
    (kHeadDim / 64) * kColBytes;  // a 64-row Q tile or one K buffer (64 KB)
// producer_stage's raw FP8 rows, 592 bytes apart (576 data bytes + 16 of padding): 592 % 128 = 80
// puts the same 16-byte piece of 8 consecutive rows on 8 different bank groups, so each 8-lane
// phase of a 16-byte shared load is conflict-free (576 apart they would share two).
// kNopeOnly: a stage row holds only the 448 FP8 bytes, 464 apart (464 % 128 = 80 as well), and
// the rope goes by cp.async straight into the K buffer: 32-head tiles, whose Q tile leaves 59 of
// the 74 KB that whole rows need.
constexpr int kRawSlots = 2;
constexpr int kRawWarps = 8;        // the two producer warpgroups' warps, one stage each
constexpr int kRawRowsPerWarp = 8;  // rows of a chunk per warp (and slot); lanes 0..7 issue them
constexpr int kRawStageBars = kRawWarps * kRawSlots;  // one barrier per warp and slot
template <bool NopeOnly>
struct raw_stage {
  static constexpr bool kNopeOnly = NopeOnly;
  static constexpr int kRowBytes = NopeOnly ? 464 : 592;
  static constexpr int kWarpBytes = kRawRowsPerWarp * kRowBytes;
  static constexpr int kBytes = kRawWarps * kRawSlots * kWarpBytes;
};

// Timeline tracing for tuning (build with -DDSV4_SM90_TRACE; never in shipped builds): each role's
// first thread stamps the SM clock at the steps of every chunk into a per-CTA record, read back by
// dsv4_cuda_sm90_trace_dump (scripts/gpu/trace_sm90.py summarises it).
namespace trace {
constexpr int kHeader = 20;    // smid, start clock, startup / epilogue stamps
constexpr int kPerChunk = 12;  // stamps per chunk (enum step)
constexpr int kChunks = 48;
[[maybe_unused]] constexpr int kSlots = kHeader + kPerChunk * kChunks;
enum step : int {
  kProdTop,
  kProdEmpty,
  kProdData,
  kProdFull,  // producer: chunk start, buffer free, data in (FP8), handed over
  kWg0Full,
  kWg0Qk,
  kWg0P,
  kWg0Pv,  // WG0: buffer ready, S done, P published, O done
  kWg1P,
  kWg1Pv,  // WG1: P ready, O done
};
enum header : int {
  kSm,
  kStart,
  kQReady,
  kWg0Epi,
  kWg0End,
  kWg1End,
  kProdEnd,
  kChunksRun,
  kInit,
  kQIssued,
  kEpiBar,
  kEpiStaged,
  kGlobalStart,
  kGlobalEnd,
  // FP8 producer: loop entered, first list entry in, slot 0 / 1 loads issued, slot 0's data in.
  kProdEnter,
  kProdIdx,
  kProdIssued0,
  kProdIssued1,
  kProdData0,
  kHeaderStamps  // count (scripts/gpu/trace_sm90.py mirrors the order and kHeader)
};
static_assert(kHeaderStamps <= kHeader, "every header stamp has a slot");
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
  return g_buf != nullptr && blockIdx.x < g_ctas ? g_buf + static_cast<size_t>(blockIdx.x) * kSlots
                                                 : nullptr;
}
[[maybe_unused]] __device__ __forceinline__ void header(int slot) {
  if (uint32_t* r = record()) r[slot] = clock32();
}
[[maybe_unused]] __device__ __forceinline__ void chunk(int i, int s) {
  if (uint32_t* r = record(); r != nullptr && i < kChunks)
    r[kHeader + i * kPerChunk + s] = clock32();
}
// Waits until `dep` (a loaded value) has arrived: a volatile shared store of it to `scratch`.
[[maybe_unused]] __device__ __forceinline__ void wait_value(uint32_t dep, uint32_t scratch) {
  asm volatile("st.volatile.shared.u32 [%0], %1;\n" ::"r"(scratch), "r"(dep) : "memory");
}
// Stamps once `dep` has arrived.
[[maybe_unused]] __device__ __forceinline__ void chunk_after(int i, int s, uint32_t dep,
                                                             uint32_t scratch) {
  wait_value(dep, scratch);
  chunk(i, s);
}
[[maybe_unused]] __device__ __forceinline__ void header_after(int slot, uint32_t dep,
                                                              uint32_t scratch) {
  wait_value(dep, scratch);
  header(slot);
}
// Host: points this file's kernels at the shared buffer (plan time), and gives them a launch's
// record count (a synchronous copy: trace builds are not graph-capturable).
[[maybe_unused]] inline cudaError_t attach() {
  uint32_t* b = sm90_trace_buffer();
  if (b == nullptr) return cudaErrorMemoryAllocation;
  return cudaMemcpyToSymbol(g_buf, &b, sizeof b);
}
[[maybe_unused]] inline void launch(int64_t ctas) {
  const uint32_t n = sm90_trace_launch(ctas);
  cudaMemcpyToSymbol(g_ctas, &n, sizeof n);
}
#else
[[maybe_unused]] __device__ __forceinline__ void header(int) {}
[[maybe_unused]] __device__ __forceinline__ void chunk(int, int) {}
[[maybe_unused]] __device__ __forceinline__ void chunk_after(int, int, uint32_t, uint32_t) {}
[[maybe_unused]] __device__ __forceinline__ void header_after(int, uint32_t, uint32_t) {}
#endif
}  // namespace trace

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Row formats the producer handles (one kernel per layout).
template <uint32_t L>
struct row_format {
  static constexpr bool kF16 = L == DSV4_KV_LAYOUT_FP16;  // fp16 rows: fp16 tensor-core inputs
  // 16-bit rows (bf16, fp16) are copied as they are; FP8 rows are converted to bf16.
  static constexpr bool kCopied = layout_copied(L);
  static constexpr bool kV4 = L == DSV4_KV_LAYOUT_FP8_V4_584B;
  static constexpr int kFp8Groups =
      kCopied ? 0 : (kV4 ? kNopeDim : kHeadDim) / 64;              // 64 fp8 bytes each
  static constexpr int kRopeGroups = kV4 ? 2 * kRopeDim / 64 : 0;  // 64 bf16 bytes each
  static constexpr int kRopeUnit0 = kNopeDim / 8;                  // first rope unit
  static_assert(kCopied || (kFp8Groups * 64 + kRopeGroups * 32 == kHeadDim &&
                            kV4 == (kRopeGroups > 0) && kRopeUnit0 * 8 == kNopeDim),
                "an FP8 row is its fp8 groups (64 dims each) and rope groups (32 dims each)");
};

// Byte offset of 16-byte unit `unit` (8 dims) of row `row` in a 128B-swizzled 64-row operand:
// 64-dim columns of 8 KB, rows of 128 bytes, the unit's position XORed with row % 8 (the
// hardware's Swizzle<3,4,3> on a 1024-byte aligned base).
__device__ __forceinline__ uint32_t sw128(int row, int unit) {
  return static_cast<uint32_t>((unit >> 3) * kColBytes + row * kAtomBytes +
                               (((unit & 7) ^ (row & 7)) << 4));
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

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Every committed group but the newest is complete.
__device__ __forceinline__ void wgmma_wait1() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
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
// Arrives on the barrier at the same offset in CTA `rank` of the cluster where `pred` holds (a
// predicated arrive, not a branch: WG0 releases buffers while a wgmma is in flight, and a divergent
// branch there makes ptxas serialise the wgmma).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b32 ra;\nsetp.ne.b32 p, %2, 0;\nmapa.shared::cluster.u32 ra, %0, "
      "%1;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank), "r"(static_cast<int>(pred))
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
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
__device__ __forceinline__ uint32_t map_remote(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Asynchronous stores into the peer CTA's shared memory (addresses from map_remote), each counted
// as bytes of the peer's transaction barrier `bar` (also a peer address): no fence, no waiting.
__device__ __forceinline__ void st_async16(uint32_t addr, uint4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(addr),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void st_async4(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(addr),
      "r"(v), "r"(bar)
      : "memory");
}
// Arrives on this CTA's `bar` and adds `bytes` to the transaction bytes its phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Tensor-map (TMA) load of the box at coordinates (x, y, z, w) into this CTA's shared memory at
// `dst`, completing as transaction bytes on `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int x, int y,
                                            int z, int w, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory at src into this
// CTA's shared memory at dst by the bulk-copy engine, completing as transaction bytes on `bar`
// (which expects them), under the L2 cache policy `policy` (row_l2_policy).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// `bytes` (a multiple of 16, 16-byte aligned) at p into L2 (the bulk-copy engine; no barrier).
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
// The line holding p into L2.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p) : "memory");
}
// The same box into L2 only (no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_4d(const CUtensorMap* map, int x, int y, int z,
                                                int w) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(z), "r"(w)
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
// 16 bytes of a gathered FP8 row. The load allocates in L1 (evict_last): that is 2-5 % faster on
// every FP8 decode case than `L1::no_allocate` (H200), and the L2 prefetch size (none, 128 B,
// 256 B) makes no difference. The bf16 producer's cp.async stays `.cg`: through L1 (`.ca`) it is
// a third to a half slower (docs/tried.md, P6). `streamed`: attention_params::stream_rows (the
// policy is made here, next to its use: held across the producer loop, it cost the pair kernels
// spills; docs/tried.md, P8).
__device__ __forceinline__ uint4 ld_nc16(const uint8_t* p, bool streamed) {
  const uint64_t policy = row_l2_policy(streamed);
  uint4 v;
  asm volatile(
      "ld.global.nc.L1::evict_last.L2::cache_hint.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
}

// Four 8x8 b16 matrices from mma-fragment registers (r[m]: row lane / 4, columns 2 (lane % 4) + {0,
// 1} of matrix m), stored transposed: row c of matrix m (its column c, 16 bytes) at the address
// lane 8 m + c gives.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// 16 bytes of shared memory (producer_stage's raw rows).
__device__ __forceinline__ uint4 lds16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
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
// chunk and the 16-byte piece q = l >> 3 of each
// 64-byte group of those rows. One producer warpgroup per chunk: k < 2, row_base 0; the chunk
// split in halves (kHalf: the two producers of a CTA pair, or the two producer warpgroups of the
// small-head kernel): k = 0, row_base = 32 half. A warp instruction reads 8 rows x 64 contiguous
// bytes; its 16-byte shared stores fall 4 per bank group of the 128B swizzle (conflict-free); every
// load of a thread's rows is in flight at once (one memory round trip per chunk, none spent on
// shuffles).

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
__device__ __forceinline__ void load_share(row_share<L>& r, const uint8_t* src, const uint8_t* sc,
                                           int q, bool streamed) {
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
  for (int g = 0; g < F::kFp8Groups; ++g) r.fp8[g] = ld_nc16(src + 64 * g + 16 * q, streamed);
#pragma unroll
  for (int g = 0; g < F::kRopeGroups; ++g)
    r.rope[g] = ld_nc16(src + kNopeDim + 64 * g + 16 * q, streamed);
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
__device__ __forceinline__ void put_unit(const chunk_dst& d, uint32_t off, uint4 v,
                                         bool to_peer = true) {
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
// kRope: also the rope groups (false: they reach the buffer by other means).
template <uint32_t L, int CLUSTER, bool kRope = true>
__device__ __forceinline__ uint32_t store_share(const row_share<L>& r, const row_slots& slot,
                                                const chunk_dst& d) {
  using F = row_format<L>;
  uint32_t inexact = 0;
#pragma unroll
  for (int g = 0; g < F::kFp8Groups; ++g) {
    const uint4& w = r.fp8[g];
    const uint32_t e = group_scale<L>(r.scales, g);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    const bool exact = pow2_fast_is_exact<4>(words, e);
    inexact |= exact ? 0u : 1u << g;
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[0],
                      fp8x8_to_bf16x8_pow2_fast(make_uint2(w.x, w.y), e), exact);
    put_unit<CLUSTER>(d, g * kColBytes + slot.pair[1],
                      fp8x8_to_bf16x8_pow2_fast(make_uint2(w.z, w.w), e), exact);
  }
  if constexpr (kRope) {
#pragma unroll
    for (int g = 0; g < F::kRopeGroups; ++g)
      put_unit<CLUSTER>(d, F::kRopeUnit0 / 8 * kColBytes + slot.quad[g], r.rope[g]);
  }
  return inexact;
}

// Rewrites the `inexact` groups of a thread's share of a row through fp32, reloading each group's
// 16 bytes with load(g) (from the row in global memory, or from its staged copy).
template <uint32_t L, int CLUSTER, class Load>
__device__ __forceinline__ void fix_groups(uint32_t inexact, Load&& load, uint2 scales,
                                           const row_slots& slot, const chunk_dst& d) {
#pragma unroll 1
  for (; inexact != 0u; inexact &= inexact - 1u) {
    const int g = __ffs(inexact) - 1;
    const uint4 w = load(g);
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

// Resolves list entry `idx` (a slot of list li's cache, layout L) to its row and scale pointers;
// nullptr when the candidate is not valid (spec 2.3).
template <uint32_t L>
__device__ __forceinline__ void resolve_index(const attention_params& p, int li, int32_t idx,
                                              const uint8_t** src, const uint8_t** sc) {
  *src = nullptr;
  *sc = nullptr;
  const dsv4_mod_cache& cache = p.cache[li];
  if (!slot_is_valid(idx, cache)) return;
  int32_t e;
  const uint8_t* block = slot_block_base32(cache, p.block_div[li], idx, &e);
  *src = block + entry_data_offset(L, e);
  *sc = block + v4_scale_offset(cache.block_size, e);
}

// Where a producer reads list entries. entry_per_call: list_entry for each (the token's row
// recomputed, which costs a division by seq_q; the 64-head kernels' producers have no registers to
// hold the rows). token_lists: both lists' rows of the token resolved once (list_row_of), an entry
// is then one load: about 40 fewer of the ~640 instructions a small-head producer warp spends per
// chunk (3 % faster for 8 heads on an H200).
struct entry_per_call {
  const attention_params& p;
  int64_t t;
  __device__ int32_t at(int li, int pos) const { return list_entry(p.list[li], t, p.seq_q, pos); }
};
struct token_lists {
  list_row main, extra;  // named, not an array: indexed by a run-time list, it went to local memory
  __device__ int32_t at(int li, int pos) const {
    const list_row r = li == 0 ? main : extra;
    return r.base[pos * r.step];
  }
};
__device__ __forceinline__ token_lists token_lists_of(const attention_params& p, int64_t t) {
  auto row = [&](const dsv4_mod_index_list& l) {
    return l.indices != nullptr ? list_row_of(l, t, p.seq_q)
                                : list_row{nullptr, 0};  // absent: never read
  };
  return token_lists{row(p.list[0]), row(p.list[1])};
}

// The list entries of chunk c at this thread's rows (-1 past the candidate count); Entries:
// entry_per_call or token_lists.
template <int N, class Entries>
__device__ __forceinline__ void load_chunk_indices(const chunk_walk& walk, int c,
                                                   const Entries& entries, const int* rows,
                                                   int32_t* idx) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    idx[k] = -1;
    if (c < walk.c_end) {
      const int li = walk.list_of(c);
      const int pos = walk.pos0(c) + rows[k];
      if (pos < walk.count(li)) idx[k] = entries.at(li, pos);
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
__device__ __forceinline__ first_jobs speculate_first(const attention_params& p, int64_t t,
                                                      int c_begin, int c_end, const int* rows,
                                                      bool alternate_chunks) {
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
    if (l.indices == nullptr || l.format != DSV4_INDEX_DENSE || p.cache[li].base == nullptr)
      continue;
    f.c[j] = c;
    if (pos < l.width) f.idx[j] = list_entry(l, t, p.seq_q, pos);
  }
  return f;
}
// The list entry of job j (chunk c, this thread's row): the speculated one when it matches,
// masked by the list's count, else a fresh load.
template <class Entries>
__device__ __forceinline__ int32_t first_entry(const chunk_walk& walk, const Entries& entries,
                                               const first_jobs& f, int j, int c) {
  if (c == f.c[j]) {
    const int li = walk.list_of(c);
    return walk.pos0(c) + f.row[j] < walk.count(li) ? f.idx[j] : -1;
  }
  int32_t idx[1];
  load_chunk_indices<1>(walk, c, entries, &f.row[j], idx);
  return idx[0];
}

// What every role of one CTA knows.
struct cta_state {
  uint8_t* smem;  // 1024-byte aligned base (generic)
  uint32_t base;  // the same, as a shared-window address
  int64_t t;      // token
  int split;
  int head0;  // first head of this CTA's group
  int c_begin;
  uint32_t peer;                 // cluster: the other CTA's rank
  uint32_t full_bar, empty_bar;  // [b] at + 8b
  uint32_t remote_bar;  // CTA pairs: [b] at + 8b, the peer's rows of buffer b (transaction bytes)
  uint32_t q_bar;       // the Q tile's tensor-map loads (transaction bytes)
  bool q_tma;           // Q comes by tensor map (WG0 waits on q_bar), else by the consumers
};

// List li's candidate count (list_count) into shared memory (threads 0 and 1 of the CTA, for every
// role).
__device__ __forceinline__ void store_list_count(const attention_params& p, int64_t t, int li,
                                                 int32_t* counts) {
  counts[li] = list_count(p, t, li);
}

// One 16-byte unit of a Q row (8 dims at element offset `off` of q) into shared memory at dst:
// zeros for a padding head, fp8 q converted (its scale is part of the logit scale), bf16 by
// cp.async when aligned (the caller commits and waits), else element by element; kF16 (fp16
// caches): bf16 q converted to fp16.
template <bool kF16 = false>
__device__ __forceinline__ void load_q_unit(const attention_params& p, uint8_t* dst, int64_t off,
                                            bool padding) {
  if (padding) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  } else if constexpr (kF16) {
    const uint16_t* src = static_cast<const uint16_t*>(p.q.data) + off;
    uint4 v;
    uint16_t* v16 = reinterpret_cast<uint16_t*>(&v);
    for (int i = 0; i < 8; ++i) v16[i] = src[i];
    *reinterpret_cast<uint4*>(dst) = bf16x8_to_f16x8(v);
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

// Work item `item` (one per CTA, or a persistent CTA's item blockIdx.x + k gridDim.x) -> (token,
// key split, head group of `heads_per_cta` heads), group fastest (the launch order of both
// kernels). With p.token_order the item's token is taken from it (longest tokens first).
__device__ __forceinline__ void set_item(cta_state& st, const attention_params& p, int64_t item,
                                         int heads_per_cta) {
  const int group = static_cast<int>(item % p.head_groups);
  st.split = static_cast<int>((item / p.head_groups) % p.num_splits);
  st.t = item / (static_cast<int64_t>(p.head_groups) * p.num_splits);
  if (p.token_order != nullptr) st.t = __ldcg(p.token_order + st.t);
  st.head0 = group * heads_per_cta;
  st.c_begin = st.split * p.chunks_per_split;
}

// Work items of a persistent CTA (a grid smaller than the item count): blockIdx.x, then every
// gridDim.x-th. cta_item_state: the CTA state st (cta_begin set it to the first item) set to its
// k-th.
__device__ __forceinline__ int64_t cta_item(int k) {
  return blockIdx.x + static_cast<int64_t>(k) * gridDim.x;
}
__device__ __forceinline__ bool cta_has_item(const attention_params& p, int k) {
  return cta_item(k) < item_count(p);
}
__device__ __forceinline__ cta_state cta_item_state(const attention_params& p, const cta_state& st,
                                                    int k, int heads_per_cta) {
  cta_state s = st;
  set_item(s, p, cta_item(k), heads_per_cta);
  return s;
}
// The last chunk (exclusive) of item state st's key split.
__device__ __forceinline__ int split_end(const attention_params& p, const cta_state& st) {
  return min(p.chunks[0] + p.chunks[1], st.c_begin + p.chunks_per_split);
}
// The chunk walk of item state st, the CTA's k-th: `counts` holds the first item's list counts,
// read at the CTA's start (store_list_count); later items read theirs.
__device__ __forceinline__ chunk_walk item_walk(const attention_params& p, const cta_state& st,
                                                int k, const int32_t* counts) {
  const int c0 = k == 0 ? counts[0] : list_count(p, st.t, 0);
  const int c1 = k == 0 ? counts[1] : list_count(p, st.t, 1);
  return chunk_walk{p, c0, c1, split_end(p, st)};
}

// Start of a Hopper CTA: its shared-memory base (1024-byte aligned, as the 128B swizzle needs), the
// dependent combine launch released early, and its first work item (set_item of blockIdx.x).
__device__ __forceinline__ void cta_begin(cta_state& st, uint8_t* smem_raw,
                                          const attention_params& p, int heads_per_cta) {
  const uint32_t raw_addr = smem_addr(smem_raw);
  st.smem = smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);
  st.base = smem_addr(st.smem);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  // An ordered launch is a programmatic dependent of the kernel that writes the order: wait for it.
  if (p.token_order != nullptr) asm volatile("griddepcontrol.wait;\n" ::: "memory");
#if defined(DSV4_SM90_TRACE)
  if (threadIdx.x == 0) {
    if (uint32_t* r = trace::record()) {
      uint32_t sm;
      asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
      r[trace::kSm] = sm;
      r[trace::kGlobalStart] = trace::global_ns();
    }
    trace::header(trace::kStart);
  }
#endif
  set_item(st, p, blockIdx.x, heads_per_cta);
}

// Full-barrier arrivals per chunk: every producer thread of the CTA; a bf16 producer thread arrives
// twice (its stores of the valid flags, and its cp.async copies landing). In a CTA pair the peer's
// half of the chunk arrives on the remote barrier instead: kPeerBytes of asynchronous stores (32
// bf16 rows and their valid flags), expected by this CTA's producer once per chunk.
template <uint32_t L>
constexpr uint32_t kFullArrivals = row_format<L>::kCopied ? 256u : 128u;
constexpr uint32_t kPeerBytes = 32u * (kHeadDim * 2 + 4);

// The bf16 producer (lane map above): rows are copied into the swizzled buffer with cp.async
// (zero-filled for invalid rows) and the copies complete on the full barrier, so nothing here waits
// on memory; the next chunk's list entries load while this one is copied.
// Map: the kernel's shared-memory map (k: two K buffers, valid: their [2][64] row flags).
// i0: chunks the CTA ran before this work item (buffer and barrier phases continue from there);
// returns the chunks of this one.
template <uint32_t L, class Map, bool kHalf>
__device__ __forceinline__ int producer_copy(const attention_params& p, const cta_state& st,
                                             const chunk_walk& walk, const first_jobs& first,
                                             int half, int warp, int lane, int i0 = 0) {
  constexpr int kTok = kHalf ? 1 : 2;  // rows per chunk and thread
  const int q = lane >> 3;
  int rows[kTok];
  row_slots slots[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    rows[k] = 32 * (kHalf ? half : k) + 8 * warp + (lane & 7);
    slots[k] = make_row_slots(rows[k], q);
  }
  int c = walk.next_active(st.c_begin);
  int32_t idx[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) idx[k] = first_entry(walk, entry_per_call{p, st.t}, first, k, c);
  const bool stamp =
      warp == 0 && lane == 0 && half == 0;  // trace builds only: one producer per CTA
  const uint64_t policy = row_l2_policy(p.stream_rows != 0);
  int i = 0;
  for (; c < walk.c_end; ++i) {
    const int c_next = walk.next_active(c + 1);
    const int li = walk.list_of(c);
    const int b = (i0 + i) & 1;
    const uint32_t parity = (((i0 + i) >> 1) & 1) ^ 1;  // the first use of a buffer does not wait
    if (stamp) trace::chunk(i0 + i, trace::kProdTop);
    const uint8_t* src[kTok];
    const uint8_t* sc[kTok];
#pragma unroll
    for (int k = 0; k < kTok; ++k) resolve_index<L>(p, li, idx[k], &src[k], &sc[k]);
    load_chunk_indices<kTok>(walk, c_next, entry_per_call{p, st.t}, rows, idx);
    mbar_wait(st.empty_bar + 8 * b,
              parity);  // the buffer (and its flags) of two chunks ago is consumed
    if (stamp) trace::chunk(i0 + i, trace::kProdEmpty);
    const uint32_t kaddr = st.base + Map::k + b * kOperandBytes;
    uint32_t* valid = reinterpret_cast<uint32_t*>(st.smem + Map::valid) + b * kKeys;
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      const bool ok = src[k] != nullptr;
      const uint8_t* row_src = ok ? src[k] : p.cache[li].base;  // not read when zero-filling
#pragma unroll
      for (int j = 0; j < kHeadDim / 8 / 4; ++j) {
        const int unit = 4 * j + q;  // column j / 2, slot quad[j % 2]
        cp_async16_zfill(kaddr + (j / 2) * kColBytes + slots[k].quad[j % 2],
                         row_src + (ok ? 16 * unit : 0), ok, policy);
      }
      if (q == 0) valid[rows[k]] = ok ? 1u : 0u;
    }
    cp_async_arrive(st.full_bar + 8 * b);
    mbar_arrive(st.full_bar + 8 * b);
    if (stamp) trace::chunk(i0 + i, trace::kProdFull);
    c = c_next;
  }
  return i;
}

// The FP8 producer: a software pipeline over row jobs (one row of one chunk per thread), two in
// flight in registers. Slot s holds the job being converted while the other slot's loads are in
// flight, so each row's memory latency hides behind the conversion of another:
//   one row per chunk and thread (kTok 2, single CTA): slot s = row s of every chunk;
//   half chunks (kTok 1): slot s = the thread's row of every other chunk (s = chunk parity).
// A slot's next job is issued as soon as its data is stored; list entries load one job ahead.
template <uint32_t L, int CLUSTER>
struct convert_slot {
  int c;               // chunk of the job in the registers (>= walk.c_end: none)
  int32_t idx_next;    // list entry of the slot's next job
  const uint8_t* src;  // row (nullptr: invalid candidate)
  const uint8_t* sc;   // its UE8M0 scales
  row_share<L> share;  // the row's bytes (this thread's pieces)
};

// CLUSTER 2: a CTA pair (half = the CTA's rank; stores go to both CTAs); kHalf without a cluster:
// one of two producer warpgroups of a CTA (half = its index).
// i0 and the result: as for producer_copy.
template <uint32_t L, class Map, int CLUSTER, bool kHalf>
__device__ __forceinline__ int producer_convert(const attention_params& p, const cta_state& st,
                                                const chunk_walk& walk, const first_jobs& first,
                                                int half, int warp, int lane, int i0 = 0) {
  static_assert(CLUSTER == 1 || kHalf, "a CTA pair splits every chunk");
  constexpr int kTok = kHalf ? 1 : 2;  // rows per chunk and thread
  const int q = lane >> 3;
  const bool leader = warp == 0 && lane == 0;
  const bool stamp =
      leader && (CLUSTER > 1 || half == 0);  // trace builds only: one producer per CTA
  int rows[2];
  row_slots slots[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    rows[s] = 32 * (kHalf ? half : s) + 8 * warp + (lane & 7);
    slots[s] = make_row_slots(rows[s], q);
  }
  // A slot's chunk stream: every chunk (kTok 2) or every other one (kTok 1).
  auto advance = [&](int c) {
    c = walk.next_active(c + 1);
    return kTok == 2 ? c : walk.next_active(c + 1);
  };
  auto entry = [&](int c, int row) {
    int32_t idx[1];
    load_chunk_indices<1>(walk, c, entry_per_call{p, st.t}, &row, idx);
    return idx[0];
  };
  // Issues the loads of slot j's job for chunk c (its entry already in idx_next) and the entry load
  // of the job after it.
  auto issue = [&](convert_slot<L, CLUSTER>& j, int c, int row) {
    j.c = c;
    j.src = nullptr;
    j.sc = nullptr;
    if (c < walk.c_end) resolve_index<L>(p, walk.list_of(c), j.idx_next, &j.src, &j.sc);
    load_share<L>(j.share, j.src, j.sc, q, p.stream_rows != 0);
    j.idx_next = entry(advance(c), row);
  };
  convert_slot<L, CLUSTER> js[2];
  const int c0 = walk.next_active(st.c_begin);
  const int c1 = kTok == 2 ? c0 : walk.next_active(c0 + 1);
  const uint32_t stamp_scratch = smem_addr(st.smem + Map::counts + 8);  // trace builds: wait_value
  if (stamp) trace::header(trace::kProdEnter);
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int c = s == 0 ? c0 : c1;
    js[s].idx_next = first_entry(walk, entry_per_call{p, st.t}, first, s, c);
    if (s == 0 && stamp) {
      trace::header_after(trace::kProdIdx, static_cast<uint32_t>(js[0].idx_next), stamp_scratch);
    }
    issue(js[s], c, rows[s]);
    if (stamp) trace::header(s == 0 ? trace::kProdIssued0 : trace::kProdIssued1);
  }
  if (stamp) {
    trace::header_after(trace::kProdData0, js[0].share.fp8[0].x ^ js[0].share.scales.x,
                        stamp_scratch);
  }
  // Converts slot s's job into chunk i's buffer, hands the buffer over when it is the chunk's last
  // job, then issues the slot's next job.
  auto process = [&](int s, int il) {
    const int i = i0 + il;  // the CTA's chunk count: buffer and phase
    convert_slot<L, CLUSTER>& j = js[s];
    const int b = i & 1;
    uint32_t* valid = reinterpret_cast<uint32_t*>(st.smem + Map::valid) + b * kKeys;
    chunk_dst d{st.smem + Map::k + b * kOperandBytes, 0u, 0u};
    if constexpr (CLUSTER > 1) {
      d.remote = map_remote(smem_addr(d.local), st.peer);
      d.remote_bar = map_remote(st.remote_bar + 8 * b, st.peer);
    }
    if (kTok == 1 || s == 0) {
      if (stamp) trace::chunk(i, trace::kProdTop);
      mbar_wait(st.empty_bar + 8 * b,
                ((i >> 1) & 1) ^ 1);  // the first use of a buffer does not wait
      // Buffer b's previous phase is complete (its consumers waited for it): expect the peer's
      // rows.
      if (CLUSTER > 1 && leader) mbar_arrive_expect_tx(st.remote_bar + 8 * b, kPeerBytes);
      if (stamp) {
        trace::chunk(i, trace::kProdEmpty);
        trace::chunk_after(i, trace::kProdData, j.share.fp8[0].x ^ j.share.rope[0].x,
                           stamp_scratch);
      }
    }
    const uint32_t ok = j.src != nullptr ? 1u : 0u;
    if (q == 0) {
      valid[rows[s]] = ok;
      if constexpr (CLUSTER > 1)
        st_async4(map_remote(smem_addr(valid + rows[s]), st.peer), ok, d.remote_bar);
    }
    const uint32_t inexact = store_share<L, CLUSTER>(j.share, slots[s], d);
    if (inexact != 0u) {
      const uint8_t* src = j.src + 16 * q;
      const bool streamed = p.stream_rows != 0;
      fix_groups<L, CLUSTER>(
          inexact, [&](int g) { return ld_nc16(src + 64 * g, streamed); }, j.share.scales, slots[s],
          d);
    }
    if (kTok == 1 || s == 1) {
      // The tensor cores read the buffers through the async proxy; the peer's copy of this half
      // completes on its remote barrier.
      fence_proxy_async();
      mbar_arrive(st.full_bar + 8 * b);
      if (stamp) trace::chunk(i, trace::kProdFull);
    }
    issue(j, advance(j.c), rows[s]);
  };
  int i = 0;
  while (js[0].c < walk.c_end) {
    process(0, i);
    if (kTok == 1) ++i;
    if (js[1].c >= walk.c_end) break;
    process(1, i);
    ++i;
  }
  if (stamp) trace::header(trace::kProdEnd);
  return i;
}

// The chunks a producer copies, one position at a time: the active chunks of the CTA's work item
// (walk), or with kPersistent those of its items k = 0, 1, ... in turn, each with its token's
// lists. Item k + 1's list counts are loaded when item k is entered, so that crossing into it waits
// on nothing. Only what the positions need is kept (the producers' registers are few).
template <bool kPersistent>
struct chunk_stream {
  const attention_params& p;
  int k = 0;  // the item of the position
  int count0, count1, c_end;
  token_lists lists;
  int next0 = 0, next1 = 0;  // persistent: item k + 1's list counts
  int c;                     // the position: a chunk of item k, or >= c_end past the last

  __device__ chunk_stream(const attention_params& p_, const cta_state& st, const chunk_walk& w)
      : p(p_),
        count0(w.count0),
        count1(w.count1),
        c_end(w.c_end),
        lists(token_lists_of(p_, st.t)),
        c(w.next_active(st.c_begin)) {
    if constexpr (kPersistent) {
      load_next(st);
      settle(st);
    }
  }
  __device__ chunk_walk walk() const { return chunk_walk{p, count0, count1, c_end}; }
  __device__ bool valid() const { return c < c_end; }
  // Moves to the next chunk (st: any state of the CTA, for its shared-memory fields); whether there
  // is one.
  __device__ bool advance(const cta_state& st) {
    c = walk().next_active(c + 1);
    if constexpr (kPersistent) settle(st);
    return valid();
  }

 private:
  __device__ void load_next(const cta_state& st) {
    if (!cta_has_item(p, k + 1)) return;
    const cta_state n = cta_item_state(p, st, k + 1, 1);  // the head group does not matter here
    next0 = list_count(p, n.t, 0);
    next1 = list_count(p, n.t, 1);
  }
  // Past item k's last chunk: on to the first chunk of the next item that has one.
  __device__ void settle(const cta_state& st) {
    while (!valid() && cta_has_item(p, k + 1)) {
      ++k;
      const cta_state n = cta_item_state(p, st, k, 1);
      count0 = next0;
      count1 = next1;
      c_end = split_end(p, n);
      lists = token_lists_of(p, n.t);
      load_next(st);
      c = walk().next_active(n.c_begin);
    }
  }
};

// The FP8 producer of two producer warpgroups (the small-head kernel) with rows staged by the
// bulk-copy engine: warp w of warpgroup `half` owns rows 32 half + 8 w + r (r < 8) of every chunk,
// as in producer_convert's map, and keeps two chunks of them in flight as raw bytes in its own
// shared-memory stage (Map::stage, kRawSlots slots of 8 rows). Lane r < 8 resolves row r, copies
// its data bytes (completing on the slot's barrier: 8 arrivals and their bytes) and loads its UE8M0
// bytes into a register (a 16-byte bulk copy of them made the copies twice as many, and the copy
// engine's issue the producers' bottleneck). The warp then converts from the stage into the K
// buffer as producer_convert does from registers, and refills the slot with the chunk two ahead. No
// thread waits on a load, and the copies cost no issue slots: on an H200 the bulk-copy engine
// gathered 576-byte rows at 15.1 B/cycle/SM against 11.9 for the producers' register map
// (bench/gpu/gather_probe.cu).

// Map::raw (raw_stage) is the stage's geometry. kNopeOnly: the stage holds each row's FP8 bytes
// only; its rope is copied by cp.async into the K buffer when the row is converted (the copies land
// on the full barrier, whose count includes each producer thread's cp.async arrival). Prefetching
// the rope into the L2 when the row is staged is slower (a bulk prefetch 5 %, two line prefetches
// 1 %, 32 heads on an H200; docs/tried.md, G12): the producers are bound by what they issue,
// and the rope's lines arrive in time without.
// kPersistent: the CTA's work items one after another (chunk_stream), so that the next item's rows
// are copied while this item's last chunks are converted. The result: the chunks converted.
template <uint32_t L, class Map, bool kPersistent = false>
__device__ __forceinline__ int producer_stage(const attention_params& p, const cta_state& st,
                                              const chunk_walk& walk, const first_jobs& first,
                                              int half, int warp, int lane) {
  using F = row_format<L>;
  using S = typename Map::raw;
  constexpr bool kNopeOnly = S::kNopeOnly;
  static_assert(!kNopeOnly || F::kV4, "rope by cp.async: the 584 B layout");
  // Bytes staged per row: the data bytes (entry_data_offset(L, 1)), or the FP8 bytes only.
  constexpr uint32_t kRowBytes = static_cast<uint32_t>(kNopeOnly ? kNopeDim
                                                       : F::kV4  ? kV4DataBytes
                                                                 : kHeadDim);
  static_assert(!F::kCopied && S::kRowBytes >= static_cast<int>(kRowBytes) + 16,
                "a stage row holds its bytes and padding");
  const int q = lane >> 3;
  const int r = lane & 7;
  const bool issuer = lane < kRawRowsPerWarp;
  const int row = 32 * half + kRawRowsPerWarp * warp + r;
  const row_slots slot = make_row_slots(row, q);
  const uint64_t policy = row_l2_policy(p.stream_rows != 0);
  const int stage_warp = 4 * half + warp;
  const bool stamp = half == 0 && warp == 0 && lane == 0;  // trace builds only
  const uint32_t stage_row =
      st.base + Map::stage + stage_warp * kRawSlots * S::kWarpBytes + r * S::kRowBytes;
  const uint32_t stage_bar = st.base + Map::stage_bars + 8 * kRawSlots * stage_warp;
  // Copies row r of chunk c (list entry idx) into slot s and loads its UE8M0 bytes into `scales`
  // (issuers only; nothing waits on that load before the row is converted); returns whether the row
  // is valid, and its data pointer in `row_src` (kNopeOnly: its rope is copied from there).
  auto issue = [&](int c, int s, int32_t idx, uint2& scales, const uint8_t*& row_src) -> uint32_t {
    if (!issuer) return 0u;
    const uint8_t* src;
    const uint8_t* sc;
    resolve_index<L>(p, walk.list_of(c), idx, &src, &sc);
    row_src = src;
    const uint32_t bar = stage_bar + 8 * s;
    if (src == nullptr) {
      mbar_arrive(bar);
      return 0u;
    }
    mbar_arrive_expect_tx(bar, kRowBytes);
    bulk_load(stage_row + s * S::kWarpBytes, src, kRowBytes, bar, policy);
    if constexpr (F::kV4) scales = ld_nc8(sc);
    return 1u;
  };
  // The chunks to copy, in order: the item's (persistent CTAs: every item's); `stream` is at the
  // next chunk whose list entry is loaded.
  chunk_stream<kPersistent> stream(p, st, walk);
  auto entry = [&]() {
    int32_t idx[1] = {-1};
    if (issuer) load_chunk_indices<1>(stream.walk(), stream.c, stream.lists, &row, idx);
    return idx[0];
  };
  // The entries of the first item's first two chunks were speculated at the kernel's start.
  auto entry_first = [&](int j) {
    if (!issuer) return -1;
    return !kPersistent || stream.k == 0
               ? first_entry(stream.walk(), stream.lists, first, j, stream.c)
               : entry();
  };
  // Converts chunk i (slot i % 2; lane r holds its row's validity, scales and pointer) into K
  // buffer i % 2.
  auto convert = [&](int i, uint32_t info, uint2 scales, const uint8_t* row_src) {
    const int s = i % kRawSlots;
    const int b = i & 1;
    uint32_t* valid = reinterpret_cast<uint32_t*>(st.smem + Map::valid) + b * kKeys;
    const chunk_dst d{st.smem + Map::k + b * kOperandBytes, 0u, 0u};
    const uint32_t mine = __shfl_sync(0xffffffffu, info, r);
    const uint32_t src = stage_row + s * S::kWarpBytes + 16 * q;
    if (stamp) trace::chunk(i, trace::kProdTop);
    mbar_wait(st.empty_bar + 8 * b, ((i >> 1) & 1) ^ 1);  // the first use of a buffer does not wait
    if (stamp) trace::chunk(i, trace::kProdEmpty);
    const bool ok = (mine & 1u) != 0u;
    if constexpr (kNopeOnly) {
      // The rope units of the row (zeros for an invalid one; cache base: not read) land on the full
      // barrier while the FP8 bytes are converted.
      const uint8_t* rope = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(row_src), r));
      rope = ok ? rope + kNopeDim + 16 * q : p.cache[0].base;
      const uint32_t rope_dst =
          st.base + Map::k + b * kOperandBytes + F::kRopeUnit0 / 8 * kColBytes;
#pragma unroll
      for (int g = 0; g < F::kRopeGroups; ++g)
        cp_async16_zfill(rope_dst + slot.quad[g], rope + 64 * g, ok, policy);
      cp_async_arrive(st.full_bar + 8 * b);
    }
    mbar_wait(stage_bar + 8 * s, (i / kRawSlots) & 1);
    if (stamp) trace::chunk(i, trace::kProdData);
    row_share<L> share;
#pragma unroll
    for (int g = 0; g < F::kFp8Groups; ++g)
      share.fp8[g] = ok ? lds16(src + 64 * g) : make_uint4(0, 0, 0, 0);
    if constexpr (!kNopeOnly) {
#pragma unroll
      for (int g = 0; g < F::kRopeGroups; ++g)
        share.rope[g] = ok ? lds16(src + kNopeDim + 64 * g) : make_uint4(0, 0, 0, 0);
    }
    share.scales = make_uint2(0x7f7f7f7fu, 0x7f7f7f7fu);
    if constexpr (F::kV4) {
      const uint2 sc =
          make_uint2(__shfl_sync(0xffffffffu, scales.x, r), __shfl_sync(0xffffffffu, scales.y, r));
      if (ok) share.scales = sc;
    }
    if (q == 0) valid[row] = ok ? 1u : 0u;
    const uint32_t inexact = store_share<L, 1, !kNopeOnly>(share, slot, d);
    if (inexact != 0u)
      fix_groups<L, 1>(
          inexact, [&](int g) { return lds16(src + 64 * g); }, share.scales, slot, d);
    fence_proxy_async();  // the tensor cores read the buffers through the async proxy
    mbar_arrive(st.full_bar + 8 * b);
    if (stamp) trace::chunk(i, trace::kProdFull);
  };
  // Chunks 0 and 1 from the speculated entries, then chunk i + 2 into chunk i's slot once it is
  // converted (the warp's own lanes read it: __syncwarp orders their reads before the copies).
  static_assert(kRawSlots == 2, "the loop below alternates two slots");
  uint32_t info0 = 0u, info1 = 0u;
  uint2 scales0 = make_uint2(0u, 0u), scales1 = make_uint2(0u, 0u);
  const uint8_t* src0 = nullptr;
  const uint8_t* src1 = nullptr;
  if (stamp) trace::header(trace::kProdEnter);
  bool full0 = stream.valid();  // whether slot 0 / 1 holds a chunk to convert
  if (full0) {
    info0 = issue(stream.c, 0, entry_first(0), scales0, src0);
    stream.advance(st);
  }
  if (stamp) trace::header(trace::kProdIssued0);
  bool full1 = stream.valid();
  if (full1) {
    info1 = issue(stream.c, 1, entry_first(1), scales1, src1);
    stream.advance(st);
  }
  if (stamp) trace::header(trace::kProdIssued1);
  // The list entries of the next two chunks to issue (c_issue, and the stream's) are in flight a
  // whole chunk period before their rows are resolved: one period ahead, their loads stalled the
  // issue (H200).
  int c_issue = stream.valid() ? stream.c : -1;  // -1: none
  int32_t idx_issue = c_issue >= 0 ? entry() : -1;
  if (c_issue >= 0) stream.advance(st);
  int32_t idx_ahead = stream.valid() ? entry() : -1;
  auto step = [&](int i, int s, bool& full, uint32_t& info, uint2& scales,
                  const uint8_t*& row_src) {
    convert(i, info, scales, row_src);
    __syncwarp();
    full = c_issue >= 0;
    if (full) {
      info = issue(c_issue, s, idx_issue, scales, row_src);
      c_issue = stream.valid() ? stream.c : -1;
      idx_issue = idx_ahead;
      if (c_issue >= 0 && stream.advance(st)) idx_ahead = entry();
    }
  };
  int i = 0;
  while (full0) {
    step(i++, 0, full0, info0, scales0, src0);
    if (!full1) break;
    step(i++, 1, full1, info1, scales1, src1);
  }
  if (stamp) trace::header(trace::kProdEnd);
  return i;
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Host: the launch of one CTA per (token, key split, head group), the order cta_begin decodes.
inline cudaLaunchConfig_t cta_grid_config(const attention_params& p, int threads, size_t smem_bytes,
                                          cudaStream_t stream) {
  const int64_t ctas = item_count(p);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
#if defined(DSV4_SM90_TRACE)
  trace::launch(ctas);
#endif
  return cfg;
}

// Host: calls f(std::integral_constant<uint32_t, L>{}) for each layout the Hopper kernels serve
// (one kernel per layout), until one fails.
template <class F>
cudaError_t for_each_sm90_layout(F&& f) {
  cudaError_t err = f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_V4_584B>{});
  if (err == cudaSuccess) err = f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_BF16>{});
  if (err == cudaSuccess)
    err = f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>{});
  if (err == cudaSuccess) err = f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP16>{});
  return err;
}
// The same for the one layout `layout` (cudaErrorInvalidValue for a layout they do not serve).
template <class F>
cudaError_t with_sm90_layout(uint32_t layout, F&& f) {
  switch (layout) {
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      return f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_V4_584B>{});
    case DSV4_KV_LAYOUT_BF16:
      return f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_BF16>{});
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR>{});
    case DSV4_KV_LAYOUT_FP16:
      return f(std::integral_constant<uint32_t, DSV4_KV_LAYOUT_FP16>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace
}  // namespace cuda
}  // namespace dsv4
