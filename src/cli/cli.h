// The `dsv4` command-line tool: shared options and helpers of its commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

namespace dsv4cli {

// Exit codes of the tool.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // a library call failed, or `run` found a wrong result
constexpr int kExitUsage = 2;    // bad command line

// Options every command understands.
struct CommonOptions {
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  std::string backend;     // "" = let the library choose
  std::string module_dir;  // "" = none
};

// Parses "cpu", "cuda" or "cuda:N". Returns false for anything else.
bool parse_device(const std::string& text, dsv4_device* out);
std::string device_name(dsv4_device device);

// Context options from the common options (log level and sink left at their defaults).
dsv4_ctx_options make_ctx_options(const CommonOptions& common);

// Prints "<what>: <STATUS>: <message>" to stderr; returns kExitFailure.
int report_error(const char* what, dsv4_status status);

// A dsv4_tensor that owns its shape array.
class Tensor {
 public:
  Tensor(void* data, dsv4_device device, dsv4_dtype dtype, std::vector<int64_t> shape);
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  dsv4_tensor* get() { return &tensor_; }
  const dsv4_tensor* get() const { return &tensor_; }

 private:
  std::vector<int64_t> shape_;
  dsv4_tensor tensor_{};
};

constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

int command_info(const CommonOptions& common, int argc, char** argv);
int command_run(const CommonOptions& common, int argc, char** argv);

}  // namespace dsv4cli
