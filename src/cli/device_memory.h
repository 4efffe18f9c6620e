// Where the `dsv4` tool's tensors live: host memory for CPU backends, device memory for CUDA
// (reached through the CUDA driver library, loaded at run time, so the tool needs no CUDA toolkit
// to build and runs on machines without a GPU).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dsv4/dsv4.h"

namespace dsv4cli {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual dsv4_device device() const = 0;
  // Every call below throws std::runtime_error on failure.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(void* dst, unsigned char byte, size_t bytes) = 0;
  // Waits for all work enqueued on the device (no-op on the host).
  virtual void synchronize() = 0;
};

// Memory for `device`; nullptr with `why` set when the device cannot be used here.
std::unique_ptr<DeviceMemory> make_device_memory(dsv4_device device, std::string* why);

// One owned allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemory* mem, size_t bytes) : mem_(mem), bytes_(bytes) {
    data_ = bytes > 0 ? mem->alloc(bytes) : nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) mem_->release(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
  }
  DeviceMemory* mem_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dsv4cli
