#include "core/ctx.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "core/abi_struct.h"
#include "loader/select.h"

namespace dsv4::detail {

namespace {

dsv4_ctx_options ctx_options_defaults() {
  dsv4_ctx_options o{};
  o.struct_size = sizeof o;
  o.api_version = DSV4_API_VERSION;
  o.device = dsv4_device{DSV4_DEVICE_CPU, 0};
  o.log_level = -1;
  return o;
}

int32_t usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int32_t>(n) : 1;
}

// The CPU worker count, decided here once so the module and dsv4_ctx_info agree:
// options.num_threads (checked by read_ctx_options), else DSV4_CPU_THREADS, else the usable
// cores, all within 1..DSV4_MAX_THREADS.
int32_t resolve_threads(const dsv4_ctx_options& o, const logger& log) {
  if (o.num_threads > 0) return o.num_threads;
  if (const char* env = env_get("DSV4_CPU_THREADS")) {
    int32_t n = 0;
    if (parse_int32(env, 1, DSV4_MAX_THREADS, &n)) return n;
    log.logf(DSV4_LOG_WARN, "DSV4_CPU_THREADS=%s is not a thread count in 1..%d; ignored", env,
             DSV4_MAX_THREADS);
  }
  return std::min(usable_cores(), DSV4_MAX_THREADS);
}

void copy_string(char* dst, size_t capacity, const std::string& src) {
  const size_t n = std::min(src.size(), capacity - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

}  // namespace

dsv4_ctx_options ctx_options_default_values() { return ctx_options_defaults(); }

dsv4_ctx_options read_ctx_options(const dsv4_ctx_options* options) {
  if (options == nullptr) return ctx_options_defaults();
  const dsv4_ctx_options o = read_struct(options, sizeof(dsv4_ctx_options), "options",
                                         "dsv4_ctx_options", ctx_options_defaults());
  const uint32_t major = o.api_version >> 16;
  const uint32_t minor = o.api_version & 0xffffu;
  if (major != DSV4_VERSION_MAJOR || minor > DSV4_VERSION_MINOR)
    fail(DSV4_STATUS_ABI_MISMATCH,
         "options->api_version = %u.%u but this libdsv4 is %d.%d (it serves API %d.0 to %d.%d)",
         major, minor, DSV4_VERSION_MAJOR, DSV4_VERSION_MINOR, DSV4_VERSION_MAJOR,
         DSV4_VERSION_MAJOR, DSV4_VERSION_MINOR);
  if (o.device.device_type <= 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->device.device_type = %d is not a DSV4_DEVICE_*",
         o.device.device_type);
  if (o.device.device_id < 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->device.device_id = %d is negative",
         o.device.device_id);
  if (o.num_threads < 0 || o.num_threads > DSV4_MAX_THREADS)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->num_threads = %d must be in 0..%d (0 = DSV4_CPU_THREADS, then the cores)",
         o.num_threads, DSV4_MAX_THREADS);
  if (o.log_level < -1 || o.log_level > DSV4_LOG_DEBUG)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->log_level = %d is not -1 (environment) or DSV4_LOG_ERROR..DSV4_LOG_DEBUG (0..3)",
         o.log_level);
  return o;
}

dsv4_ctx* ctx_create(const dsv4_ctx_options& o) {
  auto ctx = std::make_unique<dsv4_ctx>();
  ctx->log = make_logger(o.log_level, o.log_fn, o.log_user_data);
  log_scope scope(ctx->log);
  backend_request request;
  request.device = o.device;
  request.backend = o.backend;
  request.module_dir = o.module_dir;
  request.num_threads = o.device.device_type == DSV4_DEVICE_CPU ? resolve_threads(o, ctx->log) : 0;
  opened_backend b = open_backend(request, ctx->log);
  // b.mctx is owned by the context from here: nothing below may throw (ctx_destroy releases it).
  ctx->module = b.module;
  ctx->mctx = b.mctx;
  ctx->device = b.device;
  ctx->num_threads = b.device.device_type == DSV4_DEVICE_CPU ? request.num_threads : 0;
  ctx->path = std::move(b.path);
  ctx->reason = std::move(b.reason);
  ctx->log.logf(DSV4_LOG_INFO, "backend %s (%s) on device %d:%d: %s", ctx->module->name.c_str(),
                ctx->path.c_str(), ctx->device.device_type, ctx->device.device_id,
                ctx->reason.c_str());
  return ctx.release();
}

void ctx_destroy(dsv4_ctx* ctx) noexcept {
  if (ctx == nullptr) return;
  {
    log_scope scope(ctx->log);
    if (ctx->mctx != nullptr) ctx->module->iface.ctx_destroy(ctx->mctx);
  }
  delete ctx;
}

void enumerate_backends(const dsv4_ctx_options& o, dsv4_backend_info* out, int32_t capacity,
                        int32_t* out_count) {
  if (capacity < 0) fail(DSV4_STATUS_INVALID_ARGUMENT, "capacity = %d is negative", capacity);
  if (capacity > 0 && out == nullptr)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "out is NULL but capacity = %d", capacity);
  size_t stride = sizeof(dsv4_backend_info);
  if (capacity > 0) {
    check_struct_size(out[0].struct_size, sizeof(dsv4_backend_info), sizeof(dsv4_backend_info),
                      "out[0]", "dsv4_backend_info");
    stride = out[0].struct_size;
  }
  const logger log = make_logger(o.log_level, o.log_fn, o.log_user_data);
  log_scope scope(log);
  const discovery d = discover_modules(o.module_dir, log);
  if (d.candidates.size() > static_cast<size_t>(INT32_MAX))
    fail(DSV4_STATUS_INTERNAL, "too many module files");
  // Prepare everything before writing, so a failure leaves the outputs untouched.
  std::vector<dsv4_backend_info> infos(d.candidates.size());
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const candidate& c = d.candidates[i];
    dsv4_backend_info& info = infos[i];
    info = dsv4_backend_info{};
    info.struct_size = sizeof info;
    info.available = c.available ? 1 : 0;
    if (c.module != nullptr) {
      info.score = c.module->score;
      info.device_type = c.module->usable ? c.module->iface.device_type : 0;
      info.device_count = c.module->device_count;
      info.module_abi = c.module->abi;
    }
    copy_string(info.name, sizeof info.name, c.name);
    copy_string(info.path, sizeof info.path, c.path);
    copy_string(info.status, sizeof info.status, c.status);
  }
  for (size_t i = 0; i < infos.size() && i < static_cast<size_t>(capacity); ++i) {
    auto* slot = reinterpret_cast<dsv4_backend_info*>(reinterpret_cast<char*>(out) + i * stride);
    slot->struct_size = static_cast<uint32_t>(stride);
    write_struct(slot, infos[i]);
  }
  *out_count = static_cast<int32_t>(infos.size());
}

void get_device_info(const dsv4_ctx_options& o, const char* backend, int32_t index,
                     dsv4_device_info* out_info) {
  check_struct_size(out_info->struct_size, sizeof(dsv4_device_info), sizeof(dsv4_device_info),
                    "out_info", "dsv4_device_info");
  const logger log = make_logger(o.log_level, o.log_fn, o.log_user_data);
  log_scope scope(log);
  const candidate c = find_backend(o.module_dir, backend, o.device.device_type, log);
  if (index < 0 || index >= c.module->device_count)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "index = %d but backend %s has %d device(s)", index,
         c.name.c_str(), c.module->device_count);
  if (c.module->iface.get_device_info == nullptr)
    fail(DSV4_STATUS_UNSUPPORTED, "backend %s does not describe its devices", c.name.c_str());
  dsv4_device_info info{};
  info.struct_size = sizeof info;
  clear_module_error();
  const dsv4_status st = c.module->iface.get_device_info(index, &info);
  if (st != DSV4_STATUS_OK) fail_from_module(st, "backend " + c.name + ": get_device_info");
  info.struct_size = sizeof info;
  info.name[sizeof info.name - 1] = '\0';
  write_struct(out_info, info);
}

}  // namespace dsv4::detail
