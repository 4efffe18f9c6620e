// GPU benchmark of the CUDA backend through the public API, on Google Benchmark with manual time:
// each repetition is one dsv4_run (or dsv4_merge) between two CUDA events, after a 256 MB memset
// that flushes the L2 (DSV4_BENCH_FLUSH) and, for dsv4_run, after an untimed run of the same plan
// before the flush (timed_run); 25 repetitions per case by default, of which the JSON keeps the
// median, mean, stddev and cv. Each case is prepared once before its repetitions: caches tiled
// from pools of vLLM-quantised random rows, random lists through a random block permutation (no
// row shared between tokens), three untimed warm-up runs.
//
// Cases and their names (the docs generator scripts/perf/make_performance.py reads them; parts
// "key:value" are parameters):
//   cuda/CONFIG1/b:64                          FlashMLA's DeepSeek-V4 decode cases CONFIG1..CONFIG4
//                                              (s_q 2, FP8 584 B cache, SWA list 128 on 256-token
//                                              pages + extra list 512/1024 on 64/2-entry blocks,
//                                              16384 keys per request, sink on; CONFIG3/4 with
//                                              per-request extra lengths) at b = 2, 64, 128, 256
//   cuda/CONFIG1/heads:8/b:64                  CONFIG1's shape with 8, 16, 32 and 64 heads
//   cuda/CONFIG2/heads:64/b:256                CONFIG2's shape on one of 2 tensor-parallel ranks
//   cuda/CONFIG1/cache:bf16/b:64               CONFIG1 and CONFIG2 over a bf16 cache
//   cuda/CONFIG1/heads:8/chunk:32/b:64         the 32-key-chunk variant of sm_86/89, forced here
//                                              (DSV4_CUDA_FORCE=chunk=32)
//   cuda/prefill/heads:64/topk:512/s_kv:8192   sparse prefill, bf16 KV, s_q 4096, one list
//   cuda/merge/parts:4/heads:64/tokens:128/dtype:bf16
//                                              dsv4_merge of 4 partial results, as decode-context
//                                              parallelism exchanges them (out parts bf16 or f32)
// Counters of the attention cases:
//   us                 the case's time (also real_time, in µs)
//   TFLOPs             2 * heads * attended keys * (512 + 512) / time, in TFLOP/s
//   GBs, GBs_gathered  GB/s counting Q + O + attended rows x 576 B (FlashMLA's way), or x the
//                      layout's bytes per row
//   gather_us          the gather floor: a plain read of just the rows the lists reference
//   flashmla_us, flashmla_ratio   FlashMLA's measured time for the case on this GPU model
//                      (flashmla_anchors.h) and that time over ours (above 1: we are faster)
//   torch_us, torch_ratio         plain PyTorch on the same shape (--torch_csv, written by
//                      torch_baseline.py in the same run) and that time over ours
//   invariant_us, invariant_ratio the same case under DSV4_PLAN_FLAG_BATCH_INVARIANT, timed in the
//                      same repetitions, and its time over the default mode's (issue 61's targets:
//                      <= 1.10 at b >= 64, <= 1.5 at b = 2); absent where the flag is refused, as
//                      the label then says
// The label names the plan's kernel and what its run took (DSV4_CUDA_LOG_RUNS), for both modes.
//
// Usage: dsv4_bench_cuda [--torch_csv=FILE] [Google Benchmark flags], e.g.
//   --benchmark_filter=CONFIG1 --benchmark_out=cuda.json --benchmark_out_format=json
// dsv4_bench_cuda --list_torch_shapes prints the shapes torch_baseline.py should time (no GPU
// needed). Environment: DSV4_BENCH_FLUSH=memset|read|none, DSV4_COMMIT (the JSON's commit),
// DSV4_BENCH_INVARIANT=0 (no batch-invariant plans: only the default mode's runs, for profilers),
// DSV4_BENCH_INVARIANT_MAX_TOKENS=N (batch-invariant plans sized for max(N, the case's tokens):
// what an engine pays at each batch size when one plan serves batches of up to N tokens; a
// batch-invariant plan takes the key splits of its largest run),
// DSV4_BENCH_FORCE=keys (DSV4_CUDA_FORCE keys added to every case's plans, for A/B runs),
// DSV4_TRACE_OUT=FILE (with a module built with -DDSV4_SM90_TRACE: the timeline of the last
// Hopper launch, scripts/gpu/trace_sm90.py reads it). Exits 77 where no GPU is usable.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.h"
#include "common/layout.h"
#include "flashmla_anchors.h"

namespace dsv4bench {
namespace {

using dsv4cudatest::host_cache;
using dsv4test::PlanPtr;
using dsv4test::TensorView;

constexpr dsv4_device kGpu{DSV4_DEVICE_CUDA, 0};

struct bench_case {
  std::string name;
  int heads = 64;
  int batch = 2;
  int seq_q = 2;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int main_block = 256;
  int topk = 128;
  int extra_block = 64;
  int extra_topk = 512;        // 0 = no extra list
  bool extra_lengths = false;  // per-request random extra lengths (CONFIG3/4)
  int64_t keys_per_scope = 16384;
  bool prefill = false;  // one scope of keys_per_scope keys shared by all T = seq_q tokens
  std::string force;     // DSV4_CUDA_FORCE

  int tokens() const { return batch * seq_q; }
  const char* cache_name() const { return layout == DSV4_KV_LAYOUT_BF16 ? "bf16" : "fp8"; }
  // The plain-PyTorch shape "cache tokens heads keys" (per-request lengths have none).
  std::string torch_shape() const {
    if (extra_lengths) return "";
    return std::string(cache_name()) + " " + std::to_string(tokens()) + " " +
           std::to_string(heads) + " " + std::to_string(topk + extra_topk);
  }
};

std::vector<bench_case> attention_cases() {
  std::vector<bench_case> v;
  struct config {
    const char* name;
    int heads, extra_topk, extra_block;
    bool lengths;
  };
  const config configs[] = {{"CONFIG1", 64, 512, 64, false},
                            {"CONFIG2", 128, 1024, 64, false},
                            {"CONFIG3", 64, 1024, 2, true},
                            {"CONFIG4", 128, 1024, 2, true}};
  const int batches[] = {2, 64, 128, 256};
  auto decode = [](const config& k, int b) {
    bench_case c;
    c.heads = k.heads;
    c.batch = b;
    c.extra_topk = k.extra_topk;
    c.extra_block = k.extra_block;
    c.extra_lengths = k.lengths;
    return c;
  };
  for (const config& k : configs) {
    for (int b : batches) {
      bench_case c = decode(k, b);
      c.name = std::string("cuda/") + k.name + "/b:" + std::to_string(b);
      v.push_back(c);
    }
  }
  // Small head counts (tensor parallel 8/4/2 of 64 heads) beside 64 heads.
  for (int h : {8, 16, 32, 64}) {
    for (int b : batches) {
      bench_case c = decode(configs[0], b);
      c.heads = h;
      c.name = "cuda/CONFIG1/heads:" + std::to_string(h) + "/b:" + std::to_string(b);
      v.push_back(c);
    }
  }
  // CONFIG2 on one of 2 tensor-parallel ranks (64 of its 128 heads): issue 55's per-rank target.
  for (int b : {64, 256}) {
    bench_case c = decode(configs[1], b);
    c.heads = 64;
    c.name = "cuda/CONFIG2/heads:64/b:" + std::to_string(b);
    v.push_back(c);
  }
  // The bf16 cache, same decode shapes.
  for (const config& k : {configs[0], configs[1]}) {
    for (int b : batches) {
      bench_case c = decode(k, b);
      c.layout = DSV4_KV_LAYOUT_BF16;
      c.name = std::string("cuda/") + k.name + "/cache:bf16/b:" + std::to_string(b);
      v.push_back(c);
    }
  }
  // Sparse prefill, bf16 KV (FlashMLA's flash_mla_sparse_fwd cases): s_q 4096 in one list.
  for (int heads : {64, 128}) {
    for (int skv : {8192, 65536}) {
      bench_case c;
      c.heads = heads;
      c.topk = heads == 64 ? 512 : 1024;
      c.layout = DSV4_KV_LAYOUT_BF16;
      c.prefill = true;
      c.batch = 1;
      c.seq_q = 4096;
      c.main_block = 64;
      c.extra_topk = 0;
      c.keys_per_scope = skv;
      c.name = "cuda/prefill/heads:" + std::to_string(heads) + "/topk:" + std::to_string(c.topk) +
               "/s_kv:" + std::to_string(skv);
      v.push_back(c);
    }
  }
  // The small-shared-memory variant (what sm_86/89 get), forced on this GPU.
  for (int h : {8, 16, 64}) {
    for (int b : {2, 64, 128}) {
      bench_case c = decode(configs[0], b);
      c.heads = h;
      c.force = "chunk=32";
      c.name = "cuda/CONFIG1/heads:" + std::to_string(h) + "/chunk:32/b:" + std::to_string(b);
      v.push_back(c);
    }
  }
  // A/B runs: DSV4_BENCH_FORCE adds its DSV4_CUDA_FORCE keys to every case's (the case's own
  // DSV4_CUDA_FORCE is set and unset around each plan, so the variable itself would be lost).
  if (const char* extra = std::getenv("DSV4_BENCH_FORCE"); extra != nullptr && *extra != '\0')
    for (bench_case& c : v) c.force = c.force.empty() ? extra : c.force + "," + extra;
  return v;
}

struct merge_case {
  std::string name;
  int parts, heads, tokens;
  bool f32_parts;
};

// Decode-context parallel merges: CONFIG1-sized (64 heads, b = 64, s_q 2) and CONFIG2-sized
// (128 heads, b = 256) steps over 2, 4 and 8 ranks.
std::vector<merge_case> merge_cases() {
  std::vector<merge_case> v;
  for (const auto& [heads, tokens] : {std::pair{64, 128}, std::pair{128, 512}}) {
    for (int parts : {2, 4, 8}) {
      for (bool f32 : {false, true}) {
        if (f32 && parts != 8) continue;
        merge_case c{"", parts, heads, tokens, f32};
        c.name = "cuda/merge/parts:" + std::to_string(parts) + "/heads:" + std::to_string(heads) +
                 "/tokens:" + std::to_string(tokens) + "/dtype:" + (f32 ? "f32" : "bf16");
        v.push_back(c);
      }
    }
  }
  return v;
}

void check(dsv4_status st, const char* what) {
  if (st != DSV4_STATUS_OK)
    throw std::runtime_error(std::string(what) + ": " + dsv4test::status_text(st));
}

// Pools of quantised random rows, one per (layout, block size), tiled over the benchmarks' caches.
const host_cache& pool(uint32_t layout, int block, int64_t slots) {
  static std::map<std::tuple<uint32_t, int, int64_t>, host_cache> pools;
  auto key = std::make_tuple(layout, block, slots);
  auto it = pools.find(key);
  if (it == pools.end()) {
    std::mt19937_64 rng(layout * 1000003ull + block * 1009ull + static_cast<uint64_t>(slots));
    host_cache c;
    c.init(layout, block, slots, 0, 1.0f, rng);
    it = pools.emplace(key, std::move(c)).first;
  }
  return it->second;
}

// A device cache of `blocks` blocks, the pool's blocks repeated.
device_buffer tiled_cache(const host_cache& p, int64_t blocks) {
  device_buffer d(static_cast<size_t>(blocks * p.stride));
  device_buffer src = to_device(p.bytes);
  for (int64_t b = 0; b < blocks; b += p.num_blocks) {
    const int64_t n = std::min(p.num_blocks, blocks - b);
    DSV4_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(d.get()) + b * p.stride, src.get(),
                               static_cast<size_t>(n * p.stride), cudaMemcpyDeviceToDevice));
  }
  return d;
}

// FNV-1a of a case's name: the seed of its inputs, whatever ran before.
uint64_t case_seed(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// One attention case on the GPU, built once for all its repetitions.
struct prepared_attention {
  std::string name;
  device_buffer main, extra, q, sink, out, lse, main_idx, extra_idx, extra_len, workspace;
  TensorView tq, tmain, textra, tsink, tout, tlse, tmain_idx, textra_idx, textra_len;
  PlanPtr plan, invariant;
  std::string invariant_refused;  // why DSV4_PLAN_FLAG_BATCH_INVARIANT was refused
  dsv4_run_args args{};
  int64_t attended = 0;  // valid keys over all tokens
  double gather_s = 0;
  std::string label;
};

// One merge case on the GPU, built once for all its repetitions.
struct prepared_merge {
  std::string name;
  device_buffer parts, lse_parts, sink, out, lse;
  TensorView tparts, tlse_parts, tsink, tout, tlse;
  dsv4_merge_args args{};
  double bytes = 0;
};

// What every case shares: the context, the flush, the gather floor, the device's name, and
// plain PyTorch's times by shape.
struct suite {
  dsv4cudatest::log_sink log;
  dsv4test::CtxPtr ctx;
  std::unique_ptr<l2_flush> flush;
  std::unique_ptr<gather_floor> floor;
  std::unique_ptr<event_timer> timer;
  std::string device_name;
  std::map<std::string, double> torch_us;  // "cache tokens heads keys" -> µs (L2 flushed)
  bool invariant = true;                   // time DSV4_PLAN_FLAG_BATCH_INVARIANT side by side
  int64_t invariant_max_tokens = 0;        // DSV4_BENCH_INVARIANT_MAX_TOKENS
  // The case being timed, kept for its repetitions (one case's buffers on the GPU at a time);
  // released before the context.
  std::unique_ptr<prepared_attention> attention;
  std::unique_ptr<prepared_merge> merge;
};
suite* g_suite = nullptr;

// The run log of one run of a plan made like `options` with DSV4_CUDA_LOG_RUNS=1 (never a timed
// plan: the log is formatted on the host inside dsv4_run).
std::string run_log(const dsv4_plan_options& options, const std::string& force,
                    const dsv4_run_args& args) {
  PlanPtr logging;
  check(dsv4cudatest::create_plan(g_suite->ctx.get(), options, force, true, &logging),
        "logging plan");
  g_suite->log.clear();
  check(dsv4_run(logging.get(), &args), "logged run");
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string line = g_suite->log.last_run();  // "cuda: run: T tokens, <choice>"
  const size_t what = line.find("tokens, ");
  return dsv4cudatest::plan_kernel(logging.get()) +
         (what == std::string::npos ? "" : " [" + line.substr(what + 8) + "]");
}

std::unique_ptr<prepared_attention> prepare_attention(const bench_case& c) {
  auto p = std::make_unique<prepared_attention>();
  p->name = c.name;
  std::mt19937_64 rng(case_seed(c.name));
  const int T = c.tokens(), H = c.heads;
  const bool extra = c.extra_topk > 0;
  const int scopes = c.prefill ? 1 : c.batch;
  const host_cache& main_pool =
      pool(c.layout, c.main_block, std::min<int64_t>(16384, c.keys_per_scope));
  const int64_t main_blocks = scopes * ((c.keys_per_scope + c.main_block - 1) / c.main_block);
  p->main = tiled_cache(main_pool, main_blocks);
  const host_cache* extra_pool = extra ? &pool(c.layout, c.extra_block, 16384) : nullptr;
  int64_t extra_blocks = 0;
  if (extra) {
    extra_blocks = scopes * ((c.keys_per_scope + c.extra_block - 1) / c.extra_block);
    p->extra = tiled_cache(*extra_pool, extra_blocks);
  }
  // Indices: random keys of the token's scope, through a random block permutation.
  auto make_indices = [&](int width, int block, int64_t blocks) {
    std::vector<int32_t> perm(blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t per_scope = blocks / scopes;
    std::uniform_int_distribution<int64_t> key(0, c.keys_per_scope - 1);
    std::vector<int32_t> idx(static_cast<size_t>(T) * width);
    for (int t = 0; t < T; ++t) {
      const int64_t scope = c.prefill ? 0 : t / c.seq_q;
      for (int i = 0; i < width; ++i) {
        const int64_t k = key(rng);
        const int64_t blk = perm[scope * per_scope + k / block];
        idx[static_cast<size_t>(t) * width + i] = static_cast<int32_t>(blk * block + k % block);
      }
    }
    return idx;
  };
  const std::vector<int32_t> main_idx = make_indices(c.topk, c.main_block, main_blocks);
  std::vector<int32_t> extra_idx, extra_len;
  p->attended = static_cast<int64_t>(T) * c.topk;
  if (extra) {
    extra_idx = make_indices(c.extra_topk, c.extra_block, extra_blocks);
    if (c.extra_lengths) {
      extra_len.resize(c.batch);
      for (auto& l : extra_len) l = static_cast<int32_t>(rng() % (c.extra_topk + 1));
      for (int t = 0; t < T; ++t) p->attended += extra_len[t / c.seq_q];
    } else {
      p->attended += static_cast<int64_t>(T) * c.extra_topk;
    }
  }
  const int dqk = dsv4::layout_head_dim_qk(c.layout);
  std::vector<uint16_t> q(static_cast<size_t>(T) * H * dqk);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : q) x = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
  std::vector<float> sink(H);
  for (auto& s : sink) s = nd(rng);

  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.num_heads = H;
  o.head_dim_qk = dqk;
  o.max_tokens = T;
  o.swa_cache = main_pool.desc();
  if (extra) o.extra_cache = extra_pool->desc();
  o.topk = c.topk;
  o.extra_topk = c.extra_topk;
  check(dsv4cudatest::create_plan(g_suite->ctx.get(), o, c.force, false, &p->plan), "plan");
  dsv4_plan_options oi = o;
  oi.flags |= DSV4_PLAN_FLAG_BATCH_INVARIANT;
  oi.max_tokens = static_cast<int32_t>(std::max<int64_t>(T, g_suite->invariant_max_tokens));
  if (g_suite->invariant) {
    const dsv4_status inv =
        dsv4cudatest::create_plan(g_suite->ctx.get(), oi, c.force, false, &p->invariant);
    if (inv != DSV4_STATUS_OK) p->invariant_refused = dsv4test::status_text(inv);
  }
  size_t ws = 0, ws_inv = 0;
  check(dsv4_plan_get_workspace_size(p->plan.get(), &ws), "workspace size");
  if (p->invariant != nullptr)
    check(dsv4_plan_get_workspace_size(p->invariant.get(), &ws_inv), "workspace size");

  p->q = to_device(q);
  p->sink = to_device(sink);
  p->out = device_buffer(static_cast<size_t>(T) * H * 512 * 2);
  p->lse = device_buffer(static_cast<size_t>(T) * H * 4);
  p->main_idx = to_device(main_idx);
  p->extra_idx = to_device(extra_idx);
  p->extra_len = to_device(extra_len);
  p->workspace = device_buffer(std::max(ws, ws_inv));
  const int64_t B = c.batch, S = c.seq_q;
  p->tq = TensorView(p->q.get(), kGpu, dsv4test::kBf16, {B, S, H, dqk});
  p->tout = TensorView(p->out.get(), kGpu, dsv4test::kBf16, {B, S, H, 512});
  p->tlse = TensorView(p->lse.get(), kGpu, dsv4test::kF32, {B, S, H});
  p->tsink = TensorView(p->sink.get(), kGpu, dsv4test::kF32, {H});
  p->tmain = main_pool.tensor(p->main.get(), kGpu, main_blocks);
  p->tmain_idx = TensorView(p->main_idx.get(), kGpu, dsv4test::kI32, {B, S, c.topk});
  dsv4_run_args& a = p->args;
  dsv4_run_args_init(&a);
  a.q = p->tq.get();
  a.out = p->tout.get();
  a.lse = p->tlse.get();
  a.attn_sink = p->tsink.get();
  a.swa_cache = p->tmain.get();
  a.indices = p->tmain_idx.get();
  if (extra) {
    p->textra = extra_pool->tensor(p->extra.get(), kGpu, extra_blocks);
    p->textra_idx = TensorView(p->extra_idx.get(), kGpu, dsv4test::kI32, {B, S, c.extra_topk});
    p->textra_len = TensorView(p->extra_len.get(), kGpu, dsv4test::kI32, {B});
    a.extra_cache = p->textra.get();
    a.extra_indices = p->textra_idx.get();
    if (c.extra_lengths) a.extra_lengths = p->textra_len.get();
  }
  a.workspace = p->workspace.get();
  a.workspace_bytes = p->workspace.bytes();

  for (int i = 0; i < 3; ++i) {
    check(dsv4_run(p->plan.get(), &a), "warm-up run");
    if (p->invariant != nullptr) check(dsv4_run(p->invariant.get(), &a), "warm-up run");
  }
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  // The gather floor: each referenced row's data bytes in the run's caches, in list order.
  std::vector<uint64_t> rows;
  rows.reserve(static_cast<size_t>(p->attended));
  auto add_rows = [&](const device_buffer& cache, const host_cache& layout_of,
                      const std::vector<int32_t>& idx, int width, int t, int n) {
    for (int i = 0; i < n; ++i) {
      const int64_t slot = idx[static_cast<size_t>(t) * width + i];
      const int64_t block = slot / layout_of.block_size, e = slot % layout_of.block_size;
      rows.push_back(
          reinterpret_cast<uint64_t>(cache.get()) +
          static_cast<uint64_t>(block * layout_of.stride + dsv4::entry_data_offset(c.layout, e)));
    }
  };
  for (int t = 0; t < T; ++t) {
    add_rows(p->main, main_pool, main_idx, c.topk, t, c.topk);
    if (extra)
      add_rows(p->extra, *extra_pool, extra_idx, c.extra_topk, t,
               extra_len.empty() ? c.extra_topk : extra_len[t / c.seq_q]);
  }
  const int row_bytes = static_cast<int>(dsv4::entry_data_offset(c.layout, 1));
  p->gather_s = g_suite->floor->seconds(rows, row_bytes, *g_suite->flush, 25);

  p->label = run_log(o, c.force, a);
  if (p->invariant != nullptr)
    p->label += "; batch-invariant: " + run_log(oi, c.force, a);
  else if (g_suite->invariant)
    p->label += "; batch-invariant refused: " + p->invariant_refused;
  return p;
}

prepared_attention& attention(const bench_case& c) {
  std::unique_ptr<prepared_attention>& current = g_suite->attention;
  if (current == nullptr || current->name != c.name) {
    current.reset();
    current = prepare_attention(c);
  }
  return *current;
}

// Seconds of one timed run of `plan` in the state round 49's benchmark timed runs in: a run of the
// same plan, the L2 flush, the timed run. The flush empties the L2, not the SMs' instruction
// caches. Without the untimed run the batch-invariant plan's run would come before each timed one,
// with other kernels where the two modes differ (64/128 heads at b = 2: split 32-head tiles against
// one-split wgmma), and those cases measured 8-16 % above round 49 on the same kernels, launches
// and PTX.
double timed_run(const dsv4_plan* plan, const dsv4_run_args& args) {
  check(dsv4_run(plan, &args), "run");
  g_suite->flush->run();
  return g_suite->timer->seconds([&] { check(dsv4_run(plan, &args), "run"); });
}

void bm_attention(benchmark::State& state, const bench_case& c) {
  try {
    prepared_attention& p = attention(c);
    double t = 0;
    for (auto _ : state) {
      t = timed_run(p.plan.get(), p.args);
      state.SetIterationTime(t);
    }
    const double us = t * 1e6;
    const int T = c.tokens();
    const double qo = static_cast<double>(T) * c.heads * 512 * 2 * 2;
    const double rows = static_cast<double>(p.attended);
    state.counters["us"] = us;
    state.counters["TFLOPs"] = 2.0 * c.heads * rows * (512 + 512) / t / 1e12;
    state.counters["GBs"] = (qo + rows * 576) / t / 1e9;
    state.counters["GBs_gathered"] = (qo + rows * dsv4::layout_bytes_per_token(c.layout)) / t / 1e9;
    if (p.gather_s > 0) state.counters["gather_us"] = p.gather_s * 1e6;
    const double flashmla = flashmla_us(g_suite->device_name, c.name);
    if (flashmla > 0) {
      state.counters["flashmla_us"] = flashmla;
      state.counters["flashmla_ratio"] = flashmla / us;
    }
    const auto torch = g_suite->torch_us.find(c.torch_shape());
    if (torch != g_suite->torch_us.end()) {
      state.counters["torch_us"] = torch->second;
      state.counters["torch_ratio"] = torch->second / us;
    }
    if (p.invariant != nullptr) {
      const double ti = timed_run(p.invariant.get(), p.args);
      state.counters["invariant_us"] = ti * 1e6;
      state.counters["invariant_ratio"] = ti / t;
    }
    state.SetLabel(p.label);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::unique_ptr<prepared_merge> prepare_merge(const merge_case& c) {
  auto p = std::make_unique<prepared_merge>();
  p->name = c.name;
  std::mt19937_64 rng(case_seed(c.name));
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t P = c.parts, T = c.tokens, H = c.heads;
  const size_t n = static_cast<size_t>(P * T * H * 512);
  if (c.f32_parts) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    p->parts = to_device(v);
  } else {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = dsv4::f32_to_bf16(nd(rng));
    p->parts = to_device(v);
  }
  std::vector<float> lse(static_cast<size_t>(P * T * H)), sink(H);
  for (auto& x : lse) x = 6.0f + nd(rng);
  for (auto& x : sink) x = nd(rng);
  p->lse_parts = to_device(lse);
  p->sink = to_device(sink);
  p->out = device_buffer(static_cast<size_t>(T * H * 512 * 2));
  p->lse = device_buffer(static_cast<size_t>(T * H * 4));
  p->tparts = TensorView(p->parts.get(), kGpu, c.f32_parts ? dsv4test::kF32 : dsv4test::kBf16,
                         {P, T, H, 512});
  p->tlse_parts = TensorView(p->lse_parts.get(), kGpu, dsv4test::kF32, {P, T, H});
  p->tsink = TensorView(p->sink.get(), kGpu, dsv4test::kF32, {H});
  p->tout = TensorView(p->out.get(), kGpu, dsv4test::kBf16, {T, H, 512});
  p->tlse = TensorView(p->lse.get(), kGpu, dsv4test::kF32, {T, H});
  dsv4_merge_args& a = p->args;
  dsv4_merge_args_init(&a);
  a.out_parts = p->tparts.get();
  a.lse_parts = p->tlse_parts.get();
  a.attn_sink = p->tsink.get();
  a.out = p->tout.get();
  a.lse = p->tlse.get();
  p->bytes = static_cast<double>(P * T * H) * (512 * (c.f32_parts ? 4 : 2) + 4) +
             static_cast<double>(T * H) * (512 * 2 + 4) + H * 4;
  for (int i = 0; i < 3; ++i) check(dsv4_merge(g_suite->ctx.get(), &a), "warm-up merge");
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void bm_merge(benchmark::State& state, const merge_case& c) {
  try {
    std::unique_ptr<prepared_merge>& current = g_suite->merge;
    if (current == nullptr || current->name != c.name) {
      current.reset();
      current = prepare_merge(c);
    }
    prepared_merge& p = *current;
    double t = 0;
    for (auto _ : state) {
      g_suite->flush->run();
      t = g_suite->timer->seconds([&] { check(dsv4_merge(g_suite->ctx.get(), &p.args), "merge"); });
      state.SetIterationTime(t);
    }
    state.counters["us"] = t * 1e6;
    state.counters["GBs"] = p.bytes / t / 1e9;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Plain PyTorch's µs by shape, from torch_baseline.py's CSV ("cache,tokens,heads,keys,us,...").
std::map<std::string, double> read_torch_csv(const std::string& path) {
  std::map<std::string, double> times;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read --torch_csv " + path);
  std::string line;
  while (std::getline(in, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    std::string cache;
    long tokens = 0, heads = 0, keys = 0;
    double us = 0;
    if (fields >> cache >> tokens >> heads >> keys >> us)
      times[cache + " " + std::to_string(tokens) + " " + std::to_string(heads) + " " +
            std::to_string(keys)] = us;
  }
  return times;
}

// With a module built with -DDSV4_SM90_TRACE: writes the timeline of its last Hopper launch.
void dump_trace(const dsv4_ctx* ctx, const char* path) {
  dsv4_ctx_info info{};
  info.struct_size = sizeof info;
  check(dsv4_ctx_get_info(ctx, &info), "dsv4_ctx_get_info");
  void* module = dlopen(info.path, RTLD_NOW | RTLD_NOLOAD);
  using dump_fn = int (*)(const char*);
  auto dump = module != nullptr
                  ? reinterpret_cast<dump_fn>(dlsym(module, "dsv4_cuda_sm90_trace_dump"))
                  : nullptr;
  if (dump == nullptr)
    std::printf("trace: %s was not built with DSV4_SM90_TRACE\n", info.path);
  else
    std::printf("trace: %s (rc %d)\n", path, dump(path));
  if (module != nullptr) dlclose(module);
}

}  // namespace
}  // namespace dsv4bench

int main(int argc, char** argv) {
  using namespace dsv4bench;
  std::string torch_csv;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--list_torch_shapes") {
      std::set<std::string> shapes;
      for (const bench_case& c : attention_cases())
        if (!c.torch_shape().empty() && shapes.insert(c.torch_shape()).second)
          std::printf("%s\n", c.torch_shape().c_str());
      return 0;
    }
    if (arg.rfind("--torch_csv=", 0) == 0) {
      torch_csv = arg.substr(12);
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::string why;
  if (dsv4cudatest::cuda_device_count(&why) == 0) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  try {
    suite s;
    g_suite = &s;
    s.ctx = dsv4cudatest::make_cuda_ctx(0, &s.log, &why);
    if (s.ctx == nullptr) throw std::runtime_error(why);
    if (!torch_csv.empty()) s.torch_us = read_torch_csv(torch_csv);
    const char* invariant = std::getenv("DSV4_BENCH_INVARIANT");
    s.invariant = invariant == nullptr || std::string(invariant) != "0";
    if (const char* n = std::getenv("DSV4_BENCH_INVARIANT_MAX_TOKENS"))
      s.invariant_max_tokens = std::min<int64_t>(std::max(0L, std::atol(n)), 1 << 20);
    cudaDeviceProp prop;
    DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    s.device_name = prop.name;
    s.flush = std::make_unique<l2_flush>(prop.multiProcessorCount);
    s.floor = std::make_unique<gather_floor>(prop.multiProcessorCount);
    s.timer = std::make_unique<event_timer>();
    const ceilings ceil = measure_ceilings();
    add_run_context(describe_device(prop), argc, argv);
    char method[512];
    std::snprintf(method, sizeof method,
                  "CUDA events around one dsv4_run per repetition, L2 flush (%s) before each, "
                  "median of the repetitions; this GPU's ceilings: copy %.0f GB/s (read + "
                  "write), cuBLAS bf16 GEMM 8192^3 %.0f TFLOP/s%s",
                  s.flush->mode().c_str(), ceil.copy_gbs, ceil.gemm_tflops,
                  torch_csv.empty() ? "" : "; plain PyTorch from bench/gpu/torch_baseline.py");
    benchmark::AddCustomContext("method", method);
    for (const bench_case& c : attention_cases()) {
      benchmark::RegisterBenchmark(c.name.c_str(),
                                   [c](benchmark::State& st) { bm_attention(st, c); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    for (const merge_case& c : merge_cases()) {
      benchmark::RegisterBenchmark(c.name.c_str(), [c](benchmark::State& st) { bm_merge(st, c); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    const int status =
        run_benchmarks(static_cast<int>(rest.size()), rest.data(), "dsv4_bench_cuda");
    if (status != 0) return status;
    if (const char* trace_out = std::getenv("DSV4_TRACE_OUT")) dump_trace(s.ctx.get(), trace_out);
    g_suite = nullptr;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4_bench_cuda: %s\n", e.what());
    return 1;
  }
}
