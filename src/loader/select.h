// Backend discovery and selection: every module file in the search path becomes a candidate;
// ctx creation picks options.backend > DSV4_BACKEND > highest probe score for the device type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loader/module.h"
#include "loader/search_paths.h"

namespace dsv4::detail {

struct logger;

struct candidate {
  std::string path;                       // file as found in the search path
  const loaded_module* module = nullptr;  // NULL when disabled (never loaded)
  std::string name;                       // module name ("" if it could not be read)
  bool available = false;                 // usable, probed, not shadowed, not disabled
  std::string status;                     // "ok" or why not
};

struct discovery {
  std::vector<search_dir> dirs;
  std::vector<candidate> candidates;  // search order
};

// Loads every module of the search path (DSV4_BACKEND_DISABLE honoured; shadowing applied).
discovery discover_modules(const char* option_module_dir, const logger& log);

// "cpu [/x/libdsv4-cpu.so]: ok, score 30, device type 1; ..." (or which dirs were searched).
std::string describe_candidates(const discovery& d);

struct backend_request {
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  const char* backend = nullptr;  // options->backend (may be NULL)
  const char* module_dir = nullptr;
  int32_t num_threads = 0;  // resolved by the caller
};

struct opened_backend {
  const loaded_module* module = nullptr;
  std::string path;
  void* mctx = nullptr;
  dsv4_device device{DSV4_DEVICE_CPU, 0};
  std::string reason;  // "options.backend", "DSV4_BACKEND", "score 40"
};

// Selects a module and opens the device (module ctx_create). Logs one debug line per candidate.
// Throws api_error (NO_BACKEND with the candidates and their reasons, or ctx_create's status).
opened_backend open_backend(const backend_request& request, const logger& log);

// The available candidate a backend name refers to, for queries that need no context
// (dsv4_get_device_info). `name` NULL = the same rule as open_backend minus ctx_create.
const candidate& find_backend(const discovery& d, const char* name, int32_t device_type);

}  // namespace dsv4::detail
