#include "loader/select.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace dsv4::detail {

namespace {

std::vector<std::string> disabled_globs() {
  std::vector<std::string> globs;
  const char* env = env_get("DSV4_BACKEND_DISABLE");
  if (env == nullptr) return globs;
  std::string list(env);
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string glob = list.substr(start, comma - start);
    glob.erase(0, glob.find_first_not_of(" \t"));
    glob.erase(glob.find_last_not_of(" \t") + 1);
    if (!glob.empty()) globs.push_back(glob);
    start = comma + 1;
  }
  return globs;
}

bool is_disabled(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& g : globs)
    if (!name.empty() && fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

const char* device_type_name(int32_t type) {
  switch (type) {
    case DSV4_DEVICE_CPU:
      return "CPU";
    case DSV4_DEVICE_CUDA:
      return "CUDA";
    case DSV4_DEVICE_CUDA_HOST:
      return "CUDA host";
    case DSV4_DEVICE_OPENCL:
      return "OpenCL";
    case DSV4_DEVICE_ROCM:
      return "ROCm";
    case DSV4_DEVICE_CUDA_MANAGED:
      return "CUDA managed";
    case DSV4_DEVICE_ONEAPI:
      return "oneAPI";
    default:
      return "unknown";
  }
}

// The requested backend: options.backend, else DSV4_BACKEND; "name" or "name:index".
struct named_request {
  std::string name;           // "" = automatic
  std::string origin;         // "options.backend" / "DSV4_BACKEND"
  int32_t device_index = -1;  // from "name:index", -1 if absent
};

named_request parse_named_request(const char* option_backend) {
  named_request r;
  const char* text = nullptr;
  if (option_backend != nullptr && option_backend[0] != '\0') {
    text = option_backend;
    r.origin = "options.backend";
  } else if (const char* env = env_get("DSV4_BACKEND"); env != nullptr && env[0] != '\0') {
    text = env;
    r.origin = "DSV4_BACKEND";
  }
  if (text == nullptr) return r;
  std::string value(text);
  if (value == "auto") {
    r.origin.clear();
    return r;
  }
  const size_t colon = value.rfind(':');
  if (colon != std::string::npos) {
    const std::string index = value.substr(colon + 1);
    const char* what = r.origin == "DSV4_BACKEND" ? "DSV4_BACKEND" : "options->backend";
    if (!parse_int32(index.c_str(), 0, INT32_MAX, &r.device_index))
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s = '%s': the device index after ':' is not a number",
           what, text);
    value.resize(colon);
  }
  r.name = value;
  return r;
}

std::string module_line(const candidate& c) {
  const loaded_module* m = c.module;
  return strprintf("module %s: name=%s abi=%s score=%d devices=%d", c.path.c_str(),
                   c.name.empty() ? "-" : c.name.c_str(),
                   m != nullptr && m->abi != 0 ? abi_string(m->abi).c_str() : "-",
                   m != nullptr ? m->score : 0, m != nullptr ? m->device_count : 0);
}

// Candidates `name` refers to: the exact name, else the family "name-*" (cpu -> cpu-avx2, ...).
std::vector<size_t> matching(const discovery& d, const std::string& name) {
  std::vector<size_t> exact, family;
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const std::string& n = d.candidates[i].name;
    if (n == name)
      exact.push_back(i);
    else if (n.size() > name.size() && n.compare(0, name.size(), name) == 0 &&
             n[name.size()] == '-')
      family.push_back(i);
  }
  return exact.empty() ? family : exact;
}

}  // namespace

discovery discover_modules(const char* option_module_dir, const logger& log) {
  discovery d;
  d.dirs = module_search_dirs(option_module_dir, log);
  const std::vector<std::string> globs = disabled_globs();
  std::map<std::string, bool> seen_files;
  std::map<std::string, std::string> first_with_name;
  for (const auto& dir : d.dirs) {
    for (const auto& file : module_files_in(dir.path)) {
      if (!seen_files.emplace(file.real, true).second) continue;  // same file via two paths
      candidate c;
      c.path = file.path;
      const std::string file_name = module_name_from_file(file.path);
      if (is_disabled(globs, file_name)) {
        c.name = file_name;
        c.status = "disabled by DSV4_BACKEND_DISABLE";
        d.candidates.push_back(std::move(c));
        continue;
      }
      c.module = &load_module(file.real);
      c.name = c.module->name;
      c.available = c.module->available;
      c.status = c.module->status;
      if (c.module->usable && is_disabled(globs, c.name)) {
        c.available = false;
        c.status = "disabled by DSV4_BACKEND_DISABLE";
      } else if (c.module->usable) {
        auto it = first_with_name.find(c.name);
        if (it != first_with_name.end()) {
          c.available = false;
          c.status = "shadowed by " + it->second;
        } else {
          first_with_name.emplace(c.name, c.path);
        }
      }
      d.candidates.push_back(std::move(c));
    }
  }
  return d;
}

std::string describe_candidates(const discovery& d) {
  std::string s;
  if (d.candidates.empty()) {
    s = "no module files libdsv4-*.so in";
    if (d.dirs.empty()) return s + " any search directory (none exists)";
    for (size_t i = 0; i < d.dirs.size(); ++i)
      s += strprintf("%s %s (%s)", i == 0 ? "" : ",", d.dirs[i].path.c_str(),
                     d.dirs[i].origin.c_str());
    return s;
  }
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const candidate& c = d.candidates[i];
    if (i != 0) s += "; ";
    s += strprintf("%s [%s]: %s", c.name.empty() ? "?" : c.name.c_str(), c.path.c_str(),
                   c.status.c_str());
    if (c.available)
      s += strprintf(", score %d, device type %d (%s)", c.module->score,
                     c.module->iface.device_type, device_type_name(c.module->iface.device_type));
  }
  return s;
}

const candidate& find_backend(const discovery& d, const char* name, int32_t device_type) {
  const named_request req = parse_named_request(name);
  const candidate* best = nullptr;
  if (!req.name.empty()) {
    for (size_t i : matching(d, req.name)) {
      const candidate& c = d.candidates[i];
      if (c.available && (best == nullptr || c.module->score > best->module->score)) best = &c;
    }
    if (best == nullptr)
      fail(DSV4_STATUS_NO_BACKEND, "%s = '%s': no available module of that name (%s)",
           req.origin == "DSV4_BACKEND" ? "DSV4_BACKEND" : "backend", req.name.c_str(),
           describe_candidates(d).c_str());
    return *best;
  }
  for (const auto& c : d.candidates) {
    if (c.available && c.module->iface.device_type == device_type &&
        (best == nullptr || c.module->score > best->module->score))
      best = &c;
  }
  if (best == nullptr)
    fail(DSV4_STATUS_NO_BACKEND, "no available module serves device type %d (%s): %s", device_type,
         device_type_name(device_type), describe_candidates(d).c_str());
  return *best;
}

opened_backend open_backend(const backend_request& request, const logger& log) {
  const named_request req = parse_named_request(request.backend);
  const discovery d = discover_modules(request.module_dir, log);
  dsv4_device device = request.device;
  if (req.device_index >= 0) device.device_id = req.device_index;

  // One verdict per candidate, logged at the end (exactly one debug line each).
  std::vector<std::string> verdict(d.candidates.size());
  std::vector<size_t> order;  // candidates to try, best first
  const std::vector<size_t> named =
      req.name.empty() ? std::vector<size_t>() : matching(d, req.name);
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const candidate& c = d.candidates[i];
    if (!c.available) {
      verdict[i] = c.module == nullptr || c.status.rfind("shadowed", 0) == 0 ||
                           c.status.rfind("disabled", 0) == 0
                       ? "rejected (" + c.status + ")"
                       : "rejected (unavailable: " + c.status + ")";
      continue;
    }
    const int32_t type = c.module->iface.device_type;
    if (!req.name.empty() && std::find(named.begin(), named.end(), i) == named.end()) {
      verdict[i] =
          "rejected (not the requested backend '" + req.name + "' from " + req.origin + ")";
    } else if (type != device.device_type) {
      verdict[i] = strprintf("rejected (serves device type %d (%s), not %d (%s))", type,
                             device_type_name(type), device.device_type,
                             device_type_name(device.device_type));
    } else if (device.device_id >= c.module->device_count) {
      verdict[i] = strprintf("rejected (device_id %d out of range: %d device(s))", device.device_id,
                             c.module->device_count);
    } else {
      order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return d.candidates[a].module->score > d.candidates[b].module->score;
  });

  const auto log_verdicts = [&]() {
    if (!log.enabled(DSV4_LOG_DEBUG)) return;
    for (size_t i = 0; i < d.candidates.size(); ++i)
      log.logf(DSV4_LOG_DEBUG, "%s: %s", module_line(d.candidates[i]).c_str(), verdict[i].c_str());
  };

  if (order.empty()) {
    log_verdicts();
    if (!req.name.empty() && named.empty()) {
      fail(DSV4_STATUS_NO_BACKEND, "%s = '%s': no module of that name (%s)",
           req.origin == "DSV4_BACKEND" ? "DSV4_BACKEND" : "options->backend", req.name.c_str(),
           describe_candidates(d).c_str());
    }
    if (!req.name.empty()) {
      std::string why;
      for (size_t i : named)
        why += strprintf("%s%s [%s]: %s", why.empty() ? "" : "; ", d.candidates[i].name.c_str(),
                         d.candidates[i].path.c_str(), verdict[i].c_str());
      fail(DSV4_STATUS_NO_BACKEND,
           "%s = '%s' cannot serve options->device = {type %d (%s), id %d}: %s",
           req.origin == "DSV4_BACKEND" ? "DSV4_BACKEND" : "options->backend", req.name.c_str(),
           device.device_type, device_type_name(device.device_type), device.device_id, why.c_str());
    }
    std::string why;
    for (size_t i = 0; i < d.candidates.size(); ++i)
      why += strprintf("%s%s [%s]: %s", i == 0 ? "" : "; ",
                       d.candidates[i].name.empty() ? "?" : d.candidates[i].name.c_str(),
                       d.candidates[i].path.c_str(), verdict[i].c_str());
    fail(DSV4_STATUS_NO_BACKEND,
         "no usable module for options->device = {type %d (%s), id %d} (%s)", device.device_type,
         device_type_name(device.device_type), device.device_id,
         d.candidates.empty() ? describe_candidates(d).c_str() : why.c_str());
  }

  std::string failures;
  dsv4_status last_status = DSV4_STATUS_NO_BACKEND;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const candidate& c = d.candidates[i];
    dsv4_mod_ctx_config config{};
    config.struct_size = sizeof config;
    config.device_id = device.device_id;
    config.num_threads = request.num_threads;
    void* mctx = nullptr;
    clear_module_error();
    const dsv4_status st = c.module->iface.ctx_create(&config, &mctx);
    if (st == DSV4_STATUS_OK && mctx != nullptr) {
      opened_backend out;
      out.module = c.module;
      out.path = c.path;
      out.mctx = mctx;
      out.device = device;
      if (!req.name.empty())
        out.reason = req.origin;
      else
        out.reason = strprintf("score %d", c.module->score);
      if (k == 0) {
        verdict[i] =
            req.name.empty() ? "selected (highest score)" : "selected (" + req.origin + ")";
      } else {
        verdict[i] = "selected (next best after: " + failures + ")";
        out.reason += " (after " + failures + ")";
      }
      for (size_t j = k + 1; j < order.size(); ++j)
        verdict[order[j]] =
            d.candidates[order[j]].module->score == c.module->score
                ? strprintf("rejected (same score as %s (%d), which comes first in search order)",
                            c.name.c_str(), c.module->score)
                : strprintf("rejected (lower score than %s (%d))", c.name.c_str(), c.module->score);
      log_verdicts();
      return out;
    }
    std::string message = take_module_error();
    last_status = st == DSV4_STATUS_OK ? DSV4_STATUS_INTERNAL : st;
    if (message.empty())
      message = st == DSV4_STATUS_OK ? "returned no context" : status_name(st);
    else
      message = std::string(status_name(st)) + ": " + message;
    verdict[i] = "rejected (ctx_create failed: " + message + ")";
    if (req.name.empty() && k + 1 < order.size())
      log.logf(DSV4_LOG_WARN, "backend %s: ctx_create failed (%s); trying the next best module",
               c.name.c_str(), message.c_str());
    if (!failures.empty()) failures += "; ";
    failures += c.name + " ctx_create failed: " + message;
  }
  log_verdicts();
  fail(last_status, "backend ctx_create failed for device type %d id %d: %s", device.device_type,
       device.device_id, failures.c_str());
}

}  // namespace dsv4::detail
