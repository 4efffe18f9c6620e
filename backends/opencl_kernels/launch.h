// Host side of the OpenCL C kernels, shared by libdsv4-opencl.so and libdsv4-level-zero.so: which
// kernels a dsv4_run / export / kv_write / merge call launches, with which grid and arguments
// (device pointers and params.h blocks). A module only turns a launch into its API's calls
// (clSetKernelArgSVMPointer + clEnqueueNDRangeKernel, zeKernelSetArgumentValue +
// zeCommandListAppendLaunchKernel). Nothing here allocates.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <cstring>

#include "common/layout.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"
#include "module/module_slots.h"
#include "opencl_kernels/params.h"

namespace dsv4 {
namespace clk {

enum kernel_id {
  kAttention,
  kPagedBuild,
  kExportDense,
  kExportCsrLengths,
  kExportCsrScan,
  kExportCsrRows,
  kKvWrite,
  kMerge,
  kKernelCount
};

// Entry-point names in dsv4_kernels.cl, indexed by kernel_id.
inline const char* kernel_name(int id) {
  static const char* const names[kKernelCount] = {"dsv4_attention",       "dsv4_paged_build",
                                                  "dsv4_export_dense",    "dsv4_export_csr_lengths",
                                                  "dsv4_export_csr_scan", "dsv4_export_csr_rows",
                                                  "dsv4_kv_write",        "dsv4_merge"};
  return id >= 0 && id < kKernelCount ? names[id] : "";
}

// One kernel launch: a 2-D grid of work-groups and its argument list in order.
struct launch {
  static constexpr int kMaxArgs = 20;
  static constexpr size_t kValueBytes = 1024;
  struct arg {
    bool is_pointer;
    void* pointer;      // a device pointer (may be the placeholder of an absent tensor)
    const char* name;   // the tensor it comes from, for error messages
    size_t value_at;    // offset into values
    size_t value_size;  // bytes of a by-value argument
  };
  int kernel = kAttention;
  size_t groups[2] = {1, 1};      // work-groups per dimension
  size_t group_size[2] = {1, 1};  // work-items per work-group
  int num_args = 0;
  arg args[kMaxArgs] = {};
  alignas(8) unsigned char values[kValueBytes] = {};
  size_t values_used = 0;
  void* placeholder = nullptr;  // stands in for absent tensors (never dereferenced)

  void add_pointer(const void* p, const char* name) {
    arg& a = args[num_args++];
    a.is_pointer = true;
    a.name = name;
    a.pointer = const_cast<void*>(p != nullptr ? p : placeholder);
  }
  template <class T>
  void add_value(const T& v) {
    arg& a = args[num_args++];
    a.is_pointer = false;
    a.name = "parameters";
    values_used = (values_used + 7) / 8 * 8;
    a.value_at = values_used;
    a.value_size = sizeof v;
    std::memcpy(values + values_used, &v, sizeof v);
    values_used += sizeof v;
  }
  const void* value(const arg& a) const { return values + a.value_at; }
};

struct launch_list {
  launch item[4];
  int count = 0;
  launch& add(int kernel, void* placeholder) {
    launch& l = item[count++];
    l = launch{};
    l.kernel = kernel;
    l.placeholder = placeholder;
    return l;
  }
};

constexpr size_t kFlatGroup = 64;  // work-items per group of the one-item-per-row kernels
constexpr size_t kWorkspaceAlign = 256;

inline size_t groups_for(int64_t items) {
  return items <= 0 ? 0 : (static_cast<size_t>(items) + kFlatGroup - 1) / kFlatGroup;
}

// Workspace of a plan: the paged lists (the host's map), plus room to align a caller's pointer.
inline size_t workspace_bytes(const dsv4_mod_plan& plan) {
  return plan.lists.bytes > 0 ? plan.lists.bytes + kWorkspaceAlign : 0;
}

inline dsv4_cl_view view_of(const dsv4_mod_token_view& v) {
  return dsv4_cl_view{v.stride_b, v.stride_s, v.stride_h};
}

inline dsv4_cl_cache cache_of(const dsv4_mod_cache& c) {
  dsv4_cl_cache r{};
  r.block_stride = c.block_stride_bytes;
  r.num_blocks = c.base != nullptr ? c.num_blocks : 0;
  r.layout = static_cast<dsv4_cl_i32>(c.layout);
  r.block_size = c.block_size < 1 ? 1 : c.block_size;
  r.flags = c.flags;
  r.present = c.base != nullptr && c.num_blocks > 0 && c.block_size > 0 ? 1 : 0;
  return r;
}

inline dsv4_cl_list list_of(const dsv4_mod_index_list& l) {
  dsv4_cl_list r{};
  r.present = l.indices != nullptr ? 1 : 0;
  r.format = static_cast<dsv4_cl_i32>(l.format);
  r.width = l.width;
  r.stride_b = l.stride_b;
  r.stride_s = l.stride_s;
  r.stride_k = l.stride_k;
  r.num_entries = l.num_entries;
  r.has_lengths = l.lengths != nullptr ? 1 : 0;
  r.len_stride_b = l.len_stride_b;
  r.len_stride_s = l.len_stride_s;
  return r;
}

// The paged builders' geometry and batch scalars of a run (backends/common paged_geometry_of).
inline dsv4_cl_paged_params paged_params_of(const dsv4_mod_plan& plan, const dsv4_mod_run& run) {
  dsv4_cl_paged_params g{};
  const dsv4_mod_paged_batch& b = run.paged;
  g.ratio = plan.compress_ratio;
  g.window = plan.window;
  g.swa_block_size = plan.cache[0].block_size;
  g.cmp_block_size = plan.compress_ratio > 1 ? plan.cache[1].block_size : 1;
  g.cmp_width = plan.cmp_width;
  g.decode_threshold = plan.decode_threshold;
  g.num_reqs = b.num_reqs;
  g.swa_bt_stride = b.swa_bt_stride;
  g.swa_bt_cols = b.swa_bt_cols;
  g.cmp_bt_stride = b.cmp_bt_stride;
  g.cmp_bt_cols = b.cmp_bt_cols;
  g.topk_stride = b.topk_stride;
  g.swa_capacity = run.swa_cache.base != nullptr
                       ? run.swa_cache.num_blocks * static_cast<int64_t>(run.swa_cache.block_size)
                       : 0;
  g.cmp_capacity =
      run.extra_cache.base != nullptr
          ? run.extra_cache.num_blocks * static_cast<int64_t>(run.extra_cache.block_size)
          : 0;
  g.num_tokens = run.num_tokens;
  return g;
}

constexpr const char* kListNames[2][3] = {{"indices", "indptr", "lengths"},
                                          {"extra_indices", "extra_indptr", "extra_lengths"}};

inline void add_batch(launch& l, const dsv4_mod_paged_batch& b) {
  l.add_pointer(b.query_start_loc, "query_start_loc");
  l.add_pointer(b.seq_lens, "seq_lens");
  l.add_pointer(b.swa_block_table, "swa_block_table");
  l.add_pointer(b.cmp_block_table, "cmp_block_table");
  l.add_pointer(b.slot_mapping, "slot_mapping");
  l.add_pointer(b.topk_indices, "topk_indices");
}

// The launches of one dsv4_run: in paged mode the list builder (into the workspace, aligned to
// kWorkspaceAlign), then the attention kernel. The caller has checked the workspace size.
inline void plan_run(const dsv4_mod_plan& plan, const dsv4_mod_run& run, launch_list* out) {
  out->count = 0;
  if (run.num_tokens <= 0) return;
  void* ph = run.out.data;
  dsv4_cl_attention_params a{};
  a.q = view_of(run.q);
  a.out = view_of(run.out);
  a.lse = view_of(run.lse);
  a.max_logits = view_of(run.max_logits);
  a.cache[0] = cache_of(run.swa_cache);
  a.cache[1] = cache_of(run.extra_cache);
  a.num_tokens = run.num_tokens;
  a.seq_q = run.seq_q > 0 ? run.seq_q : 1;
  a.num_heads = plan.num_heads;
  a.head_dim_qk = plan.head_dim_qk;
  a.q_fp8 = plan.q_dtype.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN ? 1 : 0;
  a.has_lse = run.lse.data != nullptr ? 1 : 0;
  a.has_max_logits = run.max_logits.data != nullptr ? 1 : 0;
  a.has_sink = run.attn_sink != nullptr ? 1 : 0;
  a.out_f32 = plan.out_dtype.code == DSV4_DTYPE_CODE_FLOAT ? 1 : 0;

  const int32_t* lists[2][3] = {{nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr}};
  if (plan.mode == DSV4_MODE_EXPLICIT) {
    const dsv4_mod_index_list* l[2] = {&run.main_list, &run.extra_list};
    for (int i = 0; i < 2; ++i) {
      a.list[i] = list_of(*l[i]);
      lists[i][0] = l[i]->indices;
      lists[i][1] = l[i]->indptr;
      lists[i][2] = l[i]->lengths;
    }
  } else {
    uint8_t* ws = static_cast<uint8_t*>(run.workspace);
    ws += (kWorkspaceAlign - reinterpret_cast<uintptr_t>(ws) % kWorkspaceAlign) % kWorkspaceAlign;
    const dsv4_mod_lists_map& m = plan.lists;
    int32_t* idx[2] = {reinterpret_cast<int32_t*>(ws + m.swa_indices),
                       reinterpret_cast<int32_t*>(ws + m.cmp_indices)};
    int32_t* len[2] = {reinterpret_cast<int32_t*>(ws + m.swa_lengths),
                       reinterpret_cast<int32_t*>(ws + m.cmp_lengths)};
    launch& b = out->add(kPagedBuild, ph);
    b.groups[0] = groups_for(run.num_tokens);
    b.group_size[0] = kFlatGroup;
    add_batch(b, run.paged);
    b.add_pointer(idx[0], "workspace");
    b.add_pointer(len[0], "workspace");
    b.add_pointer(idx[1], "workspace");
    b.add_pointer(len[1], "workspace");
    b.add_value(paged_params_of(plan, run));
    const int64_t s = a.seq_q;
    const int64_t width[2] = {plan.window, plan.cmp_width};
    for (int i = 0; i < 2; ++i) {
      if (width[i] == 0) continue;
      dsv4_cl_list& l = a.list[i];
      l.present = 1;
      l.format = DSV4_INDEX_DENSE;
      l.width = static_cast<dsv4_cl_i32>(width[i]);
      l.stride_b = s * width[i];
      l.stride_s = width[i];
      l.stride_k = 1;
      l.has_lengths = 1;
      l.len_stride_b = s;
      l.len_stride_s = 1;
      lists[i][0] = idx[i];
      lists[i][2] = len[i];
    }
  }
  // Per-tensor FP8 caches keep raw e4m3 rows: kv_scale scales the logits (the plan's
  // logit_scale) and the values (each list's multiplier on its fp32 P, layout.h).
  const bool has_extra = a.list[1].present != 0 && run.extra_cache.layout != DSV4_KV_LAYOUT_NONE;
  const list_value_scales values =
      list_value_scales_of(run.swa_cache.layout, run.swa_cache.kv_scale, run.extra_cache.layout,
                           run.extra_cache.kv_scale);
  a.logit_scale[0] = plan.logit_scale[0];
  a.logit_scale[1] = has_extra ? plan.logit_scale[1] : plan.logit_scale[0];
  a.weight[0] = values.multiplier[0];
  a.weight[1] = values.multiplier[1];

  launch& k = out->add(kAttention, ph);
  k.groups[0] = static_cast<size_t>((plan.num_heads + DSV4_CL_HEAD_TILE - 1) / DSV4_CL_HEAD_TILE);
  k.groups[1] = static_cast<size_t>(run.num_tokens);
  k.group_size[0] = DSV4_CL_ATTN_THREADS;
  k.add_pointer(run.q.data, "q");
  k.add_pointer(run.out.data, "out");
  k.add_pointer(run.lse.data, "lse");
  k.add_pointer(run.max_logits.data, "max_logits");
  k.add_pointer(run.swa_cache.base, "swa_cache");
  k.add_pointer(run.extra_cache.base, "extra_cache");
  k.add_pointer(run.attn_sink, "attn_sink");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) k.add_pointer(lists[i][j], kListNames[i][j]);
  k.add_value(a);
}

inline dsv4_cl_export_list export_list_of(const dsv4_mod_export_list& l) {
  dsv4_cl_export_list r{};
  r.present = l.indices != nullptr ? 1 : 0;
  r.row_stride = l.row_stride;
  r.col_stride = l.col_stride;
  r.width = l.width;
  r.has_lengths = l.lengths != nullptr ? 1 : 0;
  r.len_stride = l.len_stride;
  r.indptr_stride = l.indptr_stride;
  return r;
}

// Whether an export_indices call has nothing to write: no tokens, except for CSR, whose indptr
// arrays still get their one 0.
inline bool export_launches_nothing(const dsv4_mod_run& batch, const dsv4_mod_export& exp) {
  return batch.num_tokens < 0 || (batch.num_tokens == 0 && exp.format != DSV4_EXPORT_CSR);
}

// The launches of one export_indices call (dense formats: one; CSR: lengths, one scan per list,
// rows). The format has been checked by the caller.
inline void plan_export(const dsv4_mod_plan& plan, const dsv4_mod_run& batch,
                        const dsv4_mod_export& exp, launch_list* out) {
  out->count = 0;
  // A CSR step without tokens still has indptr = {0}: only the scans run.
  if (export_launches_nothing(batch, exp)) return;
  const bool csr = exp.format == DSV4_EXPORT_CSR;
  const dsv4_cl_paged_params g = paged_params_of(plan, batch);
  dsv4_cl_export_params e{};
  e.swa = export_list_of(exp.swa);
  e.cmp = export_list_of(exp.cmp);
  e.combined = export_list_of(exp.combined);
  e.format = static_cast<dsv4_cl_i32>(exp.format);
  const bool want_cmp = dsv4_mod_export_wanted(&exp.cmp) && plan.cmp_width > 0;
  // Empty flat indices carry no address (spec 12.3); a CSR export always has its indptr.
  void* ph = exp.format == DSV4_EXPORT_FLASHINFER ? exp.combined.indices
             : csr                                ? static_cast<void*>(exp.swa.indptr)
                                                  : exp.swa.indices;
  if (!csr) {
    launch& l = out->add(kExportDense, ph);
    l.groups[0] = groups_for(batch.num_tokens);
    l.group_size[0] = kFlatGroup;
    add_batch(l, batch.paged);
    l.add_pointer(exp.swa.indices, "swa_indices");
    l.add_pointer(exp.swa.lengths, "swa_lengths");
    l.add_pointer(exp.cmp.indices, "cmp_indices");
    l.add_pointer(exp.cmp.lengths, "cmp_lengths");
    l.add_pointer(exp.combined.indices, "combined_indices");
    l.add_pointer(exp.combined.lengths, "combined_lengths");
    l.add_value(g);
    l.add_value(e);
    return;
  }
  if (batch.num_tokens > 0) {
    launch& len = out->add(kExportCsrLengths, ph);
    len.groups[0] = groups_for(batch.num_tokens);
    len.group_size[0] = kFlatGroup;
    add_batch(len, batch.paged);
    len.add_pointer(exp.swa.indptr, "swa_indptr");
    len.add_pointer(want_cmp ? exp.cmp.indptr : nullptr, "cmp_indptr");
    len.add_pointer(exp.swa.indptr, "swa_indptr");  // scratch: never written (limit 0)
    len.add_value(g);
    len.add_value(e);
  }
  // Inclusive scans of the indptr arrays (one work-group each), then the rows.
  for (int i = 0; i < (want_cmp ? 2 : 1); ++i) {
    const dsv4_mod_export_list& l = i == 0 ? exp.swa : exp.cmp;
    launch& scan = out->add(kExportCsrScan, ph);
    scan.groups[0] = 1;
    scan.group_size[0] = DSV4_CL_SCAN_THREADS;
    scan.add_pointer(l.indptr, i == 0 ? "swa_indptr" : "cmp_indptr");
    scan.add_value(static_cast<int64_t>(l.indptr_stride));
    scan.add_value(static_cast<int64_t>(batch.num_tokens));
  }
  if (batch.num_tokens == 0) return;
  launch& rows = out->add(kExportCsrRows, ph);
  rows.groups[0] = groups_for(batch.num_tokens);
  rows.group_size[0] = kFlatGroup;
  add_batch(rows, batch.paged);
  rows.add_pointer(exp.swa.indices, "swa_indices");
  rows.add_pointer(exp.swa.indptr, "swa_indptr");
  rows.add_pointer(exp.swa.lengths, "swa_lengths");
  rows.add_pointer(want_cmp ? exp.cmp.indices : nullptr, "cmp_indices");
  rows.add_pointer(want_cmp ? exp.cmp.indptr : nullptr, "cmp_indptr");
  rows.add_pointer(want_cmp ? exp.cmp.lengths : nullptr, "cmp_lengths");
  rows.add_value(g);
  dsv4_cl_export_params er = e;
  er.cmp.present = want_cmp ? 1 : 0;
  rows.add_value(er);
}

// The checks of a run that only a module can make: capacity and workspace.
inline dsv4_status check_run(fail_fn fail, const dsv4_mod_plan& plan, const dsv4_mod_run& run) {
  if (run.num_tokens > plan.max_tokens)
    return fail(DSV4_STATUS_PLAN_MISMATCH, "run: %d tokens, plan capacity %d", run.num_tokens,
                plan.max_tokens);
  const size_t need = workspace_bytes(plan);
  if (run.workspace_bytes < need || (need > 0 && run.workspace == nullptr))
    return fail(DSV4_STATUS_WORKSPACE_TOO_SMALL, "run: workspace of %zu bytes, plan needs %zu",
                run.workspace_bytes, need);
  return DSV4_STATUS_OK;
}

inline void plan_kv_write(const dsv4_mod_kv_write& w, launch_list* out) {
  out->count = 0;
  if (w.num_rows <= 0) return;
  dsv4_cl_kv_write_params p{};
  p.block_stride = w.cache.block_stride_bytes;
  p.num_blocks = w.cache.num_blocks;
  p.num_rows = w.num_rows;
  p.values_row_stride = w.values_row_stride;
  p.kv_scale = w.cache.kv_scale;
  p.layout = static_cast<dsv4_cl_i32>(w.cache.layout);
  p.block_size = w.cache.block_size;
  p.values_is_bf16 = w.values_is_bf16;
  launch& l = out->add(kKvWrite, w.cache.base);
  l.groups[0] = groups_for(w.num_rows);
  l.group_size[0] = kFlatGroup;
  l.add_pointer(w.values, "values");
  l.add_pointer(w.slots, "slots");
  l.add_pointer(w.cache.base, "cache");
  l.add_value(p);
}

inline void plan_merge(const dsv4_mod_merge& m, launch_list* out) {
  out->count = 0;
  const int64_t rows = static_cast<int64_t>(m.num_tokens) * m.num_heads;
  if (rows <= 0) return;
  dsv4_cl_merge_params p{};
  p.part_stride_p = m.part_stride_p;
  p.part_stride_t = m.part_stride_t;
  p.part_stride_h = m.part_stride_h;
  p.lse_part_stride_p = m.lse_part_stride_p;
  p.lse_part_stride_t = m.lse_part_stride_t;
  p.lse_part_stride_h = m.lse_part_stride_h;
  p.out_stride_t = m.out_stride_t;
  p.out_stride_h = m.out_stride_h;
  p.lse_stride_t = m.lse_stride_t;
  p.lse_stride_h = m.lse_stride_h;
  p.num_parts = m.num_parts;
  p.num_tokens = m.num_tokens;
  p.num_heads = m.num_heads;
  p.out_parts_f32 = m.out_parts_f32;
  p.has_sink = m.attn_sink != nullptr ? 1 : 0;
  p.has_lse = m.lse != nullptr ? 1 : 0;
  launch& l = out->add(kMerge, m.out);
  l.groups[0] = static_cast<size_t>(rows);
  l.group_size[0] = DSV4_CL_MERGE_THREADS;
  l.add_pointer(m.out_parts, "out_parts");
  l.add_pointer(m.lse_parts, "lse_parts");
  l.add_pointer(m.attn_sink, "attn_sink");
  l.add_pointer(m.out, "out");
  l.add_pointer(m.lse, "lse");
  l.add_value(p);
}

}  // namespace clk
}  // namespace dsv4
