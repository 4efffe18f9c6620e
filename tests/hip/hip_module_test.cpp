// The AMD HIP module where it cannot run: it loads (it links no HIP runtime), reports itself
// unavailable with the reason, and a context on it fails with a status instead of crashing. On a
// machine with an AMD GPU the module is available and these tests skip. DSV4_TEST_HIP_MODULE_DIR
// is the module directory; ctest sets DSV4_HIP_RUNTIME for the missing-runtime case.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

namespace {

// The "hip" module of the test's module directory, as dsv4_enumerate_backends reports it.
bool find_hip(dsv4_backend_info* out) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.module_dir = std::getenv("DSV4_TEST_HIP_MODULE_DIR");
  std::vector<dsv4_backend_info> infos(16);
  for (auto& i : infos) i.struct_size = sizeof i;
  int32_t count = 0;
  if (dsv4_enumerate_backends(&o, infos.data(), static_cast<int32_t>(infos.size()), &count) !=
      DSV4_STATUS_OK)
    return false;
  for (int32_t i = 0; i < count && i < static_cast<int32_t>(infos.size()); ++i) {
    if (std::string(infos[static_cast<size_t>(i)].name) == "hip" &&
        std::string(infos[static_cast<size_t>(i)].path).find("/lib/dsv4/backends/") !=
            std::string::npos) {
      *out = infos[static_cast<size_t>(i)];
      return true;
    }
  }
  return false;
}

// A ROCm context on the module: must fail with a status and a message, never crash.
void expect_context_refused() {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.module_dir = std::getenv("DSV4_TEST_HIP_MODULE_DIR");
  o.device = dsv4_device{DSV4_DEVICE_ROCM, 0};
  o.backend = "hip";
  dsv4_ctx* ctx = nullptr;
  const dsv4_status st = dsv4_ctx_create(&o, &ctx);
  EXPECT_EQ(st, DSV4_STATUS_NO_BACKEND) << dsv4_status_string(st);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("hip"), std::string::npos)
      << dsv4_last_error_message();
  dsv4_ctx_destroy(ctx);
}

TEST(HipModule, ReportsWhyItIsUnavailable) {
  dsv4_backend_info hip{};
  ASSERT_TRUE(find_hip(&hip)) << "libdsv4-hip.so not found in the module directory";
  EXPECT_EQ(hip.device_type, DSV4_DEVICE_ROCM);
  EXPECT_EQ(hip.module_abi >> 16, 2u) << "the module loaded and negotiated";
  if (hip.available) GTEST_SKIP() << "an AMD GPU is present: " << hip.status;
  EXPECT_EQ(hip.score, 0);
  EXPECT_EQ(hip.device_count, 0);
  const std::string status = hip.status;
  EXPECT_TRUE(status.find("no AMD GPU") != std::string::npos ||
              status.find("no HIP runtime") != std::string::npos)
      << status;
  expect_context_refused();
}

TEST(HipModule, NamesTheMissingRuntime) {
  const char* forced = std::getenv("DSV4_HIP_RUNTIME");
  if (forced == nullptr) GTEST_SKIP() << "DSV4_HIP_RUNTIME is not set";
  dsv4_backend_info hip{};
  ASSERT_TRUE(find_hip(&hip));
  EXPECT_EQ(hip.available, 0);
  const std::string status = hip.status;
  EXPECT_NE(status.find("no HIP runtime (libamdhip64)"), std::string::npos) << status;
  EXPECT_NE(status.find(forced), std::string::npos) << status;
  expect_context_refused();
}

}  // namespace
