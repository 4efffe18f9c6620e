#include "base/log.h"

#include <cstdarg>
#include <cstdio>

#include "base/env.h"

namespace dsv4::detail {

namespace {
thread_local const logger* t_current = nullptr;
constexpr size_t kLineCapacity = 2048;
}  // namespace

const char* log_level_name(int32_t level) noexcept {
  switch (level) {
    case DSV4_LOG_ERROR:
      return "error";
    case DSV4_LOG_WARN:
      return "warn";
    case DSV4_LOG_INFO:
      return "info";
    default:
      return "debug";
  }
}

void logger::write(int32_t line_level, const char* message) const noexcept {
  if (!enabled(line_level)) return;
  if (fn != nullptr) {
    fn(line_level, message, user_data);
  } else {
    // One fprintf per line so lines from several threads do not interleave.
    std::fprintf(stderr, "dsv4: %s: %s\n", log_level_name(line_level), message);
  }
}

void logger::logf(int32_t line_level, const char* fmt, ...) const noexcept {
  if (!enabled(line_level)) return;
  char line[kLineCapacity];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  write(line_level, line);
}

logger make_logger(int32_t option_level, dsv4_log_fn fn, void* user_data) noexcept {
  logger log;
  log.fn = fn;
  log.user_data = user_data;
  if (option_level >= DSV4_LOG_ERROR && option_level <= DSV4_LOG_DEBUG) {
    log.level = option_level;
  } else {
    const char* text = env_get("DSV4_LOG_LEVEL");
    int32_t level = DSV4_LOG_WARN;
    if (text != nullptr && !parse_log_level(text, &level)) {
      log.level = DSV4_LOG_WARN;
      log.logf(DSV4_LOG_WARN, "DSV4_LOG_LEVEL=%s is not error|warn|info|debug; using warn", text);
    }
    log.level = level;
  }
  return log;
}

const logger& current_logger() noexcept {
  if (t_current != nullptr) return *t_current;
  // Outside any public call (a module thread): the environment's level, stderr.
  thread_local logger env_default = make_logger(-1, nullptr, nullptr);
  return env_default;
}

log_scope::log_scope(const logger& log) noexcept : previous_(t_current) { t_current = &log; }
log_scope::~log_scope() { t_current = previous_; }

}  // namespace dsv4::detail
