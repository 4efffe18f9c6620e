// Entry point and module ABI slots of the HIP backend (libdsv4-hip.so). The HIP runtime is opened
// at run time (runtime.cpp): without libamdhip64 or without an AMD GPU the probe answers score 0
// with the reason. The same source builds the HIP-on-NVIDIA test module (DSV4_HIP_ON_NVIDIA:
// DSV4_DEVICE_CUDA tensors, a probe score below the CUDA module's, so it runs only when forced)
// and the emulator test module (DSV4_HIP_EMULATOR: CPU tensors, kernels run by emu/emu.h). Every
// slot catches everything and reports errors through host->set_error.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "common/layout.h"
#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "kernels.h"
#include "module/module_entry.h"
#include "module/module_slots.h"
#include "planner.h"
#include "platform.h"
#include "runtime.h"

#if defined(DSV4_HIP_EMULATOR)
#define DSV4_HIP_DEVICE_TYPE DSV4_DEVICE_CPU
#define DSV4_HIP_SCORE 1  // below every CPU module: used only when asked for by name
#define DSV4_HIP_FLAVOUR "hip-emulator"
#elif defined(DSV4_HIP_ON_NVIDIA)
#define DSV4_HIP_DEVICE_TYPE DSV4_DEVICE_CUDA
#define DSV4_HIP_SCORE 10  // below the CUDA module's 100: used only when asked for by name
#define DSV4_HIP_FLAVOUR "hip-on-nvidia"
#else
#define DSV4_HIP_DEVICE_TYPE DSV4_DEVICE_ROCM
#define DSV4_HIP_SCORE 100
#define DSV4_HIP_FLAVOUR "hip"
#endif

namespace dsv4 {
namespace hip {
namespace {

const dsv4_host_services* g_host = nullptr;

const char* host_env(const char* name) {
  return g_host != nullptr && g_host->get_env != nullptr ? g_host->get_env(name) : nullptr;
}

int host_env_int(const char* name, int fallback) {
  const char* v = host_env(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

dsv4_status fail(dsv4_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));
dsv4_status fail(dsv4_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  report_module_error(g_host, "hip", format, args);
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
  g_host->log(DSV4_LOG_DEBUG, "hip", message);
}

dsv4_status hip_fail(hipError_t err, const char* what) {
  return fail(DSV4_STATUS_BACKEND_ERROR, "%s: %s (%s)", what, hipGetErrorName(err),
              hipGetErrorString(err));
}

template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

// The runtime, opened once; false with the reason when there is none. DSV4_HIP_RUNTIME names a
// library to load, so a setuid/setgid process ignores it (secure_getenv), as the loader ignores
// DSV4_BACKEND_PATH.
bool open_runtime(std::string* reason) {
  return runtime_open(secure_getenv("DSV4_HIP_RUNTIME"), reason);
}

// Makes `device` current for the scope and restores the caller's device afterwards.
class device_scope {
 public:
  explicit device_scope(int device) {
    status_ = hipGetDevice(&previous_);
    if (status_ == hipSuccess && previous_ != device) status_ = hipSetDevice(device);
  }
  ~device_scope() {
    int now = -1;
    if (hipGetDevice(&now) == hipSuccess && now != previous_ && previous_ >= 0)
      (void)hipSetDevice(previous_);  // a destructor has no one to tell
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  hipError_t status() const { return status_; }

 private:
  int previous_ = -1;
  hipError_t status_ = hipSuccess;
};

struct context {
  int device = 0;
  device_attributes attrs;
  device_traits traits{};
  device_caps caps;
};

struct plan {
  const context* ctx = nullptr;
  dsv4_mod_plan mod{};  // the host's derived plan
  tiling tl{};
  plan_knobs knobs;
  size_t partial_rows = 0;
  workspace_layout ws;
  size_t workspace_bytes = 0;
  char kernel[96] = {0};
};

const char* family_name(kernel_family f) { return f == kernel_family::mfma ? "mfma" : "simt"; }

// What the host cannot know: which kernel serves the plan on this device, and its workspace. This
// module serves every layout, cache flag, out_dtype (bf16, fp32) and plan flag: batch invariance
// holds with one key split per token (a row's reduction order then depends on its own lists only:
// its chunks in list order, its head group's fixed lanes), so batch-invariant plans never split.
dsv4_status size_plan(plan* p) {
  const dsv4_mod_plan& o = p->mod;
  p->knobs.heads_per_cta = host_env_int("DSV4_HIP_HEADS_PER_CTA", 0);
  p->knobs.max_splits = std::max(0, host_env_int("DSV4_HIP_MAX_SPLITS", 0));
  if (const char* k = host_env("DSV4_HIP_KERNEL")) {
    if (std::strcmp(k, "simt") == 0) p->knobs.force_family = 0;
    if (std::strcmp(k, "mfma") == 0) p->knobs.force_family = 1;
  }
  // Each candidate's kernel is configured for its shared memory before the occupancy query.
  struct occupancy_query {
    int head_dim_qk;
    hipError_t err;
  } q{o.head_dim_qk, hipSuccess};
  auto occupancy = [](void* user, kernel_family f, int hg) {
    occupancy_query* oq = static_cast<occupancy_query*>(user);
    int blocks = 0;
    const hipError_t e = attention_configure(f, hg, oq->head_dim_qk, &blocks);
    if (e != hipSuccess) oq->err = e;
    return e == hipSuccess ? blocks : 0;
  };
  p->tl = choose_tiling(o, p->ctx->caps, p->knobs, occupancy, &q);
  if (p->tl.heads_per_cta == 0) {
    if (q.err != hipSuccess) return hip_fail(q.err, "plan: attention kernel configuration");
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: %s", p->tl.why);
  }
  const bool invariant = (o.flags & DSV4_PLAN_FLAG_BATCH_INVARIANT) != 0;
  p->partial_rows =
      max_partial_rows(p->tl, p->ctx->caps, o.max_tokens, invariant, p->knobs.max_splits);
  p->ws = plan_workspace(o, p->partial_rows);
  p->workspace_bytes = p->ws.total;
  std::snprintf(p->kernel, sizeof p->kernel, "%s-%s-h%d-k%d/%s", DSV4_HIP_FLAVOUR,
                family_name(p->tl.family), p->tl.heads_per_cta, kChunkKeys,
                o.mode == DSV4_MODE_PAGED ? "paged" : "explicit");
  return DSV4_STATUS_OK;
}

bool aligned16(const dsv4_mod_cache& c) {
  return c.base == nullptr ||
         (reinterpret_cast<uintptr_t>(c.base) % 16 == 0 && c.block_stride_bytes % 16 == 0);
}

dsv4_status run_plan(const plan& p, const dsv4_mod_run& run) {
  const dsv4_mod_plan& o = p.mod;
  if (run.num_tokens <= 0) return DSV4_STATUS_OK;
  if (run.num_tokens > o.max_tokens)
    return fail(DSV4_STATUS_PLAN_MISMATCH, "run: %d tokens, plan capacity %d", run.num_tokens,
                o.max_tokens);
  if (run.workspace_bytes < p.workspace_bytes ||
      (p.workspace_bytes > 0 && run.workspace == nullptr))
    return fail(DSV4_STATUS_WORKSPACE_TOO_SMALL, "run: workspace of %zu bytes, plan needs %zu",
                run.workspace_bytes, p.workspace_bytes);
  device_scope scope(p.ctx->device);
  if (scope.status() != hipSuccess) return hip_fail(scope.status(), "run: hipSetDevice");
  hipStream_t stream = static_cast<hipStream_t>(run.stream);
  uint8_t* ws = static_cast<uint8_t*>(run.workspace);
  if (ws != nullptr)
    ws += (kWorkspaceAlign - reinterpret_cast<uintptr_t>(ws) % kWorkspaceAlign) % kWorkspaceAlign;

  attention_params a{};
  a.num_tokens = run.num_tokens;
  a.seq_q = run.seq_q > 0 ? run.seq_q : 1;
  a.num_heads = o.num_heads;
  a.head_dim_qk = o.head_dim_qk;
  a.heads_per_cta = p.tl.heads_per_cta;
  a.head_groups = p.tl.head_groups;
  a.chunks[0] = p.tl.chunks[0];
  a.chunks[1] = p.tl.chunks[1];
  a.width[0] = o.list_width[0];
  a.width[1] = o.list_width[1];
  a.q_is_fp8 = o.q_dtype.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN ? 1 : 0;
  a.out_f32 = o.out_dtype.code == DSV4_DTYPE_CODE_FLOAT ? 1 : 0;
  a.aligned16 = aligned16(run.swa_cache) && aligned16(run.extra_cache) ? 1 : 0;
  for (int i = 0; i < 2; ++i) {
    // Positive even where the product underflows (a 0 scale would make 0 * -inf NaNs).
    a.logit_scale_log2[i] = std::max(o.logit_scale[i] * 1.4426950408889634f, FLT_MIN);
  }
  a.values = list_value_scales_of(o.cache[0].layout, o.cache[0].kv_scale, o.cache[1].layout,
                                  o.cache[1].kv_scale);
  a.q = run.q;
  a.out = run.out;
  a.lse = run.lse;
  a.max_logits = run.max_logits;
  a.cache[0] = run.swa_cache;
  a.cache[1] = run.extra_cache;
  a.attn_sink = run.attn_sink;

  if (o.mode == DSV4_MODE_EXPLICIT) {
    a.list[0] = run.main_list;
    a.list[1] = run.extra_list;
  } else {
    // Paged: build the lists on the device (paged_index.h), then attend to them as explicit lists.
    const dsv4_mod_lists_map& wl = o.lists;
    const int64_t cw = o.cmp_width;
    paged_build_params b{};
    b.geometry = paged_geometry_of(o);
    b.capacity.swa = run.swa_cache.num_blocks * run.swa_cache.block_size;
    b.capacity.cmp = run.extra_cache.base != nullptr
                         ? run.extra_cache.num_blocks * run.extra_cache.block_size
                         : 0;
    b.batch = run.paged;
    b.num_tokens = run.num_tokens;
    b.swa_indices = reinterpret_cast<int32_t*>(ws + wl.swa_indices);
    b.swa_lengths = reinterpret_cast<int32_t*>(ws + wl.swa_lengths);
    b.cmp_indices = cw > 0 ? reinterpret_cast<int32_t*>(ws + wl.cmp_indices) : nullptr;
    b.cmp_lengths = reinterpret_cast<int32_t*>(ws + wl.cmp_lengths);
    const hipError_t err = paged_build_launch(b, stream);
    if (err != hipSuccess) return hip_fail(err, "run: paged list builder launch");
    for (int i = 0; i < 2; ++i) {
      dsv4_mod_index_list& l = a.list[i];
      const int64_t w = i == 0 ? o.window : cw;
      l = dsv4_mod_index_list{};
      if (w == 0) continue;
      l.indices = i == 0 ? b.swa_indices : b.cmp_indices;
      l.format = DSV4_INDEX_DENSE;
      l.width = static_cast<int32_t>(w);
      l.stride_b = a.seq_q * w;
      l.stride_s = w;
      l.stride_k = 1;
      l.lengths = i == 0 ? b.swa_lengths : b.cmp_lengths;
      l.len_stride_b = a.seq_q;
      l.len_stride_s = 1;
    }
  }

  const bool invariant = (o.flags & DSV4_PLAN_FLAG_BATCH_INVARIANT) != 0;
  const split_choice sc =
      choose_splits(p.tl, p.ctx->caps, run.num_tokens, invariant, p.knobs.max_splits);
  a.num_splits = sc.splits;
  a.chunks_per_split = sc.chunks_per_split;
  if (sc.splits > 1) {
    const size_t rows = static_cast<size_t>(run.num_tokens) * static_cast<size_t>(sc.splits);
    if (rows > p.partial_rows)
      return fail(DSV4_STATUS_INTERNAL, "run: %zu partial rows exceed the plan's %zu", rows,
                  p.partial_rows);
    a.partial_o = reinterpret_cast<float*>(ws + p.ws.partial_o);
    a.partial_lse = reinterpret_cast<float*>(ws + p.ws.partial_lse);
    a.partial_max = reinterpret_cast<float*>(ws + p.ws.partial_max);
  }
  const hipError_t err = attention_launch(p.tl.family, a, stream);
  if (err != hipSuccess) return hip_fail(err, "run: attention launch");
  return DSV4_STATUS_OK;
}

// ---------------------------------------------------------------------------------------------
// ABI slots
// ---------------------------------------------------------------------------------------------
dsv4_status slot_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t capacity) {
  return guarded("probe", [&] {
    int count = 0;
    int32_t score = 0;
    std::string why;
    if (!open_runtime(&why)) {
      if (reason != nullptr && capacity > 0) std::snprintf(reason, capacity, "%s", why.c_str());
    } else {
      const hipError_t err = hipGetDeviceCount(&count);
      if (err != hipSuccess || count == 0) {
        if (reason != nullptr && capacity > 0)
          std::snprintf(reason, capacity, "no %s device: %s",
                        DSV4_HIP_DEVICE_TYPE == DSV4_DEVICE_ROCM ? "AMD GPU" : "GPU",
                        err != hipSuccess ? hipGetErrorName(err) : "the runtime sees none");
        count = 0;
      } else {
        score = DSV4_HIP_SCORE;
        if (reason != nullptr && capacity > 0)
          std::snprintf(reason, capacity, "ok: %d device(s)", count);
      }
    }
    if (out_score != nullptr) *out_score = score;
    if (out_device_count != nullptr) *out_device_count = count;
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_get_device_info(int32_t index, dsv4_device_info* out_info) {
  return guarded("get_device_info", [&] {
    if (out_info == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: out_info is NULL");
    std::string why;
    if (!open_runtime(&why))
      return fail(DSV4_STATUS_NO_BACKEND, "get_device_info: %s", why.c_str());
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess) return hip_fail(err, "get_device_info: hipGetDeviceCount");
    if (index < 0 || index >= count)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: device %d of %d", index, count);
    device_attributes attrs;
    err = query_device(index, &attrs);
    if (err != hipSuccess) return hip_fail(err, "get_device_info: device attributes");
    const uint32_t size =
        out_info->struct_size != 0 ? out_info->struct_size : sizeof(dsv4_device_info);
    dsv4_device_info info{};
    info.struct_size = size;
    info.device_type = DSV4_HIP_DEVICE_TYPE;
    info.device_id = index;
    info.compute_units = attrs.compute_units;
    info.memory_bytes = attrs.memory_bytes;
    std::snprintf(info.name, sizeof info.name, "%s", attrs.name);
    std::memcpy(out_info, &info, std::min<size_t>(size, sizeof info));
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  return guarded("ctx_create", [&] {
    if (config == nullptr || out_mctx == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: config or out_mctx is NULL");
    std::string why;
    if (!open_runtime(&why)) return fail(DSV4_STATUS_NO_BACKEND, "ctx_create: %s", why.c_str());
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess) return hip_fail(err, "ctx_create: hipGetDeviceCount");
    if (config->device_id < 0 || config->device_id >= count)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: device_id %d of %d devices",
                  config->device_id, count);
    auto ctx = std::make_unique<context>();
    ctx->device = config->device_id;
    device_scope scope(ctx->device);
    if (scope.status() != hipSuccess) return hip_fail(scope.status(), "ctx_create: hipSetDevice");
    err = query_device(ctx->device, &ctx->attrs);
    if (err != hipSuccess) return hip_fail(err, "ctx_create: device attributes");
    // The code object's own answer: also proves that it has kernels for this device.
    err = query_device_traits(&ctx->traits);
    if (err != hipSuccess)
      return fail(DSV4_STATUS_UNSUPPORTED,
                  "ctx_create: %s: this module has no kernels for it (%s: %s)", ctx->attrs.name,
                  hipGetErrorName(err), hipGetErrorString(err));
    const device_traits& t = ctx->traits;
    if (t.checksum != t.wave_size + 7 * t.mfma + t.arch)
      return fail(DSV4_STATUS_BACKEND_ERROR, "ctx_create: the device traits kernel did not run");
    ctx->caps.compute_units = std::max(1, ctx->attrs.compute_units);
    ctx->caps.max_shared_per_block = ctx->attrs.max_shared_per_block;
    ctx->caps.wave_size = t.wave_size;
    ctx->caps.mfma = t.mfma != 0;
    log_debug("context on device %d: %s, %d compute units, %d B shared memory per block, wave%d%s",
              ctx->device, ctx->attrs.name, ctx->caps.compute_units, ctx->caps.max_shared_per_block,
              t.wave_size, t.mfma ? ", matrix cores" : "");
    *out_mctx = ctx.release();
    return DSV4_STATUS_OK;
  });
}

void slot_ctx_destroy(void* mctx) { delete static_cast<context*>(mctx); }

dsv4_status slot_plan_create(void* mctx, const dsv4_mod_plan* mod, void** out_mplan) {
  return guarded("plan_create", [&] {
    const dsv4_status head = check_plan_header(fail, mctx, mod, out_mplan);
    if (head != DSV4_STATUS_OK) return head;
    auto p = std::make_unique<plan>();
    p->ctx = static_cast<const context*>(mctx);
    p->mod = *mod;
    device_scope scope(p->ctx->device);
    if (scope.status() != hipSuccess) return hip_fail(scope.status(), "plan_create: hipSetDevice");
    const dsv4_status st = size_plan(p.get());
    if (st != DSV4_STATUS_OK) return st;
    log_debug(
        "plan: %s, %d heads in %d group(s), lists %d + %d, %zu B shared, %d block(s) per "
        "compute unit, workspace %zu B",
        p->kernel, p->mod.num_heads, p->tl.head_groups, p->mod.list_width[0], p->mod.list_width[1],
        p->tl.smem_bytes, p->tl.blocks_per_cu, p->workspace_bytes);
    *out_mplan = p.release();
    return DSV4_STATUS_OK;
  });
}

void slot_plan_destroy(void* mplan) { delete static_cast<plan*>(mplan); }

dsv4_status slot_plan_get_workspace_size(const void* mplan, size_t* out_bytes) {
  return plan_workspace_size<plan>(fail, mplan, out_bytes);
}

dsv4_status slot_plan_get_kernel_name(const void* mplan, char* buffer, size_t capacity) {
  if (mplan == nullptr || buffer == nullptr || capacity == 0)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_get_kernel_name: NULL argument");
  std::snprintf(buffer, capacity, "%s", static_cast<const plan*>(mplan)->kernel);
  return DSV4_STATUS_OK;
}

dsv4_status slot_run(const void* mplan, const dsv4_mod_run* run) {
  return guarded("run", [&] {
    const plan* p = static_cast<const plan*>(mplan);
    const dsv4_status head = check_run_header(fail, mplan, run, p != nullptr ? p->mod.mode : 0u);
    if (head != DSV4_STATUS_OK) return head;
    return run_plan(*p, *run);
  });
}

dsv4_status slot_kv_write(void* mctx, const dsv4_mod_kv_write* write) {
  return guarded("kv_write", [&] {
    const dsv4_status checked = check_kv_write_header(fail, mctx, write);
    if (checked != DSV4_STATUS_OK) return checked;
    const context* ctx = static_cast<const context*>(mctx);
    device_scope scope(ctx->device);
    if (scope.status() != hipSuccess) return hip_fail(scope.status(), "kv_write: hipSetDevice");
    const hipError_t err = kv_write_launch(*write, static_cast<hipStream_t>(write->stream));
    if (err != hipSuccess) return hip_fail(err, "kv_write: launch");
    return DSV4_STATUS_OK;
  });
}

// Paged plans: the lists a run would build, in an engine's format (FlashMLA dense, CSR,
// FlashInfer). Batch values live on the device and are not validated here (that would need a
// synchronisation); the builders never read out of bounds and turn malformed entries into -1.
dsv4_status slot_export_indices(const void* mplan, const dsv4_mod_run* batch,
                                const dsv4_mod_export* exp) {
  return guarded("export_indices", [&] {
    const dsv4_status checked = check_export_header(fail, mplan, batch, exp);
    if (checked != DSV4_STATUS_OK) return checked;
    const plan* p = static_cast<const plan*>(mplan);
    const export_params e = export_params_of(*exp->plan, *batch, *exp);
    if (e.format == DSV4_EXPORT_CSR) {
      if (e.geometry.window + static_cast<int64_t>(e.geometry.cmp_width) > kExportMaxCsrWidth)
        return fail(DSV4_STATUS_UNSUPPORTED, "export_indices: CSR lists wider than %lld entries",
                    static_cast<long long>(kExportMaxCsrWidth));
    }
    device_scope scope(p->ctx->device);
    if (scope.status() != hipSuccess)
      return hip_fail(scope.status(), "export_indices: hipSetDevice");
    const hipError_t err = export_launch(e, static_cast<hipStream_t>(exp->stream));
    if (err != hipSuccess) return hip_fail(err, "export_indices: launch");
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_merge(void* mctx, const dsv4_mod_merge* m) {
  return guarded("merge", [&] {
    const dsv4_status checked = check_merge_header(fail, mctx, m);
    if (checked != DSV4_STATUS_OK) return checked;
    const context* ctx = static_cast<const context*>(mctx);
    device_scope scope(ctx->device);
    if (scope.status() != hipSuccess) return hip_fail(scope.status(), "merge: hipSetDevice");
    const hipError_t err = merge_launch(merge_params_of(*m), static_cast<hipStream_t>(m->stream));
    if (err != hipSuccess) return hip_fail(err, "merge: launch");
    return DSV4_STATUS_OK;
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "hip",
    DSV4_MODULE_VERSION_STRING " (" DSV4_HIP_FLAVOUR ")",
    DSV4_HIP_DEVICE_TYPE,
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
}  // namespace hip
}  // namespace dsv4

extern "C" DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                             const dsv4_host_services* host,
                                                             const dsv4_backend_iface** out_iface) {
  const dsv4_status status = dsv4::negotiate_module_abi("hip", inout_abi_version, host, out_iface);
  if (status != DSV4_STATUS_OK) return status;
  dsv4::hip::g_host = host;
  *out_iface = &dsv4::hip::g_iface;
  return DSV4_STATUS_OK;
}
