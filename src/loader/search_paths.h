// Where backend modules are searched for (dsv4.h): options.module_dir, DSV4_BACKEND_PATH,
// <dir of libdsv4.so>/dsv4/backends, <dir of libdsv4.so>, the configured install directory when
// libdsv4.so runs from that install. Never the current or the executable's directory: relative
// directories are refused.
#pragma once

#include <string>
#include <vector>

namespace dsv4::detail {

struct logger;

struct search_dir {
  std::string path;    // absolute, as configured
  std::string origin;  // "options.module_dir", "DSV4_BACKEND_PATH", "libdir/dsv4/backends", ...
};

// The directories in search order, each real directory once. Throws api_error
// (INVALID_ARGUMENT) for a relative option_module_dir.
std::vector<search_dir> module_search_dirs(const char* option_module_dir, const logger& log);

struct module_file {
  std::string path;  // dir + "/" + file name, as found
  std::string real;  // realpath: the identity of the module (same file seen twice -> once)
};

// Module files (libdsv4-*.so, regular files after symlinks) of one directory, sorted by name.
std::vector<module_file> module_files_in(const std::string& dir);

// The file name "libdsv4-<name>.so" -> "<name>".
std::string module_name_from_file(const std::string& path);

// Directory holding libdsv4.so itself ("" if it cannot be found).
std::string library_dir();

}  // namespace dsv4::detail
