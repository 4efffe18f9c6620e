// dsv4_export_indices: the index lists of a paged batch in engine formats
// (include/dsv4/dsv4_paged.h): validate the export arguments against the plan (host metadata only),
// then call the module's export_indices slot, which builds the lists on the plan's device.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "base/error.h"
#include "core/abi_struct.h"
#include "core/ctx.h"
#include "core/plan.h"
#include "core/run_check.h"
#include "core/tensor_check.h"
#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"
#include "dsv4_backend_export.h"

namespace dsv4::detail {
namespace {

// A required int32 tensor of `ndim` dimensions.
tensor_view int32_tensor(const dsv4_tensor* t, const std::string& name, int32_t ndim,
                         const dsv4_device& device) {
  if (t == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "%s is NULL but required", name.c_str());
  tensor_view v = check_tensor(t, name, device);
  require_dtype(v, kI32, DSV4_STATUS_INVALID_ARGUMENT);
  if (v.ndim != ndim)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s->ndim = %d but must be %d", name.c_str(), v.ndim, ndim);
  return v;
}

void require_at_least(const tensor_view& v, int32_t dim, int64_t want, dsv4_status status,
                      const char* why) {
  if (v.shape[dim] < want)
    fail(status, "%s->shape[%d] = %lld but must be at least %lld (%s)", v.name.c_str(), dim,
         static_cast<long long>(v.shape[dim]), static_cast<long long>(want), why);
}

void require_absent(const dsv4_tensor* t, const char* name, const char* why) {
  if (t != nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "%s must be NULL (%s)", name, why);
}

// The paged batch fields of `a` into `run`, with T from slot_mapping (dsv4_run's paged rules).
void read_paged_batch(const dsv4_plan& plan, const dsv4_run_args& a, dsv4_mod_run* run) {
  const dsv4_plan_options& o = plan.options;
  const dsv4_device& dev = plan.ctx->device;
  const char* slots_name = "args->batch->slot_mapping";
  const int64_t T = int32_tensor(a.slot_mapping, slots_name, 1, dev).shape[0];
  if (T > o.max_tokens)
    fail(DSV4_STATUS_PLAN_MISMATCH, "%s->shape[0] = %lld tokens exceed the plan's max_tokens %d",
         slots_name, static_cast<long long>(T), o.max_tokens);
  check_paged_batch(o, a, T, slots_name, "args->batch->", dev, run->paged);

  if (a.swa_cache == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->batch->swa_cache is NULL");
  run->swa_cache = check_cache(a.swa_cache, "args->batch->swa_cache", o.swa_cache, dev,
                               DSV4_STATUS_PLAN_MISMATCH);
  if (o.compress_ratio > 1) {
    if (a.extra_cache == nullptr)
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "args->batch->extra_cache is NULL but compress_ratio %d needs the compressed cache",
           o.compress_ratio);
    run->extra_cache = check_cache(a.extra_cache, "args->batch->extra_cache", o.extra_cache, dev,
                                   DSV4_STATUS_PLAN_MISMATCH);
  }
  run->num_tokens = static_cast<int32_t>(T);
}

// Dense [>= T, >= width] int32 output with its lengths [>= T].
void read_dense(const dsv4_tensor* indices, const char* iname, const dsv4_tensor* lengths,
                const char* lname, int64_t T, int64_t width, bool contiguous_rows,
                const dsv4_device& dev, dsv4_mod_export_list* out) {
  const tensor_view v = int32_tensor(indices, iname, 2, dev);
  require_at_least(v, 0, T, DSV4_STATUS_INVALID_ARGUMENT, "one row per token");
  require_at_least(v, 1, width, DSV4_STATUS_INVALID_ARGUMENT, "the list width of the plan");
  if (contiguous_rows) require_last_contiguous(v);
  const tensor_view l = int32_tensor(lengths, lname, 1, dev);
  require_at_least(l, 0, T, DSV4_STATUS_INVALID_ARGUMENT, "one length per token");
  out->indices = reinterpret_cast<int32_t*>(v.data);
  out->row_stride = v.stride[0];
  out->col_stride = v.stride[1];
  out->width = v.shape[1];
  out->lengths = reinterpret_cast<int32_t*>(l.data);
  out->len_stride = l.stride[0];
}

// CSR: indptr [>= T+1], flat indices [>= T * width], optional lengths [>= T].
void read_csr(const dsv4_tensor* indptr, const char* pname, const dsv4_tensor* indices,
              const char* iname, const dsv4_tensor* lengths, const char* lname, int64_t T,
              int64_t width, const dsv4_device& dev, dsv4_mod_export_list* out) {
  const int64_t nnz_max = checked_mul(T, width, "tokens * list width");
  if (nnz_max > INT32_MAX)
    fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: %lld tokens x width %lld do not fit int32 offsets",
         pname, static_cast<long long>(T), static_cast<long long>(width));
  const tensor_view p = int32_tensor(indptr, pname, 1, dev);
  require_at_least(p, 0, T + 1, DSV4_STATUS_INVALID_ARGUMENT, "num_tokens + 1 offsets");
  const tensor_view v = int32_tensor(indices, iname, 1, dev);
  require_at_least(v, 0, nnz_max, DSV4_STATUS_INVALID_ARGUMENT,
                   "num_tokens * list width, the most entries a step can have");
  out->indices = reinterpret_cast<int32_t*>(v.data);
  out->row_stride = 0;
  out->col_stride = v.stride[0];
  out->width = v.shape[0];
  out->indptr = reinterpret_cast<int32_t*>(p.data);
  out->indptr_stride = p.stride[0];
  if (lengths != nullptr) {
    const tensor_view l = int32_tensor(lengths, lname, 1, dev);
    require_at_least(l, 0, T, DSV4_STATUS_INVALID_ARGUMENT, "one length per token");
    out->lengths = reinterpret_cast<int32_t*>(l.data);
    out->len_stride = l.stride[0];
  }
}

dsv4_status export_indices(const dsv4_plan* plan, const dsv4_export_args* args_in) {
  if (plan == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "plan is NULL");
  if (args_in == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args is NULL");
  dsv4_export_args defaults{};
  const dsv4_export_args a =
      read_struct(args_in, sizeof(dsv4_export_args), "args", "dsv4_export_args", defaults);
  const dsv4_plan_options& o = plan->options;
  if (o.mode != DSV4_MODE_PAGED)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "plan is in explicit mode; dsv4_export_indices needs a DSV4_MODE_PAGED plan");
  if (a.format != DSV4_EXPORT_FLASHMLA && a.format != DSV4_EXPORT_CSR &&
      a.format != DSV4_EXPORT_FLASHINFER)
    fail(DSV4_STATUS_INVALID_ARGUMENT,
         "args->format = %u must be DSV4_EXPORT_FLASHMLA (0), DSV4_EXPORT_CSR (1) or "
         "DSV4_EXPORT_FLASHINFER (2)",
         a.format);
  if (a.batch == nullptr) fail(DSV4_STATUS_INVALID_ARGUMENT, "args->batch is NULL");
  dsv4_run_args batch_defaults{};
  const dsv4_run_args batch =
      read_struct(a.batch, sizeof(dsv4_run_args), "args->batch", "dsv4_run_args", batch_defaults);

  dsv4_mod_run run{};
  run.struct_size = sizeof(dsv4_mod_run);
  run.mode = DSV4_MODE_PAGED;
  run.seq_q = 1;
  run.stream = a.stream;
  read_paged_batch(*plan, batch, &run);

  const dsv4_device& dev = plan->ctx->device;
  const int64_t T = run.num_tokens;
  const int64_t W = plan->mod.window;
  const int64_t width = plan->mod.cmp_width;
  dsv4_mod_export exp{};
  exp.struct_size = sizeof(dsv4_mod_export);
  exp.format = a.format;
  exp.plan = &plan->mod;
  exp.stream = a.stream;
  if (a.format == DSV4_EXPORT_FLASHINFER) {
    for (const auto& [t, name] : {std::pair{a.swa_indices, "swa_indices"},
                                  {a.swa_lengths, "swa_lengths"},
                                  {a.swa_indptr, "swa_indptr"},
                                  {a.cmp_indices, "cmp_indices"},
                                  {a.cmp_lengths, "cmp_lengths"},
                                  {a.cmp_indptr, "cmp_indptr"}})
      if (t != nullptr)
        fail(DSV4_STATUS_INVALID_ARGUMENT, "args->%s must be NULL for DSV4_EXPORT_FLASHINFER",
             name);
    read_dense(a.combined_indices, "args->combined_indices", a.combined_lengths,
               "args->combined_lengths", T, plan->mod.flashinfer_columns, true, dev, &exp.combined);
  } else {
    require_absent(a.combined_indices, "args->combined_indices", "DSV4_EXPORT_FLASHINFER only");
    require_absent(a.combined_lengths, "args->combined_lengths", "DSV4_EXPORT_FLASHINFER only");
    const bool csr = a.format == DSV4_EXPORT_CSR;
    if (csr) {
      read_csr(a.swa_indptr, "args->swa_indptr", a.swa_indices, "args->swa_indices", a.swa_lengths,
               "args->swa_lengths", T, W, dev, &exp.swa);
    } else {
      require_absent(a.swa_indptr, "args->swa_indptr", "DSV4_EXPORT_CSR only");
      require_absent(a.cmp_indptr, "args->cmp_indptr", "DSV4_EXPORT_CSR only");
      read_dense(a.swa_indices, "args->swa_indices", a.swa_lengths, "args->swa_lengths", T, W,
                 false, dev, &exp.swa);
    }
    if (width == 0) {
      require_absent(a.cmp_indices, "args->cmp_indices", "SWA-only plan has no compressed list");
      require_absent(a.cmp_lengths, "args->cmp_lengths", "SWA-only plan has no compressed list");
      require_absent(a.cmp_indptr, "args->cmp_indptr", "SWA-only plan has no compressed list");
    } else if (a.cmp_indices != nullptr) {
      if (csr) {
        read_csr(a.cmp_indptr, "args->cmp_indptr", a.cmp_indices, "args->cmp_indices",
                 a.cmp_lengths, "args->cmp_lengths", T, width, dev, &exp.cmp);
      } else {
        read_dense(a.cmp_indices, "args->cmp_indices", a.cmp_lengths, "args->cmp_lengths", T, width,
                   false, dev, &exp.cmp);
      }
    } else if (a.cmp_lengths != nullptr || a.cmp_indptr != nullptr) {
      fail(DSV4_STATUS_INVALID_ARGUMENT,
           "args->cmp_lengths / cmp_indptr given without args->cmp_indices");
    }
  }

  const loaded_module& m = *plan->ctx->module;
  if (m.iface.export_indices == nullptr)
    fail(DSV4_STATUS_UNSUPPORTED, "backend %s does not implement index export", m.name.c_str());
  clear_module_error();
  const dsv4_status st = m.iface.export_indices(plan->mplan, &run, &exp);
  if (st != DSV4_STATUS_OK) fail_from_module(st, "backend " + m.name + ": export_indices");
  return DSV4_STATUS_OK;
}

}  // namespace
}  // namespace dsv4::detail

extern "C" {

DSV4_API dsv4_status(dsv4_export_args_init)(dsv4_export_args* args, size_t struct_size) {
  return dsv4::detail::guard("dsv4_export_args_init", [&]() -> dsv4_status {
    if (args == nullptr) dsv4::detail::fail(DSV4_STATUS_INVALID_ARGUMENT, "args is NULL");
    dsv4_export_args defaults{};
    defaults.format = DSV4_EXPORT_FLASHMLA;
    dsv4::detail::init_struct(args, struct_size, sizeof(dsv4_export_args), "args",
                              "dsv4_export_args", defaults);
    return DSV4_STATUS_OK;
  });
}

DSV4_API dsv4_status dsv4_export_indices(const dsv4_plan* plan, const dsv4_export_args* args) {
  return dsv4::detail::guard("dsv4_export_indices",
                             [&] { return dsv4::detail::export_indices(plan, args); });
}

}  // extern "C"
