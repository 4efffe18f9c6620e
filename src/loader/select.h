// Backend discovery and selection: every module file in the search path becomes a candidate;
// ctx creation picks options.backend > DSV4_BACKEND > highest probe score for the device type. A
// module is named after its file (libdsv4-<name>.so), so a named backend loads only its own files.
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
  std::string origin;                     // its search directory's origin ("options.module_dir")
  const loaded_module* module = nullptr;  // NULL when not loaded (disabled, another was named)
  std::string name;                       // the file's module name, or what the module says
  bool available = false;  // usable, probed, named after its file, not shadowed, not disabled
  std::string status;      // "ok" or why not
};

struct discovery {
  std::vector<search_dir> dirs;
  std::vector<candidate> candidates;  // search order
};

// Lists every module file of the search path and loads (dlopen, negotiate, probe) those `only`
// refers to: all when it is empty, else the files named `only` (or its family "only-*" when no
// file has the exact name). DSV4_BACKEND_DISABLE is honoured; a module whose name differs from
// its file's is rejected, and of several with one name the first in the search order wins.
discovery discover_modules(const char* option_module_dir, const logger& log,
                           const std::string& only = std::string());

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
  std::string reason;  // "options.backend 'cpu'; found in libdir/dsv4/backends", "score 40, ..."
};

// Selects a module and opens the device (module ctx_create). Logs one debug line per candidate.
// Throws api_error (NO_BACKEND with the candidates and their reasons, or ctx_create's status).
opened_backend open_backend(const backend_request& request, const logger& log);

// The available candidate a backend name refers to, for queries that need no context
// (dsv4_get_device_info). `name` NULL = the same rule as open_backend minus ctx_create.
candidate find_backend(const char* module_dir, const char* name, int32_t device_type,
                       const logger& log);

}  // namespace dsv4::detail
