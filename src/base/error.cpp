#include "base/error.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace dsv4::detail {

namespace {
// Storage of dsv4_last_error_message(). A fixed buffer, not a std::string, so setting it never
// allocates and never fails (messages are truncated to the buffer).
constexpr size_t kMessageCapacity = 2048;
thread_local char t_last_error[kMessageCapacity] = "";
thread_local char t_module_error[kMessageCapacity] = "";
thread_local bool t_module_error_set = false;

void copy_message(char* dst, const char* src) noexcept {
  std::snprintf(dst, kMessageCapacity, "%s", src != nullptr ? src : "");
}

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::vector<char> buffer(static_cast<size_t>(n) + 1);
  std::vsnprintf(buffer.data(), buffer.size(), fmt, args);
  return std::string(buffer.data(), static_cast<size_t>(n));
}
}  // namespace

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return s;
}

void fail(dsv4_status status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  throw api_error(status, std::move(s));
}

void set_last_error(const std::string& message) noexcept {
  copy_message(t_last_error, message.c_str());
}

void set_last_error_for(const char* fn, const char* part1, const char* part2) noexcept {
  std::snprintf(t_last_error, kMessageCapacity, "%s: %s%s", fn, part1, part2);
}

const char* last_error() noexcept { return t_last_error; }

void clear_module_error() noexcept {
  t_module_error[0] = '\0';
  t_module_error_set = false;
}

void set_module_error(const char* message) noexcept {
  copy_message(t_module_error, message);
  t_module_error_set = true;
}

std::string take_module_error() {
  std::string s = t_module_error_set ? std::string(t_module_error) : std::string();
  clear_module_error();
  return s;
}

const char* status_name(dsv4_status status) noexcept {
  switch (status) {
    case DSV4_STATUS_OK:
      return "DSV4_STATUS_OK";
    case DSV4_STATUS_INVALID_ARGUMENT:
      return "DSV4_STATUS_INVALID_ARGUMENT";
    case DSV4_STATUS_UNSUPPORTED:
      return "DSV4_STATUS_UNSUPPORTED";
    case DSV4_STATUS_NO_BACKEND:
      return "DSV4_STATUS_NO_BACKEND";
    case DSV4_STATUS_BACKEND_ERROR:
      return "DSV4_STATUS_BACKEND_ERROR";
    case DSV4_STATUS_OUT_OF_MEMORY:
      return "DSV4_STATUS_OUT_OF_MEMORY";
    case DSV4_STATUS_WORKSPACE_TOO_SMALL:
      return "DSV4_STATUS_WORKSPACE_TOO_SMALL";
    case DSV4_STATUS_PLAN_MISMATCH:
      return "DSV4_STATUS_PLAN_MISMATCH";
    case DSV4_STATUS_ABI_MISMATCH:
      return "DSV4_STATUS_ABI_MISMATCH";
    case DSV4_STATUS_INTERNAL:
      return "DSV4_STATUS_INTERNAL";
    default:
      return "DSV4_STATUS_UNKNOWN";
  }
}

void fail_from_module(dsv4_status status, const std::string& what) {
  std::string detail = take_module_error();
  if (status == DSV4_STATUS_OK) {
    // A module must not report success without producing its result.
    throw api_error(DSV4_STATUS_INTERNAL, what + " returned DSV4_STATUS_OK without a result");
  }
  if (detail.empty()) {
    throw api_error(status, what + ": returned " + status_name(status) + " without a message");
  }
  // Modules usually start their messages with their own name ("cpu: kv_write: ..."); then
  // "backend cpu: kv_write: ..." reads better than repeating the call.
  const std::string prefix = "backend ";
  if (what.compare(0, prefix.size(), prefix) == 0) {
    const std::string name = what.substr(prefix.size(), what.find(':') - prefix.size());
    if (!name.empty() && detail.compare(0, name.size() + 2, name + ": ") == 0)
      throw api_error(status, prefix + detail);
  }
  throw api_error(status, what + ": " + detail);
}

}  // namespace dsv4::detail
