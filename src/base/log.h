// Logging: one line per message, to the caller's dsv4_log_fn or to stderr as
// "dsv4: <level>: <message>". Modules log through dsv4_host_services::log, which reaches the
// logger of the public call the calling thread is inside (log_scope), or the environment default.
#pragma once

#include <cstdint>
#include <string>

#include "dsv4/dsv4.h"

namespace dsv4::detail {

struct logger {
  int32_t level = DSV4_LOG_WARN;  // lines with level <= this are emitted
  dsv4_log_fn fn = nullptr;       // NULL = stderr
  void* user_data = nullptr;

  bool enabled(int32_t line_level) const noexcept { return line_level <= level; }
  // Emits `message` (no newline) if enabled. Never throws.
  void write(int32_t line_level, const char* message) const noexcept;
  void logf(int32_t line_level, const char* fmt, ...) const noexcept
      __attribute__((format(printf, 3, 4)));
};

// "error", "warn", "info", "debug".
const char* log_level_name(int32_t level) noexcept;

// A logger from options: level -1 means DSV4_LOG_LEVEL (default warn). Levels outside -1..3 are
// rejected by the caller before this is called.
logger make_logger(int32_t option_level, dsv4_log_fn fn, void* user_data) noexcept;

// The logger that module log lines reach on this thread.
const logger& current_logger() noexcept;

// Makes `log` the current logger of this thread for the lifetime of the scope.
class log_scope {
 public:
  explicit log_scope(const logger& log) noexcept;
  ~log_scope();
  log_scope(const log_scope&) = delete;
  log_scope& operator=(const log_scope&) = delete;

 private:
  const logger* previous_;
};

}  // namespace dsv4::detail
