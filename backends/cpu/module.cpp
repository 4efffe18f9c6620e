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
#include "fast_attention.h"
#include "host.h"
#include "kv_write.h"
#include "merge.h"
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

// Kernel names: cpu-ref-f32 (the exact reference) or cpu-fast-<isa>, plus the mutation.
#if DSV4_CPU_MUTATION == 1
#define DSV4_CPU_MUTANT "-mutant-sink"
#elif DSV4_CPU_MUTATION == 2
#define DSV4_CPU_MUTANT "-mutant-offbyone"
#else
#define DSV4_CPU_MUTANT ""
#endif
#if DSV4_CPU_EMULATE_ISA
#define DSV4_CPU_FLAVOUR "fast kernels with emulated AVX-512 and AMX"
#else
#define DSV4_CPU_FLAVOUR ""
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
  dsv4_mod_plan mod{};  // the host's derived plan
  // One of the two: the exact reference kernel, or the fast kernels of one ISA.
  std::unique_ptr<attention_kernel> kernel;
  std::unique_ptr<fast_attention> fast;
  size_t workspace_bytes = 0;
};

// Shared by every slot: turns escaping exceptions into statuses.
template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

// The host validated the plan; this module serves every layout, cache flag, head count and plan
// flag it can be given (batch invariance: each token's result depends on its own lists alone).
// What is left is the candidates per token that size the scratch.
candidate_limits limits_of(const dsv4_mod_plan& p) {
  candidate_limits limits;
  limits.main = p.list_width[0];
  limits.extra = p.list_width[1];
  return limits;
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

dsv4_status slot_plan_create(void* mctx, const dsv4_mod_plan* mod, void** out_mplan) {
  return guarded("plan_create", [&] {
    const dsv4_status head = check_plan_header(fail, mctx, mod, out_mplan);
    if (head != DSV4_STATUS_OK) return head;
    auto p = std::make_unique<plan>();
    p->ctx = static_cast<context*>(mctx);
    p->mod = *mod;
#if !DSV4_CPU_HAVE_PAGED
    if (p->mod.mode == DSV4_MODE_PAGED)
      return fail(DSV4_STATUS_UNSUPPORTED, "plan: paged mode is not built into this module");
#endif
    // Paged runs: the lists first (the host's map), then the explicit kernel's workspace (none).
    p->workspace_bytes = p->mod.lists.bytes;
    const candidate_limits limits = limits_of(p->mod);
    const dsv4_host_services* h = host();
    const char* knob = h != nullptr && h->get_env != nullptr ? h->get_env("DSV4_CPU_ISA") : nullptr;
#if DSV4_CPU_HAVE_FAST
    const fast_isa isa = choose_fast_isa(p->mod, knob);
#else
    (void)knob;
    const fast_isa isa = fast_isa::none;  // not an x86-64 build: the reference kernel only
#endif
    size_t scratch = 0;
    if (isa == fast_isa::none) {
      p->kernel = std::make_unique<attention_kernel>(p->mod, limits, p->ctx->pool->size());
      scratch = p->kernel->scratch_bytes();
    } else {
#if DSV4_CPU_HAVE_FAST
      p->fast = std::make_unique<fast_attention>(p->mod, limits, p->ctx->pool->size(), isa);
      scratch = p->fast->scratch_bytes();
#endif
    }
    log(DSV4_LOG_DEBUG, "plan: %d heads, candidates %lld + %lld, %s kernel, scratch %zu bytes",
        p->mod.num_heads, static_cast<long long>(limits.main), static_cast<long long>(limits.extra),
        fast_isa_name(isa), scratch);
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
  const char* mode = p->mod.mode == DSV4_MODE_PAGED ? "paged" : "explicit";
#if DSV4_CPU_HAVE_FAST
  if (p->fast != nullptr) {
    std::snprintf(buffer, capacity, "cpu-fast-%s%s/%s", fast_isa_name(p->fast->isa()),
                  DSV4_CPU_MUTANT, mode);
    return DSV4_STATUS_OK;
  }
#endif
  std::snprintf(buffer, capacity, "cpu-ref-f32%s/%s", DSV4_CPU_MUTANT, mode);
  return DSV4_STATUS_OK;
}

dsv4_status slot_run(const void* mplan, const dsv4_mod_run* run) {
  return guarded("run", [&] {
    const plan* p = static_cast<const plan*>(mplan);
    const dsv4_status head = check_run_header(fail, mplan, run, p != nullptr ? p->mod.mode : 0u);
    if (head != DSV4_STATUS_OK) return head;
    auto attend = [p](const dsv4_mod_run& r) {
#if DSV4_CPU_HAVE_FAST
      if (p->fast != nullptr) return p->fast->run(*p->ctx->pool, r);
#endif
      return p->kernel->run(*p->ctx->pool, r);
    };
    if (p->mod.mode == DSV4_MODE_EXPLICIT) return attend(*run);
#if DSV4_CPU_HAVE_PAGED
    // The fast kernels build each token's lists as they gather its rows (nothing is written to
    // the workspace); the reference kernel reads them from the workspace.
    dsv4_mod_run lists{};
    const dsv4_status st =
        cpu_paged_build_lists(p->mod, *run, host(), &lists, /*write_lists=*/p->kernel != nullptr);
    if (st != DSV4_STATUS_OK) return st;
    return attend(lists);
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

dsv4_status slot_merge(void* mctx, const dsv4_mod_merge* m) {
  return guarded("merge", [&] {
    const dsv4_status checked = check_merge_header(fail, mctx, m);
    if (checked != DSV4_STATUS_OK) return checked;
    return merge(*static_cast<context*>(mctx)->pool, *m);
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "cpu",
#if DSV4_CPU_MUTATION == 0 && !DSV4_CPU_EMULATE_ISA
    DSV4_MODULE_VERSION_STRING " (fast AVX2 / AVX512_BF16 / AMX kernels, fp32 reference)",
#elif DSV4_CPU_MUTATION == 0
    DSV4_MODULE_VERSION_STRING " (" DSV4_CPU_FLAVOUR ": test builds only)",
#else
    DSV4_MODULE_VERSION_STRING " (mutant" DSV4_CPU_MUTANT ", deliberately wrong: test builds only)",
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
    slot_merge,
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
