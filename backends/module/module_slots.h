// Pieces every backend module's ABI slots share: exception fencing, the checks a plan, run,
// kv_write, export or merge slot starts with, and the workspace query. `fail` is the module's
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

#include "common/layout.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"

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

// What every kv_write slot checks first: its arguments, a request struct this module knows, and a
// cache description every writer can serve (the layouts' own geometry is the quantiser's).
inline dsv4_status check_kv_write_header(fail_fn fail, const void* mctx,
                                         const dsv4_mod_kv_write* w) {
  if (mctx == nullptr || w == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: NULL argument");
  if (w->struct_size < sizeof(dsv4_mod_kv_write))
    return fail(DSV4_STATUS_ABI_MISMATCH, "kv_write: dsv4_mod_kv_write of %u bytes, need %zu",
                w->struct_size, sizeof(dsv4_mod_kv_write));
  if (!layout_is_known(w->cache.layout))
    return fail(DSV4_STATUS_UNSUPPORTED, "kv_write: layout %u", w->cache.layout);
  if (w->dim != layout_head_dim_qk(w->cache.layout))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: dim %d, layout %u holds %d", w->dim,
                w->cache.layout, layout_head_dim_qk(w->cache.layout));
  if (w->cache.block_size < 1)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: block_size %d", w->cache.block_size);
  return DSV4_STATUS_OK;
}

// What every export_indices slot checks first: its arguments, a paged plan, a format the
// exporters know and the output arrays that format needs. Limits of a module's own exporter
// (e.g. a CSR staging width) are the module's.
inline dsv4_status check_export_header(fail_fn fail, const void* mplan, const dsv4_mod_run* batch,
                                       const dsv4_mod_export* exp) {
  if (mplan == nullptr || batch == nullptr || exp == nullptr || exp->plan == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "export_indices: NULL argument");
  if (exp->struct_size < sizeof(dsv4_mod_export))
    return fail(DSV4_STATUS_ABI_MISMATCH, "export_indices: dsv4_mod_export of %u bytes",
                exp->struct_size);
  if (exp->plan->mode != DSV4_MODE_PAGED)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "export_indices: not a paged plan");
  if (exp->format != DSV4_EXPORT_FLASHMLA && exp->format != DSV4_EXPORT_CSR &&
      exp->format != DSV4_EXPORT_FLASHINFER)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "export_indices: unknown format %u", exp->format);
  if (exp->format == DSV4_EXPORT_FLASHINFER && exp->combined.col_stride != 1)
    return fail(DSV4_STATUS_UNSUPPORTED,
                "export_indices: combined_indices needs a contiguous last dimension");
  if (exp->format == DSV4_EXPORT_CSR &&
      (exp->swa.indptr == nullptr || (exp->cmp.indices != nullptr && exp->cmp.indptr == nullptr)))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "export_indices: CSR needs indptr arrays");
  return DSV4_STATUS_OK;
}

// What every merge slot checks first: its arguments and a request struct this module knows.
inline dsv4_status check_merge_header(fail_fn fail, const void* mctx, const dsv4_mod_merge* m) {
  if (mctx == nullptr || m == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "merge: NULL argument");
  if (m->struct_size < sizeof(dsv4_mod_merge))
    return fail(DSV4_STATUS_ABI_MISMATCH, "merge: dsv4_mod_merge of %u bytes, need %zu",
                m->struct_size, sizeof(dsv4_mod_merge));
  return DSV4_STATUS_OK;
}

}  // namespace dsv4
