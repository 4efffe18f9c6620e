// CPU benchmarks (Google Benchmark) on the shapes of shared/perf/targets.md's CPU table, and the
// machine's ceilings they are judged against:
//   BM_decode_fp8 / BM_decode_bf16 (tokens, heads, keys, threads): each query token attends to 128
//     SWA rows (main list) plus 512 or 1024 compressed rows (extra list), no row shared between
//     tokens, attention sink on, explicit mode, FP8 584 B or bf16 caches, on a context of `threads`
//     workers. Each iteration reads the next rows of a random order of a cache of pool_rows() rows
//     (at least 1 GiB and 4x the last-level cache; the whole cache before a row repeats, as in
//     torch_cpu.py and BM_gather), so that they come from memory as the roofline's gather bandwidth
//     assumes. Counter GFLOP (per second), FLOP = 2 * heads * keys * (512 + 512) per token.
//   BM_peak (threads): the dot-product peak of the instruction the fast kernel uses (TDPBF16PS
//     where the CPU module runs its AMX kernel, else VDPBF16PS with AVX512_BF16, else fp32 FMA),
//     every thread on its own registers (tiles). Counter GFLOP.
//   BM_gather (row_bytes, ahead, threads): random rows of a pool as large, read whole (every byte
//     used), each prefetched `ahead` rows before. Counter GBps (bytes per second / 1e9).
// Pools: DSV4_BENCH_POOL_BYTES sets their size; DSV4_BENCH_HUGE_PAGES=1 backs them with huge pages.
// bench/cpu/bench_all.sh runs this with plain PyTorch's timings and writes bench/results/.
//
//   build/bin/dsv4_bench_cpu [--benchmark_filter=fp8] [--benchmark_min_time=2]
// The case being measured shows on stderr (a live line on a terminal, a line per case when piped);
// results go to stdout as each case finishes.
#include <benchmark/benchmark.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/probe.h"
#include "dsv4/dsv4.h"
#include "progress.h"

namespace {

// A rate counter of `per_iteration` units per iteration of this thread. Google Benchmark sums a
// counter over the threads of a run, counts the iterations of all of them and averages their
// times, so kIsIterationInvariantRate would count every unit `threads` times: each thread sets
// its own total here, and the sum over the threads is divided by the (averaged) wall time.
benchmark::Counter per_thread_rate(const benchmark::State& state, double per_iteration) {
  return benchmark::Counter(per_iteration * static_cast<double>(state.iterations()),
                            benchmark::Counter::kIsRate);
}

dsv4cli::Progress* g_progress = nullptr;

constexpr int64_t kDim = 512;
constexpr int64_t kSwaKeys = 128;
constexpr int32_t kBlockSize = 64;

constexpr dsv4_device kCpu{DSV4_DEVICE_CPU, 0};
constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

void check(dsv4_status st, const char* what) {
  if (st != DSV4_STATUS_OK) {
    throw std::runtime_error(std::string(what) + ": " + dsv4_status_string(st) + ": " +
                             dsv4_last_error_message());
  }
}

dsv4_tensor tensor(void* data, dsv4_dtype dtype, std::vector<int64_t>& shape) {
  dsv4_tensor t{};
  t.data = data;
  t.device = kCpu;
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  return t;
}

uint16_t to_bf16(float x) {  // round to nearest even; inputs are finite
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Bytes every pool spans: at least 1 GiB and four times the last-level cache
// (DSV4_BENCH_POOL_BYTES overrides; bench_all.sh passes the value it gives torch_cpu.py too).
// Consecutive iterations read different rows, so a pool this size keeps them out of the caches, as
// a decode step's rows are (each layer's cache is read once per step, between the other layers').
size_t pool_bytes() {
  if (const char* env = std::getenv("DSV4_BENCH_POOL_BYTES")) {
    const long long n = std::atoll(env);
    if (n > 0) return static_cast<size_t>(n);
  }
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max(size_t{1} << 30, 4 * static_cast<size_t>(llc > 0 ? llc : 0));
}

// A pool's bytes, zeroed: 2 MiB-aligned and, with DSV4_BENCH_HUGE_PAGES=1, advised to Linux's
// transparent huge pages before they are touched (an engine can allocate its KV cache so; with
// 4 KiB pages every random row costs a page walk).
struct PoolBytes {
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit PoolBytes(size_t n) : size(n) {
    constexpr size_t kHuge = size_t{1} << 21;
    data = static_cast<uint8_t*>(std::aligned_alloc(kHuge, (n + kHuge - 1) / kHuge * kHuge));
    if (data == nullptr) throw std::bad_alloc();
    if (huge_pages()) madvise(data, n, MADV_HUGEPAGE);
    std::memset(data, 0, n);
  }
  ~PoolBytes() { std::free(data); }
  PoolBytes(const PoolBytes&) = delete;
  PoolBytes& operator=(const PoolBytes&) = delete;
  static bool huge_pages() {
    const char* env = std::getenv("DSV4_BENCH_HUGE_PAGES");
    return env != nullptr && std::atoi(env) != 0;
  }
};

// Rows of a pool of `row_bytes` rows: the power of two that spans pool_bytes().
int64_t pool_rows(int64_t row_bytes) {
  int64_t rows = 4096;  // at least the rows Cache writes (a small DSV4_BENCH_POOL_BYTES)
  while (static_cast<size_t>(rows * row_bytes) < pool_bytes()) rows *= 2;
  return rows;
}

// The cache every case reads, one per layout: pool_rows() entries of random values (N(0, 1);
// 4096 distinct rows written with dsv4_kv_write, repeated: the values do not change the timing,
// the addresses do), and a random order of all its rows that the cases draw from.
struct Cache {
  dsv4_kv_cache_desc desc{};
  std::unique_ptr<PoolBytes> bytes;
  std::vector<int64_t> shape;
  dsv4_tensor t{};
  std::vector<int32_t> order;  // a permutation of the rows
  int64_t next_row = 0;        // where the next case starts reading `order` (cases go on from it)

  Cache(dsv4_ctx* ctx, uint32_t layout, std::mt19937& rng) {
    dsv4_kv_layout_info info;
    dsv4_kv_layout_info_init(&info);
    check(dsv4_kv_layout_get_info(layout, kBlockSize, &info), "dsv4_kv_layout_get_info");
    const int64_t rows = pool_rows(info.min_block_stride_bytes / kBlockSize);
    const int64_t blocks = (rows + kBlockSize - 1) / kBlockSize;
    desc = dsv4_kv_cache_desc{layout, kBlockSize, info.min_block_stride_bytes, 1.0f, 0};
    bytes.reset(new PoolBytes(static_cast<size_t>(blocks * info.min_block_stride_bytes)));
    shape = {blocks, info.min_block_stride_bytes};
    t = tensor(bytes->data, kU8, shape);
    // The first 4096 rows (64 whole blocks) written, then their bytes copied block for block.
    constexpr int64_t kBatch = 4096;
    static_assert(kBatch % kBlockSize == 0, "whole blocks");
    const int64_t n = std::min(kBatch, rows);
    std::normal_distribution<float> normal;
    std::vector<float> values(static_cast<size_t>(n * kDim));
    for (float& v : values) v = normal(rng);
    std::vector<int32_t> slots(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>(i);
    std::vector<int64_t> vshape{n, kDim}, sshape{n};
    dsv4_tensor tv = tensor(values.data(), kF32, vshape);
    dsv4_tensor ts = tensor(slots.data(), kI32, sshape);
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = desc;
    w.values = &tv;
    w.slots = &ts;
    w.cache = &t;
    check(dsv4_kv_write(ctx, &w), "dsv4_kv_write");
    const size_t written = static_cast<size_t>(n / kBlockSize * info.min_block_stride_bytes);
    for (size_t at = written; at < bytes->size; at += written)
      std::memcpy(bytes->data + at, bytes->data, std::min(written, bytes->size - at));
    order.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
  }
};

Cache& pool(dsv4_ctx* ctx, uint32_t layout) {
  static std::unique_ptr<Cache> fp8, bf16;
  std::unique_ptr<Cache>& c = layout == DSV4_KV_LAYOUT_BF16 ? bf16 : fp8;
  if (c == nullptr) {
    std::mt19937 rng(7);
    c.reset(new Cache(ctx, layout, rng));
  }
  return *c;
}

// Args: tokens, heads, total keys per token (128 SWA + the rest compressed).
void run_decode(benchmark::State& state, uint32_t layout) {
  if (g_progress != nullptr) {
    g_progress->step(std::string("decode ") + (layout == DSV4_KV_LAYOUT_BF16 ? "bf16" : "fp8") +
                     ": tokens " + std::to_string(state.range(0)) + ", heads " +
                     std::to_string(state.range(1)) + ", keys " + std::to_string(state.range(2)) +
                     ", threads " + std::to_string(state.range(3)));
  }
  const int64_t tokens = state.range(0), heads = state.range(1), keys = state.range(2);
  const int64_t extra = keys - kSwaKeys;
  std::mt19937 rng(42);
  dsv4_ctx* ctx = nullptr;
  dsv4_ctx_options co;
  dsv4_ctx_options_init(&co);
  co.backend = "cpu";
  co.num_threads = static_cast<int32_t>(state.range(3));
  check(dsv4_ctx_create(&co, &ctx), "dsv4_ctx_create");
  std::unique_ptr<dsv4_ctx, void (*)(dsv4_ctx*)> ctx_owner(ctx, dsv4_ctx_destroy);

  // Row sets: each iteration reads the next `need` rows of the pool's order (swa lists, then
  // extra lists: distinct rows, as in a decode batch), the whole pool before any row repeats.
  Cache& cache = pool(ctx, layout);  // both lists' rows come from it
  const int64_t need = tokens * keys;
  const int64_t sets = static_cast<int64_t>(cache.order.size()) / need;
  if (sets == 0) {
    state.SkipWithError(
        "the pool holds fewer rows than one iteration reads: raise DSV4_BENCH_POOL_BYTES");
    return;
  }
  std::normal_distribution<float> normal;
  std::vector<uint16_t> q(static_cast<size_t>(tokens * heads * kDim)), out(q.size());
  for (uint16_t& v : q) v = to_bf16(normal(rng));
  std::vector<float> sink(static_cast<size_t>(heads));
  for (float& s : sink) s = normal(rng);

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = static_cast<int32_t>(heads);
  po.max_tokens = static_cast<int32_t>(tokens);
  po.swa_cache = cache.desc;
  po.extra_cache = cache.desc;
  po.topk = static_cast<int32_t>(kSwaKeys);
  po.extra_topk = static_cast<int32_t>(extra);
  dsv4_plan* plan = nullptr;
  check(dsv4_plan_create(ctx, &po, &plan), "dsv4_plan_create");
  std::unique_ptr<dsv4_plan, void (*)(dsv4_plan*)> plan_owner(plan, dsv4_plan_destroy);
  size_t ws_bytes = 0;
  check(dsv4_plan_get_workspace_size(plan, &ws_bytes), "dsv4_plan_get_workspace_size");
  std::vector<uint8_t> workspace(ws_bytes);

  std::vector<int64_t> q_shape{tokens, heads, kDim}, swa_shape{tokens, kSwaKeys},
      cmp_shape{tokens, extra}, sink_shape{heads};
  dsv4_tensor tq = tensor(q.data(), kBf16, q_shape), tout = tensor(out.data(), kBf16, q_shape);
  int32_t* order = cache.order.data();
  dsv4_tensor tswa = tensor(order, kI32, swa_shape);
  dsv4_tensor tcmp = tensor(order + tokens * kSwaKeys, kI32, cmp_shape);
  dsv4_tensor tsink = tensor(sink.data(), kF32, sink_shape);
  dsv4_run_args args;
  dsv4_run_args_init(&args);
  args.q = &tq;
  args.swa_cache = &cache.t;
  args.extra_cache = &cache.t;
  args.attn_sink = &tsink;
  args.out = &tout;
  args.indices = &tswa;
  args.extra_indices = &tcmp;
  args.workspace = workspace.data();
  args.workspace_bytes = ws_bytes;

  dsv4_plan_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(dsv4_plan_get_info(plan, &info), "dsv4_plan_get_info");
  state.SetLabel(info.kernel);

  int64_t set = cache.next_row / need % sets;  // runs go on where the last one stopped
  for (auto _ : state) {
    tswa.data = order + set * need;
    tcmp.data = order + set * need + tokens * kSwaKeys;
    set = set + 1 < sets ? set + 1 : 0;
    cache.next_row = set * need;
    const dsv4_status st = dsv4_run(plan, &args);
    if (st != DSV4_STATUS_OK) {
      state.SkipWithError(dsv4_last_error_message());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double flop = 2.0 * static_cast<double>(heads * keys * tokens) * (kDim + kDim);
  state.counters["GFLOP"] = per_thread_rate(state, flop * 1e-9);
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_decode_fp8(benchmark::State& state) { run_decode(state, DSV4_KV_LAYOUT_FP8_V4_584B); }
void BM_decode_bf16(benchmark::State& state) { run_decode(state, DSV4_KV_LAYOUT_BF16); }

int max_threads() {
  const char* env = std::getenv("DSV4_BENCH_MAX_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 2;
  return n > 0 ? n : 2;
}

void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "heads", "keys", "threads"});
  for (int threads = 1; threads <= max_threads(); threads *= 2) {
    b->Args({8, 64, 640, threads});  // Flash C4A, TP1
    b->Args({32, 64, 640, threads});
    b->Args({8, 128, 1152, threads});  // Pro C4A, TP1
    b->Args({8, 16, 1152, threads});   // Pro C4A, TP8
    b->Args({8, 8, 640, threads});     // Flash C4A, TP8
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// ---------------------------------------------------------------------------------------------
// Ceilings
// ---------------------------------------------------------------------------------------------
bool has_avx512_bf16() {
  unsigned int a, b, c, d;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return ((a >> 5) & 1u) != 0 && __builtin_cpu_supports("avx512f");
}

// 24 independent accumulators, `iters` rounds: 24 * iters VDPBF16PS of 32 multiply-adds each
// (written in assembly so that nothing but the instruction under test is in the loop).
__attribute__((target("avx512f,avx512bf16"))) void peak_bf16(int64_t iters) {
  __asm__ volatile(
      "vpxord %%zmm30, %%zmm30, %%zmm30\n"
      "vpxord %%zmm31, %%zmm31, %%zmm31\n"
      "1:\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm0\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm1\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm2\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm3\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm4\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm5\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm6\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm7\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm8\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm9\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm10\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm11\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm12\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm13\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm14\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm15\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm16\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm17\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm18\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm19\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm20\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm21\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm22\n"
      "vdpbf16ps %%zmm30, %%zmm31, %%zmm23\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(iters)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",
        "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31");
}

// 12 independent accumulators: 12 * iters FMA of 8 lanes.
__attribute__((target("avx2,fma"))) void peak_fma(int64_t iters) {
  __asm__ volatile(
      "vxorps %%ymm12, %%ymm12, %%ymm12\n"
      "vxorps %%ymm13, %%ymm13, %%ymm13\n"
      "1:\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm1\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm3\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm5\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm7\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm9\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm11\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(iters)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13");
}

// AMX-BF16: tiles 0-7 of 16 rows x 64 bytes (C: 16 x 16 fp32; A: 16 x 32 bf16; B: 16 pairs of
// rows x 16 columns of bf16 pairs), as the kernel configures them (backends/cpu/fast/isa_amx.cpp).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// 4 independent accumulator tiles (tmm0-3) from 2 A (tmm4, tmm5) and 2 B tiles (tmm6, tmm7), as
// oneDNN's brgemm blocks them, so that the loop is bound by the TDPBF16PS throughput and not by its
// latency: 4 * iters TDPBF16PS of 2 * 16 * 16 * 32 = 16384 FLOP each. The theoretical peak is
// 1024 bf16 FLOP per cycle per core (one TDPBF16PS every 16 cycles), i.e. 1024 * f: about
// 2 TFLOP/s per core at 2 GHz (Sapphire Rapids' AMX clock). Tiles are configured and released on
// every call (the calling thread's own tile state). Run only where amx_kernel_runs() said so.
__attribute__((target("amx-tile,amx-bf16"))) void peak_amx(int64_t iters) {
  const AmxTileConfig cfg;
  __asm__ volatile(
      "ldtilecfg %1\n"
      "tilezero %%tmm0\n"
      "tilezero %%tmm1\n"
      "tilezero %%tmm2\n"
      "tilezero %%tmm3\n"
      "tilezero %%tmm4\n"
      "tilezero %%tmm5\n"
      "tilezero %%tmm6\n"
      "tilezero %%tmm7\n"
      "1:\n"
      "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n"
      "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n"
      "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n"
      "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n"
      "dec %0\n"
      "jnz 1b\n"
      "tilerelease\n"
      : "+r"(iters)
      : "m"(cfg)
      : "cc");
}

// The kernel the CPU module picks for a decode plan (dsv4_plan_get_info, e.g.
// "cpu-fast-amx/explicit"; DSV4_CPU_ISA included), "" when no plan could be made.
std::string decode_kernel() {
  dsv4_ctx_options co;
  dsv4_ctx_options_init(&co);
  co.backend = "cpu";
  co.num_threads = 1;
  dsv4_ctx* ctx = nullptr;
  if (dsv4_ctx_create(&co, &ctx) != DSV4_STATUS_OK) return "";
  std::unique_ptr<dsv4_ctx, void (*)(dsv4_ctx*)> ctx_owner(ctx, dsv4_ctx_destroy);
  const dsv4_kv_cache_desc cache{DSV4_KV_LAYOUT_FP8_V4_584B, kBlockSize, 0, 1.0f, 0};
  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = 64;
  po.max_tokens = 8;
  po.swa_cache = cache;
  po.extra_cache = cache;
  po.topk = static_cast<int32_t>(kSwaKeys);
  po.extra_topk = 512;
  dsv4_plan* plan = nullptr;
  if (dsv4_plan_create(ctx, &po, &plan) != DSV4_STATUS_OK) return "";
  std::unique_ptr<dsv4_plan, void (*)(dsv4_plan*)> plan_owner(plan, dsv4_plan_destroy);
  dsv4_plan_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsv4_plan_get_info(plan, &info) != DSV4_STATUS_OK) return "";
  return info.kernel;
}

// Whether the decode benchmarks run the module's AMX kernel: the module's own CPUID / XCR0 probe
// (backends/cpu/probe.cpp, compiled into this benchmark) finds AMX-BF16 with the tile state
// enabled, the module picks cpu-fast-amx for a decode plan, and Linux grants this process the tile
// state. On a CPU without AMX the first test fails and nothing else runs.
bool amx_kernel_runs() {
  if (!dsv4::cpu::detect_features().amx_bf16) return false;
  return decode_kernel().rfind("cpu-fast-amx", 0) == 0 && dsv4::cpu::request_amx_permission();
}

enum class PeakIsa { kFma, kAvx512Bf16, kAmxBf16 };

PeakIsa peak_isa() {
  static const PeakIsa isa = amx_kernel_runs()   ? PeakIsa::kAmxBf16
                             : has_avx512_bf16() ? PeakIsa::kAvx512Bf16
                                                 : PeakIsa::kFma;
  return isa;
}

void BM_peak(benchmark::State& state) {
  const PeakIsa isa = peak_isa();
  constexpr int64_t kIters = 1 << 16;
  for (auto _ : state) {
    if (isa == PeakIsa::kAmxBf16) {
      peak_amx(kIters);
    } else if (isa == PeakIsa::kAvx512Bf16) {
      peak_bf16(kIters);
    } else {
      peak_fma(kIters);
    }
  }
  const double flop = isa == PeakIsa::kAmxBf16      ? 4.0 * kIters * (2 * 16 * 16 * 32)
                      : isa == PeakIsa::kAvx512Bf16 ? 24.0 * kIters * 64
                                                    : 12.0 * kIters * 16;
  state.counters["GFLOP"] = per_thread_rate(state, flop * 1e-9);
  state.SetLabel(isa == PeakIsa::kAmxBf16      ? "TDPBF16PS (AMX-BF16)"
                 : isa == PeakIsa::kAvx512Bf16 ? "VDPBF16PS zmm"
                                               : "VFMADD231PS ymm (fp32)");
}

// Random rows of `row_bytes` from a pool of pool_bytes(), every byte summed, each row prefetched
// `ahead` rows before it is read (report.py takes the best distance and repetition: the ceiling is
// the best gather the machine showed). Each thread walks its own part of a random order of the
// rows, the whole part before any row repeats, so that rows come from memory.
void BM_gather(benchmark::State& state) {
  const int64_t row_bytes = state.range(0), ahead_rows = state.range(1);
  static std::unique_ptr<PoolBytes> pool;
  static std::vector<int64_t> order;
  static int64_t order_row_bytes = 0;
  static std::mutex setup;  // the first thread of a run builds, the others wait for it
  const size_t bytes = pool_bytes();
  {
    std::lock_guard<std::mutex> lock(setup);
    if (pool == nullptr || pool->size != bytes) {
      pool.reset();
      pool.reset(new PoolBytes(bytes));
    }
    if (order_row_bytes != row_bytes) {
      order.resize(static_cast<size_t>(bytes / row_bytes));
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(1234));
      order_row_bytes = row_bytes;
    }
  }
  constexpr int64_t kRows = 4096;
  const int64_t part = static_cast<int64_t>(order.size()) / state.threads();
  if (part <= ahead_rows) {
    state.SkipWithError("the pool holds too few rows: raise DSV4_BENCH_POOL_BYTES");
    return;
  }
  const int64_t* mine = order.data() + part * state.thread_index();
  // Each run starts where an earlier one is unlikely to have read lately.
  static std::atomic<int64_t> runs{0};
  int64_t next = (runs.fetch_add(1) * 7919 * kRows) % part;
  uint64_t sum = 0;
  for (auto _ : state) {
    for (int64_t j = 0; j < kRows; ++j) {
      const uint8_t* ahead = pool->data + mine[(next + ahead_rows) % part] * row_bytes;
      for (int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
      const uint64_t* p = reinterpret_cast<const uint64_t*>(pool->data + mine[next] * row_bytes);
      uint64_t s = 0;
      for (int64_t i = 0; i < row_bytes / 8; ++i) s += p[i];
      sum += s;
      next = next + 1 < part ? next + 1 : 0;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.counters["GBps"] = per_thread_rate(state, static_cast<double>(kRows * row_bytes) * 1e-9);
}

void thread_counts(benchmark::internal::Benchmark* b) {
  for (int threads = 1; threads <= max_threads(); threads *= 2) b->Threads(threads);
  b->UseRealTime();
}

}  // namespace

// The ceilings also report the best repetition (bench/cpu/report.py judges against it).
static double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
BENCHMARK(BM_peak)->Apply(thread_counts)->ComputeStatistics("max", max_of);
BENCHMARK(BM_gather)
    ->ArgNames({"row_bytes", "ahead"})
    ->ArgsProduct({{584, 1024}, {4, 16, 64}})
    ->Apply(thread_counts)
    ->ComputeStatistics("max", max_of);
BENCHMARK(BM_decode_fp8)->Apply(decode_shapes);
BENCHMARK(BM_decode_bf16)->Apply(decode_shapes);

namespace {

// The console reporter, erasing the progress line before each result and flushing after it.
class ProgressReporter : public benchmark::ConsoleReporter {
 public:
  ProgressReporter(dsv4cli::Progress* progress, OutputOptions options)
      : ConsoleReporter(options), progress_(progress) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    progress_->clear();
    ConsoleReporter::ReportRuns(runs);
    GetOutputStream().flush();
  }

 private:
  dsv4cli::Progress* progress_;
};

}  // namespace

int main(int argc, char** argv) {
  // Another output format (--benchmark_format=json|csv) keeps Google Benchmark's own reporter.
  bool console = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_format=", 0) == 0 && arg != "--benchmark_format=console")
      console = false;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  dsv4cli::Progress progress;
  g_progress = &progress;
  size_t ran = 0;
  if (console) {
    ProgressReporter reporter(
        &progress, isatty(STDOUT_FILENO) ? ProgressReporter::OO_Color : ProgressReporter::OO_None);
    ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    ran = benchmark::RunSpecifiedBenchmarks();
  }
  g_progress = nullptr;
  benchmark::Shutdown();
  if (ran == 0) {  // Google Benchmark only prints it
    std::fprintf(stderr, "dsv4_bench_cpu: no benchmark matched the filter\n");
    return 1;
  }
  return 0;
}
