#include "device_memory.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace dsv4cli {
namespace {

class HostMemory final : public DeviceMemory {
 public:
  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_CPU, 0}; }
  void* alloc(size_t bytes) override {
    // 64-byte alignment: what an engine's allocator gives; the library does not require it.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill(void* dst, unsigned char byte, size_t bytes) override { std::memset(dst, byte, bytes); }
  void synchronize() override {}
};

// The few CUDA driver API entry points the tool needs (cuda.h signatures, 64-bit CUdeviceptr).
using CuResult = int;
using CuDevicePtr = unsigned long long;
using CuContext = void*;
struct CudaDriver {
  CuResult (*init)(unsigned int);
  CuResult (*device_get)(int*, int);
  CuResult (*device_get_count)(int*);
  CuResult (*primary_ctx_retain)(CuContext*, int);
  CuResult (*primary_ctx_release)(int);
  CuResult (*ctx_set_current)(CuContext);
  CuResult (*mem_alloc)(CuDevicePtr*, size_t);
  CuResult (*mem_free)(CuDevicePtr);
  CuResult (*memcpy_htod)(CuDevicePtr, const void*, size_t);
  CuResult (*memcpy_dtoh)(void*, CuDevicePtr, size_t);
  CuResult (*memset_d8)(CuDevicePtr, unsigned char, size_t);
  CuResult (*ctx_synchronize)();
  CuResult (*get_error_string)(CuResult, const char**);
};

template <typename Fn>
bool load_symbol(void* lib, const char* name, Fn* out) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) return false;
  std::memcpy(out, &sym, sizeof sym);  // object -> function pointer without a cast warning
  return true;
}

class CudaMemory final : public DeviceMemory {
 public:
  static std::unique_ptr<CudaMemory> open(int device_id, std::string* why) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *why = "no CUDA driver (libcuda.so.1 not found)";
      return nullptr;
    }
    CudaDriver d{};
    const bool ok = load_symbol(lib, "cuInit", &d.init) &&
                    load_symbol(lib, "cuDeviceGet", &d.device_get) &&
                    load_symbol(lib, "cuDeviceGetCount", &d.device_get_count) &&
                    load_symbol(lib, "cuDevicePrimaryCtxRetain", &d.primary_ctx_retain) &&
                    load_symbol(lib, "cuDevicePrimaryCtxRelease_v2", &d.primary_ctx_release) &&
                    load_symbol(lib, "cuCtxSetCurrent", &d.ctx_set_current) &&
                    load_symbol(lib, "cuMemAlloc_v2", &d.mem_alloc) &&
                    load_symbol(lib, "cuMemFree_v2", &d.mem_free) &&
                    load_symbol(lib, "cuMemcpyHtoD_v2", &d.memcpy_htod) &&
                    load_symbol(lib, "cuMemcpyDtoH_v2", &d.memcpy_dtoh) &&
                    load_symbol(lib, "cuMemsetD8_v2", &d.memset_d8) &&
                    load_symbol(lib, "cuCtxSynchronize", &d.ctx_synchronize) &&
                    load_symbol(lib, "cuGetErrorString", &d.get_error_string);
    if (!ok) {
      *why = "the CUDA driver lacks a needed entry point";
      return nullptr;
    }
    int count = 0;
    if (d.init(0) != 0 || d.device_get_count(&count) != 0 || count == 0) {
      *why = "no usable CUDA device";
      return nullptr;
    }
    if (device_id < 0 || device_id >= count) {
      *why = "CUDA device " + std::to_string(device_id) + " does not exist (" +
             std::to_string(count) + " found)";
      return nullptr;
    }
    int dev = 0;
    CuContext ctx = nullptr;
    // The primary context is the one the CUDA runtime (and so the CUDA backend) uses.
    if (d.device_get(&dev, device_id) != 0 || d.primary_ctx_retain(&ctx, dev) != 0 ||
        d.ctx_set_current(ctx) != 0) {
      *why = "cannot open the primary context of CUDA device " + std::to_string(device_id);
      return nullptr;
    }
    return std::unique_ptr<CudaMemory>(new CudaMemory(d, device_id, dev));
  }
  ~CudaMemory() override { driver_.primary_ctx_release(dev_); }

  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_CUDA, device_id_}; }
  void* alloc(size_t bytes) override {
    CuDevicePtr p = 0;
    check(driver_.mem_alloc(&p, bytes), "cuMemAlloc");
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  void release(void* p) noexcept override { driver_.mem_free(ptr(p)); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) check(driver_.memcpy_htod(ptr(dst), src, bytes), "cuMemcpyHtoD");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) check(driver_.memcpy_dtoh(dst, ptr(src), bytes), "cuMemcpyDtoH");
  }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes > 0) check(driver_.memset_d8(ptr(dst), byte, bytes), "cuMemsetD8");
  }
  void synchronize() override { check(driver_.ctx_synchronize(), "cuCtxSynchronize"); }

 private:
  CudaMemory(const CudaDriver& d, int device_id, int dev)
      : driver_(d), device_id_(device_id), dev_(dev) {}
  static CuDevicePtr ptr(const void* p) {
    return static_cast<CuDevicePtr>(reinterpret_cast<uintptr_t>(p));
  }
  void check(CuResult r, const char* what) const {
    if (r == 0) return;
    const char* text = nullptr;
    driver_.get_error_string(r, &text);
    throw std::runtime_error(std::string(what) + " failed: " + (text != nullptr ? text : "?"));
  }
  CudaDriver driver_;
  int device_id_;
  int dev_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(dsv4_device device, std::string* why) {
  switch (device.device_type) {
    case DSV4_DEVICE_CPU:
      return std::unique_ptr<DeviceMemory>(new HostMemory());
    case DSV4_DEVICE_CUDA:
      return CudaMemory::open(device.device_id, why);
    default:
      *why = "the dsv4 tool cannot allocate memory on device type " +
             std::to_string(device.device_type);
      return nullptr;
  }
}

}  // namespace dsv4cli
