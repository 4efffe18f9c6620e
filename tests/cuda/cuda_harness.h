// Harness of the CUDA backend tests and benchmark: loads libdsv4-cuda.so through the module ABI
// (no libdsv4 needed), owns device buffers, and builds randomized explicit-mode problems together
// with their float64 reference (reference/reference.h). Plain C++ (no GTest), so it also runs on
// GPU machines without GoogleTest.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/codec.h"
#include "common/layout.h"
#include "core/plan.h"
#include "dsv4_backend.h"
#include "reference.h"

namespace dsv4cudatest {

// The derived plan a module receives for public options: the library's own normalisation and
// derivation (src/core/plan.cpp, linked from dsv4_internal), never a copy of them.
inline dsv4_mod_plan mod_plan_of(const dsv4_plan_options& o) {
  return dsv4::detail::derive_mod_plan(dsv4::detail::normalize_plan_options(&o));
}

constexpr int kSkip = 77;  // ctest SKIP_RETURN_CODE

inline std::string& last_error() {
  static std::string e;
  return e;
}

// The module's last log line (the benchmark reads DSV4_CUDA_LOG_RUNS's lines from it).
inline std::string& last_log() {
  static std::string l;
  return l;
}

inline void host_log(int32_t level, const char* module, const char* message) {
  last_log() = message;
  if (std::getenv("DSV4_TEST_VERBOSE") != nullptr || level == DSV4_LOG_ERROR)
    std::fprintf(stderr, "[%s] %s\n", module, message);
}
inline void host_set_error(const char* message) { last_error() = message; }
inline const char* host_get_env(const char* name) { return std::getenv(name); }

inline const dsv4_host_services* host_services() {
  static const dsv4_host_services h = {sizeof(dsv4_host_services), DSV4_MODULE_ABI_VERSION,
                                       host_log, host_set_error, host_get_env};
  return &h;
}

#define CUDA_OK(expr)                                                                 \
  do {                                                                                \
    const cudaError_t err_ = (expr);                                                  \
    if (err_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(err_)); \
  } while (0)

#define DSV4_OK(expr)                                                                            \
  do {                                                                                           \
    const dsv4_status st_ = (expr);                                                              \
    if (st_ != DSV4_STATUS_OK)                                                                   \
      throw std::runtime_error(std::string(#expr) + " -> status " + std::to_string(st_) + ": " + \
                               last_error());                                                    \
  } while (0)

// The module, loaded and negotiated. `skip_reason` is set when no usable GPU is present.
struct module {
  void* so = nullptr;
  const dsv4_backend_iface* iface = nullptr;
  std::string skip_reason;
  int device_count = 0;

  explicit module(const std::string& path) {
    so = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) throw std::runtime_error("dlopen " + path + ": " + dlerror());
    auto entry = reinterpret_cast<dsv4_backend_entry_fn>(dlsym(so, DSV4_MODULE_ENTRY_SYMBOL));
    if (entry == nullptr) throw std::runtime_error("no entry symbol in " + path);
    uint32_t abi = DSV4_MODULE_ABI_VERSION;
    DSV4_OK(entry(&abi, host_services(), &iface));
    int32_t score = 0;
    int32_t count = 0;
    char reason[256] = {0};
    DSV4_OK(iface->probe(&score, &count, reason, sizeof reason));
    device_count = count;
    if (score <= 0) skip_reason = reason[0] != '\0' ? reason : "probe score 0";
  }
};

// Device memory owned by the test.
struct dbuf {
  void* p = nullptr;
  size_t bytes = 0;
  dbuf() = default;
  explicit dbuf(size_t n) : bytes(n) {
    if (n > 0) CUDA_OK(cudaMalloc(&p, n));
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  dbuf(dbuf&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  dbuf& operator=(dbuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~dbuf() {
    if (p != nullptr) cudaFree(p);
  }
  template <class T>
  void upload(const std::vector<T>& v) {
    CUDA_OK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    CUDA_OK(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// A host-side cache image of one layout, filled with vLLM-quantised random rows.
struct host_cache {
  uint32_t layout = DSV4_KV_LAYOUT_NONE;
  int32_t block_size = 64;
  int64_t num_blocks = 0;
  int64_t stride = 0;
  float kv_scale = 1.0f;
  std::vector<uint8_t> bytes;

  int64_t capacity() const { return num_blocks * block_size; }
  void init(uint32_t l, int32_t bs, int64_t slots, int64_t stride_pad, float scale,
            std::mt19937_64& rng) {
    layout = l;
    block_size = bs;
    num_blocks = (slots + bs - 1) / bs;
    stride = dsv4::layout_min_block_bytes(l, bs) + stride_pad;
    kv_scale = scale;
    bytes.assign(static_cast<size_t>(num_blocks * stride), 0);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> off(-0.05f, 0.05f);
    const int dim = dsv4::layout_head_dim_qk(l);
    std::vector<float> v(dim);
    for (int64_t s = 0; s < capacity(); ++s) {
      // FlashMLA's generator: randn/10 + a per-row offset, clamped; some rows get tiny tiles.
      const float o = off(rng);
      const float mag = (s % 7 == 3) ? 1e-3f : 0.1f;
      for (int d = 0; d < dim; ++d) v[d] = std::fmax(-1.0f, std::fmin(1.0f, nd(rng) * mag + o));
      dsv4::quantize_entry(l, bytes.data() + (s / bs) * stride, bs, s % bs, v.data(), kv_scale);
    }
  }
  // Bytes the fast dequantisation paths do not cover: in some rows UE8M0 scales near both ends of
  // the range, in a few rows one NaN byte. The large scale (2^8) multiplies e4m3 subnormals (m
  // 2^-9), so the values (m / 2) stay in the range of the others and fp32 accumulation stays
  // accurate.
  void add_special_rows() {
    for (int64_t s = 0; s < capacity(); ++s) {
      uint8_t* block = bytes.data() + (s / block_size) * stride;
      const int64_t e = s % block_size;
      if (layout == DSV4_KV_LAYOUT_FP8_V4_584B && s % 13 == 6) {
        uint8_t* sc = block + dsv4::v4_scale_offset(block_size, e);
        uint8_t* data = block + dsv4::entry_data_offset(layout, e);
        sc[1] = 3;    // 2^-124: subnormal or zero bf16 products
        sc[4] = 135;  // 2^8, with subnormal e4m3 bytes: values m / 2, m in 0..7
        for (int j = 0; j < dsv4::kV4TileDim; ++j)
          data[4 * dsv4::kV4TileDim + j] =
              static_cast<uint8_t>(((s * 7 + j * 3) & 7) | ((j & 1) << 7));
      }
      if ((layout == DSV4_KV_LAYOUT_FP8_V4_584B || layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) &&
          s % 97 == 41)
        block[dsv4::entry_data_offset(layout, e) + 100] = 0x7f;  // e4m3 NaN
    }
  }
  // Overwrites every byte of entry `slot` (data and scales) with 0xff: NaN in every layout.
  void poison(int64_t slot) {
    uint8_t* block = bytes.data() + (slot / block_size) * stride;
    const int64_t e = slot % block_size;
    std::memset(block + dsv4::entry_data_offset(layout, e), 0xff,
                layout == DSV4_KV_LAYOUT_FP8_V4_584B ? dsv4::kV4DataBytes
                                                     : dsv4::layout_bytes_per_token(layout));
    if (layout == DSV4_KV_LAYOUT_FP8_V4_584B)
      std::memset(block + dsv4::v4_scale_offset(block_size, e), 0xff, dsv4::kV4ScaleBytes);
  }
  dsv4test::RefCache ref() const {
    dsv4test::RefCache c;
    c.base = bytes.empty() ? nullptr : bytes.data();
    c.layout = layout;
    c.block_size = block_size;
    c.block_stride_bytes = stride;
    c.num_blocks = num_blocks;
    c.kv_scale = kv_scale;
    return c;
  }
  dsv4_kv_cache_desc desc() const {
    dsv4_kv_cache_desc d{};
    d.layout = layout;
    d.block_size = block_size;
    d.block_stride_bytes = stride;
    d.kv_scale = kv_scale;
    return d;
  }
  dsv4_mod_cache mod(void* device_base) const {
    dsv4_mod_cache c{};
    c.base = static_cast<uint8_t*>(device_base);
    c.layout = layout;
    c.block_size = block_size;
    c.block_stride_bytes = stride;
    c.num_blocks = num_blocks;
    c.kv_scale = kv_scale;
    return c;
  }
};

// FlashMLA's comparison rule (spec 2.4): inf/NaN positions coincide; |a-b| < abs or rel; cos_diff.
struct tolerance {
  double abs_tol, rel_tol, cos_tol;
};
constexpr tolerance kOutTol{1e-3, 2.01 / 128, 5e-6};
constexpr tolerance kLseTol{1e-5, 8.01 / 65536, -1};

inline bool compare(const std::vector<double>& got, const std::vector<double>& want,
                    const tolerance& tol, const std::string& what, std::string* message) {
  if (got.size() != want.size()) {
    *message = what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return false;
  }
  double dot = 0, ng = 0, nw = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    const bool special_a = !std::isfinite(a), special_b = !std::isfinite(b);
    if (special_a || special_b) {
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b;
      if (!same) {
        *message = what + "[" + std::to_string(i) + "]: got " + std::to_string(a) + ", want " +
                   std::to_string(b);
        return false;
      }
      continue;
    }
    const double err = std::fabs(a - b);
    if (!(err < tol.abs_tol || err / std::fabs(b) < tol.rel_tol)) {
      *message = what + "[" + std::to_string(i) + "]: got " + std::to_string(a) + ", want " +
                 std::to_string(b);
      return false;
    }
    dot += a * b;
    ng += a * a;
    nw += b * b;
  }
  if (tol.cos_tol >= 0 && ng + nw > 0) {
    const double cos_diff = 1.0 - 2.0 * dot / (ng + nw);
    if (cos_diff > tol.cos_tol) {
      *message = what + ": cos_diff " + std::to_string(cos_diff);
      return false;
    }
  }
  return true;
}

inline double bf16_to_double(uint16_t b) { return static_cast<double>(dsv4::bf16_to_f32(b)); }

}  // namespace dsv4cudatest
