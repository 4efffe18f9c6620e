#include "loader/module.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace dsv4::detail {

namespace {

void host_log(int32_t level, const char* module_name, const char* message) {
  const logger& log = current_logger();
  if (!log.enabled(level)) return;
  log.logf(level, "%s: %s", module_name != nullptr ? module_name : "module",
           message != nullptr ? message : "");
}

void host_set_error(const char* message) { set_module_error(message); }

const char* host_get_env(const char* name) { return name != nullptr ? env_get(name) : nullptr; }

const dsv4_host_services kHostServices = {
    sizeof(dsv4_host_services), DSV4_MODULE_ABI_VERSION, host_log, host_set_error, host_get_env,
};

std::mutex g_modules_mutex;
// Never freed: modules stay loaded for the life of the process (their threads may still run).
std::map<std::string, std::unique_ptr<loaded_module>>* g_modules = nullptr;

// Negotiates with the module and checks its table; fills m.status on failure.
bool open_module(loaded_module& m) {
  // RTLD_NODELETE: even if someone dlcloses our handle, the code stays mapped.
  void* handle = dlopen(m.real_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    m.status = std::string("dlopen failed: ") + (why != nullptr ? why : "unknown error");
    return false;
  }
  dlerror();
  void* symbol = dlsym(handle, DSV4_MODULE_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    m.status = "no entry symbol " DSV4_MODULE_ENTRY_SYMBOL;
    return false;
  }
  dsv4_backend_entry_fn entry;
  static_assert(sizeof entry == sizeof symbol, "function and object pointers differ in size");
  std::memcpy(&entry, &symbol, sizeof entry);

  uint32_t abi = DSV4_MODULE_ABI_VERSION;
  const dsv4_backend_iface* iface = nullptr;
  clear_module_error();
  const dsv4_status st = entry(&abi, &kHostServices, &iface);
  const std::string module_message = take_module_error();
  if (st != DSV4_STATUS_OK) {
    m.status = std::string("entry returned ") + status_name(st) + " (module ABI " +
               abi_string(abi) + ", host " + abi_string(DSV4_MODULE_ABI_VERSION) + ")";
    if (!module_message.empty()) m.status += ": " + module_message;
    return false;
  }
  if ((abi >> 16) != DSV4_MODULE_ABI_MAJOR) {
    m.status = strprintf("ABI major %u != %u", abi >> 16, DSV4_MODULE_ABI_MAJOR);
    return false;
  }
  // A module may speak a newer minor; we use the older of the two.
  if ((abi & 0xffffu) > DSV4_MODULE_ABI_MINOR) abi = DSV4_MODULE_ABI_VERSION;
  if (iface == nullptr) {
    m.status = "entry returned no interface table";
    return false;
  }
  if (iface->struct_size < kIface20Size) {
    m.status = strprintf("interface table too small (%u < %zu bytes of module ABI 2.0)",
                         iface->struct_size, kIface20Size);
    return false;
  }
  // Copy what the module declared; anything past it stays NULL.
  std::memcpy(&m.iface, iface, std::min<size_t>(iface->struct_size, sizeof m.iface));
  m.abi = abi;
  if (m.iface.name == nullptr || m.iface.name[0] == '\0') {
    m.status = "interface table has no name";
    return false;
  }
  m.name.assign(m.iface.name, strnlen(m.iface.name, 31));
  m.version = m.iface.module_version != nullptr ? m.iface.module_version : "";
  struct required_slot {
    const char* name;
    bool present;
  };
  const required_slot slots[] = {
      {"probe", m.iface.probe != nullptr},
      {"ctx_create", m.iface.ctx_create != nullptr},
      {"ctx_destroy", m.iface.ctx_destroy != nullptr},
      {"plan_create", m.iface.plan_create != nullptr},
      {"plan_destroy", m.iface.plan_destroy != nullptr},
      {"plan_get_workspace_size", m.iface.plan_get_workspace_size != nullptr},
      {"run", m.iface.run != nullptr},
  };
  for (const auto& slot : slots) {
    if (!slot.present) {
      m.status = std::string("interface slot ") + slot.name + " is NULL";
      return false;
    }
  }
  return true;
}

void probe_module(loaded_module& m) {
  char reason[256] = "";
  int32_t score = 0;
  int32_t count = 0;
  clear_module_error();
  const dsv4_status st = m.iface.probe(&score, &count, reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  const std::string module_message = take_module_error();
  m.score = score;
  m.device_count = count;
  if (st != DSV4_STATUS_OK) {
    m.status = std::string("probe failed: ") + status_name(st);
    if (reason[0] != '\0')
      m.status += std::string(": ") + reason;
    else if (!module_message.empty())
      m.status += ": " + module_message;
    m.score = 0;
    return;
  }
  if (score <= 0) {
    m.score = 0;
    m.status = reason[0] != '\0' ? std::string(reason) : std::string("probe score 0");
    return;
  }
  m.available = true;
  m.status = "ok";
}

}  // namespace

std::string abi_string(uint32_t abi) { return strprintf("%u.%u", abi >> 16, abi & 0xffffu); }

const dsv4_host_services& host_services() noexcept { return kHostServices; }

const loaded_module& load_module(const std::string& real_path) {
  std::lock_guard<std::mutex> lock(g_modules_mutex);
  if (g_modules == nullptr) g_modules = new std::map<std::string, std::unique_ptr<loaded_module>>();
  auto it = g_modules->find(real_path);
  if (it != g_modules->end()) return *it->second;
  auto m = std::make_unique<loaded_module>();
  m->real_path = real_path;
  m->usable = open_module(*m);
  if (m->usable) probe_module(*m);
  const loaded_module& ref = *m;
  g_modules->emplace(real_path, std::move(m));
  return ref;
}

}  // namespace dsv4::detail
