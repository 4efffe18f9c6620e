// The `dsv4` command-line tool: shared options and helpers of its commands.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "progress.h"

namespace dsv4cli {

// Exit codes of the tool.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // a library call failed, or `run` found a wrong result
constexpr int kExitUsage = 2;    // bad command line

// Options every command understands, before or after the command's name.
struct CommonOptions {
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  std::string backend;     // "" = let the library choose
  std::string module_dir;  // "" = none; made absolute from the command line
  bool json = false;       // one JSON document on stdout instead of text
  bool progress = true;    // progress on stderr (--no-progress turns it off)
};

// What the tool writes besides its results, all on stderr: progress, the library's warnings and
// errors (each distinct message once per run of the tool), and the tool's own errors.
class Console {
 public:
  explicit Console(const CommonOptions& common);
  Progress& progress() { return progress_; }

  // dsv4_log_fn for every options struct the tool passes (user_data = this Console): warnings and
  // errors go to stderr once each; other lines go to the capture list when one is set.
  static void log_sink(int32_t level, const char* message, void* user_data);
  void set_capture(std::vector<std::string>* lines) { capture_ = lines; }

  // Prints "dsv4 <command>: <message>" once; returns kExitFailure.
  int error(const std::string& message);
  // The last library call failed with `status`: its thread-local message (which names the
  // function and the argument) and the status name, once; returns kExitFailure.
  int library_error(const char* function, dsv4_status status);
  // The warnings the library logged so far, and the last error said (for --json).
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::string& last_error() const { return last_error_; }

  std::string command = "dsv4";  // prefix of error lines

 private:
  Progress progress_;
  std::set<std::string> said_;
  std::vector<std::string> warnings_;
  std::string last_error_;
  std::vector<std::string>* capture_ = nullptr;
};

// Parses "cpu", "cuda" or "cuda:N". Returns false for anything else.
bool parse_device(const std::string& text, dsv4_device* out);
std::string device_name(dsv4_device device);
const char* device_type_name(int32_t device_type);

// Context options from the common options, logging through `console`.
dsv4_ctx_options make_ctx_options(const CommonOptions& common, Console* console);

// One option of a command besides the common ones.
struct CommandOption {
  const char* name;  // long name, without "--"
  bool has_value;
  const char* value_name;  // for messages ("N")
};

// Parses a command's arguments (argv[0] is the command's name) with getopt_long: the common
// options and `options`, in any order. Calls on_option(index into options, value) for the
// command's own; it returns false after printing one message for a bad value. Returns kExitOk,
// kExitUsage after one message, or -1 when --help was given (the caller prints its usage).
int parse_command(const char* command, int argc, char** argv, CommonOptions* common,
                  const std::vector<CommandOption>& options,
                  const std::function<bool(size_t, const char*)>& on_option);

// Parses an integer in [lo, hi]; false for anything else.
bool parse_int(const char* text, long long lo, long long hi, long long* out);

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

// The commands: argv[0] is the command's name, the rest its arguments.
int command_info(CommonOptions common, int argc, char** argv);
int command_run(CommonOptions common, int argc, char** argv);

}  // namespace dsv4cli
