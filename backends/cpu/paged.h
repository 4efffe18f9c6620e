// Paged mode on the CPU (spec section 4): validates an engine's batch description value by value,
// builds every token's lists with the shared builders (backends/common/paged_index.h) into the
// workspace, and hands explicit-mode attention an equivalent explicit run. Also the module's
// export_indices slot (dsv4_export_indices).
//
// Wiring in module.cpp:
//   plan_get_workspace_size: + cpu_paged_workspace_bytes(options) for paged plans (the lists come
//     first in the workspace; out_explicit_run->workspace is what follows them);
//   run (paged plans): dsv4_mod_run explicit; status = cpu_paged_build_lists(options, *run, host(),
//     &explicit); then run the explicit kernel on `explicit` (candidate limits: main >= window,
//     extra >= cpu_paged_cmp_width(options));
//   iface.export_indices = cpu_export_indices;
#pragma once

#include <cstddef>

#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"

// Workspace bytes of the paged lists for a plan (0 for explicit plans).
size_t cpu_paged_workspace_bytes(const dsv4_plan_options& plan);

// Compressed list width of a paged plan: index_topk (C4A), the C128A width, 0 (SWA-only).
int64_t cpu_paged_cmp_width(const dsv4_plan_options& plan);

// The list-building geometry of a paged run (plan options + the run's cache block sizes), and the
// slot capacity of its caches.
dsv4::paged_geometry cpu_paged_geometry(const dsv4_plan_options& plan, const dsv4_mod_run& run);
dsv4::paged_capacity cpu_paged_capacity(const dsv4_mod_run& run);

// Validates paged_run's batch values (INVALID_ARGUMENT with a message through host->set_error;
// WORKSPACE_TOO_SMALL), then builds the dense SWA [T, W] + lengths and compressed [T, width] +
// lengths lists into paged_run.workspace and fills *out_explicit_run: mode EXPLICIT, seq_q 1 with
// token strides, main_list / extra_list dense with lengths, workspace = the bytes after the lists.
// Writes nothing (not even the workspace) when the batch is rejected.
dsv4_status cpu_paged_build_lists(const dsv4_plan_options& plan, const dsv4_mod_run& paged_run,
                                  const dsv4_host_services* host, dsv4_mod_run* out_explicit_run);

// Module slot export_indices: validates like cpu_paged_build_lists, then writes the lists in the
// requested format (exp->plan carries the plan's options, so mplan is not read).
dsv4_status cpu_export_indices(const void* mplan, const dsv4_mod_run* batch,
                               const dsv4_mod_export* exp);

// Shared by both: value checks of a paged batch against the plan and the run's caches.
dsv4_status cpu_paged_validate(const dsv4_plan_options& plan, const dsv4_mod_run& run,
                               const dsv4_host_services* host);
