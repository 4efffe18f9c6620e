// Small helpers shared by the test suites: the run seed, random numbers, device buffers, tensor
// views, owning ctx / plan handles.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dsv4/dsv4.h"
#include "test_device.h"

namespace dsv4test {

// The run's seed: DSV4_TEST_SEED if set, else fresh from std::random_device. Fixed per process.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("DSV4_TEST_SEED");
    if (env != nullptr && *env != '\0')
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }();
  return seed;
}

// A seed for one named case, derived from the run seed (so every case is reproducible alone).
inline uint64_t case_seed(const std::string& name) {
  uint64_t h = test_seed() ^ 0x9e3779b97f4a7c15ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

inline std::string seed_note() {
  return "seed " + std::to_string(test_seed()) +
         " (rerun with DSV4_TEST_SEED=" + std::to_string(test_seed()) + ")";
}

// Random test data from one case seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int64_t randint(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  template <typename T>
  T pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(randint(0, static_cast<int64_t>(v.size()) - 1))];
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// "STATUS_NAME: last error message".
inline std::string status_text(dsv4_status st) {
  return std::string(dsv4_status_string(st)) + ": " + dsv4_last_error_message();
}

struct CtxDeleter {
  void operator()(dsv4_ctx* c) const { dsv4_ctx_destroy(c); }
};
struct PlanDeleter {
  void operator()(dsv4_plan* p) const { dsv4_plan_destroy(p); }
};
using CtxPtr = std::unique_ptr<dsv4_ctx, CtxDeleter>;
using PlanPtr = std::unique_ptr<dsv4_plan, PlanDeleter>;

// A context on `dev` (its backend unless DSV4_BACKEND chooses); nullptr with `error` set on
// failure. threads: dsv4_ctx_options.num_threads (0 = default).
inline CtxPtr make_test_ctx(TestDevice* dev, int32_t threads, std::string* error) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = dev->device();
  if (std::getenv("DSV4_BACKEND") == nullptr) o.backend = dev->backend();
  o.num_threads = threads;
  dsv4_ctx* ctx = nullptr;
  const dsv4_status st = dsv4_ctx_create(&o, &ctx);
  if (st != DSV4_STATUS_OK) *error = "dsv4_ctx_create: " + status_text(st);
  return CtxPtr(st == DSV4_STATUS_OK ? ctx : nullptr);
}

// Whether the context's backend checks values on the host before writing anything (the CPU module
// does; GPU modules never read device values to validate them, and neither does the HIP emulator
// module, which runs the GPU kernels on CPU tensors).
inline bool backend_checks_values(dsv4_ctx* ctx) {
  dsv4_ctx_info info{};
  info.struct_size = sizeof info;
  return dsv4_ctx_get_info(ctx, &info) == DSV4_STATUS_OK &&
         std::string(info.backend).rfind("cpu", 0) == 0;
}

// Owns `bytes` of device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(TestDevice* dev, size_t bytes) : dev_(dev), bytes_(bytes) {
    ptr_ = bytes > 0 ? dev->alloc(bytes) : nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      dev_ = o.dev_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  void upload(const std::vector<T>& host) {
    dev_->upload(ptr_, host.data(), host.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    dev_->synchronize();
    dev_->download(host.data(), ptr_, host.size() * sizeof(T));
    return host;
  }
  void fill(unsigned char byte) { dev_->fill(ptr_, byte, bytes_); }

 private:
  void release() {
    if (ptr_ != nullptr) dev_->free(ptr_);
    ptr_ = nullptr;
  }
  TestDevice* dev_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Uploads a host vector into a new device buffer.
template <typename T>
DeviceBuffer to_device(TestDevice* dev, const std::vector<T>& host) {
  DeviceBuffer b(dev, host.size() * sizeof(T));
  if (!host.empty()) b.upload(host);
  return b;
}

// A dsv4_tensor with its own shape/stride storage (call get() after any move).
class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, dsv4_device device, dsv4_dtype dtype, std::vector<int64_t> shape,
             std::vector<int64_t> strides = {}, uint64_t byte_offset = 0)
      : shape_(std::move(shape)), strides_(std::move(strides)) {
    t_.data = data;
    t_.device = device;
    t_.dtype = dtype;
    t_.byte_offset = byte_offset;
  }
  dsv4_tensor* get() {
    t_.ndim = static_cast<int32_t>(shape_.size());
    t_.shape = shape_.data();
    t_.strides = strides_.empty() ? nullptr : strides_.data();
    return &t_;
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  dsv4_tensor t_{};
};

constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};
constexpr dsv4_dtype kE4m3{DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1};

}  // namespace dsv4test
