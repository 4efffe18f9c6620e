#include "loader/search_paths.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <set>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "dsv4/dsv4.h"

#if !defined(DSV4_BACKEND_INSTALL_DIR) || !defined(DSV4_INSTALL_LIBDIR)
#error "DSV4_BACKEND_INSTALL_DIR and DSV4_INSTALL_LIBDIR must be defined by the build"
#endif

namespace dsv4::detail {

namespace {
std::string real_path(const std::string& path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer) == nullptr) return std::string();
  return buffer;
}

// Why `path` cannot be searched ("" if it is a directory).
const char* not_searchable(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "does not exist";
  return S_ISDIR(st.st_mode) ? "" : "not a directory";
}

// A relative directory would resolve against the current directory, which is never searched.
constexpr const char* kRelativeReason =
    "is not an absolute path (a relative one would resolve against the current directory, which "
    "is never searched for modules)";

// The configured install directory belongs to the install libdsv4 was configured for. It is
// searched only when this libdsv4 runs from there (then it is libdir/dsv4/backends anyway), or
// when its own location is unknown: a moved or copied install must not load another version's
// modules.
bool is_this_install(const std::string& lib) {
  if (lib.empty()) return true;
  const std::string configured = real_path(DSV4_INSTALL_LIBDIR);
  return !configured.empty() && configured == lib;
}
}  // namespace

std::string library_dir() {
  Dl_info info;
  // Any symbol of libdsv4 itself locates the file it was loaded from.
  if (dladdr(reinterpret_cast<void*>(&dsv4_get_version), &info) == 0 || info.dli_fname == nullptr)
    return std::string();
  std::string file = real_path(info.dli_fname);
  const size_t slash = file.rfind('/');
  if (slash == std::string::npos) return std::string();
  return file.substr(0, slash == 0 ? 1 : slash);
}

std::vector<search_dir> module_search_dirs(const char* option_module_dir, const logger& log) {
  std::vector<search_dir> wanted;
  if (option_module_dir != nullptr && option_module_dir[0] != '\0') {
    if (option_module_dir[0] != '/')
      fail(DSV4_STATUS_INVALID_ARGUMENT, "options->module_dir = '%s' %s", option_module_dir,
           kRelativeReason);
    wanted.push_back({option_module_dir, "options.module_dir"});
  }
  // Ignored in secure-execution mode (setuid): an attacker must not choose code to load.
  if (const char* env = env_get_secure("DSV4_BACKEND_PATH")) {
    std::string list(env);
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      if (colon == std::string::npos) colon = list.size();
      std::string dir = list.substr(start, colon - start);
      if (!dir.empty()) {
        if (dir[0] == '/') {
          wanted.push_back({dir, "DSV4_BACKEND_PATH"});
        } else {
          log.logf(DSV4_LOG_WARN, "DSV4_BACKEND_PATH entry '%s' ignored: it %s", dir.c_str(),
                   kRelativeReason);
        }
      }
      start = colon + 1;
    }
  }
  const std::string lib = library_dir();
  if (!lib.empty()) {
    wanted.push_back({lib + "/dsv4/backends", "libdir/dsv4/backends"});
    wanted.push_back({lib, "libdir"});
  }
  if (is_this_install(lib)) wanted.push_back({DSV4_BACKEND_INSTALL_DIR, "install dir"});

  std::vector<search_dir> dirs;
  std::set<std::string> seen;
  for (auto& d : wanted) {
    if (const char* why = not_searchable(d.path); why[0] != '\0') {
      log.logf(DSV4_LOG_DEBUG, "search dir %s (%s): %s", d.path.c_str(), d.origin.c_str(), why);
      continue;
    }
    const std::string real = real_path(d.path);
    if (real.empty() || !seen.insert(real).second) continue;
    dirs.push_back(std::move(d));
  }
  return dirs;
}

std::vector<module_file> module_files_in(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return {};
  while (const dirent* entry = readdir(handle)) {
    if (fnmatch("libdsv4-*.so", entry->d_name, 0) == 0) names.emplace_back(entry->d_name);
  }
  closedir(handle);
  std::sort(names.begin(), names.end());
  std::vector<module_file> files;
  for (const auto& name : names) {
    std::string path = dir + (dir.back() == '/' ? "" : "/") + name;
    std::string real = real_path(path);
    struct stat st;
    if (!real.empty() && stat(real.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      files.push_back({std::move(path), std::move(real)});
  }
  return files;
}

std::string module_name_from_file(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string prefix = "libdsv4-";
  const std::string suffix = ".so";
  if (file.size() > prefix.size() + suffix.size() && file.compare(0, prefix.size(), prefix) == 0 &&
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0)
    return file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
  return file;
}

}  // namespace dsv4::detail
