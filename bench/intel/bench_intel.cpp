// Decode benchmark of the OpenCL C kernels: on an Intel GPU through Level Zero (the default), on
// any OpenCL device (--api opencl; PoCL in CI), or on the CPU module for comparison (--api cpu).
//
//   dsv4_bench_intel                        CONFIG1-4 (targets.md) at their heads and at 8/16/32
//                                           heads, Level Zero GPU 0: us, GB/s, fraction of copy
//   dsv4_bench_intel --api opencl --suite cpu --compare-cpu
//                                           the bench_cpu shapes on OpenCL device 0 and on the CPU
//                                           module, with the ratio
//   options: --batch B (CONFIG batch rows, default 64), --reps N (runs per timed sample, 10),
//            --samples N (timed samples, median reported, 15), --device I
//
// Each token attends to its own rows (nothing shared between tokens, as in a decode batch): 128
// SWA rows (main list) plus the compressed rows (extra list); sink on, FP8 584 B caches unless the
// suite says bf16. GB/s counts the bytes gathered: every attended row (584 or 1024 B) + q + out.
// The copy bandwidth is a device-to-device copy of 256 MiB, counted as bytes read + written.
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

#if DSV4_BENCH_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#endif
#if DSV4_BENCH_HAVE_LEVEL_ZERO
#include <level_zero/ze_api.h>
#endif

namespace {

constexpr int64_t kDim = 512;
constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

void check(dsv4_status st, const char* what) {
  if (st != DSV4_STATUS_OK)
    throw std::runtime_error(std::string(what) + ": " + dsv4_status_string(st) + ": " +
                             dsv4_last_error_message());
}

// Where the tensors live and how work is timed.
class Device {
 public:
  virtual ~Device() = default;
  virtual dsv4_device device() const = 0;
  virtual const char* backend() const = 0;
  virtual std::string name() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void* stream() = 0;
  // Runs `work` (which enqueues on stream()) and waits; returns the seconds it took.
  virtual double timed(const std::function<void()>& work) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // enqueued on stream()
};

class CpuDevice final : public Device {
 public:
  ~CpuDevice() override {
    for (void* p : allocs_) std::free(p);
  }
  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_CPU, 0}; }
  const char* backend() const override { return "cpu"; }
  std::string name() const override { return "CPU module"; }
  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (p == nullptr) throw std::bad_alloc();
    allocs_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  double timed(const std::function<void()>& work) override {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  std::vector<void*> allocs_;
};

#if DSV4_BENCH_HAVE_OPENCL
void cl_check(cl_int e, const char* what) {
  if (e != CL_SUCCESS)
    throw std::runtime_error(std::string(what) + ": OpenCL error " + std::to_string(e));
}

class OpenclDevice final : public Device {
 public:
  explicit OpenclDevice(int index) : index_(index) {
    cl_uint np = 0;
    cl_check(clGetPlatformIDs(0, nullptr, &np), "clGetPlatformIDs");
    std::vector<cl_platform_id> ps(np);
    clGetPlatformIDs(np, ps.data(), nullptr);
    int seen = 0;
    for (cl_platform_id p : ps) {  // the module's order: OpenCL 2.0+ devices with SVM
      cl_uint nd = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS) continue;
      std::vector<cl_device_id> ds(nd);
      clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr);
      for (cl_device_id d : ds) {
        char v[128] = {};
        clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof v - 1, v, nullptr);
        cl_device_svm_capabilities svm = 0;
        clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr);
        int major = 0, minor = 0;
        if (std::sscanf(v, "OpenCL %d.%d", &major, &minor) != 2 || major < 2 ||
            (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) == 0)
          continue;
        if (seen++ == index) device_ = d;
      }
    }
    if (device_ == nullptr) throw std::runtime_error("no OpenCL device " + std::to_string(index));
    cl_int e;
    ctx_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &e);
    cl_check(e, "clCreateContext");
    queue_ = clCreateCommandQueueWithProperties(ctx_, device_, nullptr, &e);
    cl_check(e, "clCreateCommandQueueWithProperties");
  }
  ~OpenclDevice() override {
    clFinish(queue_);
    for (void* p : allocs_) clSVMFree(ctx_, p);
    clReleaseCommandQueue(queue_);
    clReleaseContext(ctx_);
  }
  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_OPENCL, index_}; }
  const char* backend() const override { return "opencl"; }
  std::string name() const override {
    char n[256] = {};
    clGetDeviceInfo(device_, CL_DEVICE_NAME, sizeof n - 1, n, nullptr);
    return std::string("OpenCL ") + n;
  }
  void* alloc(size_t bytes) override {
    void* p = clSVMAlloc(ctx_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 64), 0);
    if (p == nullptr) throw std::bad_alloc();
    allocs_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    cl_check(clEnqueueSVMMemcpy(queue_, CL_TRUE, dst, src, bytes, 0, nullptr, nullptr), "upload");
  }
  void* stream() override { return queue_; }
  double timed(const std::function<void()>& work) override {
    clFinish(queue_);
    const auto t0 = std::chrono::steady_clock::now();
    work();
    cl_check(clFinish(queue_), "clFinish");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    cl_check(clEnqueueSVMMemcpy(queue_, CL_FALSE, dst, src, bytes, 0, nullptr, nullptr), "copy");
  }

 private:
  int index_;
  cl_device_id device_ = nullptr;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::vector<void*> allocs_;
};
#endif

#if DSV4_BENCH_HAVE_LEVEL_ZERO
void ze_check(ze_result_t r, const char* what) {
  if (r != ZE_RESULT_SUCCESS) {
    char text[160];
    std::snprintf(text, sizeof text, "%s: Level Zero error 0x%x", what, static_cast<unsigned>(r));
    throw std::runtime_error(text);
  }
}

// GPU `index` over all drivers (the module's order); work is recorded into one command list,
// executed on a queue and waited for.
class LevelZeroDevice final : public Device {
 public:
  explicit LevelZeroDevice(int index) : index_(index) {
    ze_check(zeInit(ZE_INIT_FLAG_GPU_ONLY), "zeInit");
    uint32_t nd = 0;
    ze_check(zeDriverGet(&nd, nullptr), "zeDriverGet");
    std::vector<ze_driver_handle_t> drivers(nd);
    zeDriverGet(&nd, drivers.data());
    int seen = 0;
    for (ze_driver_handle_t drv : drivers) {
      uint32_t n = 0;
      zeDeviceGet(drv, &n, nullptr);
      std::vector<ze_device_handle_t> devs(n);
      zeDeviceGet(drv, &n, devs.data());
      for (ze_device_handle_t d : devs) {
        ze_device_properties_t p{};
        p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
        if (zeDeviceGetProperties(d, &p) != ZE_RESULT_SUCCESS || p.type != ZE_DEVICE_TYPE_GPU)
          continue;
        if (seen++ == index) {
          driver_ = drv;
          device_ = d;
          name_ = p.name;
        }
      }
    }
    if (device_ == nullptr) throw std::runtime_error("no Level Zero GPU " + std::to_string(index));
    ze_context_desc_t cd{};
    cd.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
    ze_check(zeContextCreate(driver_, &cd, &ctx_), "zeContextCreate");
    ze_command_queue_desc_t qd{};
    qd.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
    qd.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS;
    ze_check(zeCommandQueueCreate(ctx_, device_, &qd, &queue_), "zeCommandQueueCreate");
    ze_command_list_desc_t ld{};
    ld.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC;
    ze_check(zeCommandListCreate(ctx_, device_, &ld, &list_), "zeCommandListCreate");
  }
  ~LevelZeroDevice() override {
    for (void* p : allocs_) zeMemFree(ctx_, p);
    zeCommandListDestroy(list_);
    zeCommandQueueDestroy(queue_);
    zeContextDestroy(ctx_);
  }
  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_ONEAPI, index_}; }
  const char* backend() const override { return "level-zero"; }
  std::string name() const override { return "Level Zero " + name_; }
  void* alloc(size_t bytes) override {
    ze_device_mem_alloc_desc_t d{};
    d.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
    void* p = nullptr;
    ze_check(zeMemAllocDevice(ctx_, &d, std::max<size_t>(bytes, 64), 256, device_, &p),
             "zeMemAllocDevice");
    allocs_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    timed([&] {
      ze_check(zeCommandListAppendMemoryCopy(list_, dst, src, bytes, nullptr, 0, nullptr), "copy");
    });
  }
  void* stream() override { return list_; }
  double timed(const std::function<void()>& work) override {
    ze_check(zeCommandListReset(list_), "zeCommandListReset");
    work();
    ze_check(zeCommandListClose(list_), "zeCommandListClose");
    const auto t0 = std::chrono::steady_clock::now();
    ze_check(zeCommandQueueExecuteCommandLists(queue_, 1, &list_, nullptr), "execute");
    ze_check(zeCommandQueueSynchronize(queue_, UINT64_MAX), "zeCommandQueueSynchronize");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    ze_check(zeCommandListAppendMemoryCopy(list_, dst, src, bytes, nullptr, 0, nullptr), "copy");
  }

 private:
  int index_;
  ze_driver_handle_t driver_ = nullptr;
  ze_device_handle_t device_ = nullptr;
  std::string name_;
  ze_context_handle_t ctx_ = nullptr;
  ze_command_queue_handle_t queue_ = nullptr;
  ze_command_list_handle_t list_ = nullptr;
  std::vector<void*> allocs_;
};
#endif

struct Shape {
  std::string name;
  int64_t tokens;  // batch rows x s_q
  int64_t heads;
  int64_t swa_keys;    // main list width
  int32_t swa_block;   // main cache entries per block
  int64_t extra_keys;  // extra list width
  int32_t extra_block;
  bool extra_lengths;  // per-token lengths on the extra list (CONFIG3/4)
  uint32_t layout;
};

struct Options {
  std::string api = "level-zero";
  std::string suite = "configs";
  int64_t batch = 64;
  int reps = 10;
  int samples = 15;
  int device = 0;
  bool compare_cpu = false;
};

std::vector<Shape> shapes(const Options& o) {
  std::vector<Shape> v;
  if (o.suite == "cpu") {  // bench/cpu's shapes: 128 SWA + compressed, block 64
    const int64_t s[][3] = {{8, 64, 640}, {32, 64, 640}, {8, 128, 1152}, {8, 16, 1152}};
    for (uint32_t layout : {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16})
      for (const auto& x : s)
        v.push_back(Shape{std::string(layout == DSV4_KV_LAYOUT_BF16 ? "bf16" : "fp8") + " t" +
                              std::to_string(x[0]) + " h" + std::to_string(x[1]) + " k" +
                              std::to_string(x[2]),
                          x[0], x[1], 128, 64, x[2] - 128, 64, false, layout});
    return v;
  }
  // targets.md: s_q 2, 128 SWA slots on 256-token pages + the compressed list.
  struct Config {
    const char* name;
    int64_t heads, extra;
    int32_t page;
    bool lengths;
  };
  const Config configs[] = {{"CONFIG1", 64, 512, 64, false},
                            {"CONFIG2", 128, 1024, 64, false},
                            {"CONFIG3", 64, 1024, 2, true},
                            {"CONFIG4", 128, 1024, 2, true}};
  for (const Config& c : configs)
    for (int64_t h : {c.heads, int64_t{8}, int64_t{16}, int64_t{32}})
      v.push_back(
          Shape{std::string(c.name) + " h" + std::to_string(h) + " b" + std::to_string(o.batch),
                o.batch * 2, h, 128, 256, c.extra, c.page, c.lengths, DSV4_KV_LAYOUT_FP8_V4_584B});
  return v;
}

uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A device tensor description with its own shape storage.
struct View {
  std::vector<int64_t> shape;
  dsv4_tensor t{};
  View(void* data, dsv4_device d, dsv4_dtype dt, std::vector<int64_t> s) : shape(std::move(s)) {
    t.data = data;
    t.device = d;
    t.dtype = dt;
    t.ndim = static_cast<int32_t>(shape.size());
    t.shape = shape.data();
  }
  dsv4_tensor* get() {
    t.shape = shape.data();
    return &t;
  }
};

struct Cache {
  dsv4_kv_cache_desc desc{};
  void* data = nullptr;
  int64_t blocks = 0;
};

// `rows` random entries written with dsv4_kv_write on the device.
Cache make_cache(Device& dev, dsv4_ctx* ctx, uint32_t layout, int32_t block, int64_t rows,
                 std::mt19937& rng) {
  Cache c;
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  check(dsv4_kv_layout_get_info(layout, block, &info), "dsv4_kv_layout_get_info");
  c.blocks = (rows + block - 1) / block;
  c.desc = dsv4_kv_cache_desc{layout, block, info.min_block_stride_bytes, 1.0f, 0};
  c.data = dev.alloc(static_cast<size_t>(c.blocks * info.min_block_stride_bytes));
  std::normal_distribution<float> normal;
  const int64_t chunk = 16384;  // rows per write
  std::vector<float> values;
  std::vector<int32_t> slots;
  void* dv = dev.alloc(static_cast<size_t>(chunk * kDim * 4));
  void* ds = dev.alloc(static_cast<size_t>(chunk * 4));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    values.resize(static_cast<size_t>(n * kDim));
    slots.resize(static_cast<size_t>(n));
    for (float& v : values) v = normal(rng) * 0.3f;
    for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(r0 + i);
    dev.upload(dv, values.data(), values.size() * 4);
    dev.upload(ds, slots.data(), slots.size() * 4);
    View tv(dv, dev.device(), kF32, {n, kDim}), ts(ds, dev.device(), kI32, {n});
    View tc(c.data, dev.device(), kU8, {c.blocks, info.min_block_stride_bytes});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = c.desc;
    w.values = tv.get();
    w.slots = ts.get();
    w.cache = tc.get();
    w.stream = dev.stream();
    dev.timed([&] { check(dsv4_kv_write(ctx, &w), "dsv4_kv_write"); });
  }
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of one dsv4_run of `s` on `dev`.
double time_shape(Device& dev, const Shape& s, const Options& o) {
  std::mt19937 rng(42);
  dsv4_ctx_options co;
  dsv4_ctx_options_init(&co);
  co.device = dev.device();
  co.backend = dev.backend();
  dsv4_ctx* raw_ctx = nullptr;
  check(dsv4_ctx_create(&co, &raw_ctx), "dsv4_ctx_create");
  std::unique_ptr<dsv4_ctx, void (*)(dsv4_ctx*)> ctx(raw_ctx, dsv4_ctx_destroy);
  const int64_t T = s.tokens;
  Cache swa = make_cache(dev, ctx.get(), s.layout, s.swa_block, T * s.swa_keys, rng);
  Cache cmp = make_cache(dev, ctx.get(), s.layout, s.extra_block, T * s.extra_keys, rng);
  auto lists = [&](int64_t width) {  // each token its own rows, in random order
    std::vector<int32_t> idx(static_cast<size_t>(T * width));
    for (int64_t i = 0; i < T * width; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    for (int64_t t = 0; t < T; ++t)
      std::shuffle(idx.begin() + t * width, idx.begin() + (t + 1) * width, rng);
    return idx;
  };
  const std::vector<int32_t> swa_idx = lists(s.swa_keys), cmp_idx = lists(s.extra_keys);
  std::vector<int32_t> lengths(static_cast<size_t>(T));
  std::uniform_int_distribution<int64_t> len_dist(1, s.extra_keys);
  for (int32_t& l : lengths) l = static_cast<int32_t>(len_dist(rng));
  std::normal_distribution<float> normal;
  std::vector<uint16_t> q(static_cast<size_t>(T * s.heads * kDim));
  for (uint16_t& v : q) v = to_bf16(normal(rng));
  std::vector<float> sink(static_cast<size_t>(s.heads));
  for (float& v : sink) v = normal(rng);

  const dsv4_device d = dev.device();
  void* dq = dev.alloc(q.size() * 2);
  void* dout = dev.alloc(q.size() * 2);
  void* dswa = dev.alloc(swa_idx.size() * 4);
  void* dcmp = dev.alloc(cmp_idx.size() * 4);
  void* dlen = dev.alloc(lengths.size() * 4);
  void* dsink = dev.alloc(sink.size() * 4);
  dev.upload(dq, q.data(), q.size() * 2);
  dev.upload(dswa, swa_idx.data(), swa_idx.size() * 4);
  dev.upload(dcmp, cmp_idx.data(), cmp_idx.size() * 4);
  dev.upload(dlen, lengths.data(), lengths.size() * 4);
  dev.upload(dsink, sink.data(), sink.size() * 4);

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = static_cast<int32_t>(s.heads);
  po.max_tokens = static_cast<int32_t>(T);
  po.swa_cache = swa.desc;
  po.extra_cache = cmp.desc;
  po.topk = static_cast<int32_t>(s.swa_keys);
  po.extra_topk = static_cast<int32_t>(s.extra_keys);
  dsv4_plan* raw_plan = nullptr;
  check(dsv4_plan_create(ctx.get(), &po, &raw_plan), "dsv4_plan_create");
  std::unique_ptr<dsv4_plan, void (*)(dsv4_plan*)> plan(raw_plan, dsv4_plan_destroy);

  View tq(dq, d, kBf16, {T, s.heads, kDim}), to(dout, d, kBf16, {T, s.heads, kDim});
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  check(dsv4_kv_layout_get_info(s.layout, s.swa_block, &info), "layout");
  View tswac(swa.data, d, kU8, {swa.blocks, swa.desc.block_stride_bytes});
  View tcmpc(cmp.data, d, kU8, {cmp.blocks, cmp.desc.block_stride_bytes});
  View ti(dswa, d, kI32, {T, s.swa_keys}), te(dcmp, d, kI32, {T, s.extra_keys});
  View tl(dlen, d, kI32, {T}), ts(dsink, d, kF32, {s.heads});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = tq.get();
  a.out = to.get();
  a.swa_cache = tswac.get();
  a.extra_cache = tcmpc.get();
  a.indices = ti.get();
  a.extra_indices = te.get();
  a.extra_lengths = s.extra_lengths ? tl.get() : nullptr;
  a.attn_sink = ts.get();
  a.stream = dev.stream();
  auto burst = [&] {
    for (int r = 0; r < o.reps; ++r) check(dsv4_run(plan.get(), &a), "dsv4_run");
  };
  dev.timed(burst);  // warm-up (and the first run's per-context set-up)
  std::vector<double> t;
  for (int i = 0; i < o.samples; ++i) t.push_back(dev.timed(burst) / o.reps);
  return median(t);
}

// Bytes gathered by one run: every attended row, q and out.
double gathered_bytes(const Shape& s) {
  const double row = s.layout == DSV4_KV_LAYOUT_BF16 ? 1024.0 : 584.0;
  const double extra = s.extra_lengths ? (1.0 + s.extra_keys) / 2.0 : s.extra_keys;
  return static_cast<double>(s.tokens) * (row * (s.swa_keys + extra) + 2.0 * 2.0 * s.heads * kDim);
}

double copy_bandwidth(Device& dev, const Options& o) {
  const size_t bytes = size_t{256} << 20;
  void* a = dev.alloc(bytes);
  void* b = dev.alloc(bytes);
  std::vector<uint8_t> host(bytes, 1);
  dev.upload(a, host.data(), bytes);
  std::vector<double> t;
  for (int i = 0; i < std::max(3, o.samples / 3); ++i)
    t.push_back(dev.timed([&] { dev.copy(b, a, bytes); }));
  return 2.0 * bytes / median(t);
}

std::unique_ptr<Device> make_device(const std::string& api, int index) {
  if (api == "cpu") return std::make_unique<CpuDevice>();
#if DSV4_BENCH_HAVE_OPENCL
  if (api == "opencl") return std::make_unique<OpenclDevice>(index);
#endif
#if DSV4_BENCH_HAVE_LEVEL_ZERO
  if (api == "level-zero") return std::make_unique<LevelZeroDevice>(index);
#endif
  throw std::runtime_error("--api " + api + " is not built into this benchmark");
}

int run(const Options& o) {
  std::unique_ptr<Device> dev = make_device(o.api, o.device);
  std::unique_ptr<Device> cpu = o.compare_cpu ? make_device("cpu", 0) : nullptr;
  const double copy = copy_bandwidth(*dev, o);
  std::printf("device: %s; copy %.1f GB/s (read + write); %d runs per sample, median of %d\n",
              dev->name().c_str(), copy / 1e9, o.reps, o.samples);
  std::printf("%-26s %10s %9s %8s%s\n", "shape", "us", "GB/s", "of copy",
              cpu ? "     cpu us  opencl/cpu" : "");
  for (const Shape& s : shapes(o)) {
    const double sec = time_shape(*dev, s, o);
    const double gbs = gathered_bytes(s) / sec;
    std::printf("%-26s %10.1f %9.1f %7.1f%%", s.name.c_str(), sec * 1e6, gbs / 1e9,
                100.0 * gbs / copy);
    if (cpu) {
      const double csec = time_shape(*cpu, s, o);
      std::printf(" %10.1f %10.2fx", csec * 1e6, sec / csec);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const option longs[] = {{"api", required_argument, nullptr, 'a'},
                          {"suite", required_argument, nullptr, 's'},
                          {"batch", required_argument, nullptr, 'b'},
                          {"reps", required_argument, nullptr, 'r'},
                          {"samples", required_argument, nullptr, 'n'},
                          {"device", required_argument, nullptr, 'd'},
                          {"compare-cpu", no_argument, nullptr, 'c'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, nullptr)) != -1;) {
    switch (c) {
      case 'a':
        o.api = optarg;
        break;
      case 's':
        o.suite = optarg;
        break;
      case 'b':
        o.batch = std::max(1, std::atoi(optarg));
        break;
      case 'r':
        o.reps = std::max(1, std::atoi(optarg));
        break;
      case 'n':
        o.samples = std::max(1, std::atoi(optarg));
        break;
      case 'd':
        o.device = std::max(0, std::atoi(optarg));
        break;
      case 'c':
        o.compare_cpu = true;
        break;
      default:
        std::printf(
            "usage: dsv4_bench_intel [--api level-zero|opencl|cpu] [--suite configs|cpu] "
            "[--batch B] [--reps N] [--samples N] [--device I] [--compare-cpu]\n");
        return c == 'h' ? 0 : 2;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4_bench_intel: %s\n", e.what());
    return 1;
  }
}
