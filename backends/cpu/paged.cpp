// Paged mode on the CPU: value validation of the batch, then the shared per-token builders.
#include "paged.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <initializer_list>

#include "common/paged_index.h"

namespace {

dsv4_status paged_fail(const dsv4_host_services* host, dsv4_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

dsv4_status paged_fail(const dsv4_host_services* host, dsv4_status status, const char* fmt, ...) {
  char message[512];
  int prefix = std::snprintf(message, sizeof(message), "cpu: ");
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(message + prefix, sizeof(message) - static_cast<size_t>(prefix), fmt, ap);
  va_end(ap);
  if (host != nullptr && host->set_error != nullptr) host->set_error(message);
  return status;
}

int64_t cache_capacity(const dsv4_mod_cache& c) {
  return c.base == nullptr ? 0 : c.num_blocks * static_cast<int64_t>(c.block_size);
}

// Checks that logical entries [first, last] of request r are mapped by `bt` to blocks in
// [0, num_blocks). `what` names the table.
dsv4_status check_blocks(const dsv4_host_services* host, const char* what, const int32_t* bt,
                         int64_t bt_stride, int32_t bt_cols, int64_t num_blocks, int32_t block_size,
                         int64_t r, int64_t first, int64_t last, int64_t t) {
  const int64_t col_first = first / block_size;
  const int64_t col_last = last / block_size;
  if (col_last >= bt_cols) {
    return paged_fail(host, DSV4_STATUS_INVALID_ARGUMENT,
                      "%s: token %lld (request %lld) needs entry %lld in column %lld but the table "
                      "has %d columns",
                      what, static_cast<long long>(t), static_cast<long long>(r),
                      static_cast<long long>(last), static_cast<long long>(col_last), bt_cols);
  }
  for (int64_t col = col_first; col <= col_last; ++col) {
    const int64_t block = bt[r * bt_stride + col];
    if (block < 0 || block >= num_blocks || (block + 1) * block_size - 1 > INT32_MAX) {
      return paged_fail(host, DSV4_STATUS_INVALID_ARGUMENT,
                        "%s[%lld][%lld] = %lld is outside the cache's %lld blocks or int32 slots "
                        "(needed by token %lld)",
                        what, static_cast<long long>(r), static_cast<long long>(col),
                        static_cast<long long>(block), static_cast<long long>(num_blocks),
                        static_cast<long long>(t));
    }
  }
  return DSV4_STATUS_OK;
}

}  // namespace

dsv4::paged_capacity cpu_paged_capacity(const dsv4_mod_run& run) {
  return dsv4::paged_capacity{cache_capacity(run.swa_cache), cache_capacity(run.extra_cache)};
}

dsv4_status cpu_paged_validate(const dsv4_mod_plan& plan, const dsv4_mod_run& run,
                               const dsv4_host_services* host) {
  const dsv4_mod_paged_batch& b = run.paged;
  const dsv4::paged_geometry g = dsv4::paged_geometry_of(plan);
  const int64_t T = run.num_tokens;
  const int64_t R = b.num_reqs;
  const auto invalid = DSV4_STATUS_INVALID_ARGUMENT;
  if (T < 0 || T > plan.max_tokens) {
    return paged_fail(host, invalid, "num_tokens %lld exceeds the plan's max_tokens %d",
                      static_cast<long long>(T), plan.max_tokens);
  }
  if (R < 0 || R > plan.max_requests) {
    return paged_fail(host, invalid, "%lld requests exceed the plan's max_requests %d",
                      static_cast<long long>(R), plan.max_requests);
  }
  if (b.query_start_loc == nullptr || (R > 0 && b.seq_lens == nullptr) ||
      (T > 0 && b.slot_mapping == nullptr) || (R > 0 && b.swa_block_table == nullptr)) {
    return paged_fail(host, invalid,
                      "query_start_loc, seq_lens, swa_block_table and slot_mapping are required");
  }
  if (g.ratio > 1 && R > 0 && (b.cmp_block_table == nullptr || run.extra_cache.base == nullptr)) {
    return paged_fail(host, invalid, "compressed layers need cmp_block_table and extra_cache");
  }
  if (dsv4::paged_is_c4a(g) && T > 0 && b.topk_indices == nullptr) {
    return paged_fail(host, invalid, "C4A layers need topk_indices");
  }
  if (b.query_start_loc[0] != 0) {
    return paged_fail(host, invalid, "query_start_loc[0] = %d, must be 0", b.query_start_loc[0]);
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t begin = b.query_start_loc[r];
    const int64_t end = b.query_start_loc[r + 1];
    if (end < begin) {
      return paged_fail(host, invalid,
                        "query_start_loc is not monotone: [%lld] = %lld > [%lld] = %lld",
                        static_cast<long long>(r), static_cast<long long>(begin),
                        static_cast<long long>(r + 1), static_cast<long long>(end));
    }
    if (end > T) {
      return paged_fail(host, invalid, "query_start_loc[%lld] = %lld is beyond the %lld tokens",
                        static_cast<long long>(r + 1), static_cast<long long>(end),
                        static_cast<long long>(T));
    }
    if (b.seq_lens[r] < end - begin) {
      return paged_fail(host, invalid, "seq_lens[%lld] = %d is smaller than query_len %lld",
                        static_cast<long long>(r), b.seq_lens[r],
                        static_cast<long long>(end - begin));
    }
  }
  const int64_t end_tokens = R > 0 ? b.query_start_loc[R] : 0;
  for (int64_t t = 0; t < end_tokens; ++t) {
    const dsv4::paged_token k = dsv4::paged_locate(b, t);
    if (!k.valid) continue;
    const int64_t r = k.req;
    const int64_t p = k.pos;
    dsv4_status s = check_blocks(host, "swa_block_table", b.swa_block_table, b.swa_bt_stride,
                                 b.swa_bt_cols, run.swa_cache.num_blocks, g.swa_block_size, r,
                                 dsv4::paged_swa_start(p, g.window), p, t);
    if (s != DSV4_STATUS_OK) return s;
    const int64_t visible = dsv4::paged_visible_entries(g, p);
    if (dsv4::paged_is_c4a(g)) {
      const int32_t* local = b.topk_indices + t * b.topk_stride;
      for (int64_t i = 0; i < g.cmp_width; ++i) {
        const int64_t l = local[i];
        if (l < 0) continue;
        if (l >= visible) {
          return paged_fail(host, invalid,
                            "topk_indices[%lld][%lld] = %lld but token %lld (position %lld) sees "
                            "only %lld compressed entries",
                            static_cast<long long>(t), static_cast<long long>(i),
                            static_cast<long long>(l), static_cast<long long>(t),
                            static_cast<long long>(p), static_cast<long long>(visible));
        }
        s = check_blocks(host, "cmp_block_table", b.cmp_block_table, b.cmp_bt_stride, b.cmp_bt_cols,
                         run.extra_cache.num_blocks, g.cmp_block_size, r, l, l, t);
        if (s != DSV4_STATUS_OK) return s;
      }
    } else if (dsv4::paged_is_c128a(g)) {
      const int64_t n = visible < g.cmp_width ? visible : g.cmp_width;
      if (n > 0) {
        s = check_blocks(host, "cmp_block_table", b.cmp_block_table, b.cmp_bt_stride, b.cmp_bt_cols,
                         run.extra_cache.num_blocks, g.cmp_block_size, r, 0, n - 1, t);
        if (s != DSV4_STATUS_OK) return s;
      }
    }
  }
  return DSV4_STATUS_OK;
}

dsv4_status cpu_paged_build_lists(const dsv4_mod_plan& plan, const dsv4_mod_run& paged_run,
                                  const dsv4_host_services* host, dsv4_mod_run* out_explicit_run,
                                  bool write_lists) {
  const dsv4::paged_geometry g = dsv4::paged_geometry_of(plan);
  const dsv4_mod_lists_map& ws = plan.lists;
  if (paged_run.workspace_bytes < ws.bytes || (ws.bytes > 0 && paged_run.workspace == nullptr)) {
    return paged_fail(host, DSV4_STATUS_WORKSPACE_TOO_SMALL,
                      "paged lists need %llu workspace bytes, got %zu",
                      static_cast<unsigned long long>(ws.bytes), paged_run.workspace_bytes);
  }
  dsv4_status s = cpu_paged_validate(plan, paged_run, host);
  if (s != DSV4_STATUS_OK) return s;

  dsv4_mod_run run = paged_run;
  if (run.seq_q > 1) {
    // Token t = b * S + s becomes row t of a [T, ...] view: only a uniform token stride works.
    for (dsv4_mod_token_view* v : {&run.q, &run.out, &run.lse, &run.max_logits}) {
      if (v->data != nullptr && v->stride_b != run.seq_q * v->stride_s) {
        return paged_fail(host, DSV4_STATUS_UNSUPPORTED,
                          "paged mode needs a uniform token stride in q/out/lse/max_logits");
      }
      v->stride_b = v->stride_s;
    }
  }
  run.seq_q = 1;
  run.mode = DSV4_MODE_EXPLICIT;
  if (!write_lists) {
    run.main_list = dsv4_mod_index_list{};
    run.extra_list = dsv4_mod_index_list{};
    *out_explicit_run = run;
    return DSV4_STATUS_OK;
  }

  uint8_t* base = static_cast<uint8_t*>(paged_run.workspace);
  int32_t* swa_idx = reinterpret_cast<int32_t*>(base + ws.swa_indices);
  int32_t* swa_len = reinterpret_cast<int32_t*>(base + ws.swa_lengths);
  int32_t* cmp_idx = g.cmp_width > 0 ? reinterpret_cast<int32_t*>(base + ws.cmp_indices) : nullptr;
  int32_t* cmp_len = reinterpret_cast<int32_t*>(base + ws.cmp_lengths);
  const dsv4::paged_capacity cap = cpu_paged_capacity(paged_run);
  for (int64_t t = 0; t < run.num_tokens; ++t) {
    dsv4::paged_build_token(g, paged_run.paged, cap, t, swa_idx + t * g.window, 1, &swa_len[t],
                            cmp_idx != nullptr ? cmp_idx + t * g.cmp_width : nullptr, 1,
                            &cmp_len[t]);
  }

  dsv4_mod_index_list main{};
  main.indices = swa_idx;
  main.format = DSV4_INDEX_DENSE;
  main.width = g.window;
  main.stride_b = g.window;
  main.stride_s = 0;
  main.stride_k = 1;
  main.lengths = swa_len;
  main.len_stride_b = 1;
  run.main_list = main;
  dsv4_mod_index_list extra{};
  if (cmp_idx != nullptr) {
    extra.indices = cmp_idx;
    extra.format = DSV4_INDEX_DENSE;
    extra.width = g.cmp_width;
    extra.stride_b = g.cmp_width;
    extra.stride_k = 1;
    extra.lengths = cmp_len;
    extra.len_stride_b = 1;
  }
  run.extra_list = extra;
  run.workspace = ws.bytes > 0 ? base + ws.bytes : paged_run.workspace;
  run.workspace_bytes = paged_run.workspace_bytes - ws.bytes;
  *out_explicit_run = run;
  return DSV4_STATUS_OK;
}
