// Shared by the CUDA tests (test_cuda_attention.cpp) and the GPU benchmarks (bench/gpu), all of
// them on the public API: a context on a CUDA device whose module log is captured (the run log of
// DSV4_CUDA_LOG_RUNS), plans made under the module's test hook DSV4_CUDA_FORCE, and host images of
// caches in every layout filled with vLLM-quantised random rows. No GoogleTest in here: the
// benchmarks include it too.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/codec.h"
#include "common/layout.h"
#include "dsv4/dsv4.h"
#include "reference.h"
#include "test_util.h"

namespace dsv4cudatest {

// Throws on a CUDA runtime error, naming the call.
#define DSV4_CUDA_CHECK(expr)                                                         \
  do {                                                                                \
    const cudaError_t err_ = (expr);                                                  \
    if (err_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(err_)); \
  } while (0)

// The number of CUDA devices here, or 0 with `why` set (no driver, no device).
inline int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("no CUDA driver or device: ") + cudaGetErrorName(err);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "no CUDA device";
  return count;
}

// The log lines of one context (dsv4_ctx_options.log_fn at DSV4_LOG_DEBUG). The CUDA module logs
// each run's tiling, splits, token order and persistence as "cuda: run: ..." when the plan was
// made with DSV4_CUDA_LOG_RUNS=1.
class log_sink {
 public:
  static void callback(int32_t level, const char* message, void* self) {
    auto* sink = static_cast<log_sink*>(self);
    const std::string line = message != nullptr ? message : "";
    std::lock_guard<std::mutex> lock(sink->mutex_);
    if (line.find("cuda: run: ") != std::string::npos) sink->last_run_ = line;
    if (level == DSV4_LOG_ERROR || std::getenv("DSV4_TEST_VERBOSE") != nullptr)
      std::fprintf(stderr, "dsv4: %s\n", line.c_str());
  }
  std::string last_run() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_run_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    last_run_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::string last_run_;
};

// A context on CUDA device `device` through the public API (module "cuda"), its log in `sink`;
// nullptr with `error` set on failure.
inline dsv4test::CtxPtr make_cuda_ctx(int device, log_sink* sink, std::string* error) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = dsv4_device{DSV4_DEVICE_CUDA, device};
  o.backend = "cuda";
  o.log_level = DSV4_LOG_DEBUG;
  o.log_fn = &log_sink::callback;
  o.log_user_data = sink;
  dsv4_ctx* ctx = nullptr;
  const dsv4_status st = dsv4_ctx_create(&o, &ctx);
  if (st != DSV4_STATUS_OK && error != nullptr)
    *error = "dsv4_ctx_create on cuda:" + std::to_string(device) + ": " + dsv4test::status_text(st);
  return dsv4test::CtxPtr(st == DSV4_STATUS_OK ? ctx : nullptr);
}

// Environment variables set for the lifetime of the object (the module reads DSV4_CUDA_FORCE and
// DSV4_CUDA_LOG_RUNS at plan creation); earlier values come back afterwards.
class scoped_env {
 public:
  scoped_env() = default;
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had)
        setenv(it->name.c_str(), it->value.c_str(), 1);
      else
        unsetenv(it->name.c_str());
    }
  }
  // value nullptr: unset.
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old != nullptr ? old : "", old != nullptr});
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }

 private:
  struct saved {
    std::string name, value;
    bool had;
  };
  std::vector<saved> saved_;
};

// dsv4_plan_create with the module's test hook: DSV4_CUDA_FORCE=`force` (empty: unset, the
// planner's own choice) and, with `log_runs`, DSV4_CUDA_LOG_RUNS=1 (each run logs its choice).
inline dsv4_status create_plan(dsv4_ctx* ctx, const dsv4_plan_options& options,
                               const std::string& force, bool log_runs, dsv4test::PlanPtr* out) {
  scoped_env env;
  env.set("DSV4_CUDA_FORCE", force.empty() ? nullptr : force.c_str());
  env.set("DSV4_CUDA_LOG_RUNS", log_runs ? "1" : nullptr);
  dsv4_plan* plan = nullptr;
  const dsv4_status st = dsv4_plan_create(ctx, &options, &plan);
  out->reset(st == DSV4_STATUS_OK ? plan : nullptr);
  return st;
}

// The plan's kernel (dsv4_plan_get_info), or "" when it cannot say.
inline std::string plan_kernel(const dsv4_plan* plan) {
  dsv4_plan_info info{};
  info.struct_size = sizeof info;
  return dsv4_plan_get_info(plan, &info) == DSV4_STATUS_OK ? info.kernel : "";
}

// A host image of one cache layout, filled with vLLM-quantised random rows: dim 0 = blocks of
// `stride` bytes (the layout's block plus `stride_pad` spare bytes).
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
  // The cache as a tensor of `blocks` blocks at `data`: [blocks, stride] bytes.
  dsv4test::TensorView tensor(void* data, dsv4_device device, int64_t blocks) const {
    return dsv4test::TensorView(data, device, dsv4test::kU8, {blocks, stride});
  }
};

inline double bf16_to_double(uint16_t b) { return static_cast<double>(dsv4::bf16_to_f32(b)); }

}  // namespace dsv4cudatest
