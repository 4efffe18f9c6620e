// dsv4_run and dsv4_kv_write: argument validation against the plan / descriptor and translation
// into the module's normalised views (dsv4_mod_run, dsv4_mod_kv_write).
#pragma once

#include <cstdint>

#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"
#include "dsv4_backend.h"

namespace dsv4::detail {

// dsv4_run_args_init / dsv4_kv_write_args_init values.
dsv4_run_args run_args_default_values();
dsv4_kv_write_args kv_write_args_default_values();

// Validates `args` (already read under the struct_size rule) against `plan` and fills `out`.
// Returns false when there is nothing to compute (zero tokens). Throws api_error naming the
// argument: PLAN_MISMATCH where the arguments disagree with the plan, INVALID_ARGUMENT where they
// are malformed, WORKSPACE_TOO_SMALL for the workspace. Never reads device memory.
bool build_mod_run(const dsv4_plan& plan, const dsv4_run_args& args, dsv4_mod_run& out);

// The paged batch fields of `a` (query_start_loc, seq_lens, block tables, slot_mapping,
// topk_indices) against the plan for `tokens` tokens; fills `out`. Argument names in messages
// start with `prefix` ("args->" for dsv4_run, "args->batch->" for dsv4_export_indices);
// `tokens_source` names where T comes from ("args->q"). Throws api_error like build_mod_run.
void check_paged_batch(const dsv4_plan_options& o, const dsv4_run_args& a, int64_t tokens,
                       const char* tokens_source, const char* prefix, const dsv4_device& dev,
                       dsv4_mod_paged_batch& out);

// Validates and runs one attention call.
void run(const dsv4_plan& plan, const dsv4_run_args& args);

// Validates and runs one KV write.
void kv_write(dsv4_ctx& ctx, const dsv4_kv_write_args& args);

}  // namespace dsv4::detail
