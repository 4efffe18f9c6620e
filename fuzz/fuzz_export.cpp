// dsv4_export_indices (and now and then a paged dsv4_run) on the CPU backend with fuzzed paged
// plans and batch descriptions, compared with the independent reference builder
// (reference/reference_paged.h). Invariants, for well-formed tensors: the library accepts a batch
// exactly when the reference does and every slot lies inside its cache, and then writes the
// reference's FlashMLA, CSR or FlashInfer lists; for any tensors: a malformed one is rejected, and
// a failing call writes nothing.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dsv4/dsv4_paged.h"
#include "fuzz_support.h"
#include "reference_paged.h"

using namespace dsv4fuzz;

namespace {

constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};
constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};

struct PlanDeleter {
  void operator()(dsv4_plan* p) const { dsv4_plan_destroy(p); }
};

struct Tensors {
  std::vector<std::unique_ptr<FuzzTensor>> all;
  bool mutate_all = false;
  FuzzTensor* add(FuzzedDataProvider& in, TensorSpec spec, Filler& fill) {
    if (mutate_all) mutate(in, spec);
    all.push_back(std::make_unique<FuzzTensor>(spec, fill));
    return all.back().get();
  }
  template <class T>
  FuzzTensor* add_values(FuzzedDataProvider& in, TensorSpec spec, Filler& fill,
                         const std::vector<T>& v) {
    FuzzTensor* t = add(in, spec, fill);
    size_t i = 0;
    if (t->backed() && t->elem_bytes() == sizeof(T))
      t->fill_elements<T>([&] { return i < v.size() ? v[i++] : T(-7); });
    return t;
  }
};

// The int32 elements of a tensor, in order (well-formed tensors only).
std::vector<int32_t> read(const FuzzTensor& t) {
  std::vector<int32_t> v;
  for (size_t off : t.element_offsets()) {
    int32_t x;
    __builtin_memcpy(&x, t.storage().data() + off, 4);
    v.push_back(x);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  Filler fill(in.ConsumeIntegral<uint64_t>());
  dsv4test::RefPagedConfig rc;
  rc.compress_ratio = in.PickValueInArray<int64_t>({1, 4, 128});
  rc.window = in.ConsumeIntegralInRange<int64_t>(1, 200);
  rc.swa_block_size = in.ConsumeIntegralInRange<int64_t>(1, 70);
  rc.cmp_block_size = rc.compress_ratio > 1 ? in.ConsumeIntegralInRange<int64_t>(1, 8) : 1;
  rc.index_topk = in.ConsumeIntegralInRange<int64_t>(1, 48);
  rc.decode_threshold = in.ConsumeIntegralInRange<int64_t>(1, 4);
  rc.max_model_len = in.ConsumeIntegralInRange<int64_t>(1, 40000);
  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.mode = DSV4_MODE_PAGED;
  o.num_heads = 1;
  o.max_tokens = in.ConsumeIntegralInRange<int32_t>(1, 24);
  o.max_requests = in.ConsumeIntegralInRange<int32_t>(1, 6);
  o.max_swa_blocks_per_request = in.ConsumeIntegralInRange<int32_t>(1, 40);
  o.max_cmp_blocks_per_request = in.ConsumeIntegralInRange<int32_t>(1, 40);
  o.swa_cache =
      dsv4_kv_cache_desc{DSV4_KV_LAYOUT_BF16, static_cast<int32_t>(rc.swa_block_size), 0, 1.0f, 0};
  o.compress_ratio = static_cast<int32_t>(rc.compress_ratio);
  o.window = static_cast<int32_t>(rc.window);
  o.index_topk = static_cast<int32_t>(rc.index_topk);
  o.decode_threshold = static_cast<int32_t>(rc.decode_threshold);
  o.max_model_len = rc.max_model_len;
  if (rc.compress_ratio > 1) {
    o.extra_cache = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_BF16, static_cast<int32_t>(rc.cmp_block_size),
                                       0, 1.0f, 0};
    o.compressed_block_tokens = static_cast<int32_t>(rc.compress_ratio * rc.cmp_block_size);
  }
  dsv4_plan* raw = nullptr;
  if (dsv4_plan_create(cpu_ctx(), &o, &raw) != DSV4_STATUS_OK) return 0;
  const std::unique_ptr<dsv4_plan, PlanDeleter> plan(raw);
  const int64_t W = rc.window, CW = dsv4test::ref_cmp_width(rc);
  const bool compressed = rc.compress_ratio > 1;

  // The batch, mostly as an engine would build it; sometimes broken.
  dsv4test::RefPagedBatch rb;
  const int64_t R = in.ConsumeIntegralInRange<int64_t>(0, o.max_requests);
  rb.query_start_loc.push_back(in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t qlen = in.ConsumeIntegralInRange<int32_t>(0, 5);
    const int32_t context = in.ConsumeIntegralInRange<int>(0, 3) == 0
                                ? in.ConsumeIntegralInRange<int32_t>(0, 700)
                                : in.ConsumeIntegralInRange<int32_t>(0, 40);
    rb.query_start_loc.push_back(rb.query_start_loc.back() + qlen);
    rb.seq_lens.push_back(in.ConsumeIntegralInRange<int>(0, 31) == 0 ? qlen - 1 : context + qlen);
  }
  if (R > 0 && in.ConsumeIntegralInRange<int>(0, 31) == 0)
    std::swap(rb.query_start_loc[0], rb.query_start_loc[static_cast<size_t>(R)]);
  rb.num_tokens = std::min<int64_t>(o.max_tokens, std::max<int64_t>(0, rb.query_start_loc.back()) +
                                                      in.ConsumeIntegralInRange<int64_t>(0, 3));
  const int64_t T = rb.num_tokens;
  const int64_t swa_blocks = in.ConsumeIntegralInRange<int64_t>(1, 64);
  const int64_t cmp_blocks = in.ConsumeIntegralInRange<int64_t>(1, 64);
  const auto block_value = [&](int64_t blocks) {
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 0:
        return int32_t{-1};
      case 1:
        return static_cast<int32_t>(blocks + in.ConsumeIntegralInRange<int64_t>(0, 2));
      default:
        return static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, blocks - 1));
    }
  };
  rb.swa_bt_cols = in.ConsumeIntegralInRange<int64_t>(1, o.max_swa_blocks_per_request);
  for (int64_t i = 0; i < R * rb.swa_bt_cols; ++i)
    rb.swa_block_table.push_back(block_value(swa_blocks));
  if (compressed) {
    rb.cmp_bt_cols = in.ConsumeIntegralInRange<int64_t>(1, o.max_cmp_blocks_per_request);
    for (int64_t i = 0; i < R * rb.cmp_bt_cols; ++i)
      rb.cmp_block_table.push_back(block_value(cmp_blocks));
  }
  for (int64_t t = 0; t < T; ++t)
    rb.slot_mapping.push_back(in.ConsumeIntegralInRange<int>(0, 7) == 0 ? -1
                                                                        : static_cast<int32_t>(t));
  if (rc.compress_ratio == 4) {
    // Per token: a prefix of request-local entries below a guess of the visible count, then -1.
    for (int64_t t = 0; t < T; ++t) {
      const int64_t valid = in.ConsumeIntegralInRange<int64_t>(0, rc.index_topk);
      for (int64_t i = 0; i < rc.index_topk; ++i)
        rb.topk_indices.push_back(i < valid
                                      ? in.ConsumeIntegralInRange<int32_t>(
                                            in.ConsumeIntegralInRange<int>(0, 31) == 0 ? -5 : 0,
                                            in.ConsumeIntegralInRange<int32_t>(0, 200))
                                      : -1);
    }
  }

  // Tensors: all well-formed (the differential check applies), or any of them malformed.
  Tensors ts;
  ts.mutate_all = in.ConsumeIntegralInRange<int>(0, 5) == 0;
  const int64_t swa_stride = rc.swa_block_size * 1024, cmp_stride = rc.cmp_block_size * 1024;
  FuzzTensor* qsl = ts.add_values(in, compact(kI32, {R + 1}), fill, rb.query_start_loc);
  FuzzTensor* seq = ts.add_values(in, compact(kI32, {R}), fill, rb.seq_lens);
  FuzzTensor* swa_bt =
      ts.add_values(in, compact(kI32, {R, rb.swa_bt_cols}), fill, rb.swa_block_table);
  FuzzTensor* cmp_bt =
      compressed ? ts.add_values(in, compact(kI32, {R, rb.cmp_bt_cols}), fill, rb.cmp_block_table)
                 : nullptr;
  FuzzTensor* slots = ts.add_values(in, compact(kI32, {T}), fill, rb.slot_mapping);
  FuzzTensor* topk = rc.compress_ratio == 4 ? ts.add_values(in, compact(kI32, {T, rc.index_topk}),
                                                            fill, rb.topk_indices)
                                            : nullptr;
  FuzzTensor* swa_cache = ts.add(in, compact(kU8, {swa_blocks, swa_stride}), fill);
  FuzzTensor* cmp_cache =
      compressed ? ts.add(in, compact(kU8, {cmp_blocks, cmp_stride}), fill) : nullptr;
  dsv4_run_args batch;
  dsv4_run_args_init(&batch);
  batch.query_start_loc = qsl->get();
  batch.seq_lens = seq->get();
  batch.swa_block_table = swa_bt->get();
  batch.cmp_block_table = cmp_bt ? cmp_bt->get() : nullptr;
  batch.slot_mapping = slots->get();
  batch.topk_indices = topk ? topk->get() : nullptr;
  batch.swa_cache = swa_cache->get();
  batch.extra_cache = cmp_cache ? cmp_cache->get() : nullptr;
  const size_t inputs = ts.all.size();

  dsv4_export_args e;
  dsv4_export_args_init(&e);
  e.format = in.PickValueInArray<uint32_t>(
      {DSV4_EXPORT_FLASHMLA, DSV4_EXPORT_CSR, DSV4_EXPORT_FLASHINFER});
  e.batch = &batch;
  const int64_t slack = in.ConsumeIntegralInRange<int64_t>(0, 2);
  const bool want_cmp = compressed && in.ConsumeBool();
  FuzzTensor *swa_idx = nullptr, *swa_len = nullptr, *swa_ptr = nullptr, *cmp_idx = nullptr,
             *cmp_len = nullptr, *cmp_ptr = nullptr, *comb = nullptr, *comb_len = nullptr;
  const int64_t PT = (CW + 3) / 4 * 4;
  if (e.format == DSV4_EXPORT_FLASHMLA) {
    swa_idx = ts.add(in, compact(kI32, {T, W + slack}), fill);
    swa_len = ts.add(in, compact(kI32, {T}), fill);
    if (want_cmp) {
      cmp_idx = ts.add(in, compact(kI32, {T, CW + slack}), fill);
      cmp_len = ts.add(in, compact(kI32, {T}), fill);
    }
  } else if (e.format == DSV4_EXPORT_CSR) {
    swa_ptr = ts.add(in, compact(kI32, {T + 1}), fill);
    swa_idx = ts.add(in, compact(kI32, {T * W + slack}), fill);
    if (in.ConsumeBool()) swa_len = ts.add(in, compact(kI32, {T}), fill);
    if (want_cmp) {
      cmp_ptr = ts.add(in, compact(kI32, {T + 1}), fill);
      cmp_idx = ts.add(in, compact(kI32, {T * CW + slack}), fill);
      if (in.ConsumeBool()) cmp_len = ts.add(in, compact(kI32, {T}), fill);
    }
  } else {
    comb = ts.add(in, compact(kI32, {T, W + PT + slack}), fill);
    comb_len = ts.add(in, compact(kI32, {T}), fill);
  }
  e.swa_indices = swa_idx ? swa_idx->get() : nullptr;
  e.swa_lengths = swa_len ? swa_len->get() : nullptr;
  e.swa_indptr = swa_ptr ? swa_ptr->get() : nullptr;
  e.cmp_indices = cmp_idx ? cmp_idx->get() : nullptr;
  e.cmp_lengths = cmp_len ? cmp_len->get() : nullptr;
  e.cmp_indptr = cmp_ptr ? cmp_ptr->get() : nullptr;
  e.combined_indices = comb ? comb->get() : nullptr;
  e.combined_lengths = comb_len ? comb_len->get() : nullptr;
  bool malformed = false;
  for (const auto& t : ts.all) {
    if (t->too_big()) return 0;
    malformed = malformed || t->must_reject();
  }

  // The reference's verdict: a well-formed batch it builds, whose slots all lie in the caches.
  bool ref_ok = !ts.mutate_all;
  dsv4test::RefPagedLists lists;
  std::string ref_why;
  if (ref_ok) {
    try {
      lists = dsv4test::ref_build_paged_lists(rc, rb);
    } catch (const std::invalid_argument& x) {
      ref_ok = false;
      ref_why = x.what();
    }
  }
  if (ref_ok) {
    for (int64_t t = 0; t < T && ref_ok; ++t) {
      for (int32_t s : lists.swa[static_cast<size_t>(t)].idx)
        ref_ok = ref_ok && s < swa_blocks * rc.swa_block_size;
      for (int32_t s : lists.cmp[static_cast<size_t>(t)].idx)
        ref_ok = ref_ok && s < cmp_blocks * rc.cmp_block_size;
    }
    if (!ref_ok) ref_why = "a slot beyond its cache";
  }

  std::vector<std::vector<uint8_t>> before;
  for (const auto& t : ts.all) before.push_back(t->storage());
  const dsv4_status st = dsv4_export_indices(plan.get(), &e);
  const std::string why = last_error(st);
  if (debug())
    std::fprintf(stderr, "format %u: %s; reference: %s\n%s\n", e.format, why.c_str(),
                 ref_ok ? "ok" : ref_why.c_str(), dsv4test::ref_describe_batch(rb).c_str());
  FUZZ_CHECK(!(malformed && st == DSV4_STATUS_OK), "a malformed tensor was accepted");
  for (size_t i = 0; i < ts.all.size(); ++i)
    if (i < inputs || st != DSV4_STATUS_OK)
      FUZZ_CHECK(
          ts.all[i]->storage() == before[i],
          std::string(i < inputs ? "export wrote an input" : "a failing export wrote an output") +
              " (" + why + ")");
  if (!ts.mutate_all) {
    FUZZ_CHECK((st == DSV4_STATUS_OK) == ref_ok, "library (" + why + ") and reference (" +
                                                     (ref_ok ? "ok" : ref_why) + ") disagree on " +
                                                     dsv4test::ref_describe_batch(rb));
  }
  if (st == DSV4_STATUS_OK && ref_ok) {
    const auto expect_rows = [&](FuzzTensor* idx, FuzzTensor* len, const dsv4test::RefDense& d,
                                 int64_t cols, const char* what) {
      const std::vector<int32_t> got = read(*idx);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < cols; ++j)
          FUZZ_CHECK(got[static_cast<size_t>(t * cols + j)] ==
                         (j < d.width ? d.indices[static_cast<size_t>(t * d.width + j)] : -1),
                     std::string(what) + " differs from the reference at token " +
                         std::to_string(t) + " column " + std::to_string(j));
      if (len != nullptr) FUZZ_CHECK(read(*len) == d.lens, std::string(what) + " lengths differ");
    };
    const auto expect_csr = [&](FuzzTensor* ptr, FuzzTensor* idx, FuzzTensor* len,
                                const std::vector<dsv4test::RefList>& l, const char* what) {
      const dsv4test::RefCsr c = dsv4test::ref_to_csr(l);
      FUZZ_CHECK(read(*ptr) == c.indptr, std::string(what) + " indptr differs");
      const std::vector<int32_t> got = read(*idx);
      FUZZ_CHECK(std::equal(c.indices.begin(), c.indices.end(), got.begin()),
                 std::string(what) + " indices differ");
      if (len != nullptr)
        FUZZ_CHECK(read(*len) == dsv4test::ref_to_dense(l, 0).lens,
                   std::string(what) + " lengths differ");
    };
    if (e.format == DSV4_EXPORT_FLASHMLA) {
      expect_rows(swa_idx, swa_len, dsv4test::ref_to_dense(lists.swa, W), W + slack,
                  "FlashMLA SWA");
      if (cmp_idx)
        expect_rows(cmp_idx, cmp_len, dsv4test::ref_to_dense(lists.cmp, CW), CW + slack,
                    "FlashMLA compressed");
    } else if (e.format == DSV4_EXPORT_CSR) {
      expect_csr(swa_ptr, swa_idx, swa_len, lists.swa, "CSR SWA");
      if (cmp_idx) expect_csr(cmp_ptr, cmp_idx, cmp_len, lists.cmp, "CSR compressed");
    } else {
      expect_rows(comb, comb_len, dsv4test::ref_flashinfer_matrix(rc, rb, lists), W + PT + slack,
                  "FlashInfer");
    }
  }

  // Now and then the paged run itself: it accepts the batch exactly when the export did (a run of
  // no tokens computes nothing and reads no batch value).
  if (!ts.mutate_all && T > 0 && in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    Tensors run_ts;
    FuzzTensor* q = run_ts.add(in, compact(kBf16, {T, 1, 512}), fill);
    FuzzTensor* out = run_ts.add(in, compact(kBf16, {T, 1, 512}), fill);
    size_t ws = 0;
    dsv4_plan_get_workspace_size(plan.get(), &ws);
    std::vector<uint8_t> workspace(ws);
    dsv4_run_args a = batch;
    a.q = q->get();
    a.out = out->get();
    a.workspace = ws > 0 ? workspace.data() : nullptr;
    a.workspace_bytes = ws;
    const std::vector<uint8_t> out_before = out->storage();
    const dsv4_status rs = dsv4_run(plan.get(), &a);
    FUZZ_CHECK((rs == DSV4_STATUS_OK) == (st == DSV4_STATUS_OK),
               "dsv4_run (" + last_error(rs) + ") and dsv4_export_indices (" + why + ") disagree");
    if (rs != DSV4_STATUS_OK) FUZZ_CHECK(out->storage() == out_before, "a failing run wrote out");
  }
  return 0;
}
