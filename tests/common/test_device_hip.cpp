// The HIP test device: ROCm tensors in the memory of AMD GPU 0 (or DSV4_TEST_HIP_DEVICE), one
// non-blocking stream per device object. Like the HIP module it opens libamdhip64 at run time, so
// the test binaries load (and skip) where there is none. Every HIP error throws.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "test_device.h"

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

namespace dsv4test {
namespace {

struct hip_api {
  hipError_t (*get_device_count)(int*);
  hipError_t (*set_device)(int);
  hipError_t (*malloc)(void**, size_t);
  hipError_t (*free)(void*);
  hipError_t (*memcpy_async)(void*, const void*, size_t, hipMemcpyKind, hipStream_t);
  hipError_t (*memset_async)(void*, int, size_t, hipStream_t);
  hipError_t (*stream_create)(hipStream_t*, unsigned int);
  hipError_t (*stream_destroy)(hipStream_t);
  hipError_t (*stream_synchronize)(hipStream_t);
  hipError_t (*get_last_error)();
  const char* (*get_error_string)(hipError_t);
  hipError_t (*begin_capture)(hipStream_t, hipStreamCaptureMode);
  hipError_t (*end_capture)(hipStream_t, hipGraph_t*);
  hipError_t (*graph_instantiate)(hipGraphExec_t*, hipGraph_t, hipGraphNode_t*, char*, size_t);
  hipError_t (*graph_launch)(hipGraphExec_t, hipStream_t);
  hipError_t (*graph_destroy)(hipGraph_t);
  hipError_t (*graph_exec_destroy)(hipGraphExec_t);
};

template <class F>
bool resolve(void* lib, const char* name, F* out) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) return false;
  std::memcpy(out, &sym, sizeof sym);
  return true;
}

// The runtime's functions, or nullptr with `why` set.
const hip_api* open_hip(std::string* why) {
  static hip_api api;
  static std::string error = [] {
    void* lib = nullptr;
    for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) return std::string("no HIP runtime (libamdhip64)");
    bool ok = resolve(lib, "hipGetDeviceCount", &api.get_device_count);
    ok &= resolve(lib, "hipSetDevice", &api.set_device);
    ok &= resolve(lib, "hipMalloc", &api.malloc);
    ok &= resolve(lib, "hipFree", &api.free);
    ok &= resolve(lib, "hipMemcpyAsync", &api.memcpy_async);
    ok &= resolve(lib, "hipMemsetAsync", &api.memset_async);
    ok &= resolve(lib, "hipStreamCreateWithFlags", &api.stream_create);
    ok &= resolve(lib, "hipStreamDestroy", &api.stream_destroy);
    ok &= resolve(lib, "hipStreamSynchronize", &api.stream_synchronize);
    ok &= resolve(lib, "hipGetLastError", &api.get_last_error);
    ok &= resolve(lib, "hipGetErrorString", &api.get_error_string);
    ok &= resolve(lib, "hipStreamBeginCapture", &api.begin_capture);
    ok &= resolve(lib, "hipStreamEndCapture", &api.end_capture);
    ok &= resolve(lib, "hipGraphInstantiate", &api.graph_instantiate);
    ok &= resolve(lib, "hipGraphLaunch", &api.graph_launch);
    ok &= resolve(lib, "hipGraphDestroy", &api.graph_destroy);
    ok &= resolve(lib, "hipGraphExecDestroy", &api.graph_exec_destroy);
    return ok ? std::string() : std::string("the HIP runtime lacks a function the tests use");
  }();
  if (!error.empty()) {
    if (why != nullptr) *why = error;
    return nullptr;
  }
  return &api;
}

class HipTestDevice final : public TestDevice {
 public:
  HipTestDevice(const hip_api* api, int device) : api_(api), device_(device) {
    check(api_->set_device(device_), "hipSetDevice");
    check(api_->stream_create(&stream_, hipStreamNonBlocking), "hipStreamCreateWithFlags");
  }
  ~HipTestDevice() override {
    (void)api_->set_device(device_);
    if (exec_ != nullptr) (void)api_->graph_exec_destroy(exec_);
    if (graph_ != nullptr) (void)api_->graph_destroy(graph_);
    (void)api_->stream_destroy(stream_);
  }
  HipTestDevice(const HipTestDevice&) = delete;
  HipTestDevice& operator=(const HipTestDevice&) = delete;

  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_ROCM, device_}; }
  const char* backend() const override { return "hip"; }
  void* alloc(size_t bytes) override {
    select();
    void* p = nullptr;
    check(api_->malloc(&p, bytes == 0 ? 1 : bytes), "hipMalloc");
    return p;
  }
  void free(void* p) override {
    if (p == nullptr) return;
    select();
    (void)api_->free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(api_->memcpy_async(dst, src, bytes, hipMemcpyHostToDevice, stream_), "hipMemcpy H2D");
    check(api_->stream_synchronize(stream_), "hipStreamSynchronize");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(api_->memcpy_async(dst, src, bytes, hipMemcpyDeviceToHost, stream_), "hipMemcpy D2H");
    check(api_->stream_synchronize(stream_), "hipStreamSynchronize");
  }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(api_->memset_async(dst, byte, bytes, stream_), "hipMemset");
    check(api_->stream_synchronize(stream_), "hipStreamSynchronize");
  }
  void* stream() override { return stream_; }
  void synchronize() override {
    select();
    check(api_->stream_synchronize(stream_), "hipStreamSynchronize");
    check(api_->get_last_error(), "HIP error");
  }
  bool begin_capture() override {
    select();
    // The previous capture's graph goes first: destroying it during a thread-local capture would
    // invalidate the capture.
    if (exec_ != nullptr) (void)api_->graph_exec_destroy(exec_);
    if (graph_ != nullptr) (void)api_->graph_destroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    check(api_->begin_capture(stream_, hipStreamCaptureModeThreadLocal), "hipStreamBeginCapture");
    return true;
  }
  bool end_capture() override {
    select();
    check(api_->end_capture(stream_, &graph_), "hipStreamEndCapture");
    check(api_->graph_instantiate(&exec_, graph_, nullptr, nullptr, 0), "hipGraphInstantiate");
    return true;
  }
  bool replay() override {
    select();
    check(api_->graph_launch(exec_, stream_), "hipGraphLaunch");
    return true;
  }

 private:
  void check(hipError_t err, const char* what) const {
    if (err != hipSuccess)
      throw std::runtime_error(std::string(what) + ": " + api_->get_error_string(err));
  }
  void select() { check(api_->set_device(device_), "hipSetDevice"); }
  const hip_api* api_;
  int device_ = 0;
  hipStream_t stream_ = nullptr;
  hipGraph_t graph_ = nullptr;
  hipGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_hip_test_device(std::string* why) {
  const hip_api* api = open_hip(why);
  if (api == nullptr) return nullptr;
  int count = 0;
  const hipError_t err = api->get_device_count(&count);
  if (err != hipSuccess || count == 0) {
    if (why != nullptr)
      *why = err != hipSuccess ? std::string("no AMD GPU: ") + api->get_error_string(err)
                               : "no AMD GPU";
    return nullptr;
  }
  int device = 0;
  if (const char* env = std::getenv("DSV4_TEST_HIP_DEVICE")) device = std::atoi(env);
  if (device < 0 || device >= count) {
    if (why != nullptr)
      *why = "DSV4_TEST_HIP_DEVICE " + std::to_string(device) + " of " + std::to_string(count);
    return nullptr;
  }
  try {
    return std::make_unique<HipTestDevice>(api, device);
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
}

}  // namespace dsv4test
