// `dsv4 info`: every backend module candidate, the devices of the available ones, and which module
// a context for the chosen device gets (with the loader's debug lines explaining why).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"

namespace dsv4cli {
namespace {

const char* device_type_name(int32_t type) {
  switch (type) {
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
      return "?";
  }
}

const char* level_name(int32_t level) {
  switch (level) {
    case DSV4_LOG_ERROR:
      return "error";
    case DSV4_LOG_WARN:
      return "warn";
    case DSV4_LOG_INFO:
      return "info";
    default:
      return "debug";
  }
}

void print_loader_line(int32_t level, const char* message, void* /*user_data*/) {
  std::printf("    loader %-5s %s\n", level_name(level), message);
}

std::string format_bytes(int64_t bytes) {
  if (bytes <= 0) return "memory unknown";
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

void print_usage() {
  std::printf(
      "usage: dsv4 info [--device cpu|cuda[:N]] [--backend NAME] [--module-dir DIR]\n"
      "Lists every backend module found (name, file, availability, probe score, devices, ABI,\n"
      "status), the devices of the available modules, and which module a context for --device\n"
      "would use, with the loader's debug lines.\n");
}

}  // namespace

int command_info(const CommonOptions& common, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      print_usage();
      return kExitOk;
    }
    std::fprintf(stderr, "dsv4 info: unknown option '%s'\n", argv[i]);
    return kExitUsage;
  }
  const uint32_t v = dsv4_get_version();
  std::printf("libdsv4 %s (library %u.%u.%u, this tool built against %d.%d.%d)\n",
              dsv4_get_version_string(), v / 10000, v / 100 % 100, v % 100, DSV4_VERSION_MAJOR,
              DSV4_VERSION_MINOR, DSV4_VERSION_PATCH);

  const dsv4_ctx_options options = make_ctx_options(common);
  int32_t count = 0;
  dsv4_status st = dsv4_enumerate_backends(&options, nullptr, 0, &count);
  if (st != DSV4_STATUS_OK) return report_error("dsv4_enumerate_backends", st);
  std::vector<dsv4_backend_info> modules(static_cast<size_t>(count));
  for (auto& m : modules) {
    std::memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
  }
  int32_t filled = 0;
  st = dsv4_enumerate_backends(&options, modules.data(), count, &filled);
  if (st != DSV4_STATUS_OK) return report_error("dsv4_enumerate_backends", st);
  if (filled < count) modules.resize(static_cast<size_t>(filled));

  std::printf("\nbackend modules (%d found):\n", static_cast<int>(modules.size()));
  for (const dsv4_backend_info& m : modules) {
    std::printf("  %-8s %-11s score %-3d %-6s devices %-2d ABI %u.%u  %s\n",
                m.name[0] != '\0' ? m.name : "?", m.available ? "available" : "unavailable",
                static_cast<int>(m.score), device_type_name(m.device_type),
                static_cast<int>(m.device_count), m.module_abi >> 16, m.module_abi & 0xffffu,
                m.path);
    std::printf("           status: %s\n", m.status);
  }

  std::printf("\ndevices:\n");
  int devices_listed = 0;
  for (const dsv4_backend_info& m : modules) {
    if (!m.available) continue;
    for (int32_t i = 0; i < m.device_count; ++i) {
      dsv4_device_info d;
      std::memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      st = dsv4_get_device_info(&options, m.name, i, &d);
      if (st != DSV4_STATUS_OK) {
        std::printf("  %s %s:%d: %s: %s\n", m.name, device_type_name(m.device_type),
                    static_cast<int>(i), dsv4_status_string(st), dsv4_last_error_message());
        continue;
      }
      std::printf("  %-8s %s:%d  %s  (%d compute units, %s)\n", m.name,
                  device_type_name(d.device_type), static_cast<int>(d.device_id), d.name,
                  static_cast<int>(d.compute_units), format_bytes(d.memory_bytes).c_str());
      ++devices_listed;
    }
  }
  if (devices_listed == 0) std::printf("  (none)\n");

  std::printf("\nselection for %s%s%s:\n", device_name(common.device).c_str(),
              common.backend.empty() ? "" : ", backend ",
              common.backend.empty() ? "" : common.backend.c_str());
  dsv4_ctx_options ctx_options = options;
  ctx_options.log_level = DSV4_LOG_DEBUG;
  ctx_options.log_fn = print_loader_line;
  dsv4_ctx* ctx = nullptr;
  st = dsv4_ctx_create(&ctx_options, &ctx);
  if (st != DSV4_STATUS_OK) {
    std::printf("  no backend: %s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
    return kExitFailure;
  }
  dsv4_ctx_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  st = dsv4_ctx_get_info(ctx, &info);
  if (st != DSV4_STATUS_OK) {
    dsv4_ctx_destroy(ctx);
    return report_error("dsv4_ctx_get_info", st);
  }
  std::printf("  selected: %s (%s), reason: %s", info.backend, info.path, info.reason);
  if (info.device.device_type == DSV4_DEVICE_CPU) {
    std::printf(", %d worker threads", static_cast<int>(info.num_threads));
  }
  std::printf("\n");
  dsv4_ctx_destroy(ctx);
  return kExitOk;
}

}  // namespace dsv4cli
