// Times a few explicit-mode cases through the public C API of whichever libdsv4.so.0 the dynamic
// loader picks, so that two library versions can be compared even across a backend-module ABI
// bump (scripts/gpu/ab_bench.sh swaps modules and needs one module ABI). It uses only what API
// 0.1 has: built against the older version's headers, both versions serve it. Timing as in
// dsv4_bench_cuda: an untimed run, a 256 MB memset that flushes the L2, one dsv4_run between CUDA
// events; median and minimum of 25.
//
//   dsv4_api_ab [substring]     one line per case: name, median µs, min µs, the plan's kernel
//                               (DSV4_API_AB_TIMES=1: then a line of every repetition's µs)
//
// scripts/gpu/api_ab.sh builds it against another version and interleaves the two. Exits 77
// where no CUDA device is usable.
#include <cuda_runtime.h>
#include <dsv4/dsv4.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct ab_case {
  const char* name;
  int heads, topk, tokens;
  int64_t keys;  // cache rows the lists draw from
  uint32_t layout;
};

// Prefill shapes of dsv4_bench_cuda, and decodes over a bf16 and an FP8 (584 B) cache.
const ab_case kCases[] = {
    {"prefill/heads:64/topk:512/s_kv:8192", 64, 512, 4096, 8192, DSV4_KV_LAYOUT_BF16},
    {"prefill/heads:128/topk:1024/s_kv:8192", 128, 1024, 4096, 8192, DSV4_KV_LAYOUT_BF16},
    {"prefill/heads:128/topk:1024/s_kv:65536", 128, 1024, 4096, 65536, DSV4_KV_LAYOUT_BF16},
    {"decode/bf16/heads:64/topk:640/tokens:4", 64, 640, 4, 32768, DSV4_KV_LAYOUT_BF16},
    {"decode/bf16/heads:128/topk:1152/tokens:512", 128, 1152, 512, 65536, DSV4_KV_LAYOUT_BF16},
    {"decode/fp8/heads:64/topk:640/tokens:4", 64, 640, 4, 32768, DSV4_KV_LAYOUT_FP8_V4_584B},
    {"decode/fp8/heads:64/topk:640/tokens:128", 64, 640, 128, 65536, DSV4_KV_LAYOUT_FP8_V4_584B},
    {"decode/fp8/heads:128/topk:1152/tokens:512", 128, 1152, 512, 65536,
     DSV4_KV_LAYOUT_FP8_V4_584B},
};
constexpr int kBlock = 64;
constexpr int kReps = 25;

struct failure {
  std::string what;
};

void check(dsv4_status st, const char* what) {
  if (st != DSV4_STATUS_OK) throw failure{std::string(what) + ": " + dsv4_last_error_message()};
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

struct device_memory {
  void* p = nullptr;
  explicit device_memory(size_t bytes) {
    check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  }
  ~device_memory() { cudaFree(p); }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
};

template <class T>
void upload(const device_memory& d, const std::vector<T>& h) {
  check_cuda(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// xorshift64: uniform in [-1, 1), fast enough for the 268 M query values of a 128-head prefill.
struct uniform {
  uint64_t s;
  float operator()() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(s >> 40) / 8388608.f - 1.f;
  }
};

dsv4_tensor tensor(void* data, dsv4_dtype dtype, int ndim, int64_t* shape) {
  dsv4_tensor t{};
  t.data = data;
  t.device = {DSV4_DEVICE_CUDA, 0};
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

const dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1}, kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1},
    kI32{DSV4_DTYPE_CODE_INT, 32, 1}, kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

void run_case(dsv4_ctx* ctx, const ab_case& c) {
  uniform rng{0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(c.heads * 131 + c.topk + c.tokens)};
  const int64_t blocks = (c.keys + kBlock - 1) / kBlock, T = c.tokens, H = c.heads;
  dsv4_kv_layout_info li;
  std::memset(&li, 0, sizeof li);
  li.struct_size = sizeof li;
  check(dsv4_kv_layout_get_info(c.layout, kBlock, &li), "dsv4_kv_layout_get_info");
  dsv4_kv_cache_desc desc{};
  desc.layout = c.layout;
  desc.block_size = kBlock;
  desc.block_stride_bytes = li.min_block_stride_bytes;
  desc.kv_scale = 1.f;

  // The cache: every row written by the library's own writer from random bf16 values.
  device_memory cache(static_cast<size_t>(blocks * li.min_block_stride_bytes));
  {
    std::vector<uint16_t> rows(static_cast<size_t>(blocks * kBlock) * 512);
    for (auto& x : rows) x = to_bf16(0.5f * rng());
    std::vector<int32_t> slots(static_cast<size_t>(blocks * kBlock));
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
    device_memory drows(rows.size() * 2), dslots(slots.size() * 4);
    upload(drows, rows);
    upload(dslots, slots);
    int64_t srows[2] = {blocks * kBlock, 512}, sslots[1] = {blocks * kBlock},
            scache[2] = {blocks, li.min_block_stride_bytes};
    dsv4_tensor tv = tensor(drows.p, kBf16, 2, srows), ts = tensor(dslots.p, kI32, 1, sslots),
                tc = tensor(cache.p, kU8, 2, scache);
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = desc;
    w.values = &tv;
    w.slots = &ts;
    w.cache = &tc;
    check(dsv4_kv_write(ctx, &w), "dsv4_kv_write");
    check_cuda(cudaDeviceSynchronize(), "kv write");
  }

  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.num_heads = c.heads;
  o.max_tokens = c.tokens;
  o.topk = c.topk;
  o.swa_cache = desc;
  dsv4_plan* plan = nullptr;
  check(dsv4_plan_create(ctx, &o, &plan), "dsv4_plan_create");
  struct plan_guard {
    dsv4_plan* p;
    ~plan_guard() { dsv4_plan_destroy(p); }
  } guard{plan};
  size_t ws = 0;
  check(dsv4_plan_get_workspace_size(plan, &ws), "workspace size");

  // Lists: random rows through a random block permutation; q and the sink random.
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  for (size_t i = perm.size(); i > 1; --i)
    std::swap(perm[i - 1], perm[static_cast<size_t>((rng() + 1.f) * 0.5f * i) % i]);
  std::vector<int32_t> idx(static_cast<size_t>(T) * c.topk);
  for (auto& x : idx) {
    const int64_t k = static_cast<int64_t>((rng() + 1.f) * 0.5f * c.keys) % c.keys;
    x = static_cast<int32_t>(perm[k / kBlock] * kBlock + k % kBlock);
  }
  std::vector<uint16_t> q(static_cast<size_t>(T * H) * 512);
  for (auto& x : q) x = to_bf16(rng());
  std::vector<float> sink(static_cast<size_t>(H));
  for (auto& x : sink) x = rng();
  device_memory dq(q.size() * 2), didx(idx.size() * 4), dsink(sink.size() * 4),
      dout(static_cast<size_t>(T * H) * 512 * 2), dlse(static_cast<size_t>(T * H) * 4), dws(ws),
      flush(256u << 20);
  upload(dq, q);
  upload(didx, idx);
  upload(dsink, sink);
  int64_t sq[3] = {T, H, 512}, scache[2] = {blocks, li.min_block_stride_bytes},
          sidx[2] = {T, c.topk}, ssink[1] = {H}, slse[2] = {T, H};
  dsv4_tensor tq = tensor(dq.p, kBf16, 3, sq), tc = tensor(cache.p, kU8, 2, scache),
              ti = tensor(didx.p, kI32, 2, sidx), ts = tensor(dsink.p, kF32, 1, ssink),
              to = tensor(dout.p, kBf16, 3, sq), tl = tensor(dlse.p, kF32, 2, slse);
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = &tq;
  a.swa_cache = &tc;
  a.indices = &ti;
  a.attn_sink = &ts;
  a.out = &to;
  a.lse = &tl;
  a.workspace = dws.p;
  a.workspace_bytes = ws;
  for (int i = 0; i < 3; ++i) check(dsv4_run(plan, &a), "warm-up run");

  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  std::vector<float> us;
  for (int r = 0; r < kReps; ++r) {
    check(dsv4_run(plan, &a), "untimed run");
    check_cuda(cudaMemsetAsync(flush.p, r & 0xff, 256u << 20), "flush");
    check_cuda(cudaEventRecord(start), "record");
    check(dsv4_run(plan, &a), "timed run");
    check_cuda(cudaEventRecord(stop), "record");
    check_cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(ms * 1000.f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  dsv4_plan_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(dsv4_plan_get_info(plan, &info), "dsv4_plan_get_info");
  std::printf("%-44s %9.1f %9.1f  %s\n", c.name, us[kReps / 2], us[0], info.kernel);
  if (std::getenv("DSV4_API_AB_TIMES") != nullptr) {  // every repetition, sorted
    std::printf("#");
    for (float t : us) std::printf(" %.1f", t);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  dsv4_ctx_options co;
  dsv4_ctx_options_init(&co);
  co.device = {DSV4_DEVICE_CUDA, 0};
  co.backend = "cuda";
  dsv4_ctx* ctx = nullptr;
  if (dsv4_ctx_create(&co, &ctx) != DSV4_STATUS_OK) {
    std::printf("dsv4_ctx_create: %s\n", dsv4_last_error_message());
    return 1;
  }
  dsv4_ctx_info ci;
  std::memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  dsv4_ctx_get_info(ctx, &ci);
  std::printf("# libdsv4 %s, module %s\n# %-42s %9s %9s  kernel\n", dsv4_get_version_string(),
              ci.path, "case", "median", "min");
  int status = 0;
  for (const ab_case& c : kCases) {
    if (argc > 1 && std::strstr(c.name, argv[1]) == nullptr) continue;
    try {
      run_case(ctx, c);
    } catch (const failure& f) {
      std::printf("%-44s failed: %s\n", c.name, f.what.c_str());
      status = 1;
    }
  }
  dsv4_ctx_destroy(ctx);
  return status;
}
