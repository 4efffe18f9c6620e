// The OpenCL and Level Zero modules through the public API: how they enumerate here (PoCL: the
// OpenCL module available below the CPU module; Level Zero unavailable, with the reason), and bad
// input on the OpenCL device (wrong device type, no queue, a too-small workspace, a pointer that
// no SVM allocation holds where the platform can tell): a status, a message naming the argument,
// and the outputs untouched.
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "test_device.h"
#include "test_util.h"

namespace dsv4test {
namespace {

std::vector<dsv4_backend_info> backends() {
  int32_t n = 0;
  EXPECT_EQ(dsv4_enumerate_backends(nullptr, nullptr, 0, &n), DSV4_STATUS_OK);
  std::vector<dsv4_backend_info> v(static_cast<size_t>(n));
  for (auto& b : v) b.struct_size = sizeof b;
  if (n > 0) {
    EXPECT_EQ(dsv4_enumerate_backends(nullptr, v.data(), n, &n), DSV4_STATUS_OK);
  }
  return v;
}

const dsv4_backend_info* find(const std::vector<dsv4_backend_info>& v, const std::string& name) {
  for (const auto& b : v)
    if (name == b.name) return &b;
  return nullptr;
}

TEST(OpenclModules, EnumerateWithReasons) {
  const auto v = backends();
  const dsv4_backend_info* cpu = find(v, "cpu");
  const dsv4_backend_info* ocl = find(v, "opencl");
  ASSERT_NE(ocl, nullptr) << "libdsv4-opencl.so not found";
  EXPECT_EQ(ocl->device_type, DSV4_DEVICE_OPENCL);
  EXPECT_GT(std::strlen(ocl->status), 0u);
  // Only CPU OpenCL devices here (PoCL): the module must score below the native CPU module.
  bool only_cpus = true;
  cl_uint np = 0;
  std::vector<cl_platform_id> platforms(8);
  clGetPlatformIDs(8, platforms.data(), &np);
  for (cl_uint p = 0; p < np && p < 8; ++p) {
    cl_uint n = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR, 0, nullptr,
                       &n) == CL_SUCCESS &&
        n > 0)
      only_cpus = false;
  }
  if (ocl->available && cpu != nullptr && cpu->available && only_cpus) {
    EXPECT_LT(ocl->score, cpu->score) << "a CPU OpenCL device must score below the CPU module";
  }
#ifdef DSV4_TEST_HAVE_LEVEL_ZERO
  const dsv4_backend_info* ze = find(v, "level-zero");
  ASSERT_NE(ze, nullptr) << "libdsv4-level-zero.so not found";
  EXPECT_EQ(ze->device_type, DSV4_DEVICE_ONEAPI);
  if (!ze->available) {
    EXPECT_EQ(ze->score, 0);
    EXPECT_GT(std::strlen(ze->status), 0u) << "unavailable without a reason";
    std::printf("level-zero: %s\n", ze->status);
  }
#endif
}

// One explicit decode (8 heads, bf16 cache of 4 rows) on the OpenCL device, with knobs to break
// one argument at a time.
class OpenclBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dev_ = make_opencl_test_device(&why);
    if (!dev_) GTEST_SKIP() << "no OpenCL device: " << why;
    dsv4_ctx_options o;
    dsv4_ctx_options_init(&o);
    o.device = dev_->device();
    o.backend = "opencl";
    dsv4_ctx* ctx = nullptr;
    ASSERT_EQ(dsv4_ctx_create(&o, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
    ctx_.reset(ctx);
  }
  // Runs the case; out is poisoned first and must keep the poison when the run fails.
  dsv4_status run(bool cpu_q, bool null_stream, bool paged_small_ws, void* foreign_q) {
    const dsv4_device d = dev_->device();
    dsv4_plan_options po;
    dsv4_plan_options_init(&po);
    po.num_heads = 8;
    po.max_tokens = 1;
    po.swa_cache.layout = DSV4_KV_LAYOUT_BF16;
    po.swa_cache.block_size = 4;
    if (paged_small_ws) {
      po.mode = DSV4_MODE_PAGED;
      po.window = 4;
      po.max_requests = 1;
      po.max_swa_blocks_per_request = 1;
    } else {
      po.topk = 4;
    }
    dsv4_plan* plan = nullptr;
    EXPECT_EQ(dsv4_plan_create(ctx_.get(), &po, &plan), DSV4_STATUS_OK)
        << dsv4_last_error_message();
    PlanPtr owned(plan);
    size_t ws_bytes = 0;
    dsv4_plan_get_workspace_size(plan, &ws_bytes);
    std::vector<uint16_t> host_q(8 * 512, 0x3c00), host_cache(4 * 512, 0x3f80);
    DeviceBuffer q = to_device(dev_.get(), host_q), cache = to_device(dev_.get(), host_cache);
    out_ = DeviceBuffer(dev_.get(), 8 * 512 * 2);
    out_.fill(0x7F);
    DeviceBuffer idx = to_device(dev_.get(), std::vector<int32_t>{0, 1, 2, 3});
    DeviceBuffer qsl = to_device(dev_.get(), std::vector<int32_t>{0, 1});
    DeviceBuffer seq = to_device(dev_.get(), std::vector<int32_t>{3});
    DeviceBuffer bt = to_device(dev_.get(), std::vector<int32_t>{0});
    DeviceBuffer sm = to_device(dev_.get(), std::vector<int32_t>{2});
    DeviceBuffer ws(dev_.get(), ws_bytes);
    dsv4_device qd = cpu_q ? dsv4_device{DSV4_DEVICE_CPU, 0} : d;
    TensorView tq(foreign_q != nullptr ? foreign_q : q.get(), qd, kBf16, {1, 8, 512});
    TensorView tc(cache.get(), d, kBf16, {1, 4, 512});
    TensorView to(out_.get(), d, kBf16, {1, 8, 512});
    TensorView ti(idx.get(), d, kI32, {1, 4});
    TensorView tqsl(qsl.get(), d, kI32, {2}), tseq(seq.get(), d, kI32, {1});
    TensorView tbt(bt.get(), d, kI32, {1, 1}), tsm(sm.get(), d, kI32, {1});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.q = tq.get();
    a.swa_cache = tc.get();
    a.out = to.get();
    if (paged_small_ws) {
      a.query_start_loc = tqsl.get();
      a.seq_lens = tseq.get();
      a.swa_block_table = tbt.get();
      a.slot_mapping = tsm.get();
      a.workspace = ws.get();
      a.workspace_bytes = ws_bytes - 1;
    } else {
      a.indices = ti.get();
    }
    a.stream = null_stream ? nullptr : dev_->stream();
    const dsv4_status st = dsv4_run(plan, &a);
    message_ = dsv4_last_error_message();
    dev_->synchronize();
    return st;
  }
  bool out_untouched() {
    for (uint16_t v : out_.download<uint16_t>())
      if (v != 0x7F7F) return false;
    return true;
  }

  std::unique_ptr<TestDevice> dev_;
  CtxPtr ctx_;
  DeviceBuffer out_;
  std::string message_;
};

TEST_F(OpenclBadInput, GoodRunWritesTheOutput) {
  ASSERT_EQ(run(false, false, false, nullptr), DSV4_STATUS_OK) << message_;
  EXPECT_FALSE(out_untouched());
  EXPECT_EQ(out_.download<uint16_t>()[0], 0x3f80);  // the mean of four rows of 1.0
}

TEST_F(OpenclBadInput, WrongDeviceType) {
  EXPECT_EQ(run(true, false, false, nullptr), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("q"), std::string::npos) << message_;
  EXPECT_TRUE(out_untouched());
}

TEST_F(OpenclBadInput, NullStream) {
  EXPECT_EQ(run(false, true, false, nullptr), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("stream"), std::string::npos) << message_;
  EXPECT_TRUE(out_untouched());
}

TEST_F(OpenclBadInput, WorkspaceTooSmall) {
  EXPECT_EQ(run(false, false, true, nullptr), DSV4_STATUS_WORKSPACE_TOO_SMALL);
  EXPECT_NE(message_.find("workspace"), std::string::npos) << message_;
  EXPECT_TRUE(out_untouched());
}

// Only platforms with cl_intel_unified_shared_memory can tell an SVM pointer from another one.
TEST_F(OpenclBadInput, NonSvmPointerWhereDetectable) {
  cl_command_queue queue = static_cast<cl_command_queue>(dev_->stream());
  cl_device_id device = nullptr;
  clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof device, &device, nullptr);
  char ext[8192] = {};
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, nullptr);
  if (std::strstr(ext, "cl_intel_unified_shared_memory") == nullptr)
    GTEST_SKIP() << "this OpenCL platform cannot tell an SVM pointer from a host pointer";
  std::vector<uint16_t> host_q(8 * 512, 0x3c00);
  EXPECT_EQ(run(false, false, false, host_q.data()), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("q"), std::string::npos) << message_;
  EXPECT_TRUE(out_untouched());
}

}  // namespace
}  // namespace dsv4test
