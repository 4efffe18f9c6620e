// dsv4_plan: one layer's normalised options, the module's plan and its workspace size.
#pragma once

#include <cstddef>
#include <string>

#include "core/ctx.h"
#include "dsv4/dsv4.h"
#include "dsv4_backend.h"

struct dsv4_plan {
  dsv4_ctx* ctx = nullptr;      // owner; outlives the plan
  void* mplan = nullptr;        // the module's plan
  dsv4_plan_options options{};  // normalised public options (run checks, dsv4_plan_get_info)
  dsv4_mod_plan mod{};          // derived from them once: what the module saw
  size_t workspace_bytes = 0;
  std::string kernel;  // module's kernel name ("" if it reports none)
};

namespace dsv4::detail {

// The smallest dsv4_plan_options a caller may hand over: libdsv4 0.1's (it ends before out_dtype);
// fields past the caller's struct_size keep their defaults.
constexpr size_t kPlanOptionsMinSize = offsetof(dsv4_plan_options, out_dtype);

// dsv4_plan_options_init values.
dsv4_plan_options plan_options_default_values();

// Reads `options` under the struct_size rule, applies defaults (softmax_scale, block strides,
// compress_ratio <= 1 -> 1) and validates every field. Throws api_error naming "options->field".
dsv4_plan_options normalize_plan_options(const dsv4_plan_options* options);

// Validates one cache description (layout known, block_size >= 1, reserved 0, kv_scale of the
// per-tensor layout) and resolves block_stride_bytes 0 to the layout minimum. `name` prefixes
// messages ("options->swa_cache", "args->cache_desc").
void normalize_cache_desc(dsv4_kv_cache_desc& desc, const char* name);

// Everything the normalised options imply, for the modules (dsv4_backend.h): list widths, paged
// geometry, the paged lists' workspace map. Every formula lives here or in backends/common.
dsv4_mod_plan derive_mod_plan(const dsv4_plan_options& normalised);

// Builds a plan on ctx's backend from normalised options. Throws api_error.
dsv4_plan* plan_create(dsv4_ctx* ctx, const dsv4_plan_options& normalised);
void plan_destroy(dsv4_plan* plan) noexcept;

// Multiplies non-negative int64 values; throws INVALID_ARGUMENT naming `what` on overflow.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

// Layout name for messages ("FP8_V4_584B").
const char* layout_name(uint32_t layout) noexcept;

}  // namespace dsv4::detail
