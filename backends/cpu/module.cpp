// Entry point and module ABI slots of the CPU backend (libdsv4-cpu.so). Every slot validates what
// it reads, catches everything and reports errors through host->set_error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>
#include <thread>

#include "attention.h"
#include "common/layout.h"
#include "dsv4_backend.h"
#include "host.h"
#include "kv_write.h"
#include "module/module_entry.h"
#include "module/module_slots.h"
#include "probe.h"
#include "thread_pool.h"

#if DSV4_CPU_HAVE_PAGED
#include "paged.h"
#endif

#ifndef DSV4_CPU_MUTATION
#define DSV4_CPU_MUTATION 0
#endif

#if DSV4_CPU_MUTATION == 1
#define DSV4_CPU_KERNEL "cpu-ref-f32-mutant-sink"
#elif DSV4_CPU_MUTATION == 2
#define DSV4_CPU_KERNEL "cpu-ref-f32-mutant-offbyone"
#else
#define DSV4_CPU_KERNEL "cpu-ref-f32"
#endif

namespace dsv4 {
namespace cpu {
namespace {

constexpr int kMaxThreads = 4096;

struct context {
  std::unique_ptr<thread_pool> pool;
};

struct plan {
  context* ctx = nullptr;
  dsv4_plan_options options{};  // normalised copy
  std::unique_ptr<attention_kernel> kernel;
  size_t workspace_bytes = 0;
};

// Shared by every slot: turns escaping exceptions into statuses.
template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

bool dtype_is(const dsv4_dtype& t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}

dsv4_status check_cache(const dsv4_kv_cache_desc& c, const char* name, bool optional) {
  if (c.layout == DSV4_KV_LAYOUT_NONE && optional) return DSV4_STATUS_OK;
  if (!layout_is_known(c.layout))
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: %s layout %u", name, c.layout);
  if (c.block_size < 1)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: %s block_size %d", name, c.block_size);
  if (c.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR &&
      !(c.kv_scale > 0.0f && std::isfinite(c.kv_scale)))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: %s kv_scale %g", name,
                static_cast<double>(c.kv_scale));
  return DSV4_STATUS_OK;
}

// Checks what this backend can run and derives the candidate limits that size the scratch.
dsv4_status check_plan(const dsv4_plan_options& o, candidate_limits* limits) {
  if (o.mode != DSV4_MODE_EXPLICIT && o.mode != DSV4_MODE_PAGED)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: mode %u", o.mode);
  if (o.num_heads < 1 || o.num_heads > 128)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: num_heads %d (1..128)", o.num_heads);
  dsv4_status st = check_cache(o.swa_cache, "swa_cache", false);
  if (st != DSV4_STATUS_OK) return st;
  st = check_cache(o.extra_cache, "extra_cache", true);
  if (st != DSV4_STATUS_OK) return st;
  const int d_qk = layout_head_dim_qk(o.swa_cache.layout);
  if (o.head_dim_qk != d_qk)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: head_dim_qk %d, layout %u holds %d", o.head_dim_qk,
                o.swa_cache.layout, d_qk);
  if (o.extra_cache.layout != DSV4_KV_LAYOUT_NONE &&
      layout_head_dim_qk(o.extra_cache.layout) != d_qk)
    return fail(DSV4_STATUS_UNSUPPORTED,
                "plan: extra_cache layout %u has another head_dim_qk than %d", o.extra_cache.layout,
                d_qk);
  if (o.head_dim_v != kHeadDim)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: head_dim_v %d (512 only)", o.head_dim_v);
  if (dtype_is(o.q_dtype, DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8)) {
    const bool per_tensor = o.swa_cache.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR &&
                            (o.extra_cache.layout == DSV4_KV_LAYOUT_NONE ||
                             o.extra_cache.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR);
    if (!per_tensor)
      return fail(DSV4_STATUS_UNSUPPORTED, "plan: e4m3 q needs the per-tensor FP8 layout");
    if (!(o.q_scale > 0.0f && std::isfinite(o.q_scale)))
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: q_scale %g", static_cast<double>(o.q_scale));
  } else if (!dtype_is(o.q_dtype, DSV4_DTYPE_CODE_BFLOAT, 16)) {
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: q dtype code %u bits %u (bf16 or e4m3)",
                o.q_dtype.code, o.q_dtype.bits);
  }
  if (!std::isfinite(o.softmax_scale))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: softmax_scale %g",
                static_cast<double>(o.softmax_scale));

  if (o.mode == DSV4_MODE_EXPLICIT) {
    if (o.index_format != DSV4_INDEX_DENSE && o.index_format != DSV4_INDEX_CSR)
      return fail(DSV4_STATUS_UNSUPPORTED, "plan: index_format %u", o.index_format);
    if (o.topk < 0 || o.extra_topk < 0)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: topk %d, extra_topk %d", o.topk,
                  o.extra_topk);
    limits->main = o.topk;
    limits->extra = o.extra_topk;
    return DSV4_STATUS_OK;
  }
  // Paged: the SWA window plus the compressed list width of spec 4.4 / 4.5 (paged.cpp).
  if (o.window < 1) return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: window %d", o.window);
  if (o.compress_ratio > 1 && o.compress_ratio != 4 && o.compress_ratio != 128)
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: compress_ratio %d (1, 4 or 128)", o.compress_ratio);
  if (o.compress_ratio == 4 && o.index_topk < 1)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: index_topk %d", o.index_topk);
  if (o.compress_ratio == 128 && o.max_model_len < 1)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: max_model_len %lld",
                static_cast<long long>(o.max_model_len));
  if (o.compress_ratio > 1 && o.extra_cache.layout == DSV4_KV_LAYOUT_NONE)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: compress_ratio %d without an extra_cache",
                o.compress_ratio);
#if DSV4_CPU_HAVE_PAGED
  limits->main = o.window;
  limits->extra = cpu_paged_cmp_width(o);
#else
  return fail(DSV4_STATUS_UNSUPPORTED, "plan: paged mode is not built into this module");
#endif
  return DSV4_STATUS_OK;
}

// ---------------------------------------------------------------------------------------------
// ABI slots
// ---------------------------------------------------------------------------------------------
dsv4_status slot_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t capacity) {
  return guarded("probe", [&] { return probe(out_score, out_device_count, reason, capacity); });
}

dsv4_status slot_get_device_info(int32_t index, dsv4_device_info* out_info) {
  return guarded("get_device_info", [&] {
    if (out_info == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: out_info is NULL");
    if (index != 0)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: device %d (the CPU is device 0)",
                  index);
    return get_device_info(index, out_info);
  });
}

dsv4_status slot_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  return guarded("ctx_create", [&] {
    if (config == nullptr || out_mctx == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: config or out_mctx is NULL");
    if (config->device_id != 0)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: device_id %d (the CPU is device 0)",
                  config->device_id);
    int threads = config->num_threads;
    if (threads < 0 || threads > kMaxThreads)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: num_threads %d (0..%d)", threads,
                  kMaxThreads);
    if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    auto ctx = std::make_unique<context>();
    try {
      ctx->pool = std::make_unique<thread_pool>(threads);
    } catch (const std::system_error& e) {
      return fail(DSV4_STATUS_BACKEND_ERROR, "ctx_create: cannot start %d threads: %s", threads,
                  e.what());
    }
    log(DSV4_LOG_DEBUG, "context with %d threads", threads);
    *out_mctx = ctx.release();
    return DSV4_STATUS_OK;
  });
}

void slot_ctx_destroy(void* mctx) { delete static_cast<context*>(mctx); }

dsv4_status slot_plan_create(void* mctx, const dsv4_plan_options* options, void** out_mplan) {
  return guarded("plan_create", [&] {
    if (mctx == nullptr || options == nullptr || out_mplan == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan_create: NULL argument");
    auto p = std::make_unique<plan>();
    p->ctx = static_cast<context*>(mctx);
    copy_plan_options(*options, &p->options);
    candidate_limits limits;
    const dsv4_status st = check_plan(p->options, &limits);
    if (st != DSV4_STATUS_OK) return st;
#if DSV4_CPU_HAVE_PAGED
    // Paged runs: the lists first, then the explicit kernel's workspace (none).
    if (p->options.mode == DSV4_MODE_PAGED)
      p->workspace_bytes = cpu_paged_workspace_bytes(p->options);
#endif
    p->kernel = std::make_unique<attention_kernel>(p->options, limits, p->ctx->pool->size());
    log(DSV4_LOG_DEBUG, "plan: %d heads, candidates %lld + %lld, scratch %zu bytes",
        p->options.num_heads, static_cast<long long>(limits.main),
        static_cast<long long>(limits.extra), p->kernel->scratch_bytes());
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
  const plan* p = static_cast<const plan*>(mplan);
  std::snprintf(buffer, capacity, "%s/%s", DSV4_CPU_KERNEL,
                p->options.mode == DSV4_MODE_PAGED ? "paged" : "explicit");
  return DSV4_STATUS_OK;
}

dsv4_status slot_run(const void* mplan, const dsv4_mod_run* run) {
  return guarded("run", [&] {
    const plan* p = static_cast<const plan*>(mplan);
    const dsv4_status head =
        check_run_header(fail, mplan, run, p != nullptr ? p->options.mode : 0u);
    if (head != DSV4_STATUS_OK) return head;
    if (p->options.mode == DSV4_MODE_EXPLICIT) return p->kernel->run(*p->ctx->pool, *run);
#if DSV4_CPU_HAVE_PAGED
    dsv4_mod_run lists{};
    const dsv4_status st = cpu_paged_build_lists(p->options, *run, host(), &lists);
    if (st != DSV4_STATUS_OK) return st;
    return p->kernel->run(*p->ctx->pool, lists);
#else
    return fail(DSV4_STATUS_UNSUPPORTED, "run: paged mode is not built into this module");
#endif
  });
}

dsv4_status slot_kv_write(void* mctx, const dsv4_mod_kv_write* write) {
  return guarded("kv_write", [&] {
    if (mctx == nullptr || write == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: NULL argument");
    if (write->struct_size < sizeof(dsv4_mod_kv_write))
      return fail(DSV4_STATUS_ABI_MISMATCH, "kv_write: dsv4_mod_kv_write of %u bytes, need %zu",
                  write->struct_size, sizeof(dsv4_mod_kv_write));
    return kv_write(*static_cast<context*>(mctx)->pool, *write);
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "cpu",
#if DSV4_CPU_MUTATION == 0
    "0.1.0 (" DSV4_CPU_KERNEL ")",
#else
    "0.1.0 (" DSV4_CPU_KERNEL ", deliberately wrong: test builds only)",
#endif
    DSV4_DEVICE_CPU,
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
#if DSV4_CPU_HAVE_PAGED
    cpu_export_indices,
#else
    nullptr,  // export_indices: paged mode not built
#endif
};

}  // namespace
}  // namespace cpu
}  // namespace dsv4

extern "C" DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                             const dsv4_host_services* host,
                                                             const dsv4_backend_iface** out_iface) {
  const dsv4_status status = dsv4::negotiate_module_abi("cpu", inout_abi_version, host, out_iface);
  if (status != DSV4_STATUS_OK) return status;
  dsv4::cpu::set_host(host);
  *out_iface = &dsv4::cpu::g_iface;
  return DSV4_STATUS_OK;
}
