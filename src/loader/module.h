// One backend module file: dlopen, entry-point negotiation, interface table checks and probe.
// Modules are cached process-wide by real path and never unloaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsv4_backend.h"

namespace dsv4::detail {

// Size of the module ABI 2.0 interface table: the host rejects anything smaller.
constexpr size_t kIface20Size = offsetof(dsv4_backend_iface, merge) + sizeof(void*);

struct loaded_module {
  std::string real_path;
  std::string name;        // iface->name ("" if the module could not be read)
  std::string version;     // iface->module_version
  bool usable = false;     // loaded, negotiated and the table is complete
  bool available = false;  // usable and probe score > 0
  std::string status;      // "ok" or why not available ("ABI major 2 != 1", "no CUDA driver")
  uint32_t abi = 0;        // negotiated module ABI (major << 16 | minor), 0 if none
  int32_t score = 0;
  int32_t device_count = 0;
  dsv4_backend_iface iface{};  // copy of the module's table; slots past its struct_size are NULL
};

// Loads (once per process) the module at `real_path`, negotiates and probes it. Never throws
// except std::bad_alloc; failures are recorded in the returned record. Thread-safe.
const loaded_module& load_module(const std::string& real_path);

// The host services table handed to every module.
const dsv4_host_services& host_services() noexcept;

// "1.0" from major << 16 | minor.
std::string abi_string(uint32_t abi);

}  // namespace dsv4::detail
