// The device of a whole GoogleTest run: register DeviceEnvironment in main(); tests read
// g_device (nullptr, with g_device_why, when DSV4_TEST_DEVICE is not usable here: skip).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "test_device.h"

namespace dsv4test {

inline TestDevice* g_device = nullptr;
inline std::string g_device_why;

class DeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    device_ = make_test_device(&g_device_why);
    g_device = device_.get();
  }
  void TearDown() override {
    g_device = nullptr;
    device_.reset();
  }

 private:
  std::unique_ptr<TestDevice> device_;
};

}  // namespace dsv4test
