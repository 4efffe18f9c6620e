// Entry point and module ABI slots of the Level Zero backend (libdsv4-level-zero.so): the OpenCL C
// kernels of backends/opencl_kernels, compiled to SPIR-V at build time (validated by spirv-val)
// and embedded. Tensors are USM pointers (DSV4_DEVICE_ONEAPI, DLPack kDLOneAPI); the stream is the
// caller's ze_command_list_handle_t, to which the launches are appended.
//
// The loader is opened at run time (libze_loader.so.1, or DSV4_LEVEL_ZERO_LOADER for a test
// driver): no loader, no driver or no GPU leaves the module unavailable with the reason.
// Modules and kernels: created in the module's own context when a plan is first made (so a bad
// SPIR-V module fails plan creation with the build log), and once in each caller context that a
// command list brings (zeCommandListGetContextHandle, Level Zero 1.9). A run only checks its
// pointers (zeMemGetAllocProperties: host-side), sets arguments and appends launches: no
// allocation, no host synchronisation.
#include <dlfcn.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dsv4_backend.h"
#include "dsv4_backend_export.h"
#include "module/module_entry.h"
#include "module/module_slots.h"
#include "opencl_kernels/launch.h"
#include "opencl_kernels_spirv.h"
#include "ze_loader.h"

namespace dsv4 {
namespace level_zero {
namespace {

const dsv4_host_services* g_host = nullptr;

dsv4_status fail(dsv4_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));
dsv4_status fail(dsv4_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  report_module_error(g_host, "level-zero", format, args);
  va_end(args);
  return status;
}

void log_debug(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char* format, ...) {
  if (g_host == nullptr || g_host->log == nullptr) return;
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  g_host->log(DSV4_LOG_DEBUG, "level-zero", message);
}

template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

dsv4_status ze_fail(ze_result_t r, const char* what) {
  return fail(DSV4_STATUS_BACKEND_ERROR, "%s: Level Zero error 0x%x", what,
              static_cast<unsigned>(r));
}

// The loader, its entry points and the GPUs, found once per process.
struct runtime {
  ze::api api;
  std::string why;  // why there is nothing to run on (empty when devices were found)
  std::vector<ze_driver_handle_t> device_driver;
  std::vector<ze_device_handle_t> devices;
};

const runtime& rt() {
  static const runtime r = [] {
    runtime out;
    // A library path from the environment: ignored by setuid/setgid processes (secure_getenv),
    // as the loader ignores DSV4_BACKEND_PATH.
    const char* path = secure_getenv("DSV4_LEVEL_ZERO_LOADER");
    if (path == nullptr || *path == '\0') path = "libze_loader.so.1";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // never closed: modules are never unloaded
    if (lib == nullptr) {
      const char* e = dlerror();
      out.why = std::string("no Level Zero loader (") + (e != nullptr ? e : path) + ")";
      return out;
    }
#define DSV4_ZE_RESOLVE(name)                                                 \
  out.api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));      \
  if (out.api.name == nullptr) {                                              \
    out.why = std::string("the Level Zero loader ") + path + " lacks " #name; \
    return out;                                                               \
  }
    DSV4_ZE_FUNCTIONS(DSV4_ZE_RESOLVE)
#undef DSV4_ZE_RESOLVE
    out.api.list_context = reinterpret_cast<ze::command_list_get_context_fn>(
        dlsym(lib, "zeCommandListGetContextHandle"));
    out.api.list_device = reinterpret_cast<ze::command_list_get_device_fn>(
        dlsym(lib, "zeCommandListGetDeviceHandle"));
    ze_result_t res = out.api.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (res != ZE_RESULT_SUCCESS) {
      char text[96];
      std::snprintf(text, sizeof text, "no Level Zero GPU driver (zeInit: 0x%x)",
                    static_cast<unsigned>(res));
      out.why = text;
      return out;
    }
    uint32_t nd = 0;
    res = out.api.zeDriverGet(&nd, nullptr);
    if (res != ZE_RESULT_SUCCESS || nd == 0) {
      out.why = "no Level Zero driver";
      return out;
    }
    std::vector<ze_driver_handle_t> drivers(nd);
    out.api.zeDriverGet(&nd, drivers.data());
    for (ze_driver_handle_t d : drivers) {
      uint32_t n = 0;
      if (out.api.zeDeviceGet(d, &n, nullptr) != ZE_RESULT_SUCCESS || n == 0) continue;
      std::vector<ze_device_handle_t> devs(n);
      out.api.zeDeviceGet(d, &n, devs.data());
      for (ze_device_handle_t dev : devs) {
        ze_device_properties_t props{};
        props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
        if (out.api.zeDeviceGetProperties(dev, &props) != ZE_RESULT_SUCCESS ||
            props.type != ZE_DEVICE_TYPE_GPU)
          continue;
        out.device_driver.push_back(d);
        out.devices.push_back(dev);
      }
    }
    if (out.devices.empty()) out.why = "no Level Zero GPU";
    return out;
  }();
  return r;
}

// A module and its kernels in one context; launches through it are serialised (kernel arguments
// and group sizes are per kernel object).
struct instance {
  ze_context_handle_t context = nullptr;
  ze_module_handle_t module = nullptr;
  ze_kernel_handle_t kernels[clk::kKernelCount] = {};
  std::mutex mutex;
  ~instance() {
    const ze::api& z = rt().api;
    for (ze_kernel_handle_t k : kernels)
      if (k != nullptr) z.zeKernelDestroy(k);
    if (module != nullptr) z.zeModuleDestroy(module);
  }
};

struct context {
  ze_driver_handle_t driver = nullptr;
  ze_device_handle_t device = nullptr;
  ze_context_handle_t own = nullptr;
  std::mutex mutex;  // guards instances
  std::map<ze_context_handle_t, std::unique_ptr<instance>> instances;
  ~context() {
    instances.clear();
    if (own != nullptr) rt().api.zeContextDestroy(own);
  }
};

struct plan {
  context* ctx = nullptr;
  dsv4_mod_plan mod{};
};

// The module and kernels of `hctx` (ctx->mutex held): built from the embedded SPIR-V.
dsv4_status instance_in(context* ctx, ze_context_handle_t hctx, instance** out) {
  auto it = ctx->instances.find(hctx);
  if (it != ctx->instances.end()) {
    *out = it->second.get();
    return DSV4_STATUS_OK;
  }
  const ze::api& z = rt().api;
  auto inst = std::make_unique<instance>();
  inst->context = hctx;
  ze_module_desc_t desc{};
  desc.stype = ZE_STRUCTURE_TYPE_MODULE_DESC;
  desc.format = ZE_MODULE_FORMAT_IL_SPIRV;
  desc.inputSize = kDsv4SpirvKernels_size;
  desc.pInputModule = kDsv4SpirvKernels;
  desc.pBuildFlags = "";
  ze_module_build_log_handle_t log = nullptr;
  ze_result_t r = z.zeModuleCreate(hctx, ctx->device, &desc, &inst->module, &log);
  if (r != ZE_RESULT_SUCCESS) {
    std::string text;
    size_t n = 0;
    if (log != nullptr && z.zeModuleBuildLogGetString(log, &n, nullptr) == ZE_RESULT_SUCCESS &&
        n > 0) {
      text.resize(n);
      z.zeModuleBuildLogGetString(log, &n, &text[0]);
      text.resize(std::strlen(text.c_str()));
      if (text.size() > 300) text = text.substr(0, 300) + "...";
    }
    if (log != nullptr) z.zeModuleBuildLogDestroy(log);
    inst->module = nullptr;
    return fail(DSV4_STATUS_BACKEND_ERROR, "zeModuleCreate (SPIR-V kernels): 0x%x %s",
                static_cast<unsigned>(r), text.c_str());
  }
  if (log != nullptr) z.zeModuleBuildLogDestroy(log);
  for (int k = 0; k < clk::kKernelCount; ++k) {
    ze_kernel_desc_t kd{};
    kd.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC;
    kd.pKernelName = clk::kernel_name(k);
    r = z.zeKernelCreate(inst->module, &kd, &inst->kernels[k]);
    if (r != ZE_RESULT_SUCCESS) return ze_fail(r, "zeKernelCreate");
  }
  *out = inst.get();
  ctx->instances.emplace(hctx, std::move(inst));
  return DSV4_STATUS_OK;
}

// The instance of the command list's context (Level Zero 1.9 tells it; older loaders cannot).
dsv4_status instance_for(context* ctx, ze_command_list_handle_t list, const char* what,
                         instance** out) {
  if (list == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT,
                "%s: stream is NULL; the Level Zero module appends to the caller's "
                "ze_command_list_handle_t",
                what);
  const ze::api& z = rt().api;
  if (z.list_context == nullptr)
    return fail(DSV4_STATUS_UNSUPPORTED,
                "%s: the Level Zero loader lacks zeCommandListGetContextHandle (Level Zero 1.9), "
                "so the command list's context cannot be known",
                what);
  ze_context_handle_t hctx = nullptr;
  ze_result_t r = z.list_context(list, &hctx);
  if (r != ZE_RESULT_SUCCESS)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: stream is not a command list (0x%x)", what,
                static_cast<unsigned>(r));
  if (z.list_device != nullptr) {
    ze_device_handle_t dev = nullptr;
    r = z.list_device(list, &dev);
    if (r == ZE_RESULT_SUCCESS && dev != ctx->device)
      return fail(DSV4_STATUS_INVALID_ARGUMENT,
                  "%s: the command list's device is not the context's device", what);
  }
  std::lock_guard<std::mutex> lock(ctx->mutex);
  return instance_in(ctx, hctx, out);
}

// Checks every pointer (host-side query), then sets arguments and appends each launch.
dsv4_status append(instance* inst, ze_command_list_handle_t list, const clk::launch_list& launches,
                   const char* what) {
  const ze::api& z = rt().api;
  for (int i = 0; i < launches.count; ++i) {
    const clk::launch& l = launches.item[i];
    for (int a = 0; a < l.num_args; ++a) {
      const clk::launch::arg& arg = l.args[a];
      if (!arg.is_pointer) continue;
      ze_memory_allocation_properties_t props{};
      props.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
      ze_device_handle_t owner = nullptr;
      const ze_result_t r = z.zeMemGetAllocProperties(inst->context, arg.pointer, &props, &owner);
      if (r != ZE_RESULT_SUCCESS || props.type == ZE_MEMORY_TYPE_UNKNOWN)
        return fail(DSV4_STATUS_INVALID_ARGUMENT,
                    "%s: %s (%p) is not a USM allocation of the command list's context", what,
                    arg.name, arg.pointer);
    }
  }
  std::lock_guard<std::mutex> lock(inst->mutex);
  for (int i = 0; i < launches.count; ++i) {
    const clk::launch& l = launches.item[i];
    if (l.groups[0] == 0 || l.groups[1] == 0) continue;
    ze_kernel_handle_t k = inst->kernels[l.kernel];
    ze_result_t r = z.zeKernelSetGroupSize(k, static_cast<uint32_t>(l.group_size[0]),
                                           static_cast<uint32_t>(l.group_size[1]), 1);
    if (r != ZE_RESULT_SUCCESS) return ze_fail(r, "zeKernelSetGroupSize");
    for (int a = 0; a < l.num_args; ++a) {
      const clk::launch::arg& arg = l.args[a];
      r = arg.is_pointer ? z.zeKernelSetArgumentValue(k, static_cast<uint32_t>(a),
                                                      sizeof arg.pointer, &arg.pointer)
                         : z.zeKernelSetArgumentValue(k, static_cast<uint32_t>(a), arg.value_size,
                                                      l.value(arg));
      if (r != ZE_RESULT_SUCCESS) return ze_fail(r, "zeKernelSetArgumentValue");
    }
    const ze_group_count_t groups{static_cast<uint32_t>(l.groups[0]),
                                  static_cast<uint32_t>(l.groups[1]), 1};
    r = z.zeCommandListAppendLaunchKernel(list, k, &groups, nullptr, 0, nullptr);
    if (r != ZE_RESULT_SUCCESS) return ze_fail(r, "zeCommandListAppendLaunchKernel");
  }
  return DSV4_STATUS_OK;
}

// ---------------------------------------------------------------------------------------------
// ABI slots
// ---------------------------------------------------------------------------------------------
constexpr int32_t kScore = 60;

dsv4_status slot_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t capacity) {
  return guarded("probe", [&] {
    const runtime& r = rt();
    const int32_t n = static_cast<int32_t>(r.devices.size());
    if (out_score != nullptr) *out_score = n > 0 ? kScore : 0;
    if (out_device_count != nullptr) *out_device_count = n;
    if (reason != nullptr && capacity > 0) {
      if (n == 0)
        std::snprintf(reason, capacity, "%s", r.why.c_str());
      else
        std::snprintf(reason, capacity, "ok: %d GPU(s)%s", n,
                      r.api.list_context == nullptr
                          ? " (loader older than Level Zero 1.9: runs are refused)"
                          : "");
    }
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_get_device_info(int32_t index, dsv4_device_info* out_info) {
  return guarded("get_device_info", [&] {
    if (out_info == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: out_info is NULL");
    const runtime& r = rt();
    if (index < 0 || index >= static_cast<int32_t>(r.devices.size()))
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: device %d of %zu", index,
                  r.devices.size());
    ze_device_properties_t props{};
    props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    const ze_result_t res =
        r.api.zeDeviceGetProperties(r.devices[static_cast<size_t>(index)], &props);
    if (res != ZE_RESULT_SUCCESS) return ze_fail(res, "zeDeviceGetProperties");
    dsv4_device_info info{};
    info.struct_size = out_info->struct_size != 0 ? out_info->struct_size : sizeof info;
    info.device_type = DSV4_DEVICE_ONEAPI;
    info.device_id = index;
    info.compute_units = static_cast<int32_t>(props.numSlices * props.numSubslicesPerSlice);
    info.memory_bytes = 0;
    std::memcpy(info.name, props.name, std::min(sizeof info.name - 1, std::strlen(props.name)));
    const uint32_t size = info.struct_size;
    std::memcpy(out_info, &info, std::min<size_t>(size, sizeof info));
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  return guarded("ctx_create", [&] {
    if (config == nullptr || out_mctx == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: config or out_mctx is NULL");
    const runtime& r = rt();
    if (config->device_id < 0 || config->device_id >= static_cast<int32_t>(r.devices.size()))
      return fail(DSV4_STATUS_INVALID_ARGUMENT,
                  "ctx_create: device_id %d of %zu Level Zero GPUs%s%s", config->device_id,
                  r.devices.size(), r.why.empty() ? "" : ": ", r.why.c_str());
    auto ctx = std::make_unique<context>();
    ctx->driver = r.device_driver[static_cast<size_t>(config->device_id)];
    ctx->device = r.devices[static_cast<size_t>(config->device_id)];
    ze_context_desc_t desc{};
    desc.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
    const ze_result_t res = r.api.zeContextCreate(ctx->driver, &desc, &ctx->own);
    if (res != ZE_RESULT_SUCCESS) return ze_fail(res, "ctx_create: zeContextCreate");
    log_debug("context on GPU %d", config->device_id);
    *out_mctx = ctx.release();
    return DSV4_STATUS_OK;
  });
}

void slot_ctx_destroy(void* mctx) { delete static_cast<context*>(mctx); }

dsv4_status slot_plan_create(void* mctx, const dsv4_mod_plan* mod, void** out_mplan) {
  return guarded("plan_create", [&] {
    const dsv4_status head = check_plan_header(fail, mctx, mod, out_mplan);
    if (head != DSV4_STATUS_OK) return head;
    if (mod->head_dim_qk > DSV4_CL_MAX_DQK)
      return fail(DSV4_STATUS_UNSUPPORTED, "plan: head_dim_qk %d", mod->head_dim_qk);
    auto p = std::make_unique<plan>();
    p->ctx = static_cast<context*>(mctx);
    p->mod = *mod;
    // As the OpenCL module: every layout, flag and head count; batch invariant by construction.
    {
      std::lock_guard<std::mutex> lock(p->ctx->mutex);
      instance* inst = nullptr;
      const dsv4_status st = instance_in(p->ctx, p->ctx->own, &inst);
      if (st != DSV4_STATUS_OK) return st;
    }
    *out_mplan = p.release();
    return DSV4_STATUS_OK;
  });
}

void slot_plan_destroy(void* mplan) { delete static_cast<plan*>(mplan); }

dsv4_status slot_plan_get_workspace_size(const void* mplan, size_t* out_bytes) {
  if (mplan == nullptr || out_bytes == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_get_workspace_size: NULL argument");
  *out_bytes = clk::workspace_bytes(static_cast<const plan*>(mplan)->mod);
  return DSV4_STATUS_OK;
}

dsv4_status slot_plan_get_kernel_name(const void* mplan, char* buffer, size_t capacity) {
  if (mplan == nullptr || buffer == nullptr || capacity == 0)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_get_kernel_name: NULL argument");
  const plan* p = static_cast<const plan*>(mplan);
  std::snprintf(buffer, capacity, "level-zero-spirv-sg16-h%d-k%d/%s", DSV4_CL_HEAD_TILE,
                DSV4_CL_KEY_CHUNK, p->mod.mode == DSV4_MODE_PAGED ? "paged" : "explicit");
  return DSV4_STATUS_OK;
}

dsv4_status slot_run(const void* mplan, const dsv4_mod_run* run) {
  return guarded("run", [&] {
    const plan* p = static_cast<const plan*>(mplan);
    const dsv4_status head = check_run_header(fail, mplan, run, p != nullptr ? p->mod.mode : 0u);
    if (head != DSV4_STATUS_OK) return head;
    const dsv4_status checked = clk::check_run(fail, p->mod, *run);
    if (checked != DSV4_STATUS_OK) return checked;
    if (run->num_tokens <= 0) return DSV4_STATUS_OK;
    auto list = static_cast<ze_command_list_handle_t>(run->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(p->ctx, list, "run", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_run(p->mod, *run, &launches);
    return append(inst, list, launches, "run");
  });
}

dsv4_status slot_kv_write(void* mctx, const dsv4_mod_kv_write* write) {
  return guarded("kv_write", [&] {
    const dsv4_status checked = check_kv_write_header(fail, mctx, write);
    if (checked != DSV4_STATUS_OK) return checked;
    if (write->num_rows <= 0) return DSV4_STATUS_OK;
    auto list = static_cast<ze_command_list_handle_t>(write->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(static_cast<context*>(mctx), list, "kv_write", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_kv_write(*write, &launches);
    return append(inst, list, launches, "kv_write");
  });
}

dsv4_status slot_export_indices(const void* mplan, const dsv4_mod_run* batch,
                                const dsv4_mod_export* exp) {
  return guarded("export_indices", [&] {
    const dsv4_status checked = check_export_header(fail, mplan, batch, exp);
    if (checked != DSV4_STATUS_OK) return checked;
    // A CSR step without tokens still writes indptr[0] = 0 (clk::plan_export).
    if (clk::export_launches_nothing(*batch, *exp)) return DSV4_STATUS_OK;
    const plan* p = static_cast<const plan*>(mplan);
    auto list = static_cast<ze_command_list_handle_t>(exp->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(p->ctx, list, "export_indices", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_export(*exp->plan, *batch, *exp, &launches);
    return append(inst, list, launches, "export_indices");
  });
}

dsv4_status slot_merge(void* mctx, const dsv4_mod_merge* m) {
  return guarded("merge", [&] {
    const dsv4_status checked = check_merge_header(fail, mctx, m);
    if (checked != DSV4_STATUS_OK) return checked;
    if (static_cast<int64_t>(m->num_tokens) * m->num_heads <= 0) return DSV4_STATUS_OK;
    auto list = static_cast<ze_command_list_handle_t>(m->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(static_cast<context*>(mctx), list, "merge", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_merge(*m, &launches);
    return append(inst, list, launches, "merge");
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "level-zero",
    DSV4_MODULE_VERSION_STRING " (level-zero-spirv)",
    DSV4_DEVICE_ONEAPI,
    0,
    slot_probe,
    slot_get_device_info,
    slot_ctx_create,
    slot_ctx_destroy,
    slot_plan_create,
    slot_plan_destroy,
    slot_plan_get_workspace_size,
    slot_plan_get_kernel_name,
    slot_run,
    slot_kv_write,
    slot_export_indices,
    slot_merge,
};

}  // namespace
}  // namespace level_zero
}  // namespace dsv4

extern "C" DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                             const dsv4_host_services* host,
                                                             const dsv4_backend_iface** out_iface) {
  const dsv4_status status =
      dsv4::negotiate_module_abi("level-zero", inout_abi_version, host, out_iface);
  if (status != DSV4_STATUS_OK) return status;
  dsv4::level_zero::g_host = host;
  *out_iface = &dsv4::level_zero::g_iface;
  return DSV4_STATUS_OK;
}
