// The CPU test device, and the DSV4_TEST_DEVICE switch.
#include "test_device.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace dsv4test {
namespace {

class CpuTestDevice final : public TestDevice {
 public:
  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_CPU, 0}; }
  const char* backend() const override { return "cpu"; }
  void* alloc(size_t bytes) override {
    // 64-byte aligned like a real allocator would give SIMD kernels; never nullptr for bytes > 0.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void free(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes > 0) std::memset(dst, byte, bytes);
  }
  void* stream() override { return nullptr; }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<TestDevice> make_test_device(std::string* why) {
  const char* env = std::getenv("DSV4_TEST_DEVICE");
  const std::string name = env != nullptr ? env : "";
  if (name.empty() || name == "cpu") return std::make_unique<CpuTestDevice>();
  if (name == "cuda") {
#ifdef DSV4_TEST_HAVE_CUDA
    return make_cuda_test_device(why);
#else
    if (why != nullptr)
      *why = "DSV4_TEST_DEVICE=cuda but the tests were built without CUDA support";
    return nullptr;
#endif
  }
  if (name == "hip") {
#ifdef DSV4_TEST_HAVE_HIP
    return make_hip_test_device(why);
#else
    if (why != nullptr) *why = "DSV4_TEST_DEVICE=hip but the tests were built without HIP support";
    return nullptr;
#endif
  }
  if (name == "opencl") {
#ifdef DSV4_TEST_HAVE_OPENCL
    return make_opencl_test_device(why);
#else
    if (why != nullptr)
      *why = "DSV4_TEST_DEVICE=opencl but the tests were built without OpenCL support";
    return nullptr;
#endif
  }
  if (name == "level-zero") {
#ifdef DSV4_TEST_HAVE_LEVEL_ZERO
    return make_level_zero_test_device(why);
#else
    if (why != nullptr)
      *why = "DSV4_TEST_DEVICE=level-zero but the tests were built without Level Zero support";
    return nullptr;
#endif
  }
  if (why != nullptr)
    *why =
        "unknown DSV4_TEST_DEVICE '" + name + "' (expected cpu, cuda, hip, opencl or level-zero)";
  return nullptr;
}

}  // namespace dsv4test
