// The OpenCL C port of backends/common (backends/opencl_kernels/dsv4_common.cl) against the C++
// original, bit for bit, on the OpenCL device (PoCL in CI): every codec input byte and 16-bit
// pattern, fp32 narrowing of random and edge values, each layout's dequantisation (random bytes,
// both FP8 flavours) and quantisation (the production kv_write kernel), and the paged builders and
// FlashInfer rows (the production kernels) on garbage batches. Also checks that the kernels' params
// blocks have the host's sizes.
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "agreement_kernels.h"
#include "common/codec.h"
#include "common/layout.h"
#include "common/paged_index.h"
#include "opencl_kernels/launch.h"
#include "opencl_kernels_source.h"
#include "test_util.h"

namespace {

class Cl {
 public:
  bool open(std::string* why) {
    cl_uint np = 0;
    if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) {
      *why = "no OpenCL platform";
      return false;
    }
    std::vector<cl_platform_id> ps(np);
    clGetPlatformIDs(np, ps.data(), nullptr);
    for (cl_platform_id p : ps) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &device_, &nd) == CL_SUCCESS && nd > 0) break;
    }
    if (device_ == nullptr) {
      *why = "no OpenCL device";
      return false;
    }
    cl_int err;
    ctx_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    queue_ = clCreateCommandQueueWithProperties(ctx_, device_, nullptr, &err);
    const std::string text = std::string(reinterpret_cast<const char*>(kDsv4OpenclKernelSource)) +
                             "\n" + reinterpret_cast<const char*>(kAgreementKernelSource);
    const char* src = text.c_str();
    prog_ = clCreateProgramWithSource(ctx_, 1, &src, nullptr, &err);
    err = clBuildProgram(prog_, 1, &device_, "-cl-std=CL1.2", nullptr, nullptr);
    if (err != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(prog_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(prog_, device_, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
      *why = "build failed: " + log;
      return false;
    }
    return true;
  }
  ~Cl() {
    for (void* p : allocs_) clSVMFree(ctx_, p);
    if (prog_) clReleaseProgram(prog_);
    if (queue_) clReleaseCommandQueue(queue_);
    if (ctx_) clReleaseContext(ctx_);
  }
  template <class T>
  T* upload(const std::vector<T>& v) {
    void* p = clSVMAlloc(ctx_, CL_MEM_READ_WRITE, std::max<size_t>(v.size() * sizeof(T), 64), 128);
    allocs_.push_back(p);
    if (!v.empty())
      clEnqueueSVMMemcpy(queue_, CL_TRUE, p, v.data(), v.size() * sizeof(T), 0, nullptr, nullptr);
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> download(const T* p, size_t n) {
    std::vector<T> v(n);
    clFinish(queue_);
    if (n > 0) clEnqueueSVMMemcpy(queue_, CL_TRUE, v.data(), p, n * sizeof(T), 0, nullptr, nullptr);
    return v;
  }
  // Runs `name` over `n` work-items with the given arguments (pointers are SVM).
  struct arg {
    const void* ptr;
    const void* value;
    size_t size;
  };
  static arg ptr(const void* p) { return arg{p, nullptr, 0}; }
  template <class T>
  static arg val(const T& v) {
    return arg{nullptr, &v, sizeof v};
  }
  void run(const char* name, size_t n, std::initializer_list<arg> args, size_t group = 0) {
    cl_int err;
    cl_kernel k = clCreateKernel(prog_, name, &err);
    ASSERT_EQ(err, CL_SUCCESS) << name;
    cl_uint i = 0;
    for (const arg& a : args) {
      err = a.value != nullptr ? clSetKernelArg(k, i, a.size, a.value)
                               : clSetKernelArgSVMPointer(k, i, a.ptr);
      ASSERT_EQ(err, CL_SUCCESS) << name << " argument " << i;
      ++i;
    }
    size_t global = group > 0 ? (n + group - 1) / group * group : n;
    err = clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, group > 0 ? &group : nullptr, 0,
                                 nullptr, nullptr);
    ASSERT_EQ(err, CL_SUCCESS) << name;
    clFinish(queue_);
    clReleaseKernel(k);
  }
  // Runs one planned launch (backends/opencl_kernels/launch.h).
  void run(const dsv4::clk::launch& l) {
    cl_int err;
    cl_kernel k = clCreateKernel(prog_, dsv4::clk::kernel_name(l.kernel), &err);
    ASSERT_EQ(err, CL_SUCCESS);
    for (int a = 0; a < l.num_args; ++a) {
      const auto& la = l.args[a];
      err = la.is_pointer ? clSetKernelArgSVMPointer(k, a, la.pointer)
                          : clSetKernelArg(k, a, la.value_size, l.value(la));
      ASSERT_EQ(err, CL_SUCCESS) << la.name;
    }
    const size_t global[2] = {l.groups[0] * l.group_size[0], l.groups[1] * l.group_size[1]};
    if (global[0] > 0 && global[1] > 0) {
      err =
          clEnqueueNDRangeKernel(queue_, k, 2, nullptr, global, l.group_size, 0, nullptr, nullptr);
      ASSERT_EQ(err, CL_SUCCESS);
    }
    clFinish(queue_);
    clReleaseKernel(k);
  }

 private:
  cl_device_id device_ = nullptr;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program prog_ = nullptr;
  std::vector<void*> allocs_;
};

Cl* g_cl = nullptr;
std::string g_why;

class Agreement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static Cl cl;
    static bool opened = cl.open(&g_why);
    g_cl = opened ? &cl : nullptr;
  }
  void SetUp() override {
    if (g_cl == nullptr) GTEST_SKIP() << "OpenCL unavailable: " << g_why;
  }
};

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST_F(Agreement, ParamsBlocksHaveTheHostLayout) {
  int64_t* out = g_cl->upload(std::vector<int64_t>(5, 0));
  g_cl->run("t_sizes", 1, {Cl::ptr(out)});
  const std::vector<int64_t> got = g_cl->download(out, 5);
  EXPECT_EQ(got[0], static_cast<int64_t>(sizeof(dsv4_cl_attention_params)));
  EXPECT_EQ(got[1], static_cast<int64_t>(sizeof(dsv4_cl_paged_params)));
  EXPECT_EQ(got[2], static_cast<int64_t>(sizeof(dsv4_cl_export_params)));
  EXPECT_EQ(got[3], static_cast<int64_t>(sizeof(dsv4_cl_kv_write_params)));
  EXPECT_EQ(got[4], static_cast<int64_t>(sizeof(dsv4_cl_merge_params)));
}

TEST_F(Agreement, EveryByteAndHalfWordDecodesIdentically) {
  float* o8 = g_cl->upload(std::vector<float>(768, 0.0f));
  g_cl->run("t_codec_u8", 256, {Cl::ptr(o8)});
  const std::vector<float> g8 = g_cl->download(o8, 768);
  for (int i = 0; i < 256; ++i) {
    const uint8_t b = static_cast<uint8_t>(i);
    EXPECT_EQ(bits(g8[i]), bits(dsv4::fp8_e4m3_to_f32(b))) << "e4m3 " << i;
    EXPECT_EQ(bits(g8[256 + i]), bits(dsv4::fp8_e4m3fnuz_to_f32(b))) << "fnuz " << i;
    EXPECT_EQ(bits(g8[512 + i]), bits(dsv4::ue8m0_to_f32(b))) << "ue8m0 " << i;
  }
  float* o16 = g_cl->upload(std::vector<float>(2 * 65536, 0.0f));
  g_cl->run("t_codec_u16", 65536, {Cl::ptr(o16)});
  const std::vector<float> g16 = g_cl->download(o16, 2 * 65536);
  int64_t bad = 0;
  for (int i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    bad += bits(g16[i]) != bits(dsv4::bf16_to_f32(h));
    bad += bits(g16[65536 + i]) != bits(dsv4::fp16_to_f32(h));
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(Agreement, Fp32NarrowingIsIdentical) {
  std::mt19937_64 g(dsv4test::case_seed("Agreement.Fp32Narrowing"));
  std::vector<float> x;
  const float edges[] = {0.0f,
                         -0.0f,
                         448.0f,
                         464.0f,
                         -448.0f,
                         65504.0f,
                         65520.0f,
                         65519.0f,
                         1e-4f,
                         1e-8f,
                         1e-40f,
                         -1e-45f,
                         0.5f,
                         1.5f,
                         2.5f,
                         -2.5f,
                         3.0f,
                         0.00195f,
                         6e-5f,
                         6.1e-5f,
                         1e38f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (float e : edges) x.push_back(e);
  while (x.size() < (1u << 18)) {  // random bit patterns, and random values near the codecs' ranges
    const uint32_t u = static_cast<uint32_t>(g());
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
    x.push_back(static_cast<float>(std::ldexp(static_cast<double>(g() % 100000) / 100000.0 - 0.5,
                                              static_cast<int>(g() % 40) - 25)));
  }
  const size_t n = x.size();
  float* dx = g_cl->upload(x);
  uint16_t* bf = g_cl->upload(std::vector<uint16_t>(n));
  uint16_t* hf = g_cl->upload(std::vector<uint16_t>(n));
  uint8_t* f8 = g_cl->upload(std::vector<uint8_t>(n));
  int32_t* cl2 = g_cl->upload(std::vector<int32_t>(n));
  g_cl->run("t_codec_f32", n, {Cl::ptr(dx), Cl::ptr(bf), Cl::ptr(hf), Cl::ptr(f8), Cl::ptr(cl2)});
  const auto gbf = g_cl->download(bf, n);
  const auto ghf = g_cl->download(hf, n);
  const auto gf8 = g_cl->download(f8, n);
  const auto gcl = g_cl->download(cl2, n);
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    const bool ok = gbf[i] == dsv4::f32_to_bf16(x[i]) && ghf[i] == dsv4::f32_to_fp16(x[i]) &&
                    gf8[i] == dsv4::f32_to_fp8_e4m3(x[i]) &&
                    gcl[i] == ((a > 0.0f && std::isfinite(a)) ? dsv4::ceil_log2(a) : 0);
    if (!ok && bad++ < 5) ADD_FAILURE() << "value bits 0x" << std::hex << bits(x[i]);
  }
  EXPECT_EQ(bad, 0);
}

// A cache of every layout: random bytes (dequantisation), then rows written by the production
// kv_write kernel (quantisation; duplicate slots, last row wins), each compared with layout.h.
TEST_F(Agreement, LayoutsDequantiseAndQuantiseIdentically) {
  std::mt19937_64 g(dsv4test::case_seed("Agreement.Layouts"));
  const uint32_t layouts[] = {DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP16, DSV4_KV_LAYOUT_FP8_V4_584B,
                              DSV4_KV_LAYOUT_FP8_V32_656B, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR};
  for (uint32_t layout : layouts) {
    for (uint32_t flags : {0u, static_cast<uint32_t>(DSV4_KV_CACHE_FLAG_FP8_FNUZ)}) {
      if (flags != 0 && !dsv4::layout_is_fp8(layout)) continue;
      SCOPED_TRACE(dsv4test::seed_note() + ", layout " + std::to_string(layout) + " flags " +
                   std::to_string(flags));
      const int64_t bs = 1 + static_cast<int64_t>(g() % 7), blocks = 5;
      const int64_t stride = dsv4::layout_min_block_bytes(layout, bs) + 16 * (g() % 3);
      const int dqk = dsv4::layout_head_dim_qk(layout);
      std::vector<uint8_t> cache(static_cast<size_t>(blocks * stride));
      for (auto& b : cache) b = static_cast<uint8_t>(g());
      if (layout == DSV4_KV_LAYOUT_FP8_V32_656B) {  // fp32 scales: keep them finite powers of two
        for (int64_t s = 0; s < blocks * bs; ++s)
          for (int k = 0; k < 4; ++k) {
            const float sc = std::ldexp(1.0f, static_cast<int>(g() % 30) - 20);
            std::memcpy(
                &cache[static_cast<size_t>((s / bs) * stride + (s % bs) * 656 + 512 + 4 * k)], &sc,
                4);
          }
      }
      const int64_t entries = blocks * bs;
      uint8_t* dc = g_cl->upload(cache);
      float* out = g_cl->upload(std::vector<float>(static_cast<size_t>(entries * dqk)));
      g_cl->run("t_dequant", static_cast<size_t>(entries * dqk),
                {Cl::ptr(dc), Cl::ptr(out), Cl::val(layout), Cl::val(flags), Cl::val(bs),
                 Cl::val(stride), Cl::val(dqk)});
      const std::vector<float> got = g_cl->download(out, static_cast<size_t>(entries * dqk));
      std::vector<float> want(static_cast<size_t>(dqk));
      int64_t bad = 0;
      for (int64_t e = 0; e < entries; ++e) {
        dsv4::dequant_entry(layout, flags, cache.data() + (e / bs) * stride, bs, e % bs,
                            want.data());
        for (int d = 0; d < dqk; ++d) {
          const uint32_t gb = bits(got[static_cast<size_t>(e * dqk + d)]);
          const uint32_t wb = bits(want[static_cast<size_t>(d)]);
          // A NaN scale times a value gives a NaN whose sign IEEE 754 leaves open (compilers
          // order the operands differently); every other value must match bit for bit.
          const bool both_nan = std::isnan(got[static_cast<size_t>(e * dqk + d)]) &&
                                std::isnan(want[static_cast<size_t>(d)]);
          if (gb != wb && !both_nan && bad++ < 3)
            ADD_FAILURE() << std::hex << "entry " << e << " dim " << d << ": 0x" << gb
                          << ", want 0x" << wb;
        }
      }
      EXPECT_EQ(bad, 0) << "dequantised values differ";
      if (flags != 0) continue;

      // Quantisation: rows of random values (bf16 or fp32), some slots repeated, some skipped.
      for (int is_bf16 : {0, 1}) {
        const int64_t rows = 2 * entries;
        std::vector<int32_t> slots(static_cast<size_t>(rows));
        for (auto& s : slots)
          s = static_cast<int32_t>(static_cast<int64_t>(g() % (entries + 2)) - 1);
        std::vector<float> vals(static_cast<size_t>(rows * dqk));
        for (auto& v : vals) {
          const double mag = std::ldexp(1.0, static_cast<int>(g() % 24) - 16);
          v = static_cast<float>(mag * (static_cast<double>(g() % 2001) / 1000.0 - 1.0));
        }
        std::vector<uint16_t> vals16(vals.size());
        for (size_t i = 0; i < vals.size(); ++i) vals16[i] = dsv4::f32_to_bf16(vals[i]);
        std::vector<uint8_t> base(static_cast<size_t>(blocks * stride), 0xA5);
        uint8_t* dcache = g_cl->upload(base);
        const void* dv = is_bf16 ? static_cast<const void*>(g_cl->upload(vals16))
                                 : static_cast<const void*>(g_cl->upload(vals));
        int32_t* ds = g_cl->upload(slots);
        dsv4_mod_kv_write w{};
        w.struct_size = sizeof w;
        w.dim = dqk;
        w.cache.base = dcache;
        w.cache.layout = layout;
        w.cache.block_size = static_cast<int32_t>(bs);
        w.cache.block_stride_bytes = stride;
        w.cache.num_blocks = blocks - 1;  // the last block is beyond the capacity: skipped
        w.cache.kv_scale = 0.37f;
        w.num_rows = rows;
        w.values = dv;
        w.values_row_stride = dqk;
        w.values_is_bf16 = is_bf16;
        w.slots = ds;
        dsv4::clk::launch_list ll;
        dsv4::clk::plan_kv_write(w, &ll);
        ASSERT_EQ(ll.count, 1);
        g_cl->run(ll.item[0]);
        const std::vector<uint8_t> got_cache = g_cl->download(dcache, base.size());
        std::vector<uint8_t> want_cache = base;
        std::vector<float> row(static_cast<size_t>(dqk));
        for (int64_t r = 0; r < rows; ++r) {  // in row order: the last write of a slot wins
          const int64_t s = slots[static_cast<size_t>(r)];
          if (s < 0 || s >= (blocks - 1) * bs) continue;
          for (int d = 0; d < dqk; ++d)
            row[static_cast<size_t>(d)] =
                is_bf16 ? dsv4::bf16_to_f32(vals16[static_cast<size_t>(r * dqk + d)])
                        : vals[static_cast<size_t>(r * dqk + d)];
          dsv4::quantize_entry(layout, want_cache.data() + (s / bs) * stride, bs, s % bs,
                               row.data(), w.cache.kv_scale);
        }
        EXPECT_TRUE(got_cache == want_cache)
            << "quantised bytes differ (values bf16 " << is_bf16 << ")";
      }
    }
  }
}

int32_t garbage(std::mt19937_64& g) {
  static const int32_t special[] = {0,
                                    1,
                                    -1,
                                    -2,
                                    63,
                                    64,
                                    127,
                                    128,
                                    129,
                                    4096,
                                    std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min()};
  if (g() % 3 == 0) return special[g() % (sizeof(special) / sizeof(special[0]))];
  return static_cast<int32_t>(static_cast<int64_t>(g() % 4000) - 500);
}

// The production list builder and FlashInfer export kernels against paged_index.h on garbage
// batches (no validation, as on every device backend): identical rows and lengths.
TEST_F(Agreement, PagedBuildersAreIdenticalOnGarbage) {
  std::mt19937_64 g(dsv4test::case_seed("Agreement.PagedBuilders"));
  for (int iter = 0; iter < 60; ++iter) {
    SCOPED_TRACE(dsv4test::seed_note() + ", iteration " + std::to_string(iter));
    const int32_t ratios[] = {1, 4, 128};
    dsv4_mod_plan plan{};
    plan.mode = DSV4_MODE_PAGED;
    plan.compress_ratio = ratios[g() % 3];
    plan.window = static_cast<int32_t>(1 + g() % 130);
    plan.cache[0].block_size = static_cast<int32_t>(1 + g() % 70);
    plan.cache[1].block_size = static_cast<int32_t>(1 + g() % 66);
    plan.cmp_width = static_cast<int32_t>(
        dsv4::paged_cmp_width(plan.compress_ratio, 1 + g() % 40, 1 + g() % 40000));
    plan.decode_threshold = static_cast<int32_t>(1 + g() % 4);
    const dsv4::paged_geometry geo = dsv4::paged_geometry_of(plan);
    const int32_t R = static_cast<int32_t>(g() % 6);
    const int32_t T = static_cast<int32_t>(1 + g() % 20);
    const int32_t swa_cols = static_cast<int32_t>(1 + g() % 5);
    const int32_t cmp_cols = static_cast<int32_t>(1 + g() % 5);
    std::vector<int32_t> qsl(R + 1), seq(std::max(R, 1)),
        swa_bt(static_cast<size_t>(std::max(R, 1)) * swa_cols),
        cmp_bt(static_cast<size_t>(std::max(R, 1)) * cmp_cols), slots(T),
        topk(static_cast<size_t>(T) * std::max(geo.cmp_width, 1));
    for (auto* v : {&qsl, &seq, &swa_bt, &cmp_bt, &slots, &topk})
      for (int32_t& x : *v) x = garbage(g);
    if (g() % 2 == 0) {
      qsl[0] = 0;
      for (int32_t r = 0; r < R; ++r) qsl[r + 1] = qsl[r] + static_cast<int32_t>(g() % 5);
      for (int32_t r = 0; r < R; ++r) seq[r] = static_cast<int32_t>(g() % 3000);
    }
    dsv4_mod_run run{};
    run.mode = DSV4_MODE_PAGED;
    run.num_tokens = T;
    run.seq_q = 1;
    run.swa_cache.base = reinterpret_cast<uint8_t*>(16);  // capacities only; never read
    run.swa_cache.block_size = geo.swa_block_size;
    run.swa_cache.num_blocks = static_cast<int64_t>(g() % 100);
    run.extra_cache.base = reinterpret_cast<uint8_t*>(16);
    run.extra_cache.block_size = geo.cmp_block_size;
    run.extra_cache.num_blocks = static_cast<int64_t>(g() % 100);
    dsv4_mod_paged_batch& b = run.paged;
    b.num_reqs = R;
    b.swa_bt_stride = swa_cols;
    b.swa_bt_cols = swa_cols;
    b.cmp_bt_stride = cmp_cols;
    b.cmp_bt_cols = cmp_cols;
    b.topk_stride = geo.cmp_width;
    dsv4_mod_paged_batch host = b;
    host.query_start_loc = qsl.data();
    host.seq_lens = seq.data();
    host.swa_block_table = swa_bt.data();
    host.cmp_block_table = cmp_bt.data();
    host.slot_mapping = slots.data();
    host.topk_indices = topk.data();
    b.query_start_loc = g_cl->upload(qsl);
    b.seq_lens = g_cl->upload(seq);
    b.swa_block_table = g_cl->upload(swa_bt);
    b.cmp_block_table = g_cl->upload(cmp_bt);
    b.slot_mapping = g_cl->upload(slots);
    b.topk_indices = g_cl->upload(topk);

    // The builder kernel (dsv4_paged_build) through a real workspace map.
    const dsv4::paged_workspace_layout wl = dsv4::paged_workspace(T, geo.window, geo.cmp_width);
    plan.lists = dsv4_mod_lists_map{wl.swa_indices, wl.swa_lengths, wl.cmp_indices, wl.cmp_lengths,
                                    wl.total};
    std::vector<uint8_t> ws_host(wl.total + dsv4::clk::kWorkspaceAlign, 0xEE);
    uint8_t* ws = g_cl->upload(ws_host);
    run.workspace = ws;
    run.workspace_bytes = ws_host.size();
    run.out.data = ws;  // placeholder pointer for the attention launch (not run)
    dsv4::clk::launch_list ll;
    dsv4::clk::plan_run(plan, run, &ll);
    ASSERT_EQ(ll.count, 2);
    g_cl->run(ll.item[0]);
    const std::vector<uint8_t> got = g_cl->download(ws, ws_host.size());
    const dsv4::paged_capacity cap{run.swa_cache.num_blocks * geo.swa_block_size,
                                   run.extra_cache.num_blocks * geo.cmp_block_size};
    std::vector<int32_t> swa_row(static_cast<size_t>(geo.window)),
        cmp_row(static_cast<size_t>(geo.cmp_width) + 1);
    int64_t bad = 0;
    const size_t shift = (dsv4::clk::kWorkspaceAlign -
                          reinterpret_cast<uintptr_t>(ws) % dsv4::clk::kWorkspaceAlign) %
                         dsv4::clk::kWorkspaceAlign;  // plan_run aligns the workspace
    auto at = [&](size_t off, int64_t i) {
      int32_t v;
      std::memcpy(&v, got.data() + shift + off + 4 * i, 4);
      return v;
    };
    for (int64_t t = 0; t < T; ++t) {
      int32_t sl = 0, cl = 0;
      dsv4::paged_build_token(geo, host, cap, t, swa_row.data(), 1, &sl, cmp_row.data(), 1, &cl);
      bad += at(wl.swa_lengths, t) != sl;
      bad += at(wl.cmp_lengths, t) != (geo.cmp_width > 0 ? cl : 0);
      for (int32_t j = 0; j < geo.window; ++j)
        bad += at(wl.swa_indices, t * geo.window + j) != swa_row[j];
      for (int32_t j = 0; j < geo.cmp_width; ++j)
        bad += at(wl.cmp_indices, t * geo.cmp_width + j) != cmp_row[j];
    }
    EXPECT_EQ(bad, 0) << "built lists differ";

    // FlashInfer rows (dsv4_export_dense).
    const int64_t width = geo.window + dsv4::flashinfer_cmp_columns(geo.cmp_width) + 2;
    std::vector<int32_t> comb(static_cast<size_t>(T * width), 7), lens(static_cast<size_t>(T), 7);
    dsv4_mod_export exp{};
    exp.struct_size = sizeof exp;
    exp.format = DSV4_EXPORT_FLASHINFER;
    exp.plan = &plan;
    exp.combined.indices = g_cl->upload(comb);
    exp.combined.row_stride = width;
    exp.combined.col_stride = 1;
    exp.combined.width = width;
    exp.combined.lengths = g_cl->upload(lens);
    exp.combined.len_stride = 1;
    dsv4::clk::plan_export(plan, run, exp, &ll);
    ASSERT_EQ(ll.count, 1);
    g_cl->run(ll.item[0]);
    const auto gc = g_cl->download(exp.combined.indices, comb.size());
    const auto gl = g_cl->download(exp.combined.lengths, lens.size());
    const int32_t nd = dsv4::paged_num_decodes(host, geo.decode_threshold);
    std::vector<int32_t> row(static_cast<size_t>(width));
    bad = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t len =
          dsv4::paged_build_flashinfer_row(geo, host, cap, t, nd, row.data(), width);
      bad += gl[static_cast<size_t>(t)] != len;
      for (int64_t c = 0; c < width; ++c)
        bad += gc[static_cast<size_t>(t * width + c)] != row[static_cast<size_t>(c)];
    }
    EXPECT_EQ(bad, 0) << "FlashInfer rows differ";
  }
}

}  // namespace
