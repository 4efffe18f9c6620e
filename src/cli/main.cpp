// dsv4 — the libdsv4 command-line tool: `dsv4 info` shows which backend modules were found and
// which one serves a device; `dsv4 run` runs a checked, timed DeepSeek-V4 engine step.
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli.h"

namespace dsv4cli {

bool parse_device(const std::string& text, dsv4_device* out) {
  if (text == "cpu") {
    *out = dsv4_device{DSV4_DEVICE_CPU, 0};
    return true;
  }
  if (text.rfind("cuda", 0) != 0) return false;
  std::string rest = text.substr(4);
  int id = 0;
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 4) return false;
    for (size_t i = 1; i < rest.size(); ++i) {
      if (rest[i] < '0' || rest[i] > '9') return false;
      id = id * 10 + (rest[i] - '0');
    }
  }
  *out = dsv4_device{DSV4_DEVICE_CUDA, id};
  return true;
}

const char* device_type_name(int32_t device_type) {
  switch (device_type) {
    case DSV4_DEVICE_CPU:
      return "cpu";
    case DSV4_DEVICE_CUDA:
      return "cuda";
    case DSV4_DEVICE_OPENCL:
      return "opencl";
    case DSV4_DEVICE_ROCM:
      return "rocm";
    case DSV4_DEVICE_ONEAPI:
      return "oneapi";
    default:
      return "device-type";
  }
}

std::string device_name(dsv4_device device) {
  std::string name = device_type_name(device.device_type);
  if (name == "device-type") name += "-" + std::to_string(device.device_type);
  return name + ":" + std::to_string(device.device_id);
}

dsv4_ctx_options make_ctx_options(const CommonOptions& common, Console* console) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = common.device;
  o.backend = common.backend.empty() ? nullptr : common.backend.c_str();
  o.module_dir = common.module_dir.empty() ? nullptr : common.module_dir.c_str();
  o.log_fn = Console::log_sink;
  o.log_user_data = console;
  return o;
}

Console::Console(const CommonOptions& common)
    : progress_(common.progress ? Progress::Mode::kAuto : Progress::Mode::kOff) {}

void Console::log_sink(int32_t level, const char* message, void* user_data) {
  auto* self = static_cast<Console*>(user_data);
  const std::string text = message != nullptr ? message : "";
  if (level > DSV4_LOG_WARN) {
    if (self->capture_ != nullptr) self->capture_->push_back(text);
    return;
  }
  // The same warning comes from every enumeration and context the tool makes: say it once.
  if (!self->said_.insert(text).second) return;
  self->warnings_.push_back(text);
  self->progress_.clear();
  std::fprintf(stderr, "%s: %s: %s\n", self->command.c_str(),
               level == DSV4_LOG_ERROR ? "error" : "warning", text.c_str());
}

int Console::error(const std::string& message) {
  last_error_ = message;
  if (said_.insert(message).second) {
    progress_.clear();
    std::fprintf(stderr, "%s: %s\n", command.c_str(), message.c_str());
  }
  return kExitFailure;
}

int Console::library_error(const char* function, dsv4_status status) {
  std::string message = dsv4_last_error_message();
  // The library's message starts with the function's name; add it only when it does not.
  if (message.rfind(function, 0) != 0) message = std::string(function) + ": " + message;
  return error(message + " [" + dsv4_status_string(status) + "]");
}

bool parse_int(const char* text, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Tensor::Tensor(void* data, dsv4_device device, dsv4_dtype dtype, std::vector<int64_t> shape)
    : shape_(std::move(shape)) {
  tensor_.data = data;
  tensor_.device = device;
  tensor_.ndim = static_cast<int32_t>(shape_.size());
  tensor_.dtype = dtype;
  tensor_.shape = shape_.data();
  tensor_.strides = nullptr;
  tensor_.byte_offset = 0;
}

namespace {

// getopt_long values of the common options (the commands' own start at kFirstCommandOption).
enum : int {
  kOptDevice = 1000,
  kOptBackend,
  kOptModuleDir,
  kOptJson,
  kOptNoProgress,
  kOptVersion,
  kFirstCommandOption = 2000,
};

const option kCommonOptions[] = {
    {"device", required_argument, nullptr, kOptDevice},
    {"backend", required_argument, nullptr, kOptBackend},
    {"module-dir", required_argument, nullptr, kOptModuleDir},
    {"json", no_argument, nullptr, kOptJson},
    {"no-progress", no_argument, nullptr, kOptNoProgress},
    {"help", no_argument, nullptr, 'h'},
};

// Applies common option `id`; false after one message.
bool apply_common(const char* who, int id, const char* value, CommonOptions* common) {
  switch (id) {
    case kOptDevice:
      if (!parse_device(value, &common->device)) {
        std::fprintf(stderr, "%s: --device: expected cpu, cuda or cuda:N, got '%s'\n", who, value);
        return false;
      }
      return true;
    case kOptBackend:
      common->backend = value;
      return true;
    case kOptModuleDir: {
      // The library takes absolute directories only; on the command line a relative one means
      // "from here", as for any other path argument.
      char resolved[PATH_MAX];
      if (realpath(value, resolved) == nullptr) {
        std::fprintf(stderr, "%s: --module-dir '%s': %s\n", who, value, std::strerror(errno));
        return false;
      }
      common->module_dir = resolved;
      return true;
    }
    case kOptJson:
      common->json = true;
      return true;
    case kOptNoProgress:
      common->progress = false;
      return true;
    default:
      return false;
  }
}

// One message for getopt_long's '?' (unknown option) or ':' (missing value).
void report_bad_option(const char* who, int code, char** argv) {
  const char* arg = argv[optind - 1];
  if (code == ':') {
    std::fprintf(stderr, "%s: option '%s' needs a value (see %s --help)\n", who, arg, who);
  } else if (optopt != 0) {
    std::fprintf(stderr, "%s: unknown option '-%c' (see %s --help)\n", who, optopt, who);
  } else {
    std::fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", who, arg, who);
  }
}

void print_usage(FILE* f) {
  std::fprintf(
      f,
      "usage: dsv4 [options] <command> [command options]\n"
      "\n"
      "commands:\n"
      "  info       list backend modules, their devices, and which one a device gets\n"
      "  run        run a checked, timed DeepSeek-V4 engine step (paged mode)\n"
      "  version    print the library version\n"
      "  help [command]   this text, or a command's options\n"
      "\n"
      "options, before or after the command:\n"
      "  --device cpu|cuda[:N]   device the tensors live on (default cpu)\n"
      "  --backend NAME          use this backend module (default: DSV4_BACKEND, then the\n"
      "                          highest probe score)\n"
      "  --module-dir DIR        search DIR for backend modules first\n"
      "  --json                  print one JSON document on stdout instead of text\n"
      "  --no-progress           no progress line on stderr (shown by default: a live line on\n"
      "                          a terminal, one line per step when stderr is a pipe or a file)\n"
      "  -h, --help              help; --version: the library version\n"
      "\n"
      "exit status: 0 success, 1 a library call failed or a result was wrong, 2 bad usage\n");
}

int print_version(const CommonOptions& common) {
  if (common.json) {
    nlohmann::ordered_json doc;
    doc["version"] = dsv4_get_version_string();
    doc["tool_built_against"] = std::to_string(DSV4_VERSION_MAJOR) + "." +
                                std::to_string(DSV4_VERSION_MINOR) + "." +
                                std::to_string(DSV4_VERSION_PATCH);
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("dsv4 %s\n", dsv4_get_version_string());
  }
  return kExitOk;
}

}  // namespace

int parse_command(const char* command, int argc, char** argv, CommonOptions* common,
                  const std::vector<CommandOption>& options,
                  const std::function<bool(size_t, const char*)>& on_option) {
  const std::string who = std::string("dsv4 ") + command;
  std::vector<option> table(std::begin(kCommonOptions), std::end(kCommonOptions));
  for (size_t i = 0; i < options.size(); ++i) {
    table.push_back(option{options[i].name, options[i].has_value ? required_argument : no_argument,
                           nullptr, kFirstCommandOption + static_cast<int>(i)});
  }
  table.push_back(option{nullptr, 0, nullptr, 0});
  optind = 0;  // glibc: start over (this is the second getopt_long pass of the process)
  opterr = 0;  // messages are ours, one per error
  int c;
  while ((c = getopt_long(argc, argv, ":h", table.data(), nullptr)) != -1) {
    if (c == '?' || c == ':') {
      report_bad_option(who.c_str(), c, argv);
      return kExitUsage;
    }
    if (c == 'h') return -1;
    if (c >= kFirstCommandOption) {
      if (!on_option(static_cast<size_t>(c - kFirstCommandOption), optarg)) return kExitUsage;
    } else if (!apply_common(who.c_str(), c, optarg, common)) {
      return kExitUsage;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", who.c_str(),
                 argv[optind], who.c_str());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace dsv4cli

int main(int argc, char** argv) {
  using namespace dsv4cli;
  // Results reach a pipe line by line, as they are produced.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    // Common options before the command ("+": stop at the command's name).
    CommonOptions common;
    std::vector<option> table(std::begin(kCommonOptions), std::end(kCommonOptions));
    table.push_back(option{"version", no_argument, nullptr, kOptVersion});
    table.push_back(option{nullptr, 0, nullptr, 0});
    opterr = 0;
    bool version = false;
    int c;
    while ((c = getopt_long(argc, argv, "+:h", table.data(), nullptr)) != -1) {
      if (c == '?' || c == ':') {
        report_bad_option("dsv4", c, argv);
        return kExitUsage;
      }
      if (c == 'h') {
        print_usage(stdout);
        return kExitOk;
      }
      if (c == kOptVersion) {
        version = true;
      } else if (!apply_common("dsv4", c, optarg, &common)) {
        return kExitUsage;
      }
    }
    if (version) return print_version(common);
    if (optind >= argc) {
      print_usage(stderr);
      return kExitUsage;
    }
    const std::string command = argv[optind];
    const int sub_argc = argc - optind;
    char** sub_argv = argv + optind;
    if (command == "info") return command_info(common, sub_argc, sub_argv);
    if (command == "run") return command_run(common, sub_argc, sub_argv);
    if (command == "version") {
      const int st = parse_command("version", sub_argc, sub_argv, &common, {},
                                   [](size_t, const char*) { return false; });
      return st == kExitOk ? print_version(common) : st;
    }
    if (command == "help") {
      if (sub_argc < 2) {
        print_usage(stdout);
        return kExitOk;
      }
      char help[] = "--help";
      char* help_argv[] = {sub_argv[1], help, nullptr};
      const std::string topic = sub_argv[1];
      if (topic == "info") return command_info(common, 2, help_argv);
      if (topic == "run") return command_run(common, 2, help_argv);
    }
    std::fprintf(stderr, "dsv4: unknown command '%s' (commands: info, run, version, help)\n",
                 command == "help" ? sub_argv[1] : command.c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return kExitFailure;
  }
}
