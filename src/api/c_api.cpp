// The C ABI of include/dsv4/dsv4.h. Each function only validates its direct arguments, calls the
// dsv4::detail implementation and catches: no exception, abort or exit crosses this boundary.
#include "base/error.h"
#include "common/layout.h"
#include "core/abi_struct.h"
#include "core/ctx.h"
#include "core/merge.h"
#include "core/plan.h"
#include "core/run_check.h"
#include "dsv4/dsv4.h"

using namespace dsv4::detail;

namespace {

#define DSV4_STRINGIFY2(x) #x
#define DSV4_STRINGIFY(x) DSV4_STRINGIFY2(x)
constexpr const char kVersionString[] = DSV4_STRINGIFY(DSV4_VERSION_MAJOR) "." DSV4_STRINGIFY(
    DSV4_VERSION_MINOR) "." DSV4_STRINGIFY(DSV4_VERSION_PATCH);

void require_arg(const void* p, const char* name) {
  if (p == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL", name);
}

// The value an info query fills and hands to write_struct: checks the caller's out_info (non-NULL,
// struct_size of this release) and returns a zeroed T with struct_size set.
template <class T>
T new_out_info(T* out_info, const char* type) {
  require_arg(out_info, "out_info");
  check_struct_size(out_info->struct_size, sizeof(T), sizeof(T), "out_info", type);
  T info{};
  info.struct_size = sizeof info;
  return info;
}

}  // namespace

extern "C" {

DSV4_API uint32_t dsv4_get_version(void) { return DSV4_VERSION_NUMBER; }

DSV4_API const char* dsv4_get_version_string(void) { return kVersionString; }

DSV4_API const char* dsv4_status_string(dsv4_status status) { return status_name(status); }

DSV4_API const char* dsv4_last_error_message(void) { return last_error(); }

DSV4_API dsv4_status(dsv4_ctx_options_init)(dsv4_ctx_options* options, size_t struct_size) {
  return guard("dsv4_ctx_options_init", [&] {
    require_arg(options, "options");
    init_struct(options, struct_size, sizeof(dsv4_ctx_options), "options", "dsv4_ctx_options",
                ctx_options_default_values());
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_ctx_create(const dsv4_ctx_options* options, dsv4_ctx** out_ctx) {
  return guard("dsv4_ctx_create", [&] {
    require_arg(out_ctx, "out_ctx");
    const dsv4_ctx_options o = read_ctx_options(options);
    *out_ctx = ctx_create(o);
    return DSV4_STATUS_OK;
  });
}

DSV4_API void dsv4_ctx_destroy(dsv4_ctx* ctx) { ctx_destroy(ctx); }

DSV4_API dsv4_status dsv4_enumerate_backends(const dsv4_ctx_options* options,
                                             dsv4_backend_info* out, int32_t capacity,
                                             int32_t* out_count) {
  return guard("dsv4_enumerate_backends", [&] {
    require_arg(out_count, "out_count");
    const dsv4_ctx_options o = read_ctx_options(options);
    enumerate_backends(o, out, capacity, out_count);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_get_device_info(const dsv4_ctx_options* options, const char* backend,
                                          int32_t index, dsv4_device_info* out_info) {
  return guard("dsv4_get_device_info", [&] {
    require_arg(out_info, "out_info");
    const dsv4_ctx_options o = read_ctx_options(options);
    get_device_info(o, backend, index, out_info);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_ctx_get_info(const dsv4_ctx* ctx, dsv4_ctx_info* out_info) {
  return guard("dsv4_ctx_get_info", [&] {
    require_arg(ctx, "ctx");
    dsv4_ctx_info info = new_out_info(out_info, "dsv4_ctx_info");
    info.device = ctx->device;
    info.num_threads = ctx->num_threads;
    snprintf(info.backend, sizeof info.backend, "%s", ctx->module->name.c_str());
    snprintf(info.path, sizeof info.path, "%s", ctx->path.c_str());
    snprintf(info.reason, sizeof info.reason, "%s", ctx->reason.c_str());
    write_struct(out_info, info);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status(dsv4_kv_layout_info_init)(dsv4_kv_layout_info* info, size_t struct_size) {
  return guard("dsv4_kv_layout_info_init", [&] {
    require_arg(info, "info");
    init_struct(info, struct_size, sizeof(dsv4_kv_layout_info), "info", "dsv4_kv_layout_info",
                dsv4_kv_layout_info{});
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_kv_layout_get_info(uint32_t layout, int32_t block_size,
                                             dsv4_kv_layout_info* out_info) {
  return guard("dsv4_kv_layout_get_info", [&] {
    dsv4_kv_layout_info info = new_out_info(out_info, "dsv4_kv_layout_info");
    if (!dsv4::layout_is_known(layout))
      fail(DSV4_STATUS_INVALID_ARGUMENT, "layout = %u is not a known DSV4_KV_LAYOUT_*", layout);
    if (block_size < 1)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "block_size = %d must be >= 1", block_size);
    info.layout = layout;
    info.head_dim_qk = dsv4::layout_head_dim_qk(layout);
    info.head_dim_v = dsv4::kHeadDim;
    info.bytes_per_token = dsv4::layout_bytes_per_token(layout);
    info.min_block_stride_bytes = dsv4::layout_min_block_bytes(layout, block_size);
    write_struct(out_info, info);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status(dsv4_plan_options_init)(dsv4_plan_options* options, size_t struct_size) {
  return guard("dsv4_plan_options_init", [&] {
    require_arg(options, "options");
    init_struct(options, struct_size, kPlanOptionsMinSize, "options", "dsv4_plan_options",
                plan_options_default_values());
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_plan_create(dsv4_ctx* ctx, const dsv4_plan_options* options,
                                      dsv4_plan** out_plan) {
  return guard("dsv4_plan_create", [&] {
    require_arg(ctx, "ctx");
    require_arg(options, "options");
    require_arg(out_plan, "out_plan");
    const dsv4_plan_options normalised = normalize_plan_options(options);
    *out_plan = plan_create(ctx, normalised);
    return DSV4_STATUS_OK;
  });
}

DSV4_API void dsv4_plan_destroy(dsv4_plan* plan) { plan_destroy(plan); }

DSV4_API dsv4_status dsv4_plan_get_workspace_size(const dsv4_plan* plan, size_t* out_bytes) {
  return guard("dsv4_plan_get_workspace_size", [&] {
    require_arg(plan, "plan");
    require_arg(out_bytes, "out_bytes");
    *out_bytes = plan->workspace_bytes;
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_plan_get_info(const dsv4_plan* plan, dsv4_plan_info* out_info) {
  return guard("dsv4_plan_get_info", [&] {
    require_arg(plan, "plan");
    dsv4_plan_info info = new_out_info(out_info, "dsv4_plan_info");
    info.mode = plan->options.mode;
    info.num_heads = plan->options.num_heads;
    info.head_dim_qk = plan->options.head_dim_qk;
    info.workspace_bytes = plan->workspace_bytes;
    snprintf(info.backend, sizeof info.backend, "%s", plan->ctx->module->name.c_str());
    snprintf(info.kernel, sizeof info.kernel, "%s", plan->kernel.c_str());
    write_struct(out_info, info);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status(dsv4_run_args_init)(dsv4_run_args* args, size_t struct_size) {
  return guard("dsv4_run_args_init", [&] {
    require_arg(args, "args");
    init_struct(args, struct_size, sizeof(dsv4_run_args), "args", "dsv4_run_args",
                run_args_default_values());
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_run(const dsv4_plan* plan, const dsv4_run_args* args) {
  return guard("dsv4_run", [&] {
    require_arg(plan, "plan");
    require_arg(args, "args");
    const dsv4_run_args a = read_struct(args, sizeof(dsv4_run_args), "args", "dsv4_run_args",
                                        run_args_default_values());
    run(*plan, a);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status(dsv4_kv_write_args_init)(dsv4_kv_write_args* args, size_t struct_size) {
  return guard("dsv4_kv_write_args_init", [&] {
    require_arg(args, "args");
    init_struct(args, struct_size, sizeof(dsv4_kv_write_args), "args", "dsv4_kv_write_args",
                kv_write_args_default_values());
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_kv_write(dsv4_ctx* ctx, const dsv4_kv_write_args* args) {
  return guard("dsv4_kv_write", [&] {
    require_arg(ctx, "ctx");
    require_arg(args, "args");
    const dsv4_kv_write_args a = read_struct(args, sizeof(dsv4_kv_write_args), "args",
                                             "dsv4_kv_write_args", kv_write_args_default_values());
    kv_write(*ctx, a);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status(dsv4_merge_args_init)(dsv4_merge_args* args, size_t struct_size) {
  return guard("dsv4_merge_args_init", [&] {
    require_arg(args, "args");
    init_struct(args, struct_size, sizeof(dsv4_merge_args), "args", "dsv4_merge_args",
                merge_args_default_values());
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_merge(dsv4_ctx* ctx, const dsv4_merge_args* args) {
  return guard("dsv4_merge", [&] {
    require_arg(ctx, "ctx");
    require_arg(args, "args");
    const dsv4_merge_args a = read_struct(args, sizeof(dsv4_merge_args), "args", "dsv4_merge_args",
                                          merge_args_default_values());
    merge(*ctx, a);
    return DSV4_STATUS_OK;
  });
}

}  // extern "C"
