// The CUDA test device: tensors in device memory of one GPU (DSV4_TEST_CUDA_DEVICE, else 0), one
// non-blocking stream per device object. Every CUDA error throws, so a test fails loudly.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "test_device.h"

namespace dsv4test {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

class CudaTestDevice final : public TestDevice {
 public:
  explicit CudaTestDevice(int device) : device_(device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaTestDevice() override {
    cudaSetDevice(device_);
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  CudaTestDevice(const CudaTestDevice&) = delete;
  CudaTestDevice& operator=(const CudaTestDevice&) = delete;

  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_CUDA, device_}; }
  const char* backend() const override { return "cuda"; }
  void* alloc(size_t bytes) override {
    select();
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void free(void* p) override {
    if (p == nullptr) return;
    select();
    cudaFree(p);
  }
  // Copies are ordered after the work already queued on the test stream.
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy H2D");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy D2H");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes == 0) return;
    select();
    check(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemset");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void* stream() override { return stream_; }
  void synchronize() override {
    select();
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    check(cudaGetLastError(), "CUDA error");
  }
  bool begin_capture() override {
    select();
    // The previous capture's graph goes first: destroying it while this thread captures would
    // invalidate the capture (cudaStreamCaptureModeThreadLocal forbids unsafe calls meanwhile).
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
    return true;
  }
  bool end_capture() override {
    select();
    check(cudaStreamEndCapture(stream_, &graph_), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
    return true;
  }
  bool replay() override {
    select();
    check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
    return true;
  }

 private:
  void select() { check(cudaSetDevice(device_), "cudaSetDevice"); }
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_cuda_test_device(std::string* why, int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why != nullptr)
      *why = err != cudaSuccess ? std::string("no CUDA driver/device: ") + cudaGetErrorName(err)
                                : "no CUDA device";
    return nullptr;
  }
  if (device < 0) {
    const char* env = std::getenv("DSV4_TEST_CUDA_DEVICE");
    device = env != nullptr ? std::atoi(env) : 0;
  }
  if (device < 0 || device >= count) {
    if (why != nullptr)
      *why = "CUDA device " + std::to_string(device) + " asked for, " + std::to_string(count) +
             " present (DSV4_TEST_CUDA_DEVICE)";
    return nullptr;
  }
  try {
    return std::make_unique<CudaTestDevice>(device);
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
}

}  // namespace dsv4test
