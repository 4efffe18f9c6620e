// A C face of the float64 reference (reference/) and its tolerance rule for the Python tests
// (loaded with ctypes by tests/reference.py). Test-only: built with the tests, never installed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "compare_rule.h"
#include "reference.h"
#include "reference_paged.h"

namespace {

struct pyref_cache {
  const uint8_t* base;  // host bytes of block 0
  uint32_t layout;
  int64_t block_size;
  int64_t block_stride_bytes;
  int64_t num_blocks;
  double kv_scale;
};

struct pyref_list {  // dense [T, width] int32 + optional lengths [T]
  const int32_t* indices;
  int64_t width;
  const int32_t* lengths;  // NULL: no cap
};

struct pyref_paged_config {
  int64_t compress_ratio, window, swa_block_size, cmp_block_size, index_topk, decode_threshold,
      max_model_len;
};

struct pyref_paged_batch {
  int64_t num_tokens, num_requests;
  const int32_t* query_start_loc;  // [R + 1]
  const int32_t* seq_lens;         // [R]
  const int32_t* swa_block_table;  // [R, swa_bt_cols]
  int64_t swa_bt_cols;
  const int32_t* cmp_block_table;  // [R, cmp_bt_cols] or NULL
  int64_t cmp_bt_cols;
  const int32_t* slot_mapping;  // [T]
  const int32_t* topk_indices;  // [T, index_topk] or NULL
};

struct pyref_compare_result {
  int32_t passed;
  int64_t elements, failures, first_failure;
  double first_got, first_want, max_abs_err, max_rel_err, cos_diff;
};

dsv4test::RefCache to_ref(const pyref_cache* c) {
  dsv4test::RefCache r;
  if (c == nullptr) return r;
  r.base = c->base;
  r.layout = c->layout;
  r.block_size = c->block_size;
  r.block_stride_bytes = c->block_stride_bytes;
  r.num_blocks = c->num_blocks;
  r.kv_scale = c->kv_scale;
  return r;
}

std::vector<dsv4test::RefList> to_lists(const pyref_list* l, int64_t tokens) {
  std::vector<dsv4test::RefList> lists;
  if (l == nullptr) return lists;
  lists.resize(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    lists[t].idx.assign(l->indices + t * l->width, l->indices + (t + 1) * l->width);
    lists[t].length = l->lengths != nullptr ? l->lengths[t] : -1;
  }
  return lists;
}

// Runs `body`, turning an exception into status 1 and its message.
template <typename Body>
int guarded(char* error, size_t error_size, Body body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

}  // namespace

extern "C" {

// Tolerances of spec 2.4: 0 decode out, 1 decode lse, 2 prefill out, 3 prefill lse.
__attribute__((visibility("default"))) int dsv4_pyref_tolerance(int32_t which, double* abs_tol,
                                                                double* rel_tol, double* cos_tol) {
  static const dsv4test::Tolerance table[] = {dsv4test::kDecodeOutTol, dsv4test::kDecodeLseTol,
                                              dsv4test::kPrefillOutTol, dsv4test::kPrefillLseTol};
  if (which < 0 || which > 3) return 1;
  *abs_tol = table[which].abs_tol;
  *rel_tol = table[which].rel_tol;
  *cos_tol = table[which].cos_tol;
  return 0;
}

// reference_attention over dense lists: out [T, H, 512], lse / max_logits [T, H].
__attribute__((visibility("default"))) int dsv4_pyref_attention(
    int64_t tokens, int64_t heads, int64_t head_dim_qk, const double* q, double scale,
    const double* sink, const pyref_cache* main, const pyref_cache* extra,
    const pyref_list* main_list, const pyref_list* extra_list, double* out, double* lse,
    double* max_logits, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    dsv4test::RefProblem p;
    p.num_tokens = tokens;
    p.num_heads = heads;
    p.head_dim_qk = head_dim_qk;
    p.q.assign(q, q + tokens * heads * head_dim_qk);
    p.scale = scale;
    if (sink != nullptr) p.sink.assign(sink, sink + heads);
    p.main = to_ref(main);
    p.extra = to_ref(extra);
    p.main_lists = to_lists(main_list, tokens);
    p.extra_lists = to_lists(extra_list, tokens);
    const dsv4test::RefResult r = dsv4test::reference_attention(p);
    std::copy(r.out.begin(), r.out.end(), out);
    std::copy(r.lse.begin(), r.lse.end(), lse);
    std::copy(r.max_logits.begin(), r.max_logits.end(), max_logits);
  });
}

// The compressed list width of a paged configuration (0, K or Wc).
__attribute__((visibility("default"))) int64_t dsv4_pyref_cmp_width(const pyref_paged_config* c) {
  dsv4test::RefPagedConfig rc;
  rc.compress_ratio = c->compress_ratio;
  rc.index_topk = c->index_topk;
  rc.max_model_len = c->max_model_len;
  return dsv4test::ref_cmp_width(rc);
}

// Every token's paged-mode lists (spec 4): swa [T, window] + lengths, cmp [T, cmp width] +
// lengths (cmp outputs may be NULL for SWA-only layers).
__attribute__((visibility("default"))) int dsv4_pyref_paged_lists(
    const pyref_paged_config* c, const pyref_paged_batch* b, int32_t* swa_indices,
    int32_t* swa_lengths, int32_t* cmp_indices, int32_t* cmp_lengths, char* error,
    size_t error_size) {
  return guarded(error, error_size, [&] {
    dsv4test::RefPagedConfig rc;
    rc.compress_ratio = c->compress_ratio;
    rc.window = c->window;
    rc.swa_block_size = c->swa_block_size;
    rc.cmp_block_size = c->cmp_block_size;
    rc.index_topk = c->index_topk;
    rc.decode_threshold = c->decode_threshold;
    rc.max_model_len = c->max_model_len;
    dsv4test::RefPagedBatch rb;
    const int64_t T = b->num_tokens, R = b->num_requests;
    rb.num_tokens = T;
    rb.query_start_loc.assign(b->query_start_loc, b->query_start_loc + R + 1);
    rb.seq_lens.assign(b->seq_lens, b->seq_lens + R);
    rb.swa_block_table.assign(b->swa_block_table, b->swa_block_table + R * b->swa_bt_cols);
    rb.swa_bt_cols = b->swa_bt_cols;
    if (b->cmp_block_table != nullptr) {
      rb.cmp_block_table.assign(b->cmp_block_table, b->cmp_block_table + R * b->cmp_bt_cols);
      rb.cmp_bt_cols = b->cmp_bt_cols;
    }
    rb.slot_mapping.assign(b->slot_mapping, b->slot_mapping + T);
    if (b->topk_indices != nullptr)
      rb.topk_indices.assign(b->topk_indices, b->topk_indices + T * c->index_topk);
    const dsv4test::RefPagedLists lists = dsv4test::ref_build_paged_lists(rc, rb);
    for (int64_t t = 0; t < T; ++t) {
      std::copy(lists.swa[t].idx.begin(), lists.swa[t].idx.end(),
                swa_indices + t * lists.swa_width);
      swa_lengths[t] = static_cast<int32_t>(lists.swa[t].length);
      if (cmp_indices != nullptr && lists.cmp_width > 0) {
        std::copy(lists.cmp[t].idx.begin(), lists.cmp[t].idx.end(),
                  cmp_indices + t * lists.cmp_width);
        cmp_lengths[t] = static_cast<int32_t>(lists.cmp[t].length);
      }
    }
  });
}

// FlashMLA's comparison rule (spec 2.4) over n elements.
__attribute__((visibility("default"))) void dsv4_pyref_compare(const double* got,
                                                               const double* want, int64_t n,
                                                               double abs_tol, double rel_tol,
                                                               double cos_tol,
                                                               pyref_compare_result* result) {
  const dsv4test::Tolerance tol{abs_tol, rel_tol, cos_tol};
  dsv4test::CompareAccumulator acc;
  for (int64_t i = 0; i < n; ++i) acc.add(got[i], want[i], tol);
  const dsv4test::CompareResult r = acc.result(tol);
  *result =
      pyref_compare_result{r.passed,     r.elements,    r.failures,    r.first_failure, r.first_got,
                           r.first_want, r.max_abs_err, r.max_rel_err, r.cos_diff};
}

}  // extern "C"
