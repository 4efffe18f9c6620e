// `dsv4 info`: every backend module candidate, the devices of the available ones, and which module
// a context for the chosen device gets (with the loader's debug lines explaining why).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"

namespace dsv4cli {
namespace {

using json = nlohmann::ordered_json;

std::string format_bytes(int64_t bytes) {
  if (bytes <= 0) return "memory unknown";
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

std::string abi_text(uint32_t abi) {
  return std::to_string(abi >> 16) + "." + std::to_string(abi & 0xffffu);
}

void print_usage() {
  std::printf(
      "usage: dsv4 [options] info\n"
      "Lists every backend module found (name, file, availability, probe score, devices, ABI,\n"
      "status), the devices of the available modules, and which module a context for --device\n"
      "(and --backend) would use, with the loader's lines saying why.\n"
      "options: --device, --backend, --module-dir, --json, --no-progress (see dsv4 --help)\n");
}

struct Selection {
  bool ok = false;
  dsv4_ctx_info info{};
  std::string error;
  std::vector<std::string> loader_lines;
};

}  // namespace

int command_info(CommonOptions common, int argc, char** argv) {
  const int parsed =
      parse_command("info", argc, argv, &common, {}, [](size_t, const char*) { return false; });
  if (parsed == -1) {
    print_usage();
    return kExitOk;
  }
  if (parsed != kExitOk) return parsed;
  Console console(common);
  console.command = "dsv4 info";

  // With --json, a failure still ends in a document with the error.
  const auto failed = [&](int status) {
    if (common.json) {
      json doc;
      doc["error"] = console.last_error();
      doc["warnings"] = console.warnings();
      std::printf("%s\n", doc.dump(2).c_str());
    }
    return status;
  };
  const dsv4_ctx_options options = make_ctx_options(common, &console);
  int32_t count = 0;
  dsv4_status st = dsv4_enumerate_backends(&options, nullptr, 0, &count);
  if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_enumerate_backends", st));
  std::vector<dsv4_backend_info> modules(static_cast<size_t>(count));
  for (auto& m : modules) {
    std::memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
  }
  int32_t filled = 0;
  st = dsv4_enumerate_backends(&options, modules.data(), count, &filled);
  if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_enumerate_backends", st));
  if (filled < count) modules.resize(static_cast<size_t>(filled));

  struct Device {
    std::string module;
    dsv4_device_info info;
  };
  std::vector<Device> devices;
  for (const dsv4_backend_info& m : modules) {
    if (!m.available) continue;
    for (int32_t i = 0; i < m.device_count; ++i) {
      dsv4_device_info d;
      std::memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      st = dsv4_get_device_info(&options, m.name, i, &d);
      if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_get_device_info", st));
      devices.push_back({m.name, d});
    }
  }

  // The selection a context would make, with every loader line (debug level) that explains it.
  Selection sel;
  dsv4_ctx_options ctx_options = options;
  ctx_options.log_level = DSV4_LOG_DEBUG;
  console.set_capture(&sel.loader_lines);
  dsv4_ctx* ctx = nullptr;
  st = dsv4_ctx_create(&ctx_options, &ctx);
  console.set_capture(nullptr);
  if (st == DSV4_STATUS_OK) {
    sel.info.struct_size = sizeof sel.info;
    st = dsv4_ctx_get_info(ctx, &sel.info);
    dsv4_ctx_destroy(ctx);
    if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_ctx_get_info", st));
    sel.ok = true;
  } else {
    sel.error = std::string(dsv4_last_error_message()) + " [" + dsv4_status_string(st) + "]";
  }

  const uint32_t v = dsv4_get_version();
  if (common.json) {
    json doc;
    doc["library"] = {{"version", dsv4_get_version_string()},
                      {"version_number", v},
                      {"tool_built_against", std::to_string(DSV4_VERSION_MAJOR) + "." +
                                                 std::to_string(DSV4_VERSION_MINOR) + "." +
                                                 std::to_string(DSV4_VERSION_PATCH)}};
    json mods = json::array();
    for (const dsv4_backend_info& m : modules) {
      mods.push_back({{"name", m.name},
                      {"available", m.available != 0},
                      {"score", m.score},
                      {"device_type", device_type_name(m.device_type)},
                      {"device_count", m.device_count},
                      {"module_abi", abi_text(m.module_abi)},
                      {"path", m.path},
                      {"status", m.status}});
    }
    doc["modules"] = mods;
    json devs = json::array();
    for (const Device& d : devices) {
      devs.push_back({{"module", d.module},
                      {"device", device_name({d.info.device_type, d.info.device_id})},
                      {"name", d.info.name},
                      {"compute_units", d.info.compute_units},
                      {"memory_bytes", d.info.memory_bytes}});
    }
    doc["devices"] = devs;
    json s;
    s["device"] = device_name(common.device);
    s["backend_requested"] = common.backend.empty() ? json(nullptr) : json(common.backend);
    if (sel.ok) {
      s["selected"] = {{"name", sel.info.backend},
                       {"path", sel.info.path},
                       {"reason", sel.info.reason},
                       {"device", device_name(sel.info.device)},
                       {"threads", sel.info.num_threads}};
      s["error"] = nullptr;
    } else {
      s["selected"] = nullptr;
      s["error"] = sel.error;
    }
    s["loader"] = sel.loader_lines;
    doc["selection"] = s;
    doc["warnings"] = console.warnings();
    std::printf("%s\n", doc.dump(2).c_str());
    return sel.ok ? kExitOk : kExitFailure;
  }

  std::printf("libdsv4 %s (library %u.%u.%u, this tool built against %d.%d.%d)\n",
              dsv4_get_version_string(), v / 10000, v / 100 % 100, v % 100, DSV4_VERSION_MAJOR,
              DSV4_VERSION_MINOR, DSV4_VERSION_PATCH);
  std::printf("\nbackend modules (%d found):\n", static_cast<int>(modules.size()));
  for (const dsv4_backend_info& m : modules) {
    std::printf("  %-8s %-11s score %-3d %-6s devices %-2d ABI %s  %s\n",
                m.name[0] != '\0' ? m.name : "?", m.available ? "available" : "unavailable",
                static_cast<int>(m.score), device_type_name(m.device_type),
                static_cast<int>(m.device_count), abi_text(m.module_abi).c_str(), m.path);
    std::printf("           status: %s\n", m.status);
  }
  std::printf("\ndevices:\n");
  for (const Device& d : devices) {
    std::printf("  %-8s %s  %s  (%d compute units, %s)\n", d.module.c_str(),
                device_name({d.info.device_type, d.info.device_id}).c_str(), d.info.name,
                static_cast<int>(d.info.compute_units), format_bytes(d.info.memory_bytes).c_str());
  }
  if (devices.empty()) std::printf("  (none)\n");

  std::printf("\nselection for %s%s%s:\n", device_name(common.device).c_str(),
              common.backend.empty() ? "" : ", backend ", common.backend.c_str());
  for (const std::string& line : sel.loader_lines) std::printf("    loader: %s\n", line.c_str());
  if (!sel.ok) {
    std::printf("  no backend: %s\n", sel.error.c_str());
    return kExitFailure;
  }
  std::printf("  selected: %s (%s), reason: %s", sel.info.backend, sel.info.path, sel.info.reason);
  if (sel.info.device.device_type == DSV4_DEVICE_CPU)
    std::printf(", %d worker threads", static_cast<int>(sel.info.num_threads));
  std::printf("\n");
  return kExitOk;
}

}  // namespace dsv4cli
