// Entry point and module ABI slots of the OpenCL backend (libdsv4-opencl.so): the kernels of
// backends/opencl_kernels, built from source on any OpenCL 2.0+ device with coarse-grained SVM.
// Tensors are SVM pointers (DSV4_DEVICE_OPENCL); the stream is the caller's cl_command_queue, whose
// context and device the launches follow.
//
// Programs: the kernel text is compiled once per module context, at the first plan_create, in a
// context of the module's own (errors surface there); the binary is then loaded into each caller
// context the first time a run meets it (per context and device cache). Later calls only set
// arguments and enqueue: no allocation, no host synchronisation.
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
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
#include "opencl_kernels_source.h"

namespace dsv4 {
namespace opencl {
namespace {

const dsv4_host_services* g_host = nullptr;

dsv4_status fail(dsv4_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));
dsv4_status fail(dsv4_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  report_module_error(g_host, "opencl", format, args);
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
  g_host->log(DSV4_LOG_DEBUG, "opencl", message);
}

template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

dsv4_status cl_fail(cl_int err, const char* what) {
  return fail(DSV4_STATUS_BACKEND_ERROR, "%s: OpenCL error %d", what, static_cast<int>(err));
}

// Local memory the attention kernel declares (params.h geometry).
constexpr size_t kAttentionLocalBytes =
    sizeof(float) * (DSV4_CL_HEAD_TILE * DSV4_CL_MAX_DQK + DSV4_CL_KEY_CHUNK * DSV4_CL_KEY_STRIDE +
                     DSV4_CL_HEAD_TILE * DSV4_CL_KEY_CHUNK) +
    32 * DSV4_CL_KEY_CHUNK + 16;

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, &s[0], nullptr) != CL_SUCCESS) return "";
  s.resize(std::strlen(s.c_str()));
  return s;
}

// An OpenCL device this module can serve: OpenCL 2.0 or later with coarse-grained SVM buffers.
struct device_entry {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_device_type type = 0;
};

bool device_usable(cl_device_id d, std::string* why) {
  const std::string version = device_string(d, CL_DEVICE_VERSION);  // "OpenCL 3.0 ..."
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "OpenCL %d.%d", &major, &minor) != 2 || major < 2) {
    *why = "'" + version + "' (needs OpenCL 2.0 or later)";
    return false;
  }
  cl_device_svm_capabilities svm = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr) != CL_SUCCESS ||
      (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) == 0) {
    *why = "no coarse-grained SVM buffers";
    return false;
  }
  cl_ulong local = 0;
  clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, nullptr);
  if (local < kAttentionLocalBytes) {
    *why = std::to_string(local) + " B of local memory (the attention kernel needs " +
           std::to_string(kAttentionLocalBytes) + ")";
    return false;
  }
  size_t group = 0;
  clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, nullptr);
  if (group < DSV4_CL_SCAN_THREADS) {
    *why = "work-groups of " + std::to_string(group) + " work-items (needs " +
           std::to_string(DSV4_CL_SCAN_THREADS) + ")";
    return false;
  }
  return true;
}

// Every usable device, platform by platform (device_id indexes this list); `why` collects the
// reasons of the rejected ones and of a missing platform.
std::vector<device_entry> enumerate_devices(std::string* why) {
  std::vector<device_entry> out;
  cl_uint np = 0;
  const cl_int err = clGetPlatformIDs(0, nullptr, &np);
  if (err != CL_SUCCESS || np == 0) {
    *why = err == CL_SUCCESS ? "no OpenCL platform"
                             : "no OpenCL platform (clGetPlatformIDs: " + std::to_string(err) + ")";
    return out;
  }
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devices(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      std::string reason;
      if (!device_usable(d, &reason)) {
        *why += (why->empty() ? "" : "; ") + device_string(d, CL_DEVICE_NAME) + ": " + reason;
        continue;
      }
      device_entry e;
      e.platform = p;
      e.device = d;
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof e.type, &e.type, nullptr);
      out.push_back(e);
    }
  }
  if (out.empty() && why->empty()) *why = "no OpenCL device";
  return out;
}

// The program and kernels of one caller context; launches on it are serialised (kernel
// arguments are per kernel object).
struct instance {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[clk::kKernelCount] = {};
  std::mutex mutex;
  ~instance() {
    for (cl_kernel k : kernels)
      if (k != nullptr) clReleaseKernel(k);
    if (program != nullptr) clReleaseProgram(program);
    if (context != nullptr) clReleaseContext(context);
  }
};

struct context {
  device_entry dev;
  // cl_intel_unified_shared_memory's pointer query, where the platform has it: it tells a pointer
  // that no SVM/USM allocation of the context holds (other platforms cannot tell).
  clGetMemAllocInfoINTEL_fn mem_alloc_info = nullptr;
  cl_context own = nullptr;  // the module's context: plan-time builds
  std::string build_options;
  std::mutex mutex;  // guards binary and instances
  std::vector<unsigned char> binary;
  std::map<cl_context, std::unique_ptr<instance>> instances;
  ~context() {
    instances.clear();
    if (own != nullptr) clReleaseContext(own);
  }
};

struct plan {
  context* ctx = nullptr;
  dsv4_mod_plan mod{};
};

std::string build_log(cl_program p, cl_device_id d) {
  size_t n = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string s(n, '\0');
  if (n > 0) clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, &s[0], nullptr);
  s.resize(std::strlen(s.c_str()));
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

// Compiles the kernel text in the module's context and keeps the device binary (ctx->mutex
// held).
dsv4_status build_binary(context* ctx) {
  if (!ctx->binary.empty()) return DSV4_STATUS_OK;
  const char* text = reinterpret_cast<const char*>(kDsv4OpenclKernelSource);
  const size_t length = kDsv4OpenclKernelSource_size;
  cl_int err = CL_SUCCESS;
  cl_program prog = clCreateProgramWithSource(ctx->own, 1, &text, &length, &err);
  if (err != CL_SUCCESS) return cl_fail(err, "plan_create: clCreateProgramWithSource");
  err = clBuildProgram(prog, 1, &ctx->dev.device, ctx->build_options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string log = build_log(prog, ctx->dev.device);
    clReleaseProgram(prog);
    return fail(DSV4_STATUS_BACKEND_ERROR, "plan_create: the kernels do not build (%d): %s",
                static_cast<int>(err), log.c_str());
  }
  size_t size = 0;
  err = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr);
  if (err == CL_SUCCESS && size > 0) {
    ctx->binary.resize(size);
    unsigned char* data = ctx->binary.data();
    err = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr);
  }
  clReleaseProgram(prog);
  if (err != CL_SUCCESS || size == 0) {
    ctx->binary.clear();
    return cl_fail(err, "plan_create: clGetProgramInfo(CL_PROGRAM_BINARIES)");
  }
  log_debug("kernels built for %s (%zu B binary)",
            device_string(ctx->dev.device, CL_DEVICE_NAME).c_str(), size);
  return DSV4_STATUS_OK;
}

// The instance of the stream's context, loaded from the plan-time binary on first use.
dsv4_status instance_for(context* ctx, cl_command_queue queue, const char* what, instance** out) {
  if (queue == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT,
                "%s: stream is NULL; the OpenCL module enqueues on the caller's cl_command_queue",
                what);
  cl_context cl_ctx = nullptr;
  cl_device_id device = nullptr;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof cl_ctx, &cl_ctx, nullptr);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof device, &device, nullptr);
  if (err != CL_SUCCESS)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: stream is not a cl_command_queue (%d)", what,
                static_cast<int>(err));
  if (device != ctx->dev.device)
    return fail(DSV4_STATUS_INVALID_ARGUMENT,
                "%s: the stream's device (%s) is not the context's device (%s)", what,
                device_string(device, CL_DEVICE_NAME).c_str(),
                device_string(ctx->dev.device, CL_DEVICE_NAME).c_str());
  std::lock_guard<std::mutex> lock(ctx->mutex);
  auto it = ctx->instances.find(cl_ctx);
  if (it != ctx->instances.end()) {
    *out = it->second.get();
    return DSV4_STATUS_OK;
  }
  dsv4_status st = build_binary(ctx);
  if (st != DSV4_STATUS_OK) return st;
  auto inst = std::make_unique<instance>();
  const unsigned char* bin = ctx->binary.data();
  const size_t size = ctx->binary.size();
  cl_int bin_status = CL_SUCCESS;
  inst->program = clCreateProgramWithBinary(cl_ctx, 1, &device, &size, &bin, &bin_status, &err);
  if (err == CL_SUCCESS)
    err = clBuildProgram(inst->program, 1, &device, ctx->build_options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) return cl_fail(err, "loading the kernels into the stream's context");
  clRetainContext(cl_ctx);
  inst->context = cl_ctx;
  for (int k = 0; k < clk::kKernelCount; ++k) {
    inst->kernels[k] = clCreateKernel(inst->program, clk::kernel_name(k), &err);
    if (err != CL_SUCCESS) return cl_fail(err, "clCreateKernel");
  }
  *out = inst.get();
  ctx->instances.emplace(cl_ctx, std::move(inst));
  return DSV4_STATUS_OK;
}

// Sets each launch's arguments and enqueues it on the caller's queue, after checking every
// pointer where the platform can tell (so a bad one leaves everything untouched).
dsv4_status enqueue(const context* ctx, instance* inst, cl_command_queue queue,
                    const clk::launch_list& launches, const char* what) {
  if (ctx->mem_alloc_info != nullptr) {
    for (int i = 0; i < launches.count; ++i) {
      const clk::launch& l = launches.item[i];
      for (int a = 0; a < l.num_args; ++a) {
        const clk::launch::arg& arg = l.args[a];
        if (!arg.is_pointer) continue;
        cl_uint type = CL_MEM_TYPE_UNKNOWN_INTEL;
        const cl_int err = ctx->mem_alloc_info(inst->context, arg.pointer, CL_MEM_ALLOC_TYPE_INTEL,
                                               sizeof type, &type, nullptr);
        if (err != CL_SUCCESS || type == CL_MEM_TYPE_UNKNOWN_INTEL)
          return fail(DSV4_STATUS_INVALID_ARGUMENT,
                      "%s: %s (%p) is not an SVM/USM allocation of the stream's context", what,
                      arg.name, arg.pointer);
      }
    }
  }
  std::lock_guard<std::mutex> lock(inst->mutex);
  for (int i = 0; i < launches.count; ++i) {
    const clk::launch& l = launches.item[i];
    cl_kernel k = inst->kernels[l.kernel];
    for (int a = 0; a < l.num_args; ++a) {
      const clk::launch::arg& arg = l.args[a];
      cl_int err;
      if (arg.is_pointer) {
        err = clSetKernelArgSVMPointer(k, static_cast<cl_uint>(a), arg.pointer);
        if (err != CL_SUCCESS)
          return fail(DSV4_STATUS_INVALID_ARGUMENT,
                      "%s: %s is not an SVM pointer of the stream's context (OpenCL error %d)",
                      what, arg.name, static_cast<int>(err));
      } else {
        err = clSetKernelArg(k, static_cast<cl_uint>(a), arg.value_size, l.value(arg));
        if (err != CL_SUCCESS) return cl_fail(err, "clSetKernelArg");
      }
    }
    const size_t global[2] = {l.groups[0] * l.group_size[0], l.groups[1] * l.group_size[1]};
    if (global[0] == 0 || global[1] == 0) continue;
    const cl_int err =
        clEnqueueNDRangeKernel(queue, k, 2, nullptr, global, l.group_size, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return cl_fail(err, "clEnqueueNDRangeKernel");
  }
  return DSV4_STATUS_OK;
}

// ---------------------------------------------------------------------------------------------
// ABI slots
// ---------------------------------------------------------------------------------------------
// GPUs and accelerators score above the CPU module; a CPU OpenCL device (PoCL) scores below it,
// so it is chosen only when asked for (DSV4_BACKEND=opencl).
constexpr int32_t kScoreGpu = 60;
constexpr int32_t kScoreCpuDevice = 5;

dsv4_status slot_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t capacity) {
  return guarded("probe", [&] {
    std::string why;
    const std::vector<device_entry> devices = enumerate_devices(&why);
    int32_t score = 0;
    for (const device_entry& d : devices)
      score = std::max(score, (d.type & CL_DEVICE_TYPE_CPU) != 0 ? kScoreCpuDevice : kScoreGpu);
    if (out_score != nullptr) *out_score = score;
    if (out_device_count != nullptr) *out_device_count = static_cast<int32_t>(devices.size());
    if (reason != nullptr && capacity > 0) {
      if (devices.empty())
        std::snprintf(reason, capacity, "%s", why.c_str());
      else
        std::snprintf(reason, capacity, "ok: %zu device(s), first %s%s", devices.size(),
                      device_string(devices[0].device, CL_DEVICE_NAME).c_str(),
                      score == kScoreCpuDevice ? " (CPU devices only: below the CPU module)" : "");
    }
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_get_device_info(int32_t index, dsv4_device_info* out_info) {
  return guarded("get_device_info", [&] {
    if (out_info == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: out_info is NULL");
    std::string why;
    const std::vector<device_entry> devices = enumerate_devices(&why);
    if (index < 0 || index >= static_cast<int32_t>(devices.size()))
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: device %d of %zu", index,
                  devices.size());
    cl_device_id d = devices[static_cast<size_t>(index)].device;
    dsv4_device_info info{};
    info.struct_size = out_info->struct_size != 0 ? out_info->struct_size : sizeof info;
    info.device_type = DSV4_DEVICE_OPENCL;
    info.device_id = index;
    cl_uint units = 0;
    cl_ulong mem = 0;
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, nullptr);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, nullptr);
    info.compute_units = static_cast<int32_t>(units);
    info.memory_bytes = static_cast<int64_t>(mem);
    std::snprintf(info.name, sizeof info.name, "%s (%s)", device_string(d, CL_DEVICE_NAME).c_str(),
                  device_string(d, CL_DEVICE_VERSION).c_str());
    const uint32_t size = info.struct_size;
    std::memcpy(out_info, &info, std::min<size_t>(size, sizeof info));
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  return guarded("ctx_create", [&] {
    if (config == nullptr || out_mctx == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: config or out_mctx is NULL");
    std::string why;
    const std::vector<device_entry> devices = enumerate_devices(&why);
    if (config->device_id < 0 || config->device_id >= static_cast<int32_t>(devices.size()))
      return fail(DSV4_STATUS_INVALID_ARGUMENT,
                  "ctx_create: device_id %d of %zu OpenCL devices%s%s", config->device_id,
                  devices.size(), why.empty() ? "" : ": ", why.c_str());
    auto ctx = std::make_unique<context>();
    ctx->dev = devices[static_cast<size_t>(config->device_id)];
    cl_int err = CL_SUCCESS;
    const cl_context_properties props[] = {
        CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(ctx->dev.platform), 0};
    ctx->own = clCreateContext(props, 1, &ctx->dev.device, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) return cl_fail(err, "ctx_create: clCreateContext");
    ctx->mem_alloc_info = reinterpret_cast<clGetMemAllocInfoINTEL_fn>(
        clGetExtensionFunctionAddressForPlatform(ctx->dev.platform, "clGetMemAllocInfoINTEL"));
    // IEEE semantics throughout (infinities in sinks, NaN rows masked by selection).
    ctx->build_options = "-cl-std=CL1.2";
    if (const char* env = g_host != nullptr && g_host->get_env != nullptr
                              ? g_host->get_env("DSV4_OPENCL_NO_SUBGROUPS")
                              : nullptr;
        env != nullptr && std::strcmp(env, "1") == 0)
      ctx->build_options += " -DDSV4_CL_NO_SUBGROUPS";
    log_debug("context on %s (%s)", device_string(ctx->dev.device, CL_DEVICE_NAME).c_str(),
              device_string(ctx->dev.device, CL_DEVICE_VERSION).c_str());
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
    // Every layout, cache flag, head count and plan flag is served: one kernel family
    // (REFERENCE_KERNEL changes nothing) whose result for a token depends on its own lists only
    // (BATCH_INVARIANT holds).
    {
      std::lock_guard<std::mutex> lock(p->ctx->mutex);
      const dsv4_status st = build_binary(p->ctx);
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
  std::snprintf(buffer, capacity, "opencl-h%d-k%d/%s", DSV4_CL_HEAD_TILE, DSV4_CL_KEY_CHUNK,
                p->mod.mode == DSV4_MODE_PAGED ? "paged" : "explicit");
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
    instance* inst = nullptr;
    cl_command_queue queue = static_cast<cl_command_queue>(run->stream);
    const dsv4_status st = instance_for(p->ctx, queue, "run", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_run(p->mod, *run, &launches);
    return enqueue(p->ctx, inst, queue, launches, "run");
  });
}

dsv4_status slot_kv_write(void* mctx, const dsv4_mod_kv_write* write) {
  return guarded("kv_write", [&] {
    const dsv4_status checked = check_kv_write_header(fail, mctx, write);
    if (checked != DSV4_STATUS_OK) return checked;
    if (write->num_rows <= 0) return DSV4_STATUS_OK;
    context* ctx = static_cast<context*>(mctx);
    cl_command_queue queue = static_cast<cl_command_queue>(write->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(ctx, queue, "kv_write", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_kv_write(*write, &launches);
    return enqueue(ctx, inst, queue, launches, "kv_write");
  });
}

// Paged plans: the lists a run would build, in an engine's format. Batch values live on the
// device and are not validated (the builders never read out of bounds).
dsv4_status slot_export_indices(const void* mplan, const dsv4_mod_run* batch,
                                const dsv4_mod_export* exp) {
  return guarded("export_indices", [&] {
    const dsv4_status checked = check_export_header(fail, mplan, batch, exp);
    if (checked != DSV4_STATUS_OK) return checked;
    const plan* p = static_cast<const plan*>(mplan);
    // A CSR step without tokens still writes indptr[0] = 0 (clk::plan_export).
    if (clk::export_launches_nothing(*batch, *exp)) return DSV4_STATUS_OK;
    cl_command_queue queue = static_cast<cl_command_queue>(exp->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(p->ctx, queue, "export_indices", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_export(*exp->plan, *batch, *exp, &launches);
    return enqueue(p->ctx, inst, queue, launches, "export_indices");
  });
}

dsv4_status slot_merge(void* mctx, const dsv4_mod_merge* m) {
  return guarded("merge", [&] {
    const dsv4_status checked = check_merge_header(fail, mctx, m);
    if (checked != DSV4_STATUS_OK) return checked;
    if (static_cast<int64_t>(m->num_tokens) * m->num_heads <= 0) return DSV4_STATUS_OK;
    context* ctx = static_cast<context*>(mctx);
    cl_command_queue queue = static_cast<cl_command_queue>(m->stream);
    instance* inst = nullptr;
    const dsv4_status st = instance_for(ctx, queue, "merge", &inst);
    if (st != DSV4_STATUS_OK) return st;
    clk::launch_list launches;
    clk::plan_merge(*m, &launches);
    return enqueue(ctx, inst, queue, launches, "merge");
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "opencl",
    DSV4_MODULE_VERSION_STRING " (opencl-portable)",
    DSV4_DEVICE_OPENCL,
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
}  // namespace opencl
}  // namespace dsv4

extern "C" DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                             const dsv4_host_services* host,
                                                             const dsv4_backend_iface** out_iface) {
  const dsv4_status status =
      dsv4::negotiate_module_abi("opencl", inout_abi_version, host, out_iface);
  if (status != DSV4_STATUS_OK) return status;
  dsv4::opencl::g_host = host;
  *out_iface = &dsv4::opencl::g_iface;
  return DSV4_STATUS_OK;
}
