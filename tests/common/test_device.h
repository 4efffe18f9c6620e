// Where a test's tensors live. Conformance tests are written once against this interface and run
// on any backend: DSV4_TEST_DEVICE=cpu (default), cuda (needs the CUDA build and a GPU), hip (needs
// the HIP build and an AMD GPU), opencl (the OpenCL module on an OpenCL 2.0+ device with SVM: PoCL
// on a CPU in CI) or level-zero (an Intel GPU through Level Zero).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dsv4/dsv4.h"

namespace dsv4test {

class TestDevice {
 public:
  virtual ~TestDevice() = default;
  virtual dsv4_device device() const = 0;   // what tensors say
  virtual const char* backend() const = 0;  // module to request ("cpu", "cuda", ...)
  virtual void* alloc(size_t bytes) = 0;    // never nullptr for bytes > 0 (throws)
  virtual void free(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(void* dst, unsigned char byte, size_t bytes) = 0;
  virtual void* stream() = 0;  // passed to dsv4_run (nullptr on CPU)
  virtual void synchronize() = 0;
  // Graphs (CUDA graphs, hipGraph): begin_capture() starts recording the stream's work,
  // end_capture() stops and instantiates it, replay() launches the instantiated graph on the
  // stream. Each returns false where the device has none (CPU); failures throw.
  virtual bool begin_capture() { return false; }
  virtual bool end_capture() { return false; }
  virtual bool replay() { return false; }
};

// The device selected by DSV4_TEST_DEVICE (default "cpu"). Returns nullptr with `why` set when the
// device is not usable here (tests then GTEST_SKIP with that reason).
std::unique_ptr<TestDevice> make_test_device(std::string* why);

// The CUDA test device (tests/common/test_device_cuda.cpp, built only with DSV4_TEST_HAVE_CUDA) on
// GPU `device` (-1: DSV4_TEST_CUDA_DEVICE, else 0). Returns nullptr with `why` set when that GPU
// is not usable here.
std::unique_ptr<TestDevice> make_cuda_test_device(std::string* why, int device = -1);

// The HIP test device (tests/common/test_device_hip.cpp, built only with DSV4_TEST_HAVE_HIP):
// ROCm tensors (DSV4_DEVICE_ROCM) for the "hip" module. Returns nullptr with `why` set when there
// is no HIP runtime or no AMD GPU.
std::unique_ptr<TestDevice> make_hip_test_device(std::string* why);

// The OpenCL test device (tests/common/test_device_opencl.cpp, built only with
// DSV4_TEST_HAVE_OPENCL): SVM allocations and an in-order queue on one OpenCL device.
std::unique_ptr<TestDevice> make_opencl_test_device(std::string* why);

// The Level Zero test device (tests/common/test_device_level_zero.cpp, built only with
// DSV4_TEST_HAVE_LEVEL_ZERO): USM device memory and one command list on one GPU.
std::unique_ptr<TestDevice> make_level_zero_test_device(std::string* why);

}  // namespace dsv4test
