#include "base/env.h"

#include <strings.h>

#include <cerrno>
#include <cstdlib>

#include "dsv4/dsv4.h"

namespace dsv4::detail {

const char* env_get(const char* name) noexcept { return std::getenv(name); }

const char* env_get_secure(const char* name) noexcept { return secure_getenv(name); }

bool parse_log_level(const char* text, int32_t* out_level) noexcept {
  if (text == nullptr) return false;
  static const char* const names[] = {"error", "warn", "info", "debug"};
  for (int32_t level = DSV4_LOG_ERROR; level <= DSV4_LOG_DEBUG; ++level) {
    if (strcasecmp(text, names[level]) == 0) {
      *out_level = level;
      return true;
    }
  }
  if (strcasecmp(text, "warning") == 0) {
    *out_level = DSV4_LOG_WARN;
    return true;
  }
  return parse_int32(text, DSV4_LOG_ERROR, DSV4_LOG_DEBUG, out_level);
}

bool parse_int32(const char* text, int32_t min, int32_t max, int32_t* out_value) noexcept {
  if (text == nullptr || *text == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return false;
  *out_value = static_cast<int32_t>(v);
  return true;
}

}  // namespace dsv4::detail
