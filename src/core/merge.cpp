#include "core/merge.h"

#include "base/error.h"
#include "base/log.h"
#include "common/layout.h"
#include "core/tensor_check.h"
#include "dsv4_backend.h"

namespace dsv4::detail {

dsv4_merge_args merge_args_default_values() {
  dsv4_merge_args a{};
  a.struct_size = sizeof a;
  return a;
}

void merge(dsv4_ctx& ctx, const dsv4_merge_args& a) {
  const dsv4_device dev = ctx.device;
  if (a.reserved != 0)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->reserved = %u must be 0", a.reserved);

  if (a.out_parts == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out_parts is NULL");
  const tensor_view parts = check_tensor(a.out_parts, "args->out_parts", dev);
  if (parts.ndim != 4)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out_parts->ndim = %d but must be 4 [P, T, H, %d]",
         parts.ndim, kHeadDim);
  const bool parts_f32 = dtype_equal(parts.dtype, kF32);
  if (!parts_f32 && !dtype_equal(parts.dtype, kBf16))
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "args->out_parts->dtype = %s but must be bfloat16 or float32",
         dtype_name(parts.dtype).c_str());
  require_dim(parts, 3, kHeadDim, DSV4_STATUS_INVALID_ARGUMENT, "must be head_dim_v %d", kHeadDim);
  require_last_contiguous(parts);
  const int64_t P = parts.shape[0];
  const int64_t T = parts.shape[1];
  const int64_t H = parts.shape[2];
  if (P < 1)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "args->out_parts->shape[0] = 0 but at least one part is needed");
  if (P > INT32_MAX || T > INT32_MAX || H > INT32_MAX)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out_parts: P, T and H must each fit int32");

  if (a.lse_parts == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->lse_parts is NULL");
  const tensor_view lse_parts = check_tensor(a.lse_parts, "args->lse_parts", dev);
  if (lse_parts.ndim != 3)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->lse_parts->ndim = %d but must be 3 [P, T, H]",
         lse_parts.ndim);
  require_dtype(lse_parts, kF32, DSV4_STATUS_INVALID_ARGUMENT);
  for (int32_t d = 0; d < 3; ++d)
    require_dim(lse_parts, d, parts.shape[d], DSV4_STATUS_INVALID_ARGUMENT,
                "args->out_parts->shape[%d] is %lld", d, static_cast<long long>(parts.shape[d]));

  const float* sink = nullptr;
  if (a.attn_sink != nullptr) {
    const tensor_view s = check_tensor(a.attn_sink, "args->attn_sink", dev);
    if (s.ndim != 1)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "args->attn_sink->ndim = %d but must be 1 [H]", s.ndim);
    require_dim(s, 0, H, DSV4_STATUS_INVALID_ARGUMENT, "args->out_parts has H = %lld heads",
                static_cast<long long>(H));
    require_dtype(s, kF32, DSV4_STATUS_INVALID_ARGUMENT);
    require_contiguous(s);
    sink = reinterpret_cast<const float*>(s.data);
  }

  if (a.out == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out is NULL");
  const tensor_view out = check_tensor(a.out, "args->out", dev);
  if (out.ndim != 3)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "args->out->ndim = %d but must be 3 [T, H, %d]", out.ndim,
         kHeadDim);
  require_dtype(out, kBf16, DSV4_STATUS_INVALID_ARGUMENT);
  for (int32_t d = 0; d < 3; ++d)
    require_dim(out, d, parts.shape[d + 1], DSV4_STATUS_INVALID_ARGUMENT,
                "args->out_parts->shape[%d] is %lld", d + 1,
                static_cast<long long>(parts.shape[d + 1]));
  require_last_contiguous(out);

  dsv4_mod_merge m{};
  if (a.lse != nullptr) {
    const tensor_view l = check_tensor(a.lse, "args->lse", dev);
    if (l.ndim != 2)
      fail(DSV4_STATUS_INVALID_ARGUMENT, "args->lse->ndim = %d but must be 2 [T, H]", l.ndim);
    require_dtype(l, kF32, DSV4_STATUS_INVALID_ARGUMENT);
    for (int32_t d = 0; d < 2; ++d)
      require_dim(l, d, parts.shape[d + 1], DSV4_STATUS_INVALID_ARGUMENT,
                  "args->out_parts->shape[%d] is %lld", d + 1,
                  static_cast<long long>(parts.shape[d + 1]));
    m.lse = reinterpret_cast<float*>(l.data);
    m.lse_stride_t = l.stride[0];
    m.lse_stride_h = l.stride[1];
  }

  m.struct_size = sizeof m;
  m.num_parts = static_cast<int32_t>(P);
  m.num_tokens = static_cast<int32_t>(T);
  m.num_heads = static_cast<int32_t>(H);
  m.out_parts = parts.data;
  m.out_parts_f32 = parts_f32 ? 1 : 0;
  m.part_stride_p = parts.stride[0];
  m.part_stride_t = parts.stride[1];
  m.part_stride_h = parts.stride[2];
  m.lse_parts = reinterpret_cast<const float*>(lse_parts.data);
  m.lse_part_stride_p = lse_parts.stride[0];
  m.lse_part_stride_t = lse_parts.stride[1];
  m.lse_part_stride_h = lse_parts.stride[2];
  m.attn_sink = sink;
  m.out = out.data;
  m.out_stride_t = out.stride[0];
  m.out_stride_h = out.stride[1];
  m.stream = a.stream;
  if (ctx.module->iface.merge == nullptr)
    fail(DSV4_STATUS_UNSUPPORTED, "backend %s does not implement dsv4_merge",
         ctx.module->name.c_str());
  if (T == 0 || H == 0) return;
  log_scope scope(ctx.log);
  clear_module_error();
  const dsv4_status st = ctx.module->iface.merge(ctx.mctx, &m);
  if (st != DSV4_STATUS_OK) fail_from_module(st, "backend " + ctx.module->name + ": merge");
}

}  // namespace dsv4::detail
