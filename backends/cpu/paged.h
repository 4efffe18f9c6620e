// Paged mode on the CPU (spec section 4): validates an engine's batch description value by value,
// builds every token's lists with the shared builders (backends/common/paged_index.h) into the
// workspace, and hands explicit-mode attention an equivalent explicit run. Also the module's
// export_indices slot (dsv4_export_indices).
//
// Wiring in module.cpp: the workspace starts with the host's list map (dsv4_mod_plan.lists); a
// paged run builds its lists there (cpu_paged_build_lists) and runs the explicit kernel on the
// equivalent explicit run; iface.export_indices = cpu_export_indices.
#pragma once

#include <cstddef>

#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"

// The slot capacity of a run's caches (num_blocks * block_size; 0 for an absent cache).
dsv4::paged_capacity cpu_paged_capacity(const dsv4_mod_run& run);

// Validates paged_run's batch values (INVALID_ARGUMENT with a message through host->set_error;
// WORKSPACE_TOO_SMALL), then builds the dense SWA [T, W] + lengths and compressed [T, width] +
// lengths lists into paged_run.workspace and fills *out_explicit_run: mode EXPLICIT, seq_q 1 with
// token strides, main_list / extra_list dense with lengths, workspace = the bytes after the lists.
// With write_lists false (the fast kernels build each token's lists as they gather its rows), the
// lists are neither built nor written: out_explicit_run keeps the batch and has no lists.
// Writes nothing (not even the workspace) when the batch is rejected.
dsv4_status cpu_paged_build_lists(const dsv4_mod_plan& plan, const dsv4_mod_run& paged_run,
                                  const dsv4_host_services* host, dsv4_mod_run* out_explicit_run,
                                  bool write_lists = true);

// Module slot export_indices: validates like cpu_paged_build_lists, then writes the lists in the
// requested format (exp->plan carries the derived plan, so mplan is not read).
dsv4_status cpu_export_indices(const void* mplan, const dsv4_mod_run* batch,
                               const dsv4_mod_export* exp);

// Shared by both: value checks of a paged batch against the plan and the run's caches.
dsv4_status cpu_paged_validate(const dsv4_mod_plan& plan, const dsv4_mod_run& run,
                               const dsv4_host_services* host);
