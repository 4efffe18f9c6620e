// main() of the GoogleTest binaries that run on the test device (DSV4_TEST_DEVICE).
#include <gtest/gtest.h>

#include "test_env.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new dsv4test::DeviceEnvironment);
  return RUN_ALL_TESTS();
}
