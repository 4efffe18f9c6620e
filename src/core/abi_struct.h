// The struct_size rule for every struct that crosses the ABI (dsv4_types.h: structs only grow at
// their end). Input: size 0 or below the smallest released size -> INVALID_ARGUMENT; above our
// sizeof (a newer header) -> ABI_MISMATCH; otherwise read min(size, sizeof) bytes over defaults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/error.h"

namespace dsv4::detail {

// Checks `struct_size` of the struct called `name` ("options", "args", "out_info").
inline void check_struct_size(uint32_t struct_size, size_t min_size, size_t our_size,
                              const char* name, const char* type) {
  if (struct_size == 0 || struct_size < min_size)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s->struct_size = %u but must be at least %zu (sizeof(%s) of libdsv4 %s; set it with "
         "the _init function or to sizeof)",
         name, struct_size, min_size, type, dsv4_get_version_string());
  if (struct_size > our_size)
    fail(DSV4_STATUS_ABI_MISMATCH,
         "%s->struct_size = %u is larger than sizeof(%s) = %zu of this libdsv4 %s (the caller's "
         "header is newer than the library)",
         name, struct_size, type, our_size, dsv4_get_version_string());
}

// Reads an input struct: `defaults` already holds the _init values; the caller's bytes replace
// the first struct_size of them.
template <class T>
T read_struct(const T* in, size_t min_size, const char* name, const char* type, T defaults) {
  check_struct_size(in->struct_size, min_size, sizeof(T), name, type);
  std::memcpy(static_cast<void*>(&defaults), in, in->struct_size);
  defaults.struct_size = static_cast<uint32_t>(sizeof(T));
  return defaults;
}

// Writes an output struct prepared in `value` into the caller's, whose struct_size says how much
// it can hold (checked with check_struct_size first).
template <class T>
void write_struct(T* out, const T& value) {
  const uint32_t size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, size);
  out->struct_size = size;
}

// An _init function: writes `defaults` into the first `caller_size` bytes of the caller's struct
// (the sizeof of the caller's header, passed by the dsv4_*_init macros), so a binary built against
// an older, smaller struct is never overrun by a newer library.
template <class T>
void init_struct(T* out, size_t caller_size, size_t min_size, const char* name, const char* type,
                 T defaults) {
  if (caller_size > UINT32_MAX) caller_size = UINT32_MAX;
  check_struct_size(static_cast<uint32_t>(caller_size), min_size, sizeof(T), name, type);
  defaults.struct_size = static_cast<uint32_t>(caller_size);
  std::memcpy(static_cast<void*>(out), &defaults, caller_size);
}

}  // namespace dsv4::detail
