// The public headers compile as strict C++11 (-std=c++11 -pedantic -Werror -Wall -Wextra) with
// C linkage, and the structs are standard-layout (usable from C and FFI).
#include <dsv4/dsv4.h>
#include <dsv4/dsv4_paged.h>

#include <cstdio>
#include <type_traits>

#include "dsv4_backend.h"

static_assert(std::is_standard_layout<dsv4_tensor>::value, "dsv4_tensor must be standard-layout");
static_assert(std::is_standard_layout<dsv4_ctx_options>::value, "options must be standard-layout");
static_assert(std::is_standard_layout<dsv4_plan_options>::value, "options must be standard-layout");
static_assert(std::is_standard_layout<dsv4_run_args>::value, "args must be standard-layout");
static_assert(std::is_trivially_copyable<dsv4_run_args>::value, "args must be trivially copyable");
static_assert(std::is_same<dsv4_status, int32_t>::value, "dsv4_status is an int32");

int main() {
  dsv4_plan_options options;
  if (dsv4_plan_options_init(&options) != DSV4_STATUS_OK) return 1;
  if (options.struct_size != sizeof(dsv4_plan_options)) return 2;
  dsv4_status (*entry)(uint32_t*, const dsv4_host_services*, const dsv4_backend_iface**) = nullptr;
  dsv4_backend_entry_fn typed = entry;
  std::printf("C++11: libdsv4 %s, %s\n", dsv4_get_version_string(),
              typed == nullptr ? "module ABI header ok" : "?");
  return 0;
}
