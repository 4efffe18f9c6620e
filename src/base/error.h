// Errors inside libdsv4: internal code throws api_error; the C shims catch everything and turn it
// into a status plus the thread-local message of dsv4_last_error_message().
#pragma once

#include <exception>
#include <new>
#include <string>

#include "dsv4/dsv4.h"

namespace dsv4::detail {

// An error that reaches the caller: a status and a message naming the argument at fault. The C
// shim prefixes the function name ("dsv4_run: " + message).
class api_error : public std::exception {
 public:
  api_error(dsv4_status status, std::string message)
      : status_(status), message_(std::move(message)) {}
  dsv4_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  dsv4_status status_;
  std::string message_;
};

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws api_error(status, formatted message).
[[noreturn]] void fail(dsv4_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// The calling thread's last error message.
void set_last_error(const std::string& message) noexcept;
// Sets "fn: part1part2" without allocating (usable while handling bad_alloc).
void set_last_error_for(const char* fn, const char* part1, const char* part2 = "") noexcept;
const char* last_error() noexcept;

// Messages a module reports through dsv4_host_services::set_error, kept apart so the host can
// wrap them with the public function's name once the module call returns.
void clear_module_error() noexcept;
void set_module_error(const char* message) noexcept;
// The module's message since the last clear_module_error(), or "" if it set none.
std::string take_module_error();

// Runs `body` (returning dsv4_status) for the public function `fn`: api_error -> its status and
// "fn: message"; bad_alloc -> OUT_OF_MEMORY; anything else -> INTERNAL. Never throws.
template <class Body>
dsv4_status guard(const char* fn, Body&& body) noexcept {
  try {
    return body();
  } catch (const api_error& e) {
    set_last_error_for(fn, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error_for(fn, "out of host memory");
    return DSV4_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error_for(fn, "internal error: ", e.what());
    return DSV4_STATUS_INTERNAL;
  } catch (...) {
    set_last_error_for(fn, "internal error: unknown exception");
    return DSV4_STATUS_INTERNAL;
  }
}

// "DSV4_STATUS_INVALID_ARGUMENT" ...
const char* status_name(dsv4_status status) noexcept;

// Turns a failed module call into an api_error: the module's own message if it set one, otherwise
// a generic one. `what` names the call ("backend cpu: plan_create").
[[noreturn]] void fail_from_module(dsv4_status status, const std::string& what);

}  // namespace dsv4::detail
