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
#include "base/log.h"
#include "dsv4/dsv4.h"

#ifndef DSV4_BACKEND_INSTALL_DIR
#error "DSV4_BACKEND_INSTALL_DIR must be defined by the build"
#endif

namespace dsv4::detail {

namespace {
std::string real_path(const std::string& path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer) == nullptr) return std::string();
  return buffer;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
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
  if (option_module_dir != nullptr && option_module_dir[0] != '\0')
    wanted.push_back({option_module_dir, "options.module_dir"});
  // Ignored in secure-execution mode (setuid): an attacker must not choose code to load.
  if (const char* env = env_get_secure("DSV4_BACKEND_PATH")) {
    std::string list(env);
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      if (colon == std::string::npos) colon = list.size();
      std::string dir = list.substr(start, colon - start);
      if (!dir.empty()) {
        // A relative entry would resolve against the current directory, which is never searched.
        if (dir[0] == '/') {
          wanted.push_back({dir, "DSV4_BACKEND_PATH"});
        } else {
          log.logf(DSV4_LOG_WARN, "DSV4_BACKEND_PATH entry '%s' ignored: not an absolute path",
                   dir.c_str());
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
  wanted.push_back({DSV4_BACKEND_INSTALL_DIR, "install dir"});

  std::vector<search_dir> dirs;
  std::set<std::string> seen;
  for (auto& d : wanted) {
    if (!is_directory(d.path)) {
      log.logf(DSV4_LOG_DEBUG, "search dir %s (%s): not a directory", d.path.c_str(),
               d.origin.c_str());
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
