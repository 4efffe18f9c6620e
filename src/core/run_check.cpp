#include "core/run_check.h"

#include "base/error.h"
#include "common/layout.h"
#include "core/ctx.h"
#include "core/plan.h"
#include "core/tensor_check.h"

namespace dsv4::detail {

namespace {

// Query geometry: token t = b * seq + s.
struct geometry {
  int32_t q_ndim;  // 3 or 4
  int64_t batch;   // B (T for 3-D q)
  int64_t seq;     // S (1 for 3-D q)
  int64_t tokens;  // T
};

void require_null(const void* t, const char* name, const char* why) {
  if (t != nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->%s must be NULL %s", name, why);
}

// A per-token, per-head view of fp32 lse / max_logits: [T,H], [B,S,H] or [B,H,S].
dsv4_mod_token_view check_stat(const dsv4_tensor* t, const char* name, const geometry& g,
                               int64_t heads, const dsv4_device& dev) {
  dsv4_mod_token_view view{};
  if (t == nullptr) return view;
  const tensor_view v = check_tensor(t, std::string("args->") + name, dev);
  require_dtype(v, kF32, DSV4_STATUS_INVALID_ARGUMENT);
  const int64_t* s = v.shape;
  const int64_t* st = v.stride;
  if (v.ndim == 2 && s[0] == g.tokens && s[1] == heads) {
    view.stride_b = checked_mul(g.seq, st[0], "token stride");
    view.stride_s = g.q_ndim == 4 ? st[0] : 0;
    view.stride_h = st[1];
  } else if (v.ndim == 3 && s[0] == g.batch && s[1] == g.seq && s[2] == heads) {
    view.stride_b = st[0];
    view.stride_s = g.q_ndim == 4 ? st[1] : 0;
    view.stride_h = st[2];
  } else if (v.ndim == 3 && s[0] == g.batch && s[1] == heads && s[2] == g.seq) {
    view.stride_b = st[0];
    view.stride_h = st[1];
    view.stride_s = g.q_ndim == 4 ? st[2] : 0;
  } else {
    std::string shape;
    for (int32_t i = 0; i < v.ndim; ++i)
      shape += strprintf("%s%lld", i ? ", " : "", static_cast<long long>(s[i]));
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "args->%s has shape [%s] but must be [T, H] = [%lld, %lld], [B, S, H] = [%lld, %lld, "
         "%lld] or [B, H, S] = [%lld, %lld, %lld]",
         name, shape.c_str(), static_cast<long long>(g.tokens), static_cast<long long>(heads),
         static_cast<long long>(g.batch), static_cast<long long>(g.seq),
         static_cast<long long>(heads), static_cast<long long>(g.batch),
         static_cast<long long>(heads), static_cast<long long>(g.seq));
  }
  view.data = v.data;
  return view;
}

// Optional per-token length cap: [T] (3-D q), [B] or [B, S] (4-D q; [T] also accepted).
void check_lengths(const dsv4_tensor* t, const std::string& name, const geometry& g,
                   const dsv4_device& dev, dsv4_mod_index_list& list) {
  if (t == nullptr) return;
  const tensor_view v = check_tensor(t, name, dev);
  require_dtype(v, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  const char* n = name.c_str();
  if (v.ndim == 1 && v.shape[0] == g.batch) {
    list.len_stride_b = v.stride[0];
    list.len_stride_s = 0;
  } else if (v.ndim == 1 && v.shape[0] == g.tokens) {
    list.len_stride_b = checked_mul(g.seq, v.stride[0], "lengths stride");
    list.len_stride_s = v.stride[0];
  } else if (g.q_ndim == 4 && v.ndim == 2 && v.shape[0] == g.batch && v.shape[1] == g.seq) {
    list.len_stride_b = v.stride[0];
    list.len_stride_s = v.stride[1];
  } else if (g.q_ndim == 3) {
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s must be [T] = [%lld] int32", n,
         static_cast<long long>(g.tokens));
  } else {
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s must be [B] = [%lld] or [B, S] = [%lld, %lld] int32", n,
         static_cast<long long>(g.batch), static_cast<long long>(g.batch),
         static_cast<long long>(g.seq));
  }
  list.lengths = reinterpret_cast<const int32_t*>(v.data);
}

// One explicit candidate list (main or extra).
dsv4_mod_index_list check_list(const dsv4_tensor* indices, const dsv4_tensor* indptr,
                               const dsv4_tensor* lengths, const char* prefix, int32_t width,
                               uint32_t format, const geometry& g, const dsv4_device& dev) {
  const std::string idx_name = std::string("args->") + prefix + "indices";
  const std::string ptr_name = std::string("args->") + prefix + "indptr";
  const std::string len_name = std::string("args->") + prefix + "lengths";
  dsv4_mod_index_list l{};
  l.format = format;
  l.width = width;
  if (indices == nullptr)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL but the plan needs it", idx_name.c_str());
  const tensor_view v = check_tensor(indices, idx_name, dev);
  require_dtype(v, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  if (format == DSV4_INDEX_DENSE) {
    if (indptr != nullptr)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s must be NULL with DSV4_INDEX_DENSE", ptr_name.c_str());
    const char* n = idx_name.c_str();
    if (v.ndim == 2) {
      require_dim(v, 0, g.tokens, DSV4_STATUS_INVALID_ARGUMENT, "args->q has T = %lld tokens",
                  static_cast<long long>(g.tokens));
      l.stride_b = checked_mul(g.seq, v.stride[0], "indices stride");
      l.stride_s = g.q_ndim == 4 ? v.stride[0] : 0;
    } else if (v.ndim == 3 && g.q_ndim == 4) {
      require_dim(v, 0, g.batch, DSV4_STATUS_INVALID_ARGUMENT, "args->q has B = %lld",
                  static_cast<long long>(g.batch));
      require_dim(v, 1, g.seq, DSV4_STATUS_INVALID_ARGUMENT, "args->q has S = %lld",
                  static_cast<long long>(g.seq));
      l.stride_b = v.stride[0];
      l.stride_s = v.stride[1];
    } else {
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but must be %s", n, v.ndim,
           g.q_ndim == 3 ? "2 [T, topk] for 3-D q" : "3 [B, S, topk] or 2 [T, topk] for 4-D q");
    }
    require_dim(v, v.ndim - 1, width, DSV4_STATUS_PLAN_MISMATCH, "the plan has %s %d",
                prefix[0] ? "extra_topk" : "topk", width);
    l.stride_k = v.stride[v.ndim - 1];
  } else {
    if (v.ndim != 1)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but CSR indices are 1-D [nnz]",
           idx_name.c_str(), v.ndim);
    require_contiguous(v);
    if (indptr == nullptr)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL but the plan uses DSV4_INDEX_CSR",
           ptr_name.c_str());
    const tensor_view p = check_tensor(indptr, ptr_name, dev);
    require_dtype(p, kI32, DSV4_STATUS_INVALID_ARGUMENT);
    if (p.ndim != 1)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but must be 1 [T + 1]", ptr_name.c_str(),
           p.ndim);
    require_dim(p, 0, g.tokens + 1, DSV4_STATUS_INVALID_ARGUMENT, "must be T + 1 = %lld",
                static_cast<long long>(g.tokens + 1));
    require_contiguous(p);
    l.indptr = reinterpret_cast<const int32_t*>(p.data);
    l.num_entries = v.shape[0];
  }
  l.indices = reinterpret_cast<const int32_t*>(v.data);
  check_lengths(lengths, len_name, g, dev, l);
  return l;
}

// A 1-D contiguous int32 tensor of `n` entries (paged metadata). `n_fmt` says where n comes from
// ("args->q has T = %lld tokens"; formatted with n, on failure only).
const int32_t* check_vector(const dsv4_tensor* t, const std::string& name, int64_t n,
                            const std::string& n_fmt, const dsv4_device& dev) {
  if (t == nullptr)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL but paged mode needs it", name.c_str());
  const tensor_view v = check_tensor(t, name, dev);
  require_dtype(v, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  if (v.ndim != 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but must be 1", name.c_str(), v.ndim);
  if (v.shape[0] != n) {
    const std::string why = strprintf(n_fmt.c_str(), static_cast<long long>(n));
    require_dim(v, 0, n, DSV4_STATUS_INVALID_ARGUMENT, "%s", why.c_str());
  }
  require_contiguous(v);
  return reinterpret_cast<const int32_t*>(v.data);
}

// A 2-D int32 table [rows, cols] with contiguous rows (`rows_fmt` as check_vector's n_fmt).
tensor_view check_table(const dsv4_tensor* t, const std::string& name, int64_t rows,
                        const std::string& rows_fmt, const dsv4_device& dev) {
  const tensor_view v = check_tensor(t, name, dev);
  require_dtype(v, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  if (v.ndim != 2)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but must be 2", name.c_str(), v.ndim);
  if (v.shape[0] != rows) {
    const std::string why = strprintf(rows_fmt.c_str(), static_cast<long long>(rows));
    require_dim(v, 0, rows, DSV4_STATUS_INVALID_ARGUMENT, "%s", why.c_str());
  }
  require_last_contiguous(v);
  return v;
}

void check_block_table(const dsv4_tensor* t, const std::string& name, int64_t reqs,
                       const std::string& reqs_fmt, int32_t max_cols, const char* max_field,
                       const dsv4_device& dev, const int32_t** out_data, int64_t* out_stride,
                       int32_t* out_cols) {
  const tensor_view v = check_table(t, name, reqs, reqs_fmt, dev);
  if (v.shape[1] < 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->shape[1] = 0 but must be >= 1", name.c_str());
  if (v.shape[1] > max_cols)
    fail(DSV4_STATUS_PLAN_MISMATCH, "%s->shape[1] = %lld but the plan's %s is %d", name.c_str(),
         static_cast<long long>(v.shape[1]), max_field, max_cols);
  *out_data = reinterpret_cast<const int32_t*>(v.data);
  *out_stride = v.stride[0];
  *out_cols = static_cast<int32_t>(v.shape[1]);
}

void check_paged(const dsv4_plan_options& o, const dsv4_run_args& a, const geometry& g,
                 const dsv4_device& dev, dsv4_mod_paged_batch& p) {
  const char* why = "in paged mode";
  require_null(a.indices, "indices", why);
  require_null(a.indptr, "indptr", why);
  require_null(a.lengths, "lengths", why);
  require_null(a.extra_indices, "extra_indices", why);
  require_null(a.extra_indptr, "extra_indptr", why);
  require_null(a.extra_lengths, "extra_lengths", why);
  check_paged_batch(o, a, g.tokens, "args->q", "args->", dev, p);
}

void check_explicit(const dsv4_plan_options& o, const dsv4_run_args& a, const geometry& g,
                    const dsv4_device& dev, dsv4_mod_run& r) {
  const char* why = "in explicit mode";
  require_null(a.query_start_loc, "query_start_loc", why);
  require_null(a.seq_lens, "seq_lens", why);
  require_null(a.swa_block_table, "swa_block_table", why);
  require_null(a.cmp_block_table, "cmp_block_table", why);
  require_null(a.slot_mapping, "slot_mapping", why);
  require_null(a.topk_indices, "topk_indices", why);
  r.main_list = check_list(a.indices, a.indptr, a.lengths, "", o.topk, o.index_format, g, dev);
  if (o.extra_cache.layout != DSV4_KV_LAYOUT_NONE) {
    r.extra_list = check_list(a.extra_indices, a.extra_indptr, a.extra_lengths, "extra_",
                              o.extra_topk, o.index_format, g, dev);
  } else {
    const char* none = "the plan has no extra cache";
    if (a.extra_indices != nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH, "args->extra_indices is given but %s", none);
    if (a.extra_indptr != nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH, "args->extra_indptr is given but %s", none);
    if (a.extra_lengths != nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH, "args->extra_lengths is given but %s", none);
  }
}

}  // namespace

void check_paged_batch(const dsv4_plan_options& o, const dsv4_run_args& a, int64_t tokens,
                       const char* tokens_source, const char* prefix, const dsv4_device& dev,
                       dsv4_mod_paged_batch& p) {
  const std::string pre = prefix;
  const std::string qsl_name = pre + "query_start_loc";
  const std::string reqs_fmt = qsl_name + " gives R = %lld requests";
  const std::string tokens_fmt = std::string(tokens_source) + " has T = %lld tokens";
  if (a.query_start_loc == nullptr)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL but paged mode needs it", qsl_name.c_str());
  const tensor_view qsl = check_tensor(a.query_start_loc, qsl_name, dev);
  if (qsl.ndim != 1 || qsl.shape[0] < 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s must be 1-D [R + 1] with R >= 0", qsl_name.c_str());
  const int64_t reqs = qsl.shape[0] - 1;
  if (reqs > o.max_requests)
    fail(DSV4_STATUS_PLAN_MISMATCH,
         "%s->shape[0] = %lld (%lld requests) but the plan's max_requests is %d", qsl_name.c_str(),
         static_cast<long long>(qsl.shape[0]), static_cast<long long>(reqs), o.max_requests);
  p.num_reqs = static_cast<int32_t>(reqs);
  p.query_start_loc = check_vector(a.query_start_loc, qsl_name, reqs + 1, "R + 1 = %lld", dev);
  p.seq_lens = check_vector(a.seq_lens, pre + "seq_lens", reqs, reqs_fmt, dev);
  if (a.swa_block_table == nullptr)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%sswa_block_table is NULL but paged mode needs it", prefix);
  check_block_table(a.swa_block_table, pre + "swa_block_table", reqs, reqs_fmt,
                    o.max_swa_blocks_per_request, "max_swa_blocks_per_request", dev,
                    &p.swa_block_table, &p.swa_bt_stride, &p.swa_bt_cols);
  if (o.compress_ratio > 1) {
    if (a.cmp_block_table == nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH,
           "%scmp_block_table is NULL but the plan's compress_ratio %d needs it", prefix,
           o.compress_ratio);
    check_block_table(a.cmp_block_table, pre + "cmp_block_table", reqs, reqs_fmt,
                      o.max_cmp_blocks_per_request, "max_cmp_blocks_per_request", dev,
                      &p.cmp_block_table, &p.cmp_bt_stride, &p.cmp_bt_cols);
  } else if (a.cmp_block_table != nullptr) {
    fail(DSV4_STATUS_PLAN_MISMATCH,
         "%scmp_block_table is given but the plan's compress_ratio is 1 (SWA only)", prefix);
  }
  p.slot_mapping = check_vector(a.slot_mapping, pre + "slot_mapping", tokens, tokens_fmt, dev);
  if (o.compress_ratio == 4) {
    if (a.topk_indices == nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH,
           "%stopk_indices is NULL but the plan's compress_ratio 4 (C4A) needs it", prefix);
    const tensor_view v =
        check_table(a.topk_indices, pre + "topk_indices", tokens, tokens_fmt, dev);
    require_dim(v, 1, o.index_topk, DSV4_STATUS_PLAN_MISMATCH, "the plan has index_topk %d",
                o.index_topk);
    p.topk_indices = reinterpret_cast<const int32_t*>(v.data);
    p.topk_stride = v.stride[0];
  } else if (a.topk_indices != nullptr) {
    fail(DSV4_STATUS_PLAN_MISMATCH,
         "%stopk_indices is given but the plan's compress_ratio is %d (only C4A uses it)", prefix,
         o.compress_ratio);
  }
}

dsv4_run_args run_args_default_values() {
  dsv4_run_args a{};
  a.struct_size = sizeof a;
  return a;
}

dsv4_kv_write_args kv_write_args_default_values() {
  dsv4_kv_write_args a{};
  a.struct_size = sizeof a;
  a.cache_desc = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_FP8_V4_584B, 64, 0, 1.0f, 0};
  return a;
}

bool build_mod_run(const dsv4_plan& plan, const dsv4_run_args& a, dsv4_mod_run& r) {
  const dsv4_plan_options& o = plan.options;
  const dsv4_device dev = plan.ctx->device;
  r = dsv4_mod_run{};
  r.struct_size = sizeof r;
  r.mode = o.mode;
  if (a.reserved != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->reserved = %u must be 0", a.reserved);

  // q: [T, H, d] or [B, S, H, d].
  if (a.q == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->q is NULL");
  const tensor_view q = check_tensor(a.q, "args->q", dev);
  if (q.ndim != 3 && q.ndim != 4)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "args->q->ndim = %d but must be 3 [T, H, d] or 4 [B, S, H, d]", q.ndim);
  geometry g{};
  g.q_ndim = q.ndim;
  g.batch = q.shape[0];
  g.seq = q.ndim == 4 ? q.shape[1] : 1;
  g.tokens = checked_mul(g.batch, g.seq, "args->q tokens (B * S)");
  if (g.tokens > INT32_MAX)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->q has %lld tokens, more than INT32_MAX",
         static_cast<long long>(g.tokens));
  if (g.tokens > o.max_tokens)
    fail(DSV4_STATUS_PLAN_MISMATCH, "args->q has %lld tokens but the plan's max_tokens is %d",
         static_cast<long long>(g.tokens), o.max_tokens);
  const int32_t hd = q.ndim - 2;
  require_dim(q, hd, o.num_heads, DSV4_STATUS_PLAN_MISMATCH, "the plan has num_heads %d",
              o.num_heads);
  require_dim(q, hd + 1, o.head_dim_qk, DSV4_STATUS_PLAN_MISMATCH, "the plan has head_dim_qk %d",
              o.head_dim_qk);
  if (!dtype_equal(q.dtype, o.q_dtype))
    fail(DSV4_STATUS_PLAN_MISMATCH, "args->q->dtype = %s but the plan has q_dtype %s",
         dtype_name(q.dtype).c_str(), dtype_name(o.q_dtype).c_str());
  require_last_contiguous(q);
  const auto token_view = [&](const tensor_view& v) {
    dsv4_mod_token_view t{};
    t.data = v.data;
    t.stride_b = v.stride[0];
    t.stride_s = v.ndim == 4 ? v.stride[1] : 0;
    t.stride_h = v.stride[v.ndim - 2];
    return t;
  };
  r.num_tokens = static_cast<int32_t>(g.tokens);
  r.seq_q = static_cast<int32_t>(g.seq);
  r.q = token_view(q);

  // out: q's leading shape with d_v, bf16.
  if (a.out == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out is NULL");
  const tensor_view out = check_tensor(a.out, "args->out", dev);
  if (out.ndim != q.ndim)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out->ndim = %d but args->q->ndim is %d", out.ndim,
         q.ndim);
  for (int32_t i = 0; i + 1 < q.ndim; ++i) {
    require_dim(out, i, q.shape[i], DSV4_STATUS_INVALID_ARGUMENT, "args->q->shape[%d] is %lld", i,
                static_cast<long long>(q.shape[i]));
  }
  require_dim(out, out.ndim - 1, o.head_dim_v, DSV4_STATUS_INVALID_ARGUMENT,
              "must be head_dim_v %d", o.head_dim_v);
  if (!dtype_equal(out.dtype, o.out_dtype))
    fail(DSV4_STATUS_PLAN_MISMATCH, "args->out->dtype = %s but the plan has out_dtype %s",
         dtype_name(out.dtype).c_str(), dtype_name(o.out_dtype).c_str());
  require_last_contiguous(out);
  r.out = token_view(out);

  r.lse = check_stat(a.lse, "lse", g, o.num_heads, dev);
  r.max_logits = check_stat(a.max_logits, "max_logits", g, o.num_heads, dev);

  if (a.attn_sink != nullptr) {
    const tensor_view sink = check_tensor(a.attn_sink, "args->attn_sink", dev);
    if (sink.ndim != 1)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "args->attn_sink->ndim = %d but must be 1 [H]", sink.ndim);
    require_dim(sink, 0, o.num_heads, DSV4_STATUS_PLAN_MISMATCH, "the plan has num_heads %d",
                o.num_heads);
    require_dtype(sink, kF32, DSV4_STATUS_INVALID_ARGUMENT);
    require_contiguous(sink);
    r.attn_sink = reinterpret_cast<const float*>(sink.data);
  }

  // Caches.
  if (a.swa_cache == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->swa_cache is NULL");
  r.swa_cache =
      check_cache(a.swa_cache, "args->swa_cache", o.swa_cache, dev, DSV4_STATUS_PLAN_MISMATCH);
  if (o.extra_cache.layout != DSV4_KV_LAYOUT_NONE) {
    if (a.extra_cache == nullptr)
      fail(DSV4_STATUS_PLAN_MISMATCH,
           "args->extra_cache is NULL but the plan has an extra cache (%s)",
           layout_name(o.extra_cache.layout));
    r.extra_cache = check_cache(a.extra_cache, "args->extra_cache", o.extra_cache, dev,
                                DSV4_STATUS_PLAN_MISMATCH);
  } else if (a.extra_cache != nullptr) {
    fail(DSV4_STATUS_PLAN_MISMATCH, "args->extra_cache is given but the plan has no extra cache");
  }

  if (o.mode == DSV4_MODE_PAGED)
    check_paged(o, a, g, dev, r.paged);
  else
    check_explicit(o, a, g, dev, r);

  // Workspace.
  if (a.workspace == nullptr && a.workspace_bytes > 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->workspace is NULL but args->workspace_bytes = %zu",
         a.workspace_bytes);
  if (a.workspace_bytes < plan.workspace_bytes)
    fail(DSV4_STATUS_WORKSPACE_TOO_SMALL,
         "args->workspace_bytes = %zu but the plan needs %zu (dsv4_plan_get_workspace_size)",
         a.workspace_bytes, plan.workspace_bytes);
  r.workspace = a.workspace;
  r.workspace_bytes = a.workspace_bytes;
  r.stream = a.stream;
  return g.tokens > 0;
}

void run(const dsv4_plan& plan, const dsv4_run_args& args) {
  dsv4_mod_run r;
  if (!build_mod_run(plan, args, r)) return;
  const dsv4_ctx& ctx = *plan.ctx;
  log_scope scope(ctx.log);
  clear_module_error();
  const dsv4_status st = ctx.module->iface.run(plan.mplan, &r);
  if (st != DSV4_STATUS_OK) fail_from_module(st, "backend " + ctx.module->name + ": run");
}

void kv_write(dsv4_ctx& ctx, const dsv4_kv_write_args& a) {
  if (a.reserved != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->reserved = %u must be 0", a.reserved);
  dsv4_kv_cache_desc desc = a.cache_desc;
  normalize_cache_desc(desc, "args->cache_desc");
  if ((desc.flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0)
    fail(DSV4_STATUS_UNSUPPORTED,
         "args->cache_desc.flags has DSV4_KV_CACHE_FLAG_FP8_FNUZ: such caches are read-only here "
         "(ROCm's encoder writes them); dsv4_kv_write writes OCP e4m3fn bytes");
  const dsv4_device dev = ctx.device;
  const int32_t dim = layout_head_dim_qk(desc.layout);

  if (a.values == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->values is NULL");
  const tensor_view v = check_tensor(a.values, "args->values", dev);
  if (v.ndim != 2)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->values->ndim = %d but must be 2 [N, d]", v.ndim);
  require_dim(v, 1, dim, DSV4_STATUS_INVALID_ARGUMENT, "layout %s holds %d dims",
              layout_name(desc.layout), dim);
  const bool is_bf16 = dtype_equal(v.dtype, kBf16);
  if (!is_bf16 && !dtype_equal(v.dtype, kF32))
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->values->dtype = %s but must be bfloat16 or float32",
         dtype_name(v.dtype).c_str());
  require_last_contiguous(v);

  if (a.slots == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->slots is NULL");
  const tensor_view s = check_tensor(a.slots, "args->slots", dev);
  if (s.ndim != 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->slots->ndim = %d but must be 1 [N]", s.ndim);
  require_dim(s, 0, v.shape[0], DSV4_STATUS_INVALID_ARGUMENT, "args->values has N = %lld rows",
              static_cast<long long>(v.shape[0]));
  require_dtype(s, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  require_contiguous(s);

  if (a.cache == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->cache is NULL");
  dsv4_mod_kv_write w{};
  w.struct_size = sizeof w;
  w.dim = dim;
  w.cache = check_cache(a.cache, "args->cache", desc, dev, DSV4_STATUS_INVALID_ARGUMENT);
  w.num_rows = v.shape[0];
  w.values = v.data;
  w.values_row_stride = v.stride[0];
  w.values_is_bf16 = is_bf16 ? 1 : 0;
  w.slots = reinterpret_cast<const int32_t*>(s.data);
  w.stream = a.stream;
  if (ctx.module->iface.kv_write == nullptr)
    fail(DSV4_STATUS_UNSUPPORTED, "backend %s has no KV writer", ctx.module->name.c_str());
  if (w.num_rows == 0) return;
  log_scope scope(ctx.log);
  clear_module_error();
  // Slots beyond the cache capacity: the CPU module rejects them (it can read them); GPU modules
  // skip those rows (dsv4.h).
  const dsv4_status st = ctx.module->iface.kv_write(ctx.mctx, &w);
  if (st == DSV4_STATUS_INVALID_ARGUMENT) {
    // Everything but the slot values was checked above, so the module is rejecting a slot.
    try {
      fail_from_module(st, "backend " + ctx.module->name + ": kv_write");
    } catch (const api_error& e) {
      throw api_error(st, std::string("args->slots: ") + e.what());
    }
  }
  if (st != DSV4_STATUS_OK) fail_from_module(st, "backend " + ctx.module->name + ": kv_write");
}

}  // namespace dsv4::detail
