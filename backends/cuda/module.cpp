// Entry point and module ABI slots of the CUDA backend (libdsv4-cuda.so). The CUDA runtime is
// linked statically, so only the driver is needed at run time; without one the probe answers score
// 0 with the reason. Every slot catches everything and reports errors through host->set_error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "common/layout.h"
#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "kernels.h"
#include "module/module_entry.h"
#include "module/module_slots.h"
#include "planner.h"

namespace dsv4 {
namespace cuda {
namespace {

const dsv4_host_services* g_host = nullptr;
// An environment variable through the host's services (tuning and test knobs); nullptr when unset.
const char* host_env(const char* name) {
  return g_host != nullptr && g_host->get_env != nullptr ? g_host->get_env(name) : nullptr;
}
// Whether a knob that is on by default is turned off (set to "0").
bool host_env_off(const char* name) {
  const char* v = host_env(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

dsv4_status fail(dsv4_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));
dsv4_status fail(dsv4_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  report_module_error(g_host, "cuda", format, args);
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
  g_host->log(DSV4_LOG_DEBUG, "cuda", message);
}

dsv4_status cuda_fail(cudaError_t err, const char* what) {
  return fail(DSV4_STATUS_BACKEND_ERROR, "%s: %s (%s)", what, cudaGetErrorName(err),
              cudaGetErrorString(err));
}

template <class Fn>
dsv4_status guarded(const char* what, Fn&& fn) noexcept {
  return guarded_slot(fail, what, static_cast<Fn&&>(fn));
}

// Makes `device` current for the scope and restores the caller's device afterwards.
class device_scope {
 public:
  explicit device_scope(int device) {
    status_ = cudaGetDevice(&previous_);
    if (status_ == cudaSuccess && previous_ != device) status_ = cudaSetDevice(device);
  }
  ~device_scope() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0)
      cudaSetDevice(previous_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

struct context {
  int device = 0;
  int sm_count = 1;
  size_t smem_optin = 0;
  int cc_major = 0;
  int cc_minor = 0;
};

struct plan {
  const context* ctx = nullptr;
  dsv4_mod_plan mod{};          // the host's derived plan
  int chunk_keys = kChunkKeys;  // keys per shared-memory chunk
  run_planner planner{};  // the tilings runs choose from (wide: the mma.sync kernel's), the knobs
  int width[2] = {0, 0};  // list widths (explicit: topk / extra_topk; paged: W / cmp width)
  int chunks[2] = {0, 0};
  size_t stage_bytes = 0;
  size_t lists_bytes = 0;   // paged: the list builders' workspace (paged_workspace layout)
  size_t partial_rows = 0;  // (token, split) rows of partials the workspace holds
  size_t order_offset = 0;  // wgmma plans: the token order's [max_tokens] int32 in the workspace
  size_t workspace_bytes = 0;
  bool log_runs = false;  // DSV4_CUDA_LOG_RUNS=1: each run logs the planner's choice (debug level)
  char kernel[128] = {0};
};

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool dtype_is(const dsv4_dtype& t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}

// Whether a run reads most cache rows once (attention_params::stream_rows): few query tokens per
// batch row (decode, MTP) and lists that could all be distinct rows of the caches. Prefill (many
// tokens of one request) and gather workspaces (many one-token rows over a small buffer) share
// rows between CTAs and keep the L2's normal policy. On the H200, after a memset left the L2 dirty,
// streaming took CONFIG1 b=64 from 51.2 to 49.6 us, CONFIG4 b=64 123.2 -> 118.3, bf16 CONFIG1
// b=64 41.8 -> 39.1; applied to prefill it cost 2 % (673 -> 687 us).
bool rows_read_once(int64_t tokens, int seq_q, const int width[2], const dsv4_mod_cache cache[2]) {
  constexpr int kDecodeTokens = 4;
  int64_t reads = 0, rows = 0;
  for (int i = 0; i < 2; ++i) {
    if (cache[i].base == nullptr) continue;
    reads += tokens * width[i];
    rows += cache[i].num_blocks * cache[i].block_size;
  }
  return seq_q <= kDecodeTokens && reads <= rows;
}

size_t partial_bytes_o(size_t rows, int heads) {
  return align_up(rows * heads * kHeadDim * sizeof(float));
}
size_t partial_bytes_ml(size_t rows, int heads) {
  return align_up(rows * heads * 2 * sizeof(float));
}

// What the host cannot know: which layouts, cache flavours and plan flags this module's kernels
// serve, and how wide a list they take. The list geometry comes from the derived plan.
dsv4_status check_plan(plan* p) {
  const dsv4_mod_plan& o = p->mod;
  for (const dsv4_mod_cache_plan& c : o.cache) {
    if ((c.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0)
      return fail(DSV4_STATUS_UNSUPPORTED,
                  "plan: FP8 FNUZ caches (ROCm gfx942's flavour) have no CUDA kernel; the HIP "
                  "module serves them");
  }
  if (o.out_dtype.code != DSV4_DTYPE_CODE_BFLOAT)
    return fail(DSV4_STATUS_UNSUPPORTED,
                "plan: out_dtype float32 (partials for dsv4_merge) has no CUDA epilogue yet; "
                "merge bf16 partials");
  // fp16 caches run on fp16 tensor-core inputs (q converted to fp16), every other layout on bf16:
  // one kernel multiplies one element type.
  const bool fp16[2] = {o.cache[0].layout == DSV4_KV_LAYOUT_FP16,
                        o.cache[1].layout == DSV4_KV_LAYOUT_FP16};
  if (o.cache[1].layout != DSV4_KV_LAYOUT_NONE && fp16[0] != fp16[1])
    return fail(DSV4_STATUS_UNSUPPORTED,
                "plan: an FP16 cache with a cache of another layout (swa_cache layout %u, "
                "extra_cache layout %u); the CUDA kernels take fp16 caches only in pairs",
                o.cache[0].layout, o.cache[1].layout);
  if (o.list_width[1] > (1 << 24))
    return fail(DSV4_STATUS_UNSUPPORTED, "plan: compressed width %d", o.list_width[1]);
  p->width[0] = o.list_width[0];
  p->width[1] = o.list_width[1];
  p->lists_bytes = o.lists.bytes;
  return DSV4_STATUS_OK;
}

// The plan's tilings (planner.cpp), configured and measured on the device through the kernel
// table (kernels.h); its workspace and kernel name.
dsv4_status size_plan(plan* p) {
  const dsv4_mod_plan& o = p->mod;
  force_knobs knobs;
  char error[256] = {0};
  if (!parse_force(host_env("DSV4_CUDA_FORCE"), &knobs, error, sizeof error))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "plan: %s", error);
  p->log_runs = host_env("DSV4_CUDA_LOG_RUNS") != nullptr && !host_env_off("DSV4_CUDA_LOG_RUNS");
  plan_facts f;
  f.cc_major = p->ctx->cc_major;
  f.sm_count = p->ctx->sm_count;
  f.smem_optin = p->ctx->smem_optin;
  f.num_heads = o.num_heads;
  f.head_dim_qk = o.head_dim_qk;
  for (int i = 0; i < 2; ++i) {
    f.layout[i] = o.cache[i].layout;
    f.width[i] = p->width[i];
  }
  for (int32_t id = 0; id < kFamilies; ++id) {
    const kernel_family& k = kernel_family_of(id);
    f.family_ok[id] = k.serves(f.cc_major, f.head_dim_qk, f.layout[0], f.layout[1]) && k.compiled();
  }
  f.batch_invariant = (o.flags & DSV4_PLAN_FLAG_BATCH_INVARIANT) != 0;
  f.max_tokens = o.max_tokens;
  f.smem_bytes = [](const kernel_config& c) { return kernel_family_of(c.family).smem_bytes(c); };
  run_planner& rp = p->planner;
  if (!plan_tilings(f, knobs, &rp, &p->chunk_keys, p->chunks, error, sizeof error))
    return fail(DSV4_STATUS_UNSUPPORTED, "%s", error);
  for (int i = 0; tiling* t = plan_tiling_slots(rp, i); ++i) {
    if (t->head_tiles == 0) continue;
    const kernel_family& k = kernel_family_of(t->config.family);
    t->smem_bytes = k.smem_bytes(t->config);
    char what[96];
    std::snprintf(what, sizeof what, "plan: configuring the %s kernels", k.name);
    cudaError_t err = k.configure(t->config);
    if (err == cudaSuccess)
      err = k.occupancy(t->config, p->ctx->sm_count, &t->ctas_per_sm, t->resident);
    if (err != cudaSuccess) return cuda_fail(err, what);
  }
  apply_persistent_knob(knobs, &rp);
  p->stage_bytes = rp.wide.config.stage_bytes;
  // Partials: the largest tokens x splits of any run (any tiling; the partials' layout does not
  // depend on it).
  const size_t rows = max_partial_rows(rp, o.max_tokens);
  p->partial_rows = rows;
  p->workspace_bytes = align_up(p->lists_bytes);
  if (rows > 0)
    p->workspace_bytes += partial_bytes_o(rows, o.num_heads) + partial_bytes_ml(rows, o.num_heads);
  // The wgmma kernel's token order (longest first), for runs of uneven tokens.
  if (rp.sm90.sm90) {
    p->order_offset = align_up(p->workspace_bytes);
    p->workspace_bytes =
        p->order_offset + align_up(static_cast<size_t>(o.max_tokens) * sizeof(int32_t));
  }
  // The caller's workspace need not be aligned: keep room to align its start to kAlign.
  if (p->workspace_bytes > 0) p->workspace_bytes += kAlign;
  const tiling& named = rp.sm90.head_tiles != 0 ? rp.sm90 : rp.wide;
  std::snprintf(p->kernel, sizeof p->kernel, "cuda-%s-%s-h%d-k%d/%s", tiling_kernel(named),
                o.cache[0].layout == DSV4_KV_LAYOUT_FP16 ? "f16" : "bf16", tiling_heads(named),
                p->chunk_keys, o.mode == DSV4_MODE_PAGED ? "paged" : "explicit");
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
  if (scope.status() != cudaSuccess) return cuda_fail(scope.status(), "run: cudaSetDevice");
  cudaStream_t stream = static_cast<cudaStream_t>(run.stream);
  uint8_t* ws = static_cast<uint8_t*>(run.workspace);
  if (ws != nullptr) ws += (kAlign - reinterpret_cast<uintptr_t>(ws) % kAlign) % kAlign;

  attention_params a{};
  a.num_tokens = run.num_tokens;
  a.seq_q = run.seq_q > 0 ? run.seq_q : 1;
  a.num_heads = o.num_heads;
  a.head_dim_qk = o.head_dim_qk;
  const bool caches_aligned = aligned16(run.swa_cache) && aligned16(run.extra_cache);
  a.chunk_keys = p.chunk_keys;
  a.dependent_combine = p.ctx->cc_major >= 9 ? 1 : 0;
  a.chunks[0] = p.chunks[0];
  a.chunks[1] = p.chunks[1];
  a.width[0] = p.width[0];
  a.width[1] = p.width[1];
  a.q_is_fp8 = dtype_is(o.q_dtype, DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8) ? 1 : 0;
  a.q = run.q;
  a.out = run.out;
  a.lse = run.lse;
  a.max_logits = run.max_logits;
  a.cache[0] = run.swa_cache;
  a.cache[1] = run.extra_cache;
  for (int i = 0; i < 2; ++i)
    a.block_div[i] = make_u31_divisor(static_cast<uint32_t>(std::max(1, a.cache[i].block_size)));
  a.aligned16 = caches_aligned ? 1 : 0;
  a.stream_rows = rows_read_once(run.num_tokens, a.seq_q, p.width, a.cache) ? 1 : 0;
  const float q_scale = a.q_is_fp8 ? o.q_scale : 1.0f;
  // The CUDA kernels do not keep O in the lists' value units yet (value_units, common/layout.h):
  // an extra list of another kv_scale weights its bf16 P by its ratio to the main list's, which
  // rounds the ratio with P (docs/cuda-backend.md, "Per-tensor FP8 caches of different scales").
  const list_value_scales values = list_value_scales_of(a.cache[0].layout, a.cache[0].kv_scale,
                                                        a.cache[1].layout, a.cache[1].kv_scale);
  for (int i = 0; i < 2; ++i) {
    // Positive even where the product underflows: the Hopper softmax scales its maxima and logits
    // by it (0 * -inf would be NaN there).
    a.logit_scale_log2[i] =
        std::max(o.softmax_scale * q_scale * values.multiplier[i] * 1.4426950408889634f, FLT_MIN);
  }
  a.out_scale = values.multiplier[0];
  a.value_scale[0] = 1.0f;
  a.value_scale[1] = values.extra_to_main;
  a.stage_bytes = static_cast<int32_t>(p.stage_bytes);
  a.q_aligned16 = !a.q_is_fp8 && reinterpret_cast<uintptr_t>(run.q.data) % 16 == 0 &&
                  run.q.stride_b % 8 == 0 && run.q.stride_s % 8 == 0 && run.q.stride_h % 8 == 0;
  a.out_aligned16 = reinterpret_cast<uintptr_t>(run.out.data) % 16 == 0 &&
                    run.out.stride_b % 8 == 0 && run.out.stride_s % 8 == 0 &&
                    run.out.stride_h % 8 == 0;
  a.attn_sink = run.attn_sink;

  if (o.mode == DSV4_MODE_EXPLICIT) {
    a.list[0] = run.main_list;
    a.list[1] = run.extra_list;
  } else {
    // Paged: build the lists on the device (paged_index.h), then attend to them as explicit lists.
    const int64_t cw = p.width[1];
    const dsv4_mod_lists_map& wl = o.lists;
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
    const cudaError_t err = paged_build_launch(b, stream);
    if (err != cudaSuccess) return cuda_fail(err, "run: paged list builder launch");
    const int64_t s = a.seq_q;
    for (int i = 0; i < 2; ++i) {
      dsv4_mod_index_list& l = a.list[i];
      const int64_t w = i == 0 ? o.window : cw;
      l = dsv4_mod_index_list{};
      if (w == 0) continue;
      l.indices = i == 0 ? b.swa_indices : b.cmp_indices;
      l.format = DSV4_INDEX_DENSE;
      l.width = static_cast<int32_t>(w);
      l.stride_b = s * w;
      l.stride_s = w;
      l.stride_k = 1;
      l.lengths = i == 0 ? b.swa_lengths : b.cmp_lengths;
      l.len_stride_b = s;
      l.len_stride_s = 1;
    }
  }

  // The planner's choice for this run; the launch hook launches exactly that.
  run_facts facts;
  facts.tokens = run.num_tokens;
  facts.sm90_ok = caches_aligned;
  facts.uniform = uniform_items(a);
  facts.q_map = q_map_applies(a);
  const run_choice rc = choose_run(p.planner, facts);
  const tiling& tl = rc.tl;
  a.head_tiles = tl.head_tiles;
  a.head_groups = tl.head_groups;
  a.num_splits = rc.splits.splits;
  a.chunks_per_split = rc.splits.chunks_per_split;
  a.small_staged = tl.sm90_small && tl.config.staged ? 1 : 0;
  a.small_heads8 = tl.sm90_small && tl.small_heads8 ? 1 : 0;
  a.launch_ctas = static_cast<int32_t>(rc.ctas);
  a.cluster_ctas = rc.cluster;
  a.persistent = rc.persistent ? 1 : 0;
  if (p.log_runs)
    log_debug("run: %d tokens, %s h%d tiles, %d split(s) of %d chunk(s)%s%s%s", run.num_tokens,
              tiling_kernel(tl), tiling_heads(tl), rc.splits.splits, rc.splits.chunks_per_split,
              rc.order ? ", tokens longest first" : "", rc.cluster == 2 ? ", CTA pairs" : "",
              rc.persistent ? ", persistent CTAs" : "");
  if (rc.splits.splits > 1) {
    const size_t rows = static_cast<size_t>(run.num_tokens) * static_cast<size_t>(rc.splits.splits);
    if (rows > p.partial_rows)
      return fail(DSV4_STATUS_INTERNAL, "run: %zu partial rows exceed the plan's %zu", rows,
                  p.partial_rows);
    uint8_t* part = ws + align_up(p.lists_bytes);
    a.partial_o = reinterpret_cast<float*>(part);
    a.partial_ml = reinterpret_cast<float*>(part + partial_bytes_o(p.partial_rows, o.num_heads));
  }
  if (rc.order) a.token_order = reinterpret_cast<int32_t*>(ws + p.order_offset);
  const cudaError_t err = kernel_family_of(tl.config.family).launch(a, stream);
  if (err != cudaSuccess) return cuda_fail(err, "run: attention launch");
  return DSV4_STATUS_OK;
}

// ---------------------------------------------------------------------------------------------
// ABI slots
// ---------------------------------------------------------------------------------------------
dsv4_status slot_probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                       size_t capacity) {
  return guarded("probe", [&] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    int32_t score = 0;
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice || err != cudaSuccess) {
      const char* what = err == cudaErrorNoDevice ? "no CUDA device" : "no CUDA driver";
      if (reason != nullptr && capacity > 0)
        std::snprintf(reason, capacity, "%s: %s", what, cudaGetErrorName(err));
      count = 0;
    } else if (count == 0) {
      if (reason != nullptr && capacity > 0) std::snprintf(reason, capacity, "no CUDA device");
    } else {
      score = 100;
      if (reason != nullptr && capacity > 0)
        std::snprintf(reason, capacity, "ok: %d device(s)", count);
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
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return cuda_fail(err, "get_device_info: cudaGetDeviceCount");
    if (index < 0 || index >= count)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "get_device_info: device %d of %d", index, count);
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, index);
    if (err != cudaSuccess) return cuda_fail(err, "get_device_info: cudaGetDeviceProperties");
    const uint32_t size =
        out_info->struct_size != 0 ? out_info->struct_size : sizeof(dsv4_device_info);
    dsv4_device_info info{};
    info.struct_size = size;
    info.device_type = DSV4_DEVICE_CUDA;
    info.device_id = index;
    info.compute_units = prop.multiProcessorCount;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, " (sm_%d%d)", prop.major, prop.minor);
    const size_t keep =
        std::min(std::strlen(prop.name), sizeof info.name - 1 - std::strlen(suffix));
    std::memcpy(info.name, prop.name, keep);
    std::memcpy(info.name + keep, suffix, std::strlen(suffix) + 1);
    std::memcpy(out_info, &info, std::min<size_t>(size, sizeof info));
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_ctx_create(const dsv4_mod_ctx_config* config, void** out_mctx) {
  return guarded("ctx_create", [&] {
    if (config == nullptr || out_mctx == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: config or out_mctx is NULL");
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return cuda_fail(err, "ctx_create: cudaGetDeviceCount");
    if (config->device_id < 0 || config->device_id >= count)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "ctx_create: device_id %d of %d CUDA devices",
                  config->device_id, count);
    auto ctx = std::make_unique<context>();
    ctx->device = config->device_id;
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, ctx->device);
    if (err != cudaSuccess) return cuda_fail(err, "ctx_create: cudaGetDeviceProperties");
    if (prop.major < 8)
      return fail(DSV4_STATUS_UNSUPPORTED,
                  "ctx_create: %s is sm_%d%d; the CUDA backend needs sm_80 or newer", prop.name,
                  prop.major, prop.minor);
    ctx->sm_count = prop.multiProcessorCount;
    ctx->smem_optin = prop.sharedMemPerBlockOptin;
    ctx->cc_major = prop.major;
    ctx->cc_minor = prop.minor;
    log_debug("context on device %d: %s, %d SMs, %zu B shared memory per block", ctx->device,
              prop.name, ctx->sm_count, ctx->smem_optin);
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
    dsv4_status st = check_plan(p.get());
    if (st != DSV4_STATUS_OK) return st;
    device_scope scope(p->ctx->device);
    if (scope.status() != cudaSuccess)
      return cuda_fail(scope.status(), "plan_create: cudaSetDevice");
    st = size_plan(p.get());
    if (st != DSV4_STATUS_OK) return st;
    log_debug("plan: %s, %d heads in %d group(s), lists %d + %d, %zu B shared, workspace %zu B",
              p->kernel, p->mod.num_heads, p->planner.wide.head_groups, p->width[0], p->width[1],
              p->planner.wide.smem_bytes, p->workspace_bytes);
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
    if (scope.status() != cudaSuccess) return cuda_fail(scope.status(), "kv_write: cudaSetDevice");
    const cudaError_t err = kv_write_launch(*write, static_cast<cudaStream_t>(write->stream));
    if (err != cudaSuccess) return cuda_fail(err, "kv_write: launch");
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
    if (scope.status() != cudaSuccess)
      return cuda_fail(scope.status(), "export_indices: cudaSetDevice");
    const cudaError_t err = export_launch(e, static_cast<cudaStream_t>(exp->stream));
    if (err != cudaSuccess) return cuda_fail(err, "export_indices: launch");
    return DSV4_STATUS_OK;
  });
}

dsv4_status slot_merge(void* mctx, const dsv4_mod_merge* m) {
  return guarded("merge", [&] {
    const dsv4_status checked = check_merge_header(fail, mctx, m);
    if (checked != DSV4_STATUS_OK) return checked;
    const context* ctx = static_cast<const context*>(mctx);
    device_scope scope(ctx->device);
    if (scope.status() != cudaSuccess) return cuda_fail(scope.status(), "merge: cudaSetDevice");
    const cudaError_t err = merge_launch(*m, static_cast<cudaStream_t>(m->stream));
    if (err != cudaSuccess) return cuda_fail(err, "merge: launch");
    return DSV4_STATUS_OK;
  });
}

const dsv4_backend_iface g_iface = {
    sizeof(dsv4_backend_iface),
    DSV4_MODULE_ABI_VERSION,
    "cuda",
    DSV4_MODULE_VERSION_STRING " (cuda-mma-bf16)",
    DSV4_DEVICE_CUDA,
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
}  // namespace cuda
}  // namespace dsv4

extern "C" DSV4_MODULE_EXPORT dsv4_status dsv4_backend_entry(uint32_t* inout_abi_version,
                                                             const dsv4_host_services* host,
                                                             const dsv4_backend_iface** out_iface) {
  const dsv4_status status = dsv4::negotiate_module_abi("cuda", inout_abi_version, host, out_iface);
  if (status != DSV4_STATUS_OK) return status;
  dsv4::cuda::g_host = host;
  *out_iface = &dsv4::cuda::g_iface;
  return DSV4_STATUS_OK;
}
