// What the GPU benchmarks share: device memory, CUDA-event timing of one call, the L2 flush before
// each timed call, the device's ceilings (copy bandwidth, cuBLAS bf16 GEMM), the gather floor of a
// case, the device's description for the JSON context, and the benchmarks' own command-line flags.
#pragma once

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/codec.h"
#include "cuda_harness.h"

namespace dsv4bench {

// Device memory owned by the benchmark (GPU 0).
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) DSV4_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept { *this = std::move(o); }
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~device_buffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  void upload(const std::vector<T>& v) {
    DSV4_CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
device_buffer to_device(const std::vector<T>& v) {
  device_buffer b(std::max<size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) b.upload(v);
  return b;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Seconds of GPU time of one call of `launch` on the null stream, between two CUDA events.
class event_timer {
 public:
  event_timer() {
    DSV4_CUDA_CHECK(cudaEventCreate(&start_));
    DSV4_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  ~event_timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <class Launch>
  double seconds(Launch&& launch) {
    DSV4_CUDA_CHECK(cudaEventRecord(start_));
    launch();
    DSV4_CUDA_CHECK(cudaEventRecord(stop_));
    DSV4_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// A kernel of PTX text, JIT-compiled by the driver (the benchmarks are built by the host
// compiler), run on `blocks` CTAs of 256 threads. Its last parameter is a 4-byte sink it writes
// only if its reads' XOR hits a magic value, so that the reads cannot be optimised away.
class jit_kernel {
 public:
  jit_kernel(const char* ptx, const char* entry, int blocks) : sink_(4), blocks_(blocks) {
    DSV4_CUDA_CHECK(cudaLibraryLoadData(&lib_, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    DSV4_CUDA_CHECK(cudaLibraryGetKernel(&kernel_, lib_, entry));
  }
  ~jit_kernel() { cudaLibraryUnload(lib_); }
  jit_kernel(const jit_kernel&) = delete;
  jit_kernel& operator=(const jit_kernel&) = delete;
  // args: the kernel's parameters but the sink.
  template <class... A>
  void launch(A*... args) {
    void* sink = sink_.get();
    void* all[] = {args..., &sink};
    DSV4_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(blocks_),
                                     dim3(256), all, 0, nullptr));
  }

 private:
  device_buffer sink_;
  int blocks_;
  cudaLibrary_t lib_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
};

// Reads 16 bytes at every `stride` bytes of [src, src + words * stride) by a grid-stride loop.
inline const char kReadPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry dsv4_bench_l2_read(.param .u64 src, .param .u64 words, .param .u64 stride, .param .u64 sink) {
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [src];
  ld.param.u64 %rd2, [words];
  ld.param.u64 %rd9, [stride];
  ld.param.u64 %rd3, [sink];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  mul.wide.u32 %rd6, %r4, %r2;
  mov.u32 %r10, 0;
  setp.ge.u64 %p1, %rd4, %rd2;
  @%p1 bra DONE;
LOOP:
  mul.lo.u64 %rd7, %rd4, %rd9;
  add.u64 %rd8, %rd1, %rd7;
  ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
  xor.b32 %r10, %r10, %r5;
  xor.b32 %r10, %r10, %r6;
  xor.b32 %r10, %r10, %r7;
  xor.b32 %r10, %r10, %r8;
  add.u64 %rd4, %rd4, %rd6;
  setp.lt.u64 %p1, %rd4, %rd2;
  @%p1 bra LOOP;
DONE:
  setp.ne.u32 %p1, %r10, 1592876781;
  @%p1 bra END;
  st.global.u32 [%rd3], %r10;
END:
  ret;
}
)";

// An empty kernel: the floor of one launch's host cost.
inline const char kEmptyPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry dsv4_bench_empty(.param .u64 sink) {
  ret;
}
)";

// What is in L2 when a timed call starts (DSV4_BENCH_FLUSH). "memset" (default): a 256 MB memset,
// as FlashMLA's own benchmark flushes; it leaves the L2 holding dirty lines, so the timed call's
// misses also pay for their write-back. "read": a kernel reads a 256 MB buffer instead, leaving
// clean lines. "none": no flush (a diagnostic: what the previous call left in L2). The flush is
// queued ahead of the timed call, so the host's cost of that call overlaps it.
class l2_flush {
 public:
  explicit l2_flush(int sm_count) : buf_(size_t(256) << 20) {
    const char* env = std::getenv("DSV4_BENCH_FLUSH");
    mode_ = env != nullptr ? env : "memset";
    if (mode_ != "memset" && mode_ != "read" && mode_ != "none")
      throw std::runtime_error("DSV4_BENCH_FLUSH=" + mode_ + ": memset, read or none");
    if (mode_ == "read") {
      DSV4_CUDA_CHECK(cudaMemset(buf_.get(), 0, buf_.bytes()));  // XOR 0: the kernel never stores
      reader_ = std::make_unique<jit_kernel>(kReadPtx, "dsv4_bench_l2_read", sm_count * 8);
    }
  }
  const std::string& mode() const { return mode_; }
  void run() {
    if (mode_ == "memset") {
      DSV4_CUDA_CHECK(cudaMemsetAsync(buf_.get(), (rep_++) & 0xff, buf_.bytes()));
    } else if (mode_ == "read") {
      void* p = buf_.get();
      uint64_t words = buf_.bytes() / 16, stride = 16;
      reader_->launch(&p, &words, &stride);
    }
  }

 private:
  device_buffer buf_;
  std::string mode_;
  int rep_ = 0;
  std::unique_ptr<jit_kernel> reader_;
};

// The gather floor of a case: the time to read just the cache rows its lists reference (each
// row's data bytes), nothing else, by plain 16-byte loads under the L2 evict_first policy, after
// the same flush. No attention kernel can take less; for small head counts it is most of the time
// (docs/tried.md, T2).
// Thread i of the grid-stride loop reads piece i % pieces of row i / pieces (row addresses from a
// table, 8 bytes per row more read), four pieces in flight per thread.
inline const char kGatherPtx[] = R"(
.version 7.4
.target sm_80
.address_size 64
.visible .entry dsv4_bench_gather(.param .u64 rows, .param .u32 n, .param .u32 pieces, .param .u64 sink) {
  .reg .pred %p<6>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<20>;
  ld.param.u64 %rd1, [rows];
  ld.param.u32 %r1, [n];
  ld.param.u32 %r2, [pieces];
  ld.param.u64 %rd2, [sink];
  createpolicy.fractional.L2::evict_first.b64 %rd3, 1.0;
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.u32 %r6, %r3, %r4, %r5;
  mov.u32 %r7, %nctaid.x;
  mul.lo.u32 %r8, %r7, %r4;
  shl.b32 %r35, %r8, 2;
  mov.u32 %r30, 0;
LOOP:
  setp.ge.u32 %p1, %r6, %r1;
  @%p1 bra DONE;
  add.u32 %r9, %r6, %r8;
  add.u32 %r10, %r9, %r8;
  add.u32 %r11, %r10, %r8;
  setp.lt.u32 %p2, %r9, %r1;
  setp.lt.u32 %p3, %r10, %r1;
  setp.lt.u32 %p4, %r11, %r1;
  selp.u32 %r9, %r9, %r6, %p2;
  selp.u32 %r10, %r10, %r6, %p3;
  selp.u32 %r11, %r11, %r6, %p4;
  div.u32 %r12, %r6, %r2;
  div.u32 %r13, %r9, %r2;
  div.u32 %r14, %r10, %r2;
  div.u32 %r15, %r11, %r2;
  mul.wide.u32 %rd4, %r12, 8;
  mul.wide.u32 %rd5, %r13, 8;
  mul.wide.u32 %rd6, %r14, 8;
  mul.wide.u32 %rd7, %r15, 8;
  add.u64 %rd4, %rd1, %rd4;
  add.u64 %rd5, %rd1, %rd5;
  add.u64 %rd6, %rd1, %rd6;
  add.u64 %rd7, %rd1, %rd7;
  ld.global.nc.u64 %rd8, [%rd4];
  ld.global.nc.u64 %rd9, [%rd5];
  ld.global.nc.u64 %rd10, [%rd6];
  ld.global.nc.u64 %rd11, [%rd7];
  mul.lo.u32 %r12, %r12, %r2;
  mul.lo.u32 %r13, %r13, %r2;
  mul.lo.u32 %r14, %r14, %r2;
  mul.lo.u32 %r15, %r15, %r2;
  sub.u32 %r12, %r6, %r12;
  sub.u32 %r13, %r9, %r13;
  sub.u32 %r14, %r10, %r14;
  sub.u32 %r15, %r11, %r15;
  mul.wide.u32 %rd12, %r12, 16;
  mul.wide.u32 %rd13, %r13, 16;
  mul.wide.u32 %rd14, %r14, 16;
  mul.wide.u32 %rd15, %r15, 16;
  add.u64 %rd8, %rd8, %rd12;
  add.u64 %rd9, %rd9, %rd13;
  add.u64 %rd10, %rd10, %rd14;
  add.u64 %rd11, %rd11, %rd15;
  ld.global.nc.L2::cache_hint.v4.u32 {%r16, %r17, %r18, %r19}, [%rd8], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r20, %r21, %r22, %r23}, [%rd9], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r24, %r25, %r26, %r27}, [%rd10], %rd3;
  ld.global.nc.L2::cache_hint.v4.u32 {%r31, %r32, %r33, %r34}, [%rd11], %rd3;
  xor.b32 %r16, %r16, %r17;
  xor.b32 %r18, %r18, %r19;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r22, %r22, %r23;
  xor.b32 %r24, %r24, %r25;
  xor.b32 %r26, %r26, %r27;
  xor.b32 %r31, %r31, %r32;
  xor.b32 %r33, %r33, %r34;
  xor.b32 %r16, %r16, %r18;
  xor.b32 %r20, %r20, %r22;
  xor.b32 %r24, %r24, %r26;
  xor.b32 %r31, %r31, %r33;
  xor.b32 %r16, %r16, %r20;
  xor.b32 %r24, %r24, %r31;
  xor.b32 %r30, %r30, %r16;
  xor.b32 %r30, %r30, %r24;
  add.u32 %r6, %r6, %r35;
  bra LOOP;
DONE:
  setp.ne.u32 %p5, %r30, 1592876781;
  @%p5 bra END;
  st.global.u32 [%rd2], %r30;
END:
  ret;
}
)";

class gather_floor {
 public:
  explicit gather_floor(int sm_count) : reader_(kGatherPtx, "dsv4_bench_gather", sm_count * 8) {}
  // Median seconds of reading `row_bytes` (a multiple of 16) at each of the device addresses in
  // `rows`, each read after `flush`; 0 when there is nothing to read or too much for one grid.
  double seconds(const std::vector<uint64_t>& rows, int row_bytes, l2_flush& flush, int reps) {
    const uint64_t total = rows.size() * static_cast<uint64_t>(row_bytes / 16);
    if (rows.empty() || total >= (1ull << 31)) return 0.0;
    device_buffer table = to_device(rows);
    void* p = table.get();
    uint32_t n = static_cast<uint32_t>(total), pieces = static_cast<uint32_t>(row_bytes / 16);
    event_timer timer;
    std::vector<double> t;
    for (int i = 0; i < reps + 2; ++i) {
      flush.run();
      const double s = timer.seconds([&] { reader_.launch(&p, &n, &pieces); });
      if (i >= 2) t.push_back(s);
    }
    return median(t);
  }

 private:
  jit_kernel reader_;
};

// The device's ceilings: device-to-device copy (GB/s, bytes read + written) and cuBLAS bf16 GEMM
// 8192^3 (TFLOP/s), medians of a few runs.
struct ceilings {
  double copy_gbs = 0;
  double gemm_tflops = 0;
};

inline ceilings measure_ceilings() {
  ceilings c;
  event_timer timer;
  {
    const size_t bytes = size_t(2) << 30;
    device_buffer a(bytes), b(bytes);
    DSV4_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
    std::vector<double> t;
    for (int i = 0; i < 10; ++i)
      t.push_back(timer.seconds([&] {
        DSV4_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
      }));
    c.copy_gbs = 2.0 * bytes / median(t) / 1e9;
  }
  {
    const int n = 8192;
    device_buffer a(size_t(n) * n * 2), b(size_t(n) * n * 2), d(size_t(n) * n * 2);
    std::vector<uint16_t> h(size_t(n) * n);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : h) x = dsv4::f32_to_bf16(nd(rng));
    a.upload(h);
    b.upload(h);
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
    const float alpha = 1.f, beta = 0.f;
    std::vector<double> t;
    for (int i = 0; i < 10; ++i)
      t.push_back(timer.seconds([&] {
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n,
                     b.get(), CUDA_R_16BF, n, &beta, d.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      }));
    cublasDestroy(handle);
    t.erase(t.begin(), t.begin() + 2);  // warm-up
    c.gemm_tflops = 2.0 * n * n * double(n) / median(t) / 1e12;
  }
  return c;
}

// "NVIDIA H200 (132 SMs, 60 MB L2, CUDA driver 13.0, runtime 13.0)".
inline std::string describe_device(const cudaDeviceProp& prop) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  return std::string(prop.name) + " (" + std::to_string(prop.multiProcessorCount) + " SMs, " +
         std::to_string(prop.l2CacheSize >> 20) + " MB L2, CUDA driver " + version(driver) +
         ", runtime " + version(runtime) + ")";
}

// The run's context keys that the docs generator prints (scripts/perf/make_performance.py):
// backend, device, commit (DSV4_COMMIT, else "unknown") and the command line.
inline void add_run_context(const std::string& device, int argc, char** argv) {
  benchmark::AddCustomContext("backend", "cuda");
  benchmark::AddCustomContext("device", device);
  const char* commit = std::getenv("DSV4_COMMIT");
  benchmark::AddCustomContext("commit", commit != nullptr && *commit ? commit : "unknown");
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  benchmark::AddCustomContext("command", command);
}

// Google Benchmark's flags with this suite's defaults in front (the caller's own flags, later on
// the line, win): each case is timed in 25 repetitions of one call each, and the JSON keeps their
// median, mean, stddev and cv (the docs generator reads the median).
inline std::vector<char*> with_default_flags(int argc, char** argv) {
  static std::string defaults[] = {"--benchmark_min_time=0", "--benchmark_repetitions=25",
                                   "--benchmark_report_aggregates_only=true"};
  std::vector<char*> args{argv[0]};
  for (std::string& d : defaults) args.push_back(d.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  return args;
}

// Runs the registered cases with the suite's defaults (with_default_flags): 0, 2 for an unknown
// flag, and 1 when the filter matches nothing, which Google Benchmark only prints. Names end in
// /manual_time, so a '$' after a case's name never matches.
inline int run_benchmarks(int argc, char** argv, const char* program) {
  std::vector<char*> args = with_default_flags(argc, argv);
  int n = static_cast<int>(args.size()) - 1;
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
  const size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (ran != 0) return 0;
  std::fprintf(stderr, "%s: no benchmark matched the filter\n", program);
  return 1;
}

}  // namespace dsv4bench
