// Benchmark of the HIP module (Google Benchmark, manual time from device events), through the
// public API. One source for AMD GPUs (hipcc; ROCm tensors, the "hip" module) and for NVIDIA GPUs
// through the HIP-on-NVIDIA test module (nvcc; CUDA tensors, DSV4_BACKEND_PATH=<its directory>).
// Cases: FlashMLA's DeepSeek-V4 decode shapes CONFIG1-4 (s_q 2, SWA list 128 on 256-token pages
// plus an extra list of 512 / 1024 over 64- / 2-entry blocks, 16384 keys per scope, sink on; FP8
// 584 B caches) at b = 2, 64, 128, and CONFIG1 with 8 / 16 / 32 heads (FP8 and bf16 caches).
// The same run measures the device's FP32 FMA rate (a kernel of independent FMA chains) and its
// copy bandwidth (a device-to-device copy, bytes read + written), and reports for every case the
// median over its iterations: us, GFLOP/s (2 * heads * valid keys * 1024 per token), GB/s (every
// attended row's bytes + Q + O), fma_frac (of the FMA rate: FLOP / 2 per FMA) and copy_frac (of
// the copy bandwidth). A 512 MB memset before each iteration (outside the events) flushes the L2
// (and MI300's 256 MB Infinity Cache). Usage: dsv4_bench_hip [--benchmark_filter=...]
// [--benchmark_out=x.json --benchmark_out_format=json].
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

#if defined(DSV4_HIP_EMULATOR)
// The CPU emulator (a smoke test of this file's logic in CI, on tiny runs): host memory, host
// clocks, the kernels through emu/emu.h.
#include <chrono>

#include "platform.h"
#define __launch_bounds__(n)
namespace {
struct emu_event {
  std::chrono::steady_clock::time_point t;
};
}  // namespace
typedef emu_event* hipEvent_t;
enum hipMemcpyKind { hipMemcpyHostToDevice, hipMemcpyDeviceToDevice };
inline hipError_t hipMalloc(void** p, size_t n) {
  *p = std::malloc(n);
  return *p != nullptr ? hipSuccess : hipErrorInvalidValue;
}
inline hipError_t hipFree(void* p) {
  std::free(p);
  return hipSuccess;
}
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind) {
  std::memcpy(d, s, n);
  return hipSuccess;
}
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, hipMemcpyKind k, void*) {
  return hipMemcpy(d, s, n, k);
}
inline hipError_t hipMemsetAsync(void* d, int v, size_t n, void*) {
  std::memset(d, v, n);
  return hipSuccess;
}
inline hipError_t hipEventCreate(hipEvent_t* e) {
  *e = new emu_event;
  return hipSuccess;
}
inline hipError_t hipEventDestroy(hipEvent_t e) {
  delete e;
  return hipSuccess;
}
inline hipError_t hipEventRecord(hipEvent_t e, void*) {
  e->t = std::chrono::steady_clock::now();
  return hipSuccess;
}
inline hipError_t hipEventSynchronize(hipEvent_t) { return hipSuccess; }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return hipSuccess;
}
inline hipError_t hipDeviceSynchronize() { return hipSuccess; }
constexpr int hipDeviceAttributeMultiprocessorCount = 0;
inline hipError_t hipDeviceGetAttribute(int* v, int, int) {
  *v = dsv4::emu::props().compute_units;
  return hipSuccess;
}
#define DSV4_BENCH_DEVICE DSV4_DEVICE_CPU
#elif defined(DSV4_HIP_ON_NVIDIA)
#include <cuda_runtime.h>
typedef cudaError_t hipError_t;
typedef cudaEvent_t hipEvent_t;
#define hipSuccess cudaSuccess
#define hipGetErrorString cudaGetErrorString
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipGetLastError cudaGetLastError
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define DSV4_BENCH_DEVICE DSV4_DEVICE_CUDA
#else
#include <hip/hip_runtime.h>
#define DSV4_BENCH_DEVICE DSV4_DEVICE_ROCM
#endif

namespace {

#define HIP_OK(expr)                                                                 \
  do {                                                                               \
    const hipError_t err_ = (expr);                                                  \
    if (err_ != hipSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + hipGetErrorString(err_)); \
  } while (0)

#define DSV4_OK(expr)                                                                       \
  do {                                                                                      \
    const dsv4_status st_ = (expr);                                                         \
    if (st_ != DSV4_STATUS_OK)                                                              \
      throw std::runtime_error(std::string(#expr) + ": " + dsv4_status_string(st_) + ": " + \
                               dsv4_last_error_message());                                  \
  } while (0)

// Device memory owned by the benchmark.
struct dbuf {
  void* p = nullptr;
  size_t bytes = 0;
  dbuf() = default;
  explicit dbuf(size_t n) : bytes(n) { HIP_OK(hipMalloc(&p, n == 0 ? 16 : n)); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  dbuf(dbuf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  dbuf& operator=(dbuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~dbuf() {
    if (p != nullptr) (void)hipFree(p);
  }
  template <class T>
  void upload(const std::vector<T>& v) {
    HIP_OK(hipMemcpy(p, v.data(), v.size() * sizeof(T), hipMemcpyHostToDevice));
  }
};

// Median milliseconds of `n` timed calls of `launch`, each after `before` (outside the events).
template <class Launch, class Before>
std::vector<float> time_ms(int n, Launch&& launch, Before&& before) {
  hipEvent_t e0, e1;
  HIP_OK(hipEventCreate(&e0));
  HIP_OK(hipEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < n; ++i) {
    before();
    HIP_OK(hipEventRecord(e0, nullptr));
    launch();
    HIP_OK(hipEventRecord(e1, nullptr));
    HIP_OK(hipEventSynchronize(e1));
    float ms = 0;
    HIP_OK(hipEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  (void)hipEventDestroy(e0);
  (void)hipEventDestroy(e1);
  return t;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#if defined(DSV4_HIP_EMULATOR)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

// The FP32 FMA ceiling: 8 independent chains per thread, enough blocks to fill every compute unit.
constexpr int kFmaChains = 8;
constexpr int kFmaThreads = 256;
__global__ void __launch_bounds__(kFmaThreads) fma_kernel(float* sink, int iters, float seed) {
  float a[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) a[i] = seed * static_cast<float>(threadIdx.x + i);
  const float b = 0.9999f, c = 0.0001f;
  for (int k = 0; k < iters; ++k) {
#pragma unroll
    for (int i = 0; i < kFmaChains; ++i) a[i] = fmaf(a[i], b, c);
  }
  float s = 0.0f;
  for (int i = 0; i < kFmaChains; ++i) s += a[i];
  if (s == -1.0f) *sink = s;  // never: keeps the chains
}

struct ceilings {
  double fma_per_s = 0;  // FP32 FMAs per second
  double copy_bps = 0;   // device-to-device copy, bytes read + written per second
  int compute_units = 0;
};

ceilings measure_ceilings() {
  ceilings c;
  HIP_OK(hipDeviceGetAttribute(&c.compute_units, hipDeviceAttributeMultiprocessorCount, 0));
  {
    const int blocks = 16 * c.compute_units, iters = kEmulated ? 16 : 8192;
    dbuf sink(4);
    auto launch = [&] {
#if defined(DSV4_HIP_EMULATOR)
      HIP_OK(dsv4_hip_launch(fma_kernel, dim3(blocks), dim3(kFmaThreads), 0, nullptr,
                             static_cast<float*>(sink.p), iters, 1e-3f));
#else
      // clang-format off
      fma_kernel<<<blocks, kFmaThreads>>>(static_cast<float*>(sink.p), iters, 1e-3f);
      // clang-format on
      HIP_OK(hipGetLastError());
#endif
    };
    launch();
    const float ms = median(time_ms(9, launch, [] {}));
    c.fma_per_s = static_cast<double>(blocks) * kFmaThreads * iters * kFmaChains / (ms * 1e-3);
  }
  {
    const size_t bytes = size_t(1) << (kEmulated ? 24 : 30);
    dbuf a(bytes), b(bytes);
    HIP_OK(hipMemsetAsync(a.p, 1, bytes, nullptr));
    auto launch = [&] {
      HIP_OK(hipMemcpyAsync(b.p, a.p, bytes, hipMemcpyDeviceToDevice, nullptr));
    };
    launch();
    const float ms = median(time_ms(9, launch, [] {}));
    c.copy_bps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
  }
  return c;
}

ceilings g_ceil;
dbuf* g_flush = nullptr;
dsv4_ctx* g_ctx = nullptr;

struct bench_case {
  std::string name;
  int heads = 64;
  int batch = 2;
  int seq_q = 2;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int main_block = 256;
  int topk = 128;
  int extra_block = 64;
  int extra_topk = 512;
  bool extra_lengths = false;  // per-batch-row random extra lengths (CONFIG3/4)
  int64_t keys_per_scope = 16384;
};

const dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
const dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
const dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
const dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

// A dsv4_tensor with its own shape storage.
struct tensor {
  std::vector<int64_t> shape;
  dsv4_tensor t{};
  tensor(void* data, dsv4_dtype dt, std::vector<int64_t> s) : shape(std::move(s)) {
    t.data = data;
    t.device = dsv4_device{DSV4_BENCH_DEVICE, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dt;
    t.shape = shape.data();
  }
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;
};

// A cache of `blocks` blocks: a pool of up to 64 blocks of random rows written by dsv4_kv_write,
// tiled over the rest by device copies.
dbuf make_cache(uint32_t layout, int block, int64_t blocks, std::mt19937_64& rng, int64_t* stride) {
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  DSV4_OK(dsv4_kv_layout_get_info(layout, block, &info));
  *stride = info.min_block_stride_bytes;
  dbuf cache(static_cast<size_t>(blocks * *stride));
  const int64_t pool = std::min<int64_t>(blocks, 64);
  const int dim = info.head_dim_qk;
  std::vector<float> values(static_cast<size_t>(pool * block * dim));
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (auto& v : values) v = std::fmax(-1.0f, std::fmin(1.0f, nd(rng)));
  std::vector<int32_t> slots(static_cast<size_t>(pool * block));
  std::iota(slots.begin(), slots.end(), 0);
  dbuf dv(values.size() * 4), ds(slots.size() * 4);
  dv.upload(values);
  ds.upload(slots);
  tensor vt(dv.p, kF32, {pool * block, dim}), st(ds.p, kI32, {pool * block}),
      ct(cache.p, kU8, {blocks, *stride});
  dsv4_kv_write_args w;
  dsv4_kv_write_args_init(&w);
  w.cache_desc.layout = layout;
  w.cache_desc.block_size = block;
  w.values = &vt.t;
  w.slots = &st.t;
  w.cache = &ct.t;
  DSV4_OK(dsv4_kv_write(g_ctx, &w));
  HIP_OK(hipDeviceSynchronize());
  uint8_t* base = static_cast<uint8_t*>(cache.p);
  for (int64_t b = pool; b < blocks; b += pool) {
    const int64_t n = std::min(pool, blocks - b);
    HIP_OK(hipMemcpyAsync(base + b * *stride, base, static_cast<size_t>(n * *stride),
                          hipMemcpyDeviceToDevice, nullptr));
  }
  HIP_OK(hipDeviceSynchronize());
  return cache;
}

void run_case(benchmark::State& state, const bench_case& c) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  const int T = c.batch * c.seq_q, H = c.heads;
  const bool extra = c.extra_topk > 0;
  const int64_t main_blocks = c.batch * ((c.keys_per_scope + c.main_block - 1) / c.main_block);
  const int64_t extra_blocks = c.batch * ((c.keys_per_scope + c.extra_block - 1) / c.extra_block);
  int64_t main_stride = 0, extra_stride = 0;
  dbuf main_cache = make_cache(c.layout, c.main_block, main_blocks, rng, &main_stride);
  dbuf extra_cache;
  if (extra) extra_cache = make_cache(c.layout, c.extra_block, extra_blocks, rng, &extra_stride);

  // Random keys of the token's batch row through a random block permutation.
  auto indices = [&](int width, int block, int64_t blocks) {
    std::vector<int32_t> perm(static_cast<size_t>(blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t per_row = blocks / c.batch;
    std::uniform_int_distribution<int64_t> key(0, c.keys_per_scope - 1);
    std::vector<int32_t> v(static_cast<size_t>(T) * width);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < width; ++i) {
        const int64_t k = key(rng);
        v[static_cast<size_t>(t) * width + i] = static_cast<int32_t>(
            perm[static_cast<size_t>((t / c.seq_q) * per_row + k / block)] * block + k % block);
      }
    return v;
  };
  const std::vector<int32_t> main_idx = indices(c.topk, c.main_block, main_blocks);
  std::vector<int32_t> extra_idx, extra_len;
  int64_t attended = static_cast<int64_t>(T) * c.topk;
  if (extra) {
    extra_idx = indices(c.extra_topk, c.extra_block, extra_blocks);
    if (c.extra_lengths) {
      for (int b = 0; b < c.batch; ++b)
        extra_len.push_back(static_cast<int32_t>(rng() % (c.extra_topk + 1)));
      for (int t = 0; t < T; ++t) attended += extra_len[static_cast<size_t>(t / c.seq_q)];
    } else {
      attended += static_cast<int64_t>(T) * c.extra_topk;
    }
  }
  std::vector<uint16_t> q(static_cast<size_t>(T) * H * 512);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : q) {
    const float f = std::fmax(-1.0f, std::fmin(1.0f, nd(rng)));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  std::vector<float> sink(static_cast<size_t>(H));
  for (auto& s : sink) s = nd(rng);

  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.num_heads = H;
  o.max_tokens = T;
  o.swa_cache.layout = c.layout;
  o.swa_cache.block_size = c.main_block;
  o.topk = c.topk;
  if (extra) {
    o.extra_cache.layout = c.layout;
    o.extra_cache.block_size = c.extra_block;
    o.extra_topk = c.extra_topk;
  }
  dsv4_plan* plan = nullptr;
  DSV4_OK(dsv4_plan_create(g_ctx, &o, &plan));
  dsv4_plan_info info;
  info.struct_size = sizeof info;
  DSV4_OK(dsv4_plan_get_info(plan, &info));
  size_t ws_bytes = 0;
  DSV4_OK(dsv4_plan_get_workspace_size(plan, &ws_bytes));
  dbuf dq(q.size() * 2), dsink(sink.size() * 4), dout(static_cast<size_t>(T) * H * 512 * 2),
      dmi(main_idx.size() * 4), dei(std::max<size_t>(1, extra_idx.size()) * 4),
      del(std::max<size_t>(1, extra_len.size()) * 4), dws(ws_bytes);
  dq.upload(q);
  dsink.upload(sink);
  dmi.upload(main_idx);
  if (extra) dei.upload(extra_idx);
  if (!extra_len.empty()) del.upload(extra_len);
  tensor qt(dq.p, kBf16, {c.batch, c.seq_q, H, 512}), ot(dout.p, kBf16, {c.batch, c.seq_q, H, 512}),
      st(dsink.p, kF32, {H}), mct(main_cache.p, kU8, {main_blocks, main_stride}),
      ect(extra_cache.p, kU8, {extra_blocks, extra_stride}),
      mit(dmi.p, kI32, {c.batch, c.seq_q, c.topk}),
      eit(dei.p, kI32, {c.batch, c.seq_q, c.extra_topk}), elt(del.p, kI32, {c.batch});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = &qt.t;
  a.out = &ot.t;
  a.attn_sink = &st.t;
  a.swa_cache = &mct.t;
  a.indices = &mit.t;
  if (extra) {
    a.extra_cache = &ect.t;
    a.extra_indices = &eit.t;
    if (!extra_len.empty()) a.extra_lengths = &elt.t;
  }
  a.workspace = dws.p;
  a.workspace_bytes = ws_bytes;
  auto launch = [&] { DSV4_OK(dsv4_run(plan, &a)); };
  auto flush = [&] { HIP_OK(hipMemsetAsync(g_flush->p, 0, g_flush->bytes, nullptr)); };
  launch();  // warm-up
  HIP_OK(hipDeviceSynchronize());
  std::vector<float> all;
  for (auto _ : state) {
    const std::vector<float> t = time_ms(1, launch, flush);
    state.SetIterationTime(t[0] * 1e-3);
    all.push_back(t[0]);
  }
  dsv4_plan_destroy(plan);
  const double s = median(all) * 1e-3;
  const double flop = 2.0 * H * static_cast<double>(attended) * 1024.0;
  dsv4_kv_layout_info li;
  dsv4_kv_layout_info_init(&li);
  DSV4_OK(dsv4_kv_layout_get_info(c.layout, 1, &li));
  const double bytes = static_cast<double>(attended) * li.bytes_per_token + 2.0 * T * H * 512 * 2;
  state.counters["us"] = s * 1e6;
  state.counters["GFLOP/s"] = flop / s / 1e9;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.counters["fma_frac"] = flop / 2.0 / s / g_ceil.fma_per_s;
  state.counters["copy_frac"] = bytes / s / g_ceil.copy_bps;
  state.SetLabel(info.kernel);
}

std::vector<bench_case> cases() {
  std::vector<bench_case> v;
  struct cfg {
    const char* name;
    int heads, extra_topk, extra_block;
    bool lengths;
  };
  const cfg configs[] = {{"CONFIG1", 64, 512, 64, false},
                         {"CONFIG2", 128, 1024, 64, false},
                         {"CONFIG3", 64, 1024, 2, true},
                         {"CONFIG4", 128, 1024, 2, true}};
  for (const cfg& k : configs) {
    for (int b : {2, 64, 128}) {
      bench_case c;
      c.name = std::string(k.name) + " fp8 b=" + std::to_string(b);
      c.heads = k.heads;
      c.batch = b;
      c.extra_topk = k.extra_topk;
      c.extra_block = k.extra_block;
      c.extra_lengths = k.lengths;
      v.push_back(c);
    }
  }
  for (uint32_t layout : {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16}) {
    for (int h : {8, 16, 32}) {
      bench_case c;
      c.name = "CONFIG1 h" + std::to_string(h) +
               (layout == DSV4_KV_LAYOUT_BF16 ? " bf16" : " fp8") + " b=64";
      c.heads = h;
      c.batch = 64;
      c.layout = layout;
      v.push_back(c);
    }
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  try {
    dsv4_ctx_options o;
    dsv4_ctx_options_init(&o);
    o.device = dsv4_device{DSV4_BENCH_DEVICE, 0};
    if (std::getenv("DSV4_BACKEND") == nullptr) o.backend = "hip";
    DSV4_OK(dsv4_ctx_create(&o, &g_ctx));
    dsv4_ctx_info ci;
    ci.struct_size = sizeof ci;
    DSV4_OK(dsv4_ctx_get_info(g_ctx, &ci));
    g_ceil = measure_ceilings();
    dbuf flush(size_t(512) << (kEmulated ? 10 : 20));
    g_flush = &flush;
    benchmark::AddCustomContext("dsv4_module", ci.path);
    benchmark::AddCustomContext("fp32_fma_tflops", std::to_string(2.0 * g_ceil.fma_per_s / 1e12));
    benchmark::AddCustomContext("copy_gbs", std::to_string(g_ceil.copy_bps / 1e9));
    benchmark::AddCustomContext("compute_units", std::to_string(g_ceil.compute_units));
    for (const bench_case& c : cases()) {
      benchmark::RegisterBenchmark(c.name.c_str(), [c](benchmark::State& s) { run_case(s, c); })
          ->UseManualTime()
          ->Iterations(kEmulated ? 2 : 25)
          ->Unit(benchmark::kMicrosecond);
    }
    const size_t ran = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    dsv4_ctx_destroy(g_ctx);
    if (ran == 0) {
      std::fprintf(stderr, "dsv4_bench_hip: no case matches the filter\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4_bench_hip: %s\n", e.what());
    return 1;
  }
  return 0;
}
