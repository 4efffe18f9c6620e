// The OpenCL test device: tensors in coarse-grained SVM of one OpenCL 2.0+ device (the first such
// device over all platforms, or DSV4_TEST_OPENCL_DEVICE = its index in that order, the OpenCL
// module's device_id), one in-order queue as the stream. Every OpenCL error throws.
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_device.h"

namespace dsv4test {
namespace {

void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS)
    throw std::runtime_error(std::string(what) + ": OpenCL error " + std::to_string(err));
}

// OpenCL 2.0+ devices with coarse-grained SVM, platform by platform (the module's order).
std::vector<cl_device_id> svm_devices() {
  std::vector<cl_device_id> out;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return out;
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devices(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      char version[128] = {};
      clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof version - 1, version, nullptr);
      int major = 0, minor = 0;
      cl_device_svm_capabilities svm = 0;
      clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr);
      if (std::sscanf(version, "OpenCL %d.%d", &major, &minor) == 2 && major >= 2 &&
          (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) != 0)
        out.push_back(d);
    }
  }
  return out;
}

class OpenclTestDevice final : public TestDevice {
 public:
  OpenclTestDevice(cl_device_id device, int index) : index_(index) {
    cl_int err = CL_SUCCESS;
    context_ = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    queue_ = clCreateCommandQueueWithProperties(context_, device, nullptr, &err);
    check(err, "clCreateCommandQueueWithProperties");
  }
  ~OpenclTestDevice() override {
    clFinish(queue_);
    clReleaseCommandQueue(queue_);
    clReleaseContext(context_);
  }
  OpenclTestDevice(const OpenclTestDevice&) = delete;
  OpenclTestDevice& operator=(const OpenclTestDevice&) = delete;

  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_OPENCL, index_}; }
  const char* backend() const override { return "opencl"; }
  void* alloc(size_t bytes) override {
    void* p = clSVMAlloc(context_, CL_MEM_READ_WRITE, bytes == 0 ? 1 : bytes, 128);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void free(void* p) override {
    if (p == nullptr) return;
    clFinish(queue_);
    clSVMFree(context_, p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0)
      check(clEnqueueSVMMemcpy(queue_, CL_TRUE, dst, src, bytes, 0, nullptr, nullptr),
            "clEnqueueSVMMemcpy");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0)
      check(clEnqueueSVMMemcpy(queue_, CL_TRUE, dst, src, bytes, 0, nullptr, nullptr),
            "clEnqueueSVMMemcpy");
  }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes == 0) return;
    check(clEnqueueSVMMemFill(queue_, dst, &byte, 1, bytes, 0, nullptr, nullptr),
          "clEnqueueSVMMemFill");
    check(clFinish(queue_), "clFinish");
  }
  void* stream() override { return queue_; }
  void synchronize() override { check(clFinish(queue_), "clFinish"); }

 private:
  int index_ = 0;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_opencl_test_device(std::string* why) {
  const std::vector<cl_device_id> devices = svm_devices();
  int index = 0;
  if (const char* env = std::getenv("DSV4_TEST_OPENCL_DEVICE")) index = std::atoi(env);
  if (index < 0 || index >= static_cast<int>(devices.size())) {
    if (why != nullptr)
      *why = devices.empty() ? "no OpenCL 2.0+ device with SVM"
                             : "DSV4_TEST_OPENCL_DEVICE " + std::to_string(index) + " of " +
                                   std::to_string(devices.size());
    return nullptr;
  }
  try {
    return std::make_unique<OpenclTestDevice>(devices[static_cast<size_t>(index)], index);
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
}

}  // namespace dsv4test
