// Host cost of the library on a GPU (issue 55's target: <= 3 µs per dsv4_run from C), on Google
// Benchmark with manual time. A tiny decode step (CONFIG1's shape at b = 2: 64 heads, s_q 2, FP8
// 584 B cache, 128 + 512 keys per token, ~15 µs on an H200) is called in bursts of 100 back to
// back from C (host_overhead_burst.c); a repetition's time is the burst's wall time divided by
// 100, and the GPU is synchronised only between bursts, outside the timing. A burst queues far
// fewer launches than the driver holds, so the host never waits for the GPU: what is timed is the
// host's own cost per call (validation, planning, argument packing, the launches). 25 repetitions
// (2500 calls) by default; the JSON keeps their median, mean, stddev and cv.
//
//   cuda/host/dsv4_run/b:2       µs of host time per dsv4_run (counter target_us: 3)
//   cuda/host/graph_replay/b:2   µs per cudaGraphLaunch of one captured dsv4_run: the host cost
//                                per step of an engine that replays graphs (the library's is zero)
//   cuda/host/empty_launch       µs per cudaLaunchKernel of an empty kernel: the floor of one
//   launch
// Counters: us_per_call (= real_time), gpu_us_per_call (the GPU's time per call over the same
// burst, from CUDA events: above us_per_call, the GPU is the slower side, as it must be here).
//
// Usage: dsv4_bench_host_overhead [Google Benchmark flags]; exits 77 where no GPU is usable.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_common.h"
#include "host_overhead_burst.h"

namespace dsv4bench {
namespace {

using dsv4cudatest::host_cache;
using dsv4test::PlanPtr;
using dsv4test::TensorView;

constexpr int kBurst = 100;
constexpr dsv4_device kGpu{DSV4_DEVICE_CUDA, 0};

void check(dsv4_status st, const char* what) {
  if (st != DSV4_STATUS_OK)
    throw std::runtime_error(std::string(what) + ": " + dsv4test::status_text(st));
}

// CONFIG1 at b = 2 on the GPU: a plan and its run arguments (null stream), plus a stream and a
// graph of one run captured on it.
struct tiny_step {
  dsv4cudatest::log_sink log;
  dsv4test::CtxPtr ctx;
  host_cache main, extra;
  device_buffer d_main, d_extra, q, sink, out, lse, main_idx, extra_idx, workspace;
  TensorView tq, tmain, textra, tsink, tout, tlse, tmain_idx, textra_idx;
  PlanPtr plan;
  dsv4_run_args args{};
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::unique_ptr<jit_kernel> empty;

  tiny_step();
  ~tiny_step() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (stream != nullptr) cudaStreamDestroy(stream);
    plan.reset();
    ctx.reset();
  }
};

tiny_step::tiny_step() {
  std::string why;
  ctx = dsv4cudatest::make_cuda_ctx(0, &log, &why);
  if (ctx == nullptr) throw std::runtime_error(why);
  const int B = 2, S = 2, T = B * S, H = 64, topk = 128, extra_topk = 512;
  std::mt19937_64 rng(2);
  main.init(DSV4_KV_LAYOUT_FP8_V4_584B, 256, int64_t{B} * 4096, 0, 1.0f, rng);
  extra.init(DSV4_KV_LAYOUT_FP8_V4_584B, 64, int64_t{B} * 4096, 0, 1.0f, rng);
  auto indices = [&](int width, int64_t capacity) {
    std::uniform_int_distribution<int32_t> slot(0, static_cast<int32_t>(capacity - 1));
    std::vector<int32_t> idx(static_cast<size_t>(T) * width);
    for (auto& i : idx) i = slot(rng);
    return idx;
  };
  std::vector<uint16_t> hq(static_cast<size_t>(T) * H * 512);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : hq) x = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
  std::vector<float> hsink(H);
  for (auto& x : hsink) x = nd(rng);
  d_main = to_device(main.bytes);
  d_extra = to_device(extra.bytes);
  q = to_device(hq);
  sink = to_device(hsink);
  out = device_buffer(static_cast<size_t>(T) * H * 512 * 2);
  lse = device_buffer(static_cast<size_t>(T) * H * 4);
  main_idx = to_device(indices(topk, main.capacity()));
  extra_idx = to_device(indices(extra_topk, extra.capacity()));

  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.num_heads = H;
  o.max_tokens = T;
  o.swa_cache = main.desc();
  o.extra_cache = extra.desc();
  o.topk = topk;
  o.extra_topk = extra_topk;
  check(dsv4cudatest::create_plan(ctx.get(), o, "", false, &plan), "plan");
  size_t ws = 0;
  check(dsv4_plan_get_workspace_size(plan.get(), &ws), "workspace size");
  workspace = device_buffer(ws);
  tq = TensorView(q.get(), kGpu, dsv4test::kBf16, {B, S, H, 512});
  tout = TensorView(out.get(), kGpu, dsv4test::kBf16, {B, S, H, 512});
  tlse = TensorView(lse.get(), kGpu, dsv4test::kF32, {B, S, H});
  tsink = TensorView(sink.get(), kGpu, dsv4test::kF32, {H});
  tmain = main.tensor(d_main.get(), kGpu, main.num_blocks);
  textra = extra.tensor(d_extra.get(), kGpu, extra.num_blocks);
  tmain_idx = TensorView(main_idx.get(), kGpu, dsv4test::kI32, {B, S, topk});
  textra_idx = TensorView(extra_idx.get(), kGpu, dsv4test::kI32, {B, S, extra_topk});
  dsv4_run_args_init(&args);
  args.q = tq.get();
  args.out = tout.get();
  args.lse = tlse.get();
  args.attn_sink = tsink.get();
  args.swa_cache = tmain.get();
  args.extra_cache = textra.get();
  args.indices = tmain_idx.get();
  args.extra_indices = textra_idx.get();
  args.workspace = workspace.get();
  args.workspace_bytes = ws;

  // One run captured on its own stream, for the replays.
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  dsv4_run_args captured = args;
  captured.stream = stream;
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const dsv4_status st = dsv4_run(plan.get(), &captured);
  DSV4_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  check(st, "run under capture");
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  empty = std::make_unique<jit_kernel>(kEmptyPtx, "dsv4_bench_empty", 1);

  double seconds = 0;  // warm-up: one burst of each
  check(dsv4_bench_run_burst(plan.get(), &args, kBurst, &seconds), "warm-up burst");
  for (int i = 0; i < kBurst; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
}

tiny_step* g_step = nullptr;

// Runs one burst by `burst(&host_seconds)` on `stream` between two CUDA events, then waits for
// the GPU; the repetition's time is the host's per call.
template <class Burst>
void time_burst(benchmark::State& state, cudaStream_t stream, Burst&& burst) {
  try {
    cudaEvent_t start, stop;
    DSV4_CUDA_CHECK(cudaEventCreate(&start));
    DSV4_CUDA_CHECK(cudaEventCreate(&stop));
    double host = 0, gpu = 0;
    for (auto _ : state) {
      DSV4_CUDA_CHECK(cudaEventRecord(start, stream));
      burst(&host);
      DSV4_CUDA_CHECK(cudaEventRecord(stop, stream));
      DSV4_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      gpu = ms * 1e-3;
      state.SetIterationTime(host / kBurst);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    state.counters["us_per_call"] = host / kBurst * 1e6;
    state.counters["gpu_us_per_call"] = gpu / kBurst * 1e6;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bm_dsv4_run(benchmark::State& state) {
  time_burst(state, nullptr, [](double* host) {
    check(dsv4_bench_run_burst(g_step->plan.get(), &g_step->args, kBurst, host), "dsv4_run");
  });
  state.counters["target_us"] = 3.0;
}

void bm_graph_replay(benchmark::State& state) {
  time_burst(state, g_step->stream, [](double* host) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(g_step->exec, g_step->stream));
    *host = seconds_since(t0);
  });
}

void bm_empty_launch(benchmark::State& state) {
  time_burst(state, nullptr, [](double* host) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) g_step->empty->launch();
    *host = seconds_since(t0);
  });
}

}  // namespace
}  // namespace dsv4bench

int main(int argc, char** argv) {
  using namespace dsv4bench;
  std::string why;
  if (dsv4cudatest::cuda_device_count(&why) == 0) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  try {
    tiny_step step;
    g_step = &step;
    cudaDeviceProp prop;
    DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    add_run_context(describe_device(prop), argc, argv);
    benchmark::AddCustomContext("method",
                                "host wall time of bursts of " + std::to_string(kBurst) +
                                    " calls, per call; the GPU synchronised between bursts only");
    for (auto [name, fn] : {std::pair{"cuda/host/dsv4_run/b:2", &bm_dsv4_run},
                            std::pair{"cuda/host/graph_replay/b:2", &bm_graph_replay},
                            std::pair{"cuda/host/empty_launch", &bm_empty_launch}})
      benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Unit(benchmark::kMicrosecond);
    const int status = run_benchmarks(argc, argv, "dsv4_bench_host_overhead");
    g_step = nullptr;
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4_bench_host_overhead: %s\n", e.what());
    return 1;
  }
}
