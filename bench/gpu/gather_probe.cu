// Row-gather probe for Hopper (sm_90a): how fast one CTA per SM gathers random 1 KB rows (512 bf16
// dims, the bf16 cache's row) into 64-row, 128B-swizzled shared-memory buffers — the bf16
// producer's job in attention_sm90.cu — by each copy method a kernel could use, and random FP8 rows
// into registers by lane map (the FP8 producer's loads). No consumers: it
// measures the copy path alone, with one or two buffers in flight. Not part of the library.
//
// Build: nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -Ibackends/include
//        -Ibackends bench/gpu/gather_probe.cu -o gather_probe   (or scripts/gpu/run_all.sh probe)
// Run:   gather_probe METHOD TABLE_ROWS DEPTH [CHUNKS [BUSY]]
//   METHOD cp4: cp.async 16 B, 4 lanes per row (a warp: 8 rows x 64 B), 128 threads (the kernel's);
//          cp8: cp.async 16 B, 8 lanes per row (a warp: 4 rows x 128 B), 128 threads;
//          cp4x2: cp4's map over 256 threads (one row each);
//          tma: tensor-map boxes of 64 dims x 1 row (SWIZZLE_128B), 8 per row, 64 threads;
//          regs: ld.global.v4 into registers, then st.shared (one chunk in flight), 128 threads;
//          bulk: cp.async.bulk of whole rows, unswizzled (the bulk-copy engine), 64 threads.
//          fbulk: FP8 rows (below) by cp.async.bulk, one 576-byte copy per row and thread, 64
//                 threads, DEPTH 1..5 chunks in flight (one 36 KB buffer each): the small-head
//                 kernel's producer_stage.
//   FP8 rows (576 data bytes of the 584 B layout, rows packed as in a 64-entry page, so every other
//   row starts 64 bytes past a 128-byte line): ld.global.v4 into registers, then st.shared of the
//   raw bytes (unswizzled), 256 threads (the small-head kernel's two producer warpgroups), DEPTH
//   chunks of loads in flight per thread:
//          f64: 4 lanes per row (a warp: 8 rows x 64 B, the Hopper FP8 producers' map), 9 loads;
//          f128: 8 lanes per row (a warp: 4 rows x 128 B from the row's start), 2 rows x 5 loads;
//          f128a: as f128, but the pieces start at 128-byte lines (a row 64 bytes past a line
//                 begins with a 64-byte piece), so each piece is one line.
//   DEPTH  1: a chunk is issued once the previous one has landed (its latency); 2: two in flight.
//   BUSY   none; mma: a warpgroup issues S-like wgmma (64 x 64 x 512, both operands in shared
//          memory) back to back meanwhile; alu: two warpgroups run FMA chains (issue slots).
// Each run checks the last two chunks of CTA 0 byte by byte against the table and prints one line:
// method, table rows, depth, median time, TB/s over all SMs, bytes per cycle and SM, cycles per
// chunk. The copies use the Hopper kernels' own PTX wrappers (sm90_pipeline.cuh).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/sm90_pipeline.cuh"
#include "cuda/wgmma_ops.cuh"

namespace gather_probe {

using namespace dsv4::cuda;  // kKeys, kColBytes, sw128 and the PTX wrappers of the Hopper kernels

constexpr int kRowBytes = 1024;
constexpr int kBufBytes = kKeys * kRowBytes;
static_assert(kBufBytes == kOperandBytes, "a buffer is one 64-row operand of the Hopper kernels");
constexpr int kQBytes = kBufBytes;  // the busy warpgroup's A operand
constexpr int kBarBytes = 128;      // up to 8 mbarriers, then the busy warps' flags
constexpr int kSmemBytes = 2 * kBufBytes + kQBytes + 1024 + kBarBytes;

enum Method { kCp4, kCp8, kCp4x2, kTma, kRegs, kBulk, kF64, kF128, kF128a, kFBulk };
constexpr int kMethods = 10;
enum Busy { kNone, kMma, kAlu };
__host__ __device__ constexpr int busy_threads(int busy) {
  return busy == kMma ? 128 : busy == kAlu ? 256 : 0;
}
__host__ __device__ constexpr int threads_of(int m) {
  return (m == kCp4x2 || (m >= kF64 && m != kFBulk)) ? 256
         : (m == kTma || m == kBulk || m == kFBulk)  ? 64
                                                     : 128;
}
__host__ __device__ constexpr bool is_fp8(int m) { return m >= kF64; }
constexpr int kFp8Row = 576;  // data bytes of an FP8 row (448 e4m3 + 64 bf16 rope)
constexpr int kFp8Units = kFp8Row / 16;
constexpr int kFp8Loads = 10;  // a thread's 16-byte loads per chunk (f64 uses 9)
__host__ __device__ constexpr int chunk_bytes(int m) {
  return is_fp8(m) ? kKeys * kFp8Row : kBufBytes;
}
// Buffers in flight: fbulk keeps DEPTH chunks of FP8 rows in the 192 KB region (2 buffers + the
// busy warpgroup's operand), the others two buffers of kBufBytes.
__host__ __device__ constexpr int max_depth(int m) { return m == kFBulk ? 5 : 2; }
__host__ __device__ inline int buffers_of(int m, int depth) { return m == kFBulk ? depth : 2; }
__host__ __device__ constexpr int buffer_stride(int m) {
  return m == kFBulk ? kKeys * kFp8Row : kBufBytes;
}
constexpr int kDumpBytes = 2 * kBufBytes + kQBytes;

struct Args {
  const uint8_t* table;
  const int* idx;  // [ctas][chunks][64]
  int chunks;
  int depth;
  unsigned long long* cycles;
  uint8_t* dump;  // CTA 0's two buffers at the end
  float* sink;    // the busy threads' results (kept live)
};

// The busy warpgroups (threads 0.. of the CTA) until the copies are done (`flag` set).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The bf16 producer's lane map (producer_copy): row k of a thread, 4 lanes per row; its 16-byte
// pieces are units 4 j + (lane >> 3). Used by cp4, cp4x2 and regs.
__device__ __forceinline__ int kernel_map_row(int k, int warp, int lane) {
  return 32 * k + 8 * warp + (lane & 7);
}

// FP8 methods: load n of a thread's chunk job -> (row of the chunk, 16-byte unit of the row), unit
// -1 for no load. table_row: the row's table index (its parity sets the line offset for f128a).
template <int M>
__device__ __forceinline__ int fp8_row_of(int n, int warp, int lane) {
  if constexpr (M == kF64) return 8 * warp + (lane & 7);
  return 32 * (n / 5) + 4 * warp + (lane >> 3);
}
template <int M>
__device__ __forceinline__ int fp8_unit_of(int n, int lane, int table_row) {
  int u;
  if constexpr (M == kF64) {
    u = n < 9 ? 4 * n + (lane >> 3) : -1;
  } else {
    const int shift = (M == kF128a && (table_row & 1)) ? 4 : 0;  // 576 * odd = 64 mod 128
    u = 8 * (n % 5) + (lane & 7) - shift;
  }
  return (u >= 0 && u < kFp8Units) ? u : -1;
}
struct fp8_job {
  uint4 v[kFp8Loads];
  int table_row[2];  // the table rows of the job's chunk rows (f64: one; f128, f128a: two)
};
template <int M>
__device__ __forceinline__ void fp8_load(fp8_job& j, const uint8_t* table, const int* idx, int warp,
                                         int lane) {
#pragma unroll
  for (int k = 0; k < 2; ++k) j.table_row[k] = idx[fp8_row_of<M>(5 * k, warp, lane)];
#pragma unroll
  for (int n = 0; n < kFp8Loads; ++n) {
    const int row = j.table_row[n / 5];
    const int u = fp8_unit_of<M>(n, lane, row);
    if (u >= 0) j.v[n] = ld_nc16(table + static_cast<size_t>(row) * kFp8Row + 16 * u, true);
  }
}
template <int M>
__device__ __forceinline__ void fp8_store(const fp8_job& j, uint8_t* buf, int warp, int lane) {
#pragma unroll
  for (int n = 0; n < kFp8Loads; ++n) {
    const int r = fp8_row_of<M>(n, warp, lane);
    const int u = fp8_unit_of<M>(n, lane, j.table_row[n / 5]);
    if (u >= 0) *reinterpret_cast<uint4*>(buf + r * kFp8Row + 16 * u) = j.v[n];
  }
}

template <int BUSY>
__device__ void busy_work(uint32_t base, volatile int* flag, volatile int* decision, float* sink) {
  const int tid = threadIdx.x;
  if constexpr (BUSY == kMma) {
    const uint32_t q_lo = desc_lo(base + 2 * kBufBytes, 16);
    const uint32_t k_lo = desc_lo(base, 16);
    float s[32];
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    float acc = 0.0f;
    for (int it = 0;; ++it) {
      if (tid == 0) decision[it & 1] = *flag;
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      if (decision[it & 1]) break;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 32; ++ks) {
        const uint32_t off = (ks / 4) * kColBytes + (ks % 4) * 32;
        wgmma_m64n64_ss(s, desc_at(q_lo, off), desc_at(k_lo, (it & 1) * kBufBytes + off),
                        ks > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait0();
      wgmma_fence_operands32(s);
      acc += s[0];  // keeps the accumulators live (a constant index keeps them in registers)
    }
    sink[blockIdx.x * 1024 + tid] = acc;
  } else if constexpr (BUSY == kAlu) {
    float x = tid * 1e-3f, y = 1.0f;
    while (!*flag) {
#pragma unroll 64
      for (int i = 0; i < 1024; ++i) y = fmaf(y, x, 0.5f);
    }
    sink[blockIdx.x * 1024 + tid] = y;
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int M, int BUSY>
__global__ void __launch_bounds__(384, 1) probe(Args a, const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  uint8_t* gbase = raw + (base - raw_addr);
  const uint32_t bars = base + 2 * kBufBytes + kQBytes;
  volatile int* flag = reinterpret_cast<volatile int*>(gbase + 2 * kBufBytes + kQBytes + 64);
  if (threadIdx.x == 0) *flag = 0;
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < busy_threads(BUSY)) {
    busy_work<BUSY>(base, flag, flag + 1, a.sink);
    return;
  }
  const int tid = threadIdx.x - busy_threads(BUSY);
  const int warp = tid / 32;
  const int lane = tid % 32;
  if (tid == 0) {
    // cp.async arrivals count per thread (.noinc); tensor / bulk copies: one arrive.expect_tx each.
    for (int b = 0; b < buffers_of(M, a.depth); ++b) mbar_init(bars + 8 * b, threads_of(M));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("bar.sync 2, %0;\n" ::"r"(threads_of(M)) : "memory");
  const unsigned long long t0 = clock64();
  const int* idx0 = a.idx + static_cast<size_t>(blockIdx.x) * a.chunks * kKeys;
  const uint64_t policy = row_l2_policy(true);
  fp8_job cur, next;
  const int nbuf = buffers_of(M, a.depth);
  if constexpr (is_fp8(M) && M != kFBulk) fp8_load<M>(cur, a.table, idx0, warp, lane);
  for (int i = 0; i < a.chunks; ++i) {
    const int b = i % nbuf;
    const int wait_for = i - a.depth;  // the chunk whose landing frees this issue slot
    if (wait_for >= 0) mbar_wait(bars + 8 * (wait_for % nbuf), (wait_for / nbuf) & 1);
    const uint32_t buf = base + b * buffer_stride(M);
    const uint32_t bar = bars + 8 * b;
    const int* idx = idx0 + i * kKeys;
    if constexpr (M == kCp4 || M == kCp4x2) {
      const int q = lane >> 3;
      constexpr int kRowsPer = M == kCp4 ? 2 : 1;
#pragma unroll
      for (int k = 0; k < kRowsPer; ++k) {
        const int r = kernel_map_row(k, warp, lane);
        const uint8_t* src = a.table + static_cast<size_t>(idx[r]) * kRowBytes;
#pragma unroll
        for (int j = 0; j < 16; ++j)
          cp_async16_zfill(buf + sw128(r, 4 * j + q), src + 16 * (4 * j + q), true, policy);
      }
      cp_async_arrive(bar);
    } else if constexpr (M == kCp8) {
      const int e = lane & 7;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = 16 * k + 4 * warp + (lane >> 3);
        const uint8_t* src = a.table + static_cast<size_t>(idx[r]) * kRowBytes;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          cp_async16_zfill(buf + sw128(r, 8 * j + e), src + 16 * (8 * j + e), true, policy);
      }
      cp_async_arrive(bar);
    } else if constexpr (M == kTma) {
      const int r = tid;
      const int row = idx[r];
      mbar_arrive_expect_tx(bar, kRowBytes);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            "[%0], [%1, {%2, %3}], "
            "[%4];\n" ::"r"(buf + c * kColBytes + r * 128),
            "l"(reinterpret_cast<uint64_t>(&map)), "r"(64 * c), "r"(row), "r"(bar)
            : "memory");
      }
    } else if constexpr (M == kBulk) {
      const int r = tid;
      mbar_arrive_expect_tx(bar, kRowBytes);
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];\n" ::"r"(buf + r * kRowBytes),
          "l"(a.table + static_cast<size_t>(idx[r]) * kRowBytes), "r"(kRowBytes), "r"(bar)
          : "memory");
    } else if constexpr (M == kFBulk) {
      const int r = tid;
      mbar_arrive_expect_tx(bar, kFp8Row);
      bulk_load(buf + r * kFp8Row, a.table + static_cast<size_t>(idx[r]) * kFp8Row, kFp8Row, bar,
                policy);
    } else if constexpr (is_fp8(M)) {
      // Chunk i's loads were issued an iteration ago (DEPTH 2) or are issued now (DEPTH 1).
      const bool ahead = a.depth == 2 && i + 1 < a.chunks;
      if (ahead) fp8_load<M>(next, a.table, idx + kKeys, warp, lane);
      fp8_store<M>(cur, gbase + b * kBufBytes, warp, lane);
      mbar_arrive(bar);
      if (ahead) {
        cur = next;
      } else if (i + 1 < a.chunks) {
        fp8_load<M>(cur, a.table, idx + kKeys, warp, lane);
      }
    } else {  // kRegs
      const int q = lane >> 3;
      uint4 v[2][16];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int r = kernel_map_row(k, warp, lane);
        const uint8_t* src = a.table + static_cast<size_t>(idx[r]) * kRowBytes;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          v[k][j] = ld_nc16(src + 16 * (4 * j + q), true);
        }
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int r = kernel_map_row(k, warp, lane);
#pragma unroll
        for (int j = 0; j < 16; ++j)
          *reinterpret_cast<uint4*>(gbase + b * kBufBytes + sw128(r, 4 * j + q)) = v[k][j];
      }
      mbar_arrive(bar);
    }
  }
  // Drain: the chunks still in flight.
  for (int i = a.chunks - nbuf; i < a.chunks; ++i) mbar_wait(bars + 8 * (i % nbuf), (i / nbuf) & 1);
  const unsigned long long t1 = clock64();
  if (tid == 0) {
    a.cycles[blockIdx.x] = t1 - t0;
    *flag = 1;
  }
  if (blockIdx.x == 0) {
    for (int o = 16 * tid; o < kDumpBytes; o += 16 * threads_of(M)) {
      *reinterpret_cast<uint4*>(a.dump + o) = *reinterpret_cast<const uint4*>(gbase + o);
    }
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return 2;                                                                               \
    }                                                                                         \
  } while (0)

template <int M, int BUSY>
cudaError_t launch(int ctas, const Args& a, const CUtensorMap& map) {
  cudaError_t e =
      cudaFuncSetAttribute(probe<M, BUSY>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  probe<M, BUSY><<<ctas, threads_of(M) + busy_threads(BUSY), kSmemBytes>>>(a, map);
  return cudaGetLastError();
}
// Launches method m (a run-time value) by matching it against every Method in turn.
template <int BUSY, int... Ms>
cudaError_t launch_busy(int m, int ctas, const Args& a, const CUtensorMap& map,
                        std::integer_sequence<int, Ms...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((m == Ms ? (e = launch<Ms, BUSY>(ctas, a, map), true) : false) || ...);
  return e;
}
template <int BUSY>
cudaError_t launch_busy(int m, int ctas, const Args& a, const CUtensorMap& map) {
  return launch_busy<BUSY>(m, ctas, a, map, std::make_integer_sequence<int, kMethods>{});
}
cudaError_t launch_method(int m, int busy, int ctas, const Args& a, const CUtensorMap& map) {
  if (busy == kMma) return launch_busy<kMma>(m, ctas, a, map);
  if (busy == kAlu) return launch_busy<kAlu>(m, ctas, a, map);
  return launch_busy<kNone>(m, ctas, a, map);
}

}  // namespace gather_probe
using namespace gather_probe;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::printf(
        "usage: gather_probe cp4|cp8|cp4x2|tma|regs|bulk|f64|f128|f128a|fbulk TABLE_ROWS DEPTH "
        "[CHUNKS [BUSY]]\n");
    return 1;
  }
  const std::string names[kMethods] = {"cp4",  "cp8", "cp4x2", "tma",   "regs",
                                       "bulk", "f64", "f128",  "f128a", "fbulk"};
  int m = -1;
  for (int i = 0; i < kMethods; ++i) {
    if (names[i] == argv[1]) m = i;
  }
  const long long rows = std::atoll(argv[2]);
  const int depth = std::atoi(argv[3]);
  const int chunks = argc > 4 ? std::atoi(argv[4]) : 64;
  const std::string busy_name = argc > 5 ? argv[5] : "none";
  const int busy = busy_name == "mma" ? kMma : busy_name == "alu" ? kAlu : kNone;
  if (m < 0 || rows < 64 || depth < 1 || chunks < 2) {
    std::printf("bad arguments\n");
    return 1;
  }
  if (depth > max_depth(m) || chunks < buffers_of(m, depth)) {
    std::printf("%-6s depth %d: not supported by this method\n", argv[1], depth);
    return 0;
  }
  int dev = 0, sms = 0, khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const int ctas = sms;

  // Table: every 32-bit word holds its own word index (word w of 1 KB row R: R * 256 + w), so every
  // 16-byte unit names its position, for 1 KB rows and 576-byte FP8 rows alike.
  uint8_t* table = nullptr;
  CHECK(cudaMalloc(&table, static_cast<size_t>(rows) * kRowBytes));
  {
    const long long chunk_rows = 1 << 16;
    std::vector<uint32_t> h(static_cast<size_t>(chunk_rows) * 256);
    for (long long r0 = 0; r0 < rows; r0 += chunk_rows) {
      const long long n = std::min(chunk_rows, rows - r0);
      for (long long r = 0; r < n; ++r) {
        for (int w = 0; w < 256; ++w) h[r * 256 + w] = static_cast<uint32_t>((r0 + r) * 256 + w);
      }
      CHECK(cudaMemcpy(table + r0 * kRowBytes, h.data(), n * kRowBytes, cudaMemcpyHostToDevice));
    }
  }
  std::vector<int> hidx(static_cast<size_t>(ctas) * chunks * kKeys);
  std::mt19937_64 rng(0x5eed ^ static_cast<unsigned>(rows));
  for (int& v : hidx) v = static_cast<int>(rng() % static_cast<unsigned long long>(rows));
  int* idx = nullptr;
  unsigned long long* cycles = nullptr;
  uint8_t* dump = nullptr;
  CHECK(cudaMalloc(&idx, hidx.size() * sizeof(int)));
  CHECK(cudaMemcpy(idx, hidx.data(), hidx.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&cycles, ctas * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&dump, kDumpBytes));
  float* sink = nullptr;
  CHECK(cudaMalloc(&sink, static_cast<size_t>(ctas) * 1024 * sizeof(float)));

  CUtensorMap map{};
  if (m == kTma) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                           &q));
    auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    cuuint64_t dims[2] = {512, static_cast<cuuint64_t>(rows)};
    cuuint64_t strides[1] = {kRowBytes};
    cuuint32_t box[2] = {64, 1};
    cuuint32_t elem[2] = {1, 1};
    const CUresult r =
        encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, table, dims, strides, box, elem,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      std::printf("%s: tensor map encode failed (%d)\n", argv[1], static_cast<int>(r));
      return 2;
    }
  }
  Args a{table, idx, chunks, depth, cycles, dump, sink};
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int rep = 0; rep < 7; ++rep) {
    CHECK(cudaEventRecord(e0));
    CHECK(launch_method(m, busy, ctas, a, map));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (rep > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::vector<unsigned long long> cyc(ctas);
  CHECK(cudaMemcpy(cyc.data(), cycles, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::sort(cyc.begin(), cyc.end());

  // Check CTA 0's last chunks (one per buffer): swizzled units, or whole rows for the bulk copies.
  std::vector<uint8_t> hd(kDumpBytes);
  CHECK(cudaMemcpy(hd.data(), dump, hd.size(), cudaMemcpyDeviceToHost));
  long long bad = 0;
  const int nbuf = buffers_of(m, depth);
  for (int i = chunks - nbuf; i < chunks; ++i) {
    const uint8_t* buf = hd.data() + (i % nbuf) * buffer_stride(m);
    for (int r = 0; r < kKeys; ++r) {
      const uint32_t row = static_cast<uint32_t>(hidx[static_cast<size_t>(i) * kKeys + r]);
      if (is_fp8(m)) {
        for (int u = 0; u < kFp8Units; ++u) {
          uint32_t w[4];
          std::memcpy(w, buf + r * kFp8Row + 16 * u, 16);
          for (int k = 0; k < 4; ++k) bad += w[k] != (row * kFp8Row + 16 * u) / 4 + k;
        }
        continue;
      }
      for (int u = 0; u < 64; ++u) {
        const uint32_t off = m == kBulk
                                 ? r * kRowBytes + 16 * u
                                 : (u >> 3) * kColBytes + r * 128 + (((u & 7) ^ (r & 7)) << 4);
        uint32_t w[4];
        std::memcpy(w, buf + off, 16);
        for (int k = 0; k < 4; ++k) bad += w[k] != row * 256 + 4 * u + k;
      }
    }
  }
  const double bytes = static_cast<double>(ctas) * chunks * chunk_bytes(m);
  const double med_ms = ms[ms.size() / 2];
  const double med_cyc = static_cast<double>(cyc[cyc.size() / 2]);
  std::printf(
      "%-6s busy %-4s rows %9lld depth %d: %8.1f us  %5.2f TB/s  %5.1f B/cycle/SM  %6.0f "
      "cycles/chunk  %s\n",
      argv[1], busy_name.c_str(), rows, depth, med_ms * 1e3, bytes / (med_ms * 1e-3) / 1e12,
      static_cast<double>(chunk_bytes(m)) * chunks / med_cyc, med_cyc / chunks,
      bad == 0 ? "ok" : "WRONG BYTES");
  (void)khz;
  return bad == 0 ? 0 : 3;
}
