// The Level Zero module's call sequence against the in-tree fake loader (fake_ze_loader.c, given
// through DSV4_LEVEL_ZERO_LOADER; results are proven by the OpenCL module on the same kernels):
// discovery, one SPIR-V module and its kernels per context, launches appended to the caller's
// command list with nothing allocated or synchronised, pointers checked before anything is
// appended, and the injected failures (no driver, a rejected module, no loader) reported with
// their reasons. Each ctest entry runs one suite (FakeDriver, FakeBuildFailure, FakeNoDriver,
// NoLoader) with its environment.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "test_util.h"

namespace dsv4test {
namespace {

struct Fake {
  const char* (*calls)() = nullptr;
  void (*clear)() = nullptr;
  void (*reg)(const void*, size_t) = nullptr;
  void (*forget)() = nullptr;
  bool open() {
    const char* path = std::getenv("DSV4_LEVEL_ZERO_LOADER");
    void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (h == nullptr) return false;
    calls = reinterpret_cast<const char* (*)()>(dlsym(h, "fake_ze_calls"));
    clear = reinterpret_cast<void (*)()>(dlsym(h, "fake_ze_clear"));
    reg = reinterpret_cast<void (*)(const void*, size_t)>(dlsym(h, "fake_ze_register"));
    forget = reinterpret_cast<void (*)()>(dlsym(h, "fake_ze_forget"));
    return calls != nullptr && clear != nullptr && reg != nullptr && forget != nullptr;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream s(calls());
    for (std::string l; std::getline(s, l);) v.push_back(l);
    return v;
  }
  int count(const std::string& prefix) const {
    int n = 0;
    for (const auto& l : lines()) n += l.rfind(prefix, 0) == 0;
    return n;
  }
};

dsv4_backend_info level_zero_info() {
  int32_t n = 0;
  dsv4_enumerate_backends(nullptr, nullptr, 0, &n);
  std::vector<dsv4_backend_info> v(static_cast<size_t>(n));
  for (auto& b : v) b.struct_size = sizeof b;
  dsv4_enumerate_backends(nullptr, v.data(), n, &n);
  for (const auto& b : v)
    if (std::string(b.name) == "level-zero") return b;
  return dsv4_backend_info{};
}

constexpr dsv4_device kGpu{DSV4_DEVICE_ONEAPI, 0};

CtxPtr make_ctx() {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = kGpu;
  o.backend = "level-zero";
  dsv4_ctx* c = nullptr;
  EXPECT_EQ(dsv4_ctx_create(&o, &c), DSV4_STATUS_OK) << dsv4_last_error_message();
  return CtxPtr(c);
}

dsv4_plan_options decode_options(uint32_t mode) {
  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.mode = mode;
  po.num_heads = 16;
  po.max_tokens = 3;
  po.swa_cache.layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  po.swa_cache.block_size = 64;
  po.topk = 128;
  po.window = 128;
  po.max_requests = 2;
  po.max_swa_blocks_per_request = 4;
  return po;
}

// Host memory standing in for USM allocations (registered with the fake unless `foreign`).
struct Buffers {
  std::vector<uint8_t> q, cache, out, idx, qsl, seq, bt, sm, ws;
  void make(size_t ws_bytes) {
    q.assign(3 * 16 * 512 * 2, 0);
    cache.assign(37440 * 2, 0);
    out.assign(3 * 16 * 512 * 2, 0);
    idx.assign(3 * 128 * 4, 0);
    qsl.assign(3 * 4, 0);
    seq.assign(2 * 4, 0);
    bt.assign(2 * 4 * 4, 0);
    sm.assign(3 * 4, 0);
    ws.assign(ws_bytes + 1, 0);
  }
  void register_all(const Fake& f) {
    for (auto* b : {&q, &cache, &out, &idx, &qsl, &seq, &bt, &sm, &ws}) f.reg(b->data(), b->size());
  }
};

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.open()) << "DSV4_LEVEL_ZERO_LOADER is not the fake";
    fake_.forget();  // buffers of earlier tests are gone
  }
  // One run of a plan of `mode` on the buffers, appended to `list`.
  dsv4_status run(dsv4_plan* plan, uint32_t mode, Buffers& b, void* list, bool foreign_q) {
    std::vector<uint8_t> host_q(b.q.size());
    TensorView tq(foreign_q ? host_q.data() : b.q.data(), kGpu, kBf16, {3, 16, 512});
    TensorView tc(b.cache.data(), kGpu, kU8, {2, 37440});
    TensorView to(b.out.data(), kGpu, kBf16, {3, 16, 512});
    TensorView ti(b.idx.data(), kGpu, kI32, {3, 128});
    TensorView tqsl(b.qsl.data(), kGpu, kI32, {3}), tseq(b.seq.data(), kGpu, kI32, {2});
    TensorView tbt(b.bt.data(), kGpu, kI32, {2, 4}), tsm(b.sm.data(), kGpu, kI32, {3});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.q = tq.get();
    a.swa_cache = tc.get();
    a.out = to.get();
    if (mode == DSV4_MODE_PAGED) {
      a.query_start_loc = tqsl.get();
      a.seq_lens = tseq.get();
      a.swa_block_table = tbt.get();
      a.slot_mapping = tsm.get();
    } else {
      a.indices = ti.get();
    }
    a.workspace = b.ws.data();
    a.workspace_bytes = b.ws.size();
    a.stream = list;
    return dsv4_run(plan, &a);
  }
  Fake fake_;
};

TEST_F(FakeDriver, DiscoversTheGpu) {
  const dsv4_backend_info info = level_zero_info();
  EXPECT_EQ(info.available, 1) << info.status;
  EXPECT_EQ(info.device_count, 1);
  EXPECT_EQ(info.device_type, DSV4_DEVICE_ONEAPI);
  dsv4_device_info d{};
  d.struct_size = sizeof d;
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = kGpu;
  ASSERT_EQ(dsv4_get_device_info(&o, "level-zero", 0, &d), DSV4_STATUS_OK);
  EXPECT_STREQ(d.name, "Fake Level Zero GPU");
}

TEST_F(FakeDriver, ModuleOncePerContextLaunchesAppendedWithoutAllocation) {
  CtxPtr ctx = make_ctx();
  ASSERT_TRUE(ctx);
  fake_.clear();
  dsv4_plan_options po = decode_options(DSV4_MODE_EXPLICIT);
  dsv4_plan* raw = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &po, &raw), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr plan(raw);
  // Plan creation builds the SPIR-V module (magic 0x07230203) and every kernel in the own context.
  EXPECT_EQ(fake_.count("zeModuleCreate context=own device=gpu format=0"), 1) << fake_.calls();
  EXPECT_NE(std::string(fake_.calls()).find("magic=0x07230203"), std::string::npos);
  EXPECT_EQ(fake_.count("zeKernelCreate dsv4_"), 8);
  PlanPtr second;
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &po, &raw), DSV4_STATUS_OK);
  second.reset(raw);
  EXPECT_EQ(fake_.count("zeModuleCreate"), 1) << "a second plan must reuse the module";

  Buffers b;
  size_t ws = 0;
  dsv4_plan_get_workspace_size(plan.get(), &ws);
  b.make(ws);
  b.register_all(fake_);
  void* list = reinterpret_cast<void*>(0x7000);
  ASSERT_EQ(run(plan.get(), DSV4_MODE_EXPLICIT, b, list, false), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  // The first run in the caller's context builds the module there once; a second run does not.
  EXPECT_EQ(fake_.count("zeModuleCreate context=caller"), 1);
  fake_.clear();
  ASSERT_EQ(run(plan.get(), DSV4_MODE_EXPLICIT, b, list, false), DSV4_STATUS_OK);
  const std::vector<std::string> calls = fake_.lines();
  for (const std::string& c : calls) {
    const bool allowed =
        c.rfind("zeCommandListGet", 0) == 0 || c.rfind("zeMemGetAllocProperties", 0) == 0 ||
        c.rfind("zeKernelSet", 0) == 0 || c.rfind("zeCommandListAppendLaunchKernel", 0) == 0;
    EXPECT_TRUE(allowed) << "dsv4_run called " << c;
  }
  // One attention launch: 16 heads in tiles of 8, 3 tokens; 128 work-items per group.
  EXPECT_EQ(fake_.count("zeCommandListAppendLaunchKernel 2 3 1"), 1) << fake_.calls();
  EXPECT_EQ(fake_.count("zeKernelSetGroupSize 128 1 1"), 1);
  EXPECT_EQ(fake_.count("zeKernelSetArgumentValue"), 14);

  // Paged mode: the list builder, then attention.
  dsv4_plan_options pp = decode_options(DSV4_MODE_PAGED);
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &pp, &raw), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr paged(raw);
  size_t pws = 0;
  dsv4_plan_get_workspace_size(paged.get(), &pws);
  Buffers pb;
  pb.make(pws);
  pb.register_all(fake_);
  fake_.clear();
  ASSERT_EQ(run(paged.get(), DSV4_MODE_PAGED, pb, list, false), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_EQ(fake_.count("zeCommandListAppendLaunchKernel"), 2) << fake_.calls();
  EXPECT_EQ(fake_.count("zeCommandListAppendLaunchKernel 1 1 1"), 1);  // builder: 3 tokens
}

TEST_F(FakeDriver, BadPointersAndStreamsAppendNothing) {
  CtxPtr ctx = make_ctx();
  ASSERT_TRUE(ctx);
  dsv4_plan_options po = decode_options(DSV4_MODE_EXPLICIT);
  dsv4_plan* raw = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &po, &raw), DSV4_STATUS_OK);
  PlanPtr plan(raw);
  Buffers b;
  b.make(0);
  b.register_all(fake_);
  fake_.clear();
  EXPECT_EQ(run(plan.get(), DSV4_MODE_EXPLICIT, b, reinterpret_cast<void*>(0x7000), true),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("q ("), std::string::npos)
      << dsv4_last_error_message();
  EXPECT_EQ(fake_.count("zeCommandListAppendLaunchKernel"), 0);
  EXPECT_EQ(run(plan.get(), DSV4_MODE_EXPLICIT, b, nullptr, false), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("stream"), std::string::npos);
  EXPECT_EQ(run(plan.get(), DSV4_MODE_EXPLICIT, b, reinterpret_cast<void*>(0xBAD0), false),
            DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("device"), std::string::npos);
  EXPECT_EQ(fake_.count("zeCommandListAppendLaunchKernel"), 0);
}

TEST(FakeBuildFailure, PlanCreationReportsTheBuildLog) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = kGpu;
  o.backend = "level-zero";
  dsv4_ctx* c = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&o, &c), DSV4_STATUS_OK) << dsv4_last_error_message();
  CtxPtr ctx(c);
  dsv4_plan_options po = decode_options(DSV4_MODE_EXPLICIT);
  dsv4_plan* raw = nullptr;
  EXPECT_EQ(dsv4_plan_create(ctx.get(), &po, &raw), DSV4_STATUS_BACKEND_ERROR);
  EXPECT_EQ(raw, nullptr);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("fake build log"), std::string::npos)
      << dsv4_last_error_message();
}

TEST(FakeNoDriver, UnavailableWithTheReason) {
  const dsv4_backend_info info = level_zero_info();
  EXPECT_EQ(info.available, 0);
  EXPECT_NE(std::string(info.status).find("zeInit"), std::string::npos) << info.status;
}

TEST(NoLoader, UnavailableWithTheReason) {
  const dsv4_backend_info info = level_zero_info();
  EXPECT_EQ(info.available, 0);
  EXPECT_NE(std::string(info.status).find("no Level Zero loader"), std::string::npos)
      << info.status;
}

}  // namespace
}  // namespace dsv4test
