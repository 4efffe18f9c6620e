// Pieces every backend module's ABI slots share: exception fencing, the checks a plan or run slot
// starts with, and the workspace query. `fail` is the module's
// fail(status, printf format, ...), which records the thread-local message and returns the status.
#pragma once

#include <stddef.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "dsv4_backend.h"

namespace dsv4 {

using fail_fn = dsv4_status (*)(dsv4_status, const char*, ...);

// The body of every module's fail(): "<module>: <message>" to the host's thread-local error.
inline void report_module_error(const dsv4_host_services* host, const char* module,
                                const char* format, va_list args) {
  char message[512];
  const int prefix = std::snprintf(message, sizeof message, "%s: ", module);
  std::vsnprintf(message + prefix, sizeof message - static_cast<size_t>(prefix), format, args);
  if (host != nullptr && host->set_error != nullptr) host->set_error(message);
}

// Runs fn; an escaping exception becomes a status (nothing crosses the C ABI).
template <class Fn>
dsv4_status guarded_slot(fail_fn fail, const char* what, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return fail(DSV4_STATUS_OUT_OF_MEMORY, "%s: out of host memory", what);
  } catch (const std::exception& e) {
    return fail(DSV4_STATUS_INTERNAL, "%s: %s", what, e.what());
  } catch (...) {
    return fail(DSV4_STATUS_INTERNAL, "%s: unknown exception", what);
  }
}

// What every plan_create slot checks first: its arguments and a derived plan this module can read.
inline dsv4_status check_plan_header(fail_fn fail, const void* mctx, const dsv4_mod_plan* plan,
                                     void* const* out_mplan) {
  if (mctx == nullptr || plan == nullptr || out_mplan == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_create: NULL argument");
  if (plan->struct_size < sizeof(dsv4_mod_plan))
    return fail(DSV4_STATUS_ABI_MISMATCH, "plan_create: dsv4_mod_plan of %u bytes, need %zu",
                plan->struct_size, sizeof(dsv4_mod_plan));
  return DSV4_STATUS_OK;
}

// plan_get_workspace_size for a module plan type with a `workspace_bytes` member.
template <class Plan>
dsv4_status plan_workspace_size(fail_fn fail, const void* mplan, size_t* out_bytes) {
  if (mplan == nullptr || out_bytes == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_get_workspace_size: NULL argument");
  *out_bytes = static_cast<const Plan*>(mplan)->workspace_bytes;
  return DSV4_STATUS_OK;
}

// What every run slot checks first: both arguments, a run struct this module knows, the plan's
// mode.
inline dsv4_status check_run_header(fail_fn fail, const void* mplan, const dsv4_mod_run* run,
                                    uint32_t plan_mode) {
  if (mplan == nullptr || run == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "run: NULL argument");
  if (run->struct_size < sizeof(dsv4_mod_run))
    return fail(DSV4_STATUS_ABI_MISMATCH, "run: dsv4_mod_run of %u bytes, need %zu",
                run->struct_size, sizeof(dsv4_mod_run));
  if (run->mode != plan_mode)
    return fail(DSV4_STATUS_PLAN_MISMATCH, "run: mode %u, plan has %u", run->mode, plan_mode);
  return DSV4_STATUS_OK;
}

}  // namespace dsv4
