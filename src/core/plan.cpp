#include "core/plan.h"

#include <cmath>
#include <memory>

#include "base/error.h"
#include "common/layout.h"
#include "common/paged_index.h"
#include "core/abi_struct.h"

namespace dsv4::detail {

namespace {

constexpr int32_t kMaxHeads = 128;
constexpr uint32_t kKnownPlanFlags =
    DSV4_PLAN_FLAG_BATCH_INVARIANT | DSV4_PLAN_FLAG_REFERENCE_KERNEL;

bool dtype_is(const dsv4_dtype& t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}

bool positive_finite(float v) { return std::isfinite(v) && v > 0.0f; }

}  // namespace

void normalize_cache_desc(dsv4_kv_cache_desc& c, const char* name) {
  if (!layout_is_known(c.layout))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s.layout = %u is not a known DSV4_KV_LAYOUT_*", name,
         c.layout);
  if (c.block_size < 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s.block_size = %d must be >= 1", name, c.block_size);
  if ((c.flags & ~kKnownCacheFlags) != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s.flags = 0x%x has unknown bits", name, c.flags);
  if ((c.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0 && !layout_is_fp8(c.layout))
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s.flags has DSV4_KV_CACHE_FLAG_FP8_FNUZ but layout %s holds no FP8 bytes", name,
         layout_name(c.layout));
  const int64_t min_bytes = layout_min_block_bytes(c.layout, c.block_size);
  if (c.block_stride_bytes == 0) c.block_stride_bytes = min_bytes;
  if (c.block_stride_bytes < min_bytes)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "%s.block_stride_bytes = %lld is below the %s minimum %lld for block_size %d", name,
         static_cast<long long>(c.block_stride_bytes), layout_name(c.layout),
         static_cast<long long>(min_bytes), c.block_size);
  if (c.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR && !positive_finite(c.kv_scale))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s.kv_scale = %g must be finite and > 0", name,
         static_cast<double>(c.kv_scale));
}

namespace {

void require_at_least(int64_t value, int64_t min, const char* field) {
  if (value < min)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->%s = %lld must be >= %lld", field,
         static_cast<long long>(value), static_cast<long long>(min));
}

void validate_explicit(dsv4_plan_options& o) {
  if (o.index_format != DSV4_INDEX_DENSE && o.index_format != DSV4_INDEX_CSR)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->index_format = %u is not DSV4_INDEX_DENSE (0) or DSV4_INDEX_CSR (1)",
         o.index_format);
  require_at_least(o.topk, 1, "topk");
  const bool has_extra = o.extra_cache.layout != DSV4_KV_LAYOUT_NONE;
  if (has_extra) {
    require_at_least(o.extra_topk, 1, "extra_topk");
    if (layout_head_dim_qk(o.extra_cache.layout) != o.head_dim_qk)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "options->extra_cache.layout = %s holds %d dims but head_dim_qk is %d",
           layout_name(o.extra_cache.layout), layout_head_dim_qk(o.extra_cache.layout),
           o.head_dim_qk);
  } else if (o.extra_topk != 0) {
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->extra_topk = %d but options->extra_cache.layout is DSV4_KV_LAYOUT_NONE (must "
         "be 0 without an extra cache)",
         o.extra_topk);
  }
  checked_mul(o.max_tokens, checked_add(o.topk, o.extra_topk, "options->topk + extra_topk"),
              "options->max_tokens * (topk + extra_topk)");
}

void validate_paged(dsv4_plan_options& o) {
  if (o.compress_ratio <= 1) o.compress_ratio = 1;
  if (o.compress_ratio != 1 && o.compress_ratio != 4 && o.compress_ratio != 128)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->compress_ratio = %d must be <= 1 (SWA only), 4 (C4A) or 128 (C128A)",
         o.compress_ratio);
  const bool compressed = o.compress_ratio > 1;
  const bool has_extra = o.extra_cache.layout != DSV4_KV_LAYOUT_NONE;
  if (compressed && !has_extra)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->extra_cache.layout is DSV4_KV_LAYOUT_NONE but compress_ratio %d needs the "
         "compressed cache",
         o.compress_ratio);
  if (!compressed && has_extra)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->extra_cache.layout = %s but compress_ratio %d (SWA only) has no compressed "
         "cache (use DSV4_KV_LAYOUT_NONE)",
         layout_name(o.extra_cache.layout), o.compress_ratio);
  if (compressed && o.extra_cache.layout != o.swa_cache.layout)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->extra_cache.layout = %s differs from options->swa_cache.layout = %s",
         layout_name(o.extra_cache.layout), layout_name(o.swa_cache.layout));
  require_at_least(o.window, 1, "window");
  require_at_least(o.decode_threshold, 1, "decode_threshold");
  require_at_least(o.max_model_len, 1, "max_model_len");
  require_at_least(o.max_requests, 1, "max_requests");
  require_at_least(o.max_swa_blocks_per_request, 1, "max_swa_blocks_per_request");
  checked_mul(o.max_requests, o.max_swa_blocks_per_request,
              "options->max_requests * max_swa_blocks_per_request");
  if (compressed) {
    require_at_least(o.max_cmp_blocks_per_request, 1, "max_cmp_blocks_per_request");
    checked_mul(o.max_requests, o.max_cmp_blocks_per_request,
                "options->max_requests * max_cmp_blocks_per_request");
    const int64_t want = static_cast<int64_t>(o.compress_ratio) * o.extra_cache.block_size;
    if (o.compressed_block_tokens != want)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "options->compressed_block_tokens = %d must equal compress_ratio * "
           "extra_cache.block_size = %d * %d = %lld",
           o.compressed_block_tokens, o.compress_ratio, o.extra_cache.block_size,
           static_cast<long long>(want));
  }
  if (o.compress_ratio == 4) require_at_least(o.index_topk, 1, "index_topk");
  // Candidates per token: the window plus the compressed width (spec 4.4 / 4.5), which must fit the
  // int32 lists; the workspace holding max_tokens such rows must fit int64 bytes.
  const int64_t per_token =
      checked_add(o.window, paged_cmp_width(o.compress_ratio, o.index_topk, o.max_model_len),
                  "options->window + compressed list width");
  if (per_token > INT32_MAX)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options: candidates per token (window + compressed width) = %lld exceed INT32_MAX "
         "(check options->max_model_len / index_topk / window)",
         static_cast<long long>(per_token));
  checked_add(checked_mul(checked_mul(o.max_tokens, per_token + 2, "options->max_tokens * lists"),
                          static_cast<int64_t>(sizeof(int32_t)), "paged list workspace bytes"),
              static_cast<int64_t>(4 * kPagedWorkspaceAlign), "paged list workspace bytes");
}

}  // namespace

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s overflows int64 (%lld * %lld)", what,
         static_cast<long long>(a), static_cast<long long>(b));
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s overflows int64 (%lld + %lld)", what,
         static_cast<long long>(a), static_cast<long long>(b));
  return r;
}

const char* layout_name(uint32_t layout) noexcept {
  switch (layout) {
    case DSV4_KV_LAYOUT_NONE:
      return "NONE";
    case DSV4_KV_LAYOUT_BF16:
      return "BF16";
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      return "FP8_V4_584B";
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      return "FP8_V32_656B";
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return "FP8_E4M3_PER_TENSOR";
    case DSV4_KV_LAYOUT_FP16:
      return "FP16";
    default:
      return "unknown";
  }
}

dsv4_plan_options plan_options_default_values() {
  dsv4_plan_options o{};
  o.struct_size = sizeof o;
  o.mode = DSV4_MODE_EXPLICIT;
  o.flags = DSV4_PLAN_FLAG_NONE;
  o.num_heads = 64;
  o.head_dim_qk = 512;
  o.head_dim_v = 512;
  o.softmax_scale = 0.0f;
  o.q_dtype = dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  o.q_scale = 1.0f;
  o.max_tokens = 1024;
  o.swa_cache = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_FP8_V4_584B, 64, 0, 1.0f, 0};
  o.extra_cache = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_NONE, 64, 0, 1.0f, 0};
  o.index_format = DSV4_INDEX_DENSE;
  o.topk = 128;
  o.extra_topk = 0;
  o.compress_ratio = 1;
  o.window = 128;
  o.index_topk = 512;
  o.decode_threshold = 1;
  o.max_model_len = 65536;
  o.max_requests = 256;
  o.max_swa_blocks_per_request = 1024;
  o.max_cmp_blocks_per_request = 1024;
  o.compressed_block_tokens = 256;
  o.out_dtype = dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  return o;
}

dsv4_plan_options normalize_plan_options(const dsv4_plan_options* options) {
  dsv4_plan_options o = read_struct(options, kPlanOptionsMinSize, "options", "dsv4_plan_options",
                                    plan_options_default_values());
  if (o.mode != DSV4_MODE_EXPLICIT && o.mode != DSV4_MODE_PAGED)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->mode = %u is not DSV4_MODE_EXPLICIT (0) or DSV4_MODE_PAGED (1)", o.mode);
  if ((o.flags & ~kKnownPlanFlags) != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->flags = 0x%x has unknown bits", o.flags);
  if (o.num_heads < 1 || o.num_heads > kMaxHeads)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->num_heads = %d must be in 1..%d", o.num_heads,
         kMaxHeads);
  normalize_cache_desc(o.swa_cache, "options->swa_cache");
  if (o.extra_cache.layout != DSV4_KV_LAYOUT_NONE) {
    normalize_cache_desc(o.extra_cache, "options->extra_cache");
    // The kernels convert a running output between the lists' value units (layout.h).
    const list_value_scales v = list_value_scales_of(o.swa_cache.layout, o.swa_cache.kv_scale,
                                                     o.extra_cache.layout, o.extra_cache.kv_scale);
    if (!(v.main_to_extra <= kMaxValueMultiplierRatio &&
          v.main_to_extra >= 1.0f / kMaxValueMultiplierRatio))
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "options->extra_cache.kv_scale: the caches' value scales (%g for swa_cache, %g for "
           "extra_cache) differ by more than 2^64",
           static_cast<double>(v.multiplier[0]), static_cast<double>(v.multiplier[1]));
  }
  const int32_t layout_dim = layout_head_dim_qk(o.swa_cache.layout);
  if (o.head_dim_qk != layout_dim)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->head_dim_qk = %d but options->swa_cache.layout %s holds %d dims (512 for BF16, "
         "FP16, FP8_V4_584B and FP8_E4M3_PER_TENSOR; 576 only for FP8_V32_656B)",
         o.head_dim_qk, layout_name(o.swa_cache.layout), layout_dim);
  if (o.head_dim_v != kHeadDim)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "options->head_dim_v = %d must be %d", o.head_dim_v,
         kHeadDim);
  if (dtype_is(o.q_dtype, DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8)) {
    if (o.swa_cache.layout != DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "options->q_dtype = float8_e4m3fn needs options->swa_cache.layout "
           "FP8_E4M3_PER_TENSOR, not %s",
           layout_name(o.swa_cache.layout));
    if (o.extra_cache.layout != DSV4_KV_LAYOUT_NONE &&
        o.extra_cache.layout != DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "options->q_dtype = float8_e4m3fn needs options->extra_cache.layout "
           "FP8_E4M3_PER_TENSOR (or NONE), not %s",
           layout_name(o.extra_cache.layout));
    if (!positive_finite(o.q_scale))
      fail(DSV4_STATUS_INVALID_ARGUMENT, "options->q_scale = %g must be finite and > 0",
           static_cast<double>(o.q_scale));
  } else if (!dtype_is(o.q_dtype, DSV4_DTYPE_CODE_BFLOAT, 16)) {
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->q_dtype = {code %u, bits %u, lanes %u} must be bfloat16 (or float8_e4m3fn with "
         "the FP8_E4M3_PER_TENSOR layout)",
         o.q_dtype.code, o.q_dtype.bits, o.q_dtype.lanes);
  }
  if (!dtype_is(o.out_dtype, DSV4_DTYPE_CODE_BFLOAT, 16) &&
      !dtype_is(o.out_dtype, DSV4_DTYPE_CODE_FLOAT, 32))
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->out_dtype = {code %u, bits %u, lanes %u} must be bfloat16 or float32",
         o.out_dtype.code, o.out_dtype.bits, o.out_dtype.lanes);
  if (o.softmax_scale == 0.0f)
    o.softmax_scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim_qk));
  if (!positive_finite(o.softmax_scale))
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "options->softmax_scale = %g must be finite and > 0 (0 = "
         "head_dim_qk^-0.5)",
         static_cast<double>(o.softmax_scale));
  require_at_least(o.max_tokens, 1, "max_tokens");
  checked_mul(checked_mul(o.max_tokens, o.num_heads, "options->max_tokens * num_heads"),
              o.head_dim_qk, "options->max_tokens * num_heads * head_dim_qk");
  if (o.mode == DSV4_MODE_EXPLICIT)
    validate_explicit(o);
  else
    validate_paged(o);
  return o;
}

namespace {

dsv4_mod_cache_plan cache_plan(const dsv4_kv_cache_desc& c) {
  dsv4_mod_cache_plan p{};
  p.layout = c.layout;
  if (c.layout == DSV4_KV_LAYOUT_NONE) return p;
  p.flags = c.flags;
  p.block_size = c.block_size;
  p.bytes_per_token = layout_bytes_per_token(c.layout);
  p.block_stride_bytes = c.block_stride_bytes;
  p.kv_scale = c.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR ? c.kv_scale : 1.0f;
  p.head_dim = layout_head_dim_qk(c.layout);
  return p;
}

}  // namespace

dsv4_mod_plan derive_mod_plan(const dsv4_plan_options& o) {
  dsv4_mod_plan p{};
  p.struct_size = sizeof p;
  p.mode = o.mode;
  p.flags = o.flags;
  p.num_heads = o.num_heads;
  p.head_dim_qk = o.head_dim_qk;
  p.head_dim_v = o.head_dim_v;
  p.q_dtype = o.q_dtype;
  p.out_dtype = o.out_dtype;
  p.q_scale = dtype_is(o.q_dtype, DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8) ? o.q_scale : 1.0f;
  p.softmax_scale = o.softmax_scale;
  p.max_tokens = o.max_tokens;
  p.cache[0] = cache_plan(o.swa_cache);
  p.cache[1] = cache_plan(o.extra_cache);
  for (int i = 0; i < 2; ++i) p.logit_scale[i] = p.softmax_scale * p.q_scale * p.cache[i].kv_scale;
  if (o.mode == DSV4_MODE_EXPLICIT) {
    p.index_format = o.index_format;
    p.list_width[0] = o.topk;
    p.list_width[1] = o.extra_cache.layout != DSV4_KV_LAYOUT_NONE ? o.extra_topk : 0;
    return p;
  }
  // Paged: every width below was bounded by normalize_plan_options (validate_paged).
  p.index_format = DSV4_INDEX_DENSE;
  p.compress_ratio = o.compress_ratio;
  p.window = o.window;
  p.index_topk = o.compress_ratio == kC4Ratio ? o.index_topk : 0;
  p.cmp_width =
      static_cast<int32_t>(paged_cmp_width(o.compress_ratio, o.index_topk, o.max_model_len));
  p.flashinfer_columns = static_cast<int32_t>(p.window + flashinfer_cmp_columns(p.cmp_width));
  p.decode_threshold = o.decode_threshold;
  p.max_requests = o.max_requests;
  p.max_swa_blocks_per_request = o.max_swa_blocks_per_request;
  p.max_cmp_blocks_per_request = o.compress_ratio > 1 ? o.max_cmp_blocks_per_request : 0;
  p.compressed_block_tokens = o.compress_ratio > 1 ? o.compressed_block_tokens : 0;
  p.max_model_len = o.max_model_len;
  p.list_width[0] = p.window;
  p.list_width[1] = p.cmp_width;
  const paged_workspace_layout w = paged_workspace(o.max_tokens, p.window, p.cmp_width);
  p.lists = dsv4_mod_lists_map{w.swa_indices, w.swa_lengths, w.cmp_indices, w.cmp_lengths, w.total};
  return p;
}

dsv4_plan* plan_create(dsv4_ctx* ctx, const dsv4_plan_options& normalised) {
  auto plan = std::make_unique<dsv4_plan>();
  plan->ctx = ctx;
  plan->options = normalised;
  plan->mod = derive_mod_plan(normalised);
  const dsv4_backend_iface& m = ctx->module->iface;
  const std::string who = "backend " + ctx->module->name;
  log_scope scope(ctx->log);
  clear_module_error();
  void* mplan = nullptr;
  const dsv4_status st = m.plan_create(ctx->mctx, &plan->mod, &mplan);
  if (st != DSV4_STATUS_OK || mplan == nullptr) fail_from_module(st, who + ": plan_create");
  plan->mplan = mplan;
  // From here on the module plan must be released if anything fails.
  struct release_on_failure {
    dsv4_plan* p;
    ~release_on_failure() {
      if (p != nullptr) p->ctx->module->iface.plan_destroy(p->mplan);
    }
  } guard{plan.get()};
  size_t bytes = 0;
  clear_module_error();
  const dsv4_status ws = m.plan_get_workspace_size(mplan, &bytes);
  if (ws != DSV4_STATUS_OK) fail_from_module(ws, who + ": plan_get_workspace_size");
  plan->workspace_bytes = bytes;
  if (m.plan_get_kernel_name != nullptr) {
    char name[128] = "";
    clear_module_error();
    const dsv4_status ks = m.plan_get_kernel_name(mplan, name, sizeof name);
    if (ks != DSV4_STATUS_OK) fail_from_module(ks, who + ": plan_get_kernel_name");
    name[sizeof name - 1] = '\0';
    plan->kernel = name;
  }
  ctx->log.logf(DSV4_LOG_DEBUG, "plan: backend %s, kernel %s, workspace %zu bytes",
                ctx->module->name.c_str(), plan->kernel.empty() ? "-" : plan->kernel.c_str(),
                plan->workspace_bytes);
  guard.p = nullptr;
  return plan.release();
}

void plan_destroy(dsv4_plan* plan) noexcept {
  if (plan == nullptr) return;
  {
    log_scope scope(plan->ctx->log);
    plan->ctx->module->iface.plan_destroy(plan->mplan);
  }
  delete plan;
}

}  // namespace dsv4::detail
