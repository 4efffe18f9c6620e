// dsv4 — the libdsv4 command-line tool: `dsv4 info` shows which backend modules were found and
// which one serves a device; `dsv4 run` runs a checked, timed DeepSeek-V4 engine step.
#include <cstdio>
#include <cstring>
#include <exception>
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

std::string device_name(dsv4_device device) {
  switch (device.device_type) {
    case DSV4_DEVICE_CPU:
      return "cpu:" + std::to_string(device.device_id);
    case DSV4_DEVICE_CUDA:
      return "cuda:" + std::to_string(device.device_id);
    case DSV4_DEVICE_ROCM:
      return "rocm:" + std::to_string(device.device_id);
    case DSV4_DEVICE_ONEAPI:
      return "oneapi:" + std::to_string(device.device_id);
    default:
      return "device-type-" + std::to_string(device.device_type) + ":" +
             std::to_string(device.device_id);
  }
}

dsv4_ctx_options make_ctx_options(const CommonOptions& common) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = common.device;
  o.backend = common.backend.empty() ? nullptr : common.backend.c_str();
  o.module_dir = common.module_dir.empty() ? nullptr : common.module_dir.c_str();
  return o;
}

int report_error(const char* what, dsv4_status status) {
  std::fprintf(stderr, "dsv4: %s: %s: %s\n", what, dsv4_status_string(status),
               dsv4_last_error_message());
  return kExitFailure;
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

void print_usage(FILE* f) {
  std::fprintf(
      f,
      "usage: dsv4 <command> [options]\n"
      "\n"
      "commands:\n"
      "  info       list backend modules, their devices, and which one a device gets\n"
      "  run        run a checked, timed DeepSeek-V4 engine step (paged mode)\n"
      "  help       this text (`dsv4 run --help` for the options of run)\n"
      "  version    print the library version\n"
      "\n"
      "options of every command:\n"
      "  --device cpu|cuda[:N]   device the tensors live on (default cpu)\n"
      "  --backend NAME          use this backend module (default: DSV4_BACKEND, then the\n"
      "                          highest probe score)\n"
      "  --module-dir DIR        search DIR for backend modules first\n"
      "\n"
      "exit status: 0 success, 1 a library call failed or a result was wrong, 2 bad usage\n");
}

}  // namespace
}  // namespace dsv4cli

int main(int argc, char** argv) {
  using namespace dsv4cli;
  try {
    if (argc < 2) {
      print_usage(stderr);
      return kExitUsage;
    }
    const std::string command = argv[1];
    if (command == "help" || command == "--help" || command == "-h") {
      print_usage(stdout);
      return kExitOk;
    }
    if (command == "version" || command == "--version") {
      std::printf("dsv4 %s\n", dsv4_get_version_string());
      return kExitOk;
    }
    // Pull the common options out; the rest goes to the command.
    CommonOptions common;
    std::vector<char*> rest;
    rest.push_back(argv[1]);
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      const bool has_value = i + 1 < argc;
      if (a == "--device" || a == "--backend" || a == "--module-dir") {
        if (!has_value) {
          std::fprintf(stderr, "dsv4: %s needs a value\n", a.c_str());
          return kExitUsage;
        }
        const std::string v = argv[++i];
        if (a == "--device") {
          if (!parse_device(v, &common.device)) {
            std::fprintf(stderr, "dsv4: --device: expected cpu, cuda or cuda:N, got '%s'\n",
                         v.c_str());
            return kExitUsage;
          }
        } else if (a == "--backend") {
          common.backend = v;
        } else {
          common.module_dir = v;
        }
      } else {
        rest.push_back(argv[i]);
      }
    }
    if (command == "info") return command_info(common, static_cast<int>(rest.size()), rest.data());
    if (command == "run") return command_run(common, static_cast<int>(rest.size()), rest.data());
    std::fprintf(stderr, "dsv4: unknown command '%s'\n\n", command.c_str());
    print_usage(stderr);
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return kExitFailure;
  }
}
