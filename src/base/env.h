// Environment access in one place: which variables are honoured under setuid and how they parse.
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::detail {

// getenv; NULL when unset. Honoured in secure-execution mode.
const char* env_get(const char* name) noexcept;
// secure_getenv: NULL when unset or when the process runs setuid / with AT_SECURE.
const char* env_get_secure(const char* name) noexcept;

// Parses "error|warn|info|debug" (any case) or "0".."3"; returns false for anything else.
bool parse_log_level(const char* text, int32_t* out_level) noexcept;

// Parses a decimal int32 in [min, max]; returns false for anything else (trailing junk included).
bool parse_int32(const char* text, int32_t min, int32_t max, int32_t* out_value) noexcept;

}  // namespace dsv4::detail
