// Paged mode (spec section 4) through the public API only: index lists exported by
// dsv4_export_indices against hand-checked values and against the independent builder of
// reference/reference_paged; paged dsv4_run against explicit dsv4_run fed the reference lists
// (bit-exact on the CPU backend) and against the float64 reference; malformed batches rejected
// with a message and nothing written.
//
// Environment: DSV4_TEST_DEVICE (cpu|cuda), DSV4_TEST_SEED (reproduce a run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"
#include "reference.h"
#include "reference_paged.h"
#include "test_device.h"
#include "test_env.h"
#include "test_util.h"

namespace dsv4test {
namespace {

constexpr int64_t kDv = 512;

CtxPtr make_ctx() {
  std::string error;
  CtxPtr ctx = make_test_ctx(g_device, 0, &error);
  EXPECT_TRUE(ctx) << error;
  return ctx;
}

// ----------------------------------------------------------------------------------------------
// A layer configuration and one step's batch
// ----------------------------------------------------------------------------------------------
struct Layer {
  RefPagedConfig cfg;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int64_t heads = 8;
  float kv_scale[2] = {1.0f, 1.0f};  // per-tensor FP8: the SWA / compressed cache's
  int64_t d_qk() const { return layout == DSV4_KV_LAYOUT_FP8_V32_656B ? 576 : 512; }
  bool compressed() const { return cfg.compress_ratio > 1; }
  bool c4a() const { return cfg.compress_ratio == 4; }
};

struct Step {
  RefPagedBatch batch;
  int64_t swa_num_blocks = 1;
  int64_t cmp_num_blocks = 1;
};

std::string describe(const Layer& l, const Step& s) {
  std::ostringstream os;
  os << seed_note() << "; ratio " << l.cfg.compress_ratio << " W " << l.cfg.window << " Bs "
     << l.cfg.swa_block_size << " Bc " << l.cfg.cmp_block_size << " K " << l.cfg.index_topk << " L "
     << l.cfg.max_model_len << " thr " << l.cfg.decode_threshold << " layout " << l.layout << " H "
     << l.heads << "; " << ref_describe_batch(s.batch);
  return os.str();
}

dsv4_plan_options plan_options(const Layer& l, const Step& s, uint32_t mode) {
  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.mode = mode;
  o.num_heads = static_cast<int32_t>(l.heads);
  o.head_dim_qk = static_cast<int32_t>(l.d_qk());
  o.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, s.batch.num_tokens));
  o.swa_cache.layout = l.layout;
  o.swa_cache.block_size = static_cast<int32_t>(l.cfg.swa_block_size);
  o.swa_cache.block_stride_bytes = 0;
  o.swa_cache.kv_scale = l.kv_scale[0];
  if (l.compressed()) {
    o.extra_cache.layout = l.layout;
    o.extra_cache.block_size = static_cast<int32_t>(l.cfg.cmp_block_size);
    o.extra_cache.block_stride_bytes = 0;
    o.extra_cache.kv_scale = l.kv_scale[1];
  } else {
    o.extra_cache.layout = DSV4_KV_LAYOUT_NONE;
  }
  if (mode == DSV4_MODE_PAGED) {
    o.compress_ratio = static_cast<int32_t>(l.cfg.compress_ratio);
    o.window = static_cast<int32_t>(l.cfg.window);
    o.index_topk = static_cast<int32_t>(l.cfg.index_topk);
    o.decode_threshold = static_cast<int32_t>(l.cfg.decode_threshold);
    o.max_model_len = l.cfg.max_model_len;
    o.max_requests = static_cast<int32_t>(std::max<size_t>(1, s.batch.seq_lens.size()));
    o.max_swa_blocks_per_request = static_cast<int32_t>(std::max<int64_t>(1, s.batch.swa_bt_cols));
    o.max_cmp_blocks_per_request = static_cast<int32_t>(std::max<int64_t>(1, s.batch.cmp_bt_cols));
    o.compressed_block_tokens =
        static_cast<int32_t>(l.compressed() ? l.cfg.compress_ratio * l.cfg.cmp_block_size : 256);
  } else {
    o.index_format = DSV4_INDEX_DENSE;
    o.topk = static_cast<int32_t>(l.cfg.window);
    o.extra_topk = static_cast<int32_t>(ref_cmp_width(l.cfg));
  }
  return o;
}

int64_t block_bytes(uint32_t layout, int64_t block_size) {
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  EXPECT_EQ(dsv4_kv_layout_get_info(layout, static_cast<int32_t>(block_size), &info),
            DSV4_STATUS_OK);
  return info.min_block_stride_bytes;
}

// The batch's device tensors.
struct DeviceBatch {
  DeviceBuffer qsl, seq, swa_bt, cmp_bt, slots, topk, swa_cache, cmp_cache;
  TensorView qsl_t, seq_t, swa_bt_t, cmp_bt_t, slots_t, topk_t, swa_cache_t, cmp_cache_t;
  std::vector<uint8_t> swa_host, cmp_host;  // cache bytes after writing (for the reference)

  void upload(const Layer& l, const Step& s) {
    const RefPagedBatch& b = s.batch;
    const dsv4_device dev = g_device->device();
    const int64_t R = static_cast<int64_t>(b.seq_lens.size());
    qsl = to_device(g_device, b.query_start_loc);
    seq = to_device(g_device, b.seq_lens);
    swa_bt = to_device(g_device, b.swa_block_table);
    slots = to_device(g_device, b.slot_mapping);
    qsl_t = TensorView(qsl.get(), dev, kI32, {R + 1});
    seq_t = TensorView(seq.get(), dev, kI32, {R});
    swa_bt_t = TensorView(swa_bt.get(), dev, kI32, {R, b.swa_bt_cols});
    slots_t = TensorView(slots.get(), dev, kI32, {b.num_tokens});
    const int64_t swa_bytes = block_bytes(l.layout, l.cfg.swa_block_size);
    swa_cache = DeviceBuffer(g_device, static_cast<size_t>(s.swa_num_blocks * swa_bytes));
    swa_cache.fill(0xFF);  // unreferenced rows are NaN / garbage
    swa_cache_t = TensorView(swa_cache.get(), dev, kU8, {s.swa_num_blocks, swa_bytes});
    if (l.compressed()) {
      cmp_bt = to_device(g_device, b.cmp_block_table);
      cmp_bt_t = TensorView(cmp_bt.get(), dev, kI32, {R, b.cmp_bt_cols});
      const int64_t cmp_bytes = block_bytes(l.layout, l.cfg.cmp_block_size);
      cmp_cache = DeviceBuffer(g_device, static_cast<size_t>(s.cmp_num_blocks * cmp_bytes));
      cmp_cache.fill(0xFF);
      cmp_cache_t = TensorView(cmp_cache.get(), dev, kU8, {s.cmp_num_blocks, cmp_bytes});
    }
    if (l.c4a()) {
      topk = to_device(g_device, b.topk_indices);
      topk_t = TensorView(topk.get(), dev, kI32, {b.num_tokens, l.cfg.index_topk});
    }
  }

  // Fills the paged fields (and caches) of `a`.
  void fill(const Layer& l, dsv4_run_args* a) {
    a->query_start_loc = qsl_t.get();
    a->seq_lens = seq_t.get();
    a->swa_block_table = swa_bt_t.get();
    a->slot_mapping = slots_t.get();
    a->swa_cache = swa_cache_t.get();
    if (l.compressed()) {
      a->cmp_block_table = cmp_bt_t.get();
      a->extra_cache = cmp_cache_t.get();
    }
    if (l.c4a()) a->topk_indices = topk_t.get();
  }
};

// ----------------------------------------------------------------------------------------------
// Export through the public API
// ----------------------------------------------------------------------------------------------
struct Exported {
  std::vector<int32_t> swa_idx, swa_len, cmp_idx, cmp_len;          // FLASHMLA (rows of the width)
  std::vector<int32_t> swa_indptr, swa_flat, cmp_indptr, cmp_flat;  // CSR
  std::vector<int32_t> comb_idx, comb_len;                          // FLASHINFER
  int64_t swa_cols = 0, cmp_cols = 0, comb_cols = 0;
};

constexpr int32_t kPoison = 0x5A5A5A5A;

// Runs dsv4_export_indices in `format`; extra_cols adds columns past the list widths (must come
// back -1). Returns the status; outputs are downloaded either way (to check "untouched").
dsv4_status export_lists(dsv4_plan* plan, const Layer& l, DeviceBatch& db, int64_t T,
                         uint32_t format, int64_t extra_cols, Exported* e) {
  const dsv4_device dev = g_device->device();
  const int64_t W = l.cfg.window;
  const int64_t width = ref_cmp_width(l.cfg);
  dsv4_run_args batch;
  dsv4_run_args_init(&batch);
  db.fill(l, &batch);
  dsv4_export_args a;
  dsv4_export_args_init(&a);
  a.format = format;
  a.batch = &batch;
  a.stream = g_device->stream();
  auto poisoned = [](size_t n) { return std::vector<int32_t>(std::max<size_t>(n, 1), kPoison); };
  DeviceBuffer b1, b2, b3, b4, b5, b6;
  TensorView t1, t2, t3, t4, t5, t6;
  const size_t Tn = static_cast<size_t>(T);
  if (format == DSV4_EXPORT_FLASHINFER) {
    e->comb_cols = W + (width + 3) / 4 * 4 + extra_cols;
    b1 = to_device(g_device, poisoned(Tn * e->comb_cols));
    b2 = to_device(g_device, poisoned(Tn));
    t1 = TensorView(b1.get(), dev, kI32, {T, e->comb_cols});
    t2 = TensorView(b2.get(), dev, kI32, {T});
    a.combined_indices = t1.get();
    a.combined_lengths = t2.get();
  } else if (format == DSV4_EXPORT_FLASHMLA) {
    e->swa_cols = W + extra_cols;
    b1 = to_device(g_device, poisoned(Tn * e->swa_cols));
    b2 = to_device(g_device, poisoned(Tn));
    t1 = TensorView(b1.get(), dev, kI32, {T, e->swa_cols});
    t2 = TensorView(b2.get(), dev, kI32, {T});
    a.swa_indices = t1.get();
    a.swa_lengths = t2.get();
    if (width > 0) {
      e->cmp_cols = width + extra_cols;
      b3 = to_device(g_device, poisoned(Tn * e->cmp_cols));
      b4 = to_device(g_device, poisoned(Tn));
      t3 = TensorView(b3.get(), dev, kI32, {T, e->cmp_cols});
      t4 = TensorView(b4.get(), dev, kI32, {T});
      a.cmp_indices = t3.get();
      a.cmp_lengths = t4.get();
    }
  } else {
    b1 = to_device(g_device, poisoned(Tn + 1));
    b2 = to_device(g_device, poisoned(Tn * W));
    b5 = to_device(g_device, poisoned(Tn));
    t1 = TensorView(b1.get(), dev, kI32, {T + 1});
    t2 = TensorView(b2.get(), dev, kI32, {T * W});
    t5 = TensorView(b5.get(), dev, kI32, {T});
    a.swa_indptr = t1.get();
    a.swa_indices = t2.get();
    a.swa_lengths = t5.get();
    if (width > 0) {
      b3 = to_device(g_device, poisoned(Tn + 1));
      b4 = to_device(g_device, poisoned(Tn * width));
      b6 = to_device(g_device, poisoned(Tn));
      t3 = TensorView(b3.get(), dev, kI32, {T + 1});
      t4 = TensorView(b4.get(), dev, kI32, {T * width});
      t6 = TensorView(b6.get(), dev, kI32, {T});
      a.cmp_indptr = t3.get();
      a.cmp_indices = t4.get();
      a.cmp_lengths = t6.get();
    }
  }
  const dsv4_status st = dsv4_export_indices(plan, &a);
  g_device->synchronize();
  if (format == DSV4_EXPORT_FLASHINFER) {
    e->comb_idx = b1.download<int32_t>();
    e->comb_len = b2.download<int32_t>();
  } else if (format == DSV4_EXPORT_FLASHMLA) {
    e->swa_idx = b1.download<int32_t>();
    e->swa_len = b2.download<int32_t>();
    if (width > 0) {
      e->cmp_idx = b3.download<int32_t>();
      e->cmp_len = b4.download<int32_t>();
    }
  } else {
    e->swa_indptr = b1.download<int32_t>();
    e->swa_flat = b2.download<int32_t>();
    e->swa_len = b5.download<int32_t>();
    if (width > 0) {
      e->cmp_indptr = b3.download<int32_t>();
      e->cmp_flat = b4.download<int32_t>();
      e->cmp_len = b6.download<int32_t>();
    }
  }
  return st;
}

// Dense exported rows (cols wide, of which the first `width` belong to the list) vs reference.
::testing::AssertionResult same_dense(const std::vector<int32_t>& got_idx,
                                      const std::vector<int32_t>& got_len, int64_t cols,
                                      const RefDense& want, const char* what) {
  const int64_t T = static_cast<int64_t>(want.lens.size());
  for (int64_t t = 0; t < T; ++t) {
    if (got_len[t] != want.lens[t])
      return ::testing::AssertionFailure()
             << what << ": token " << t << " length " << got_len[t] << " != " << want.lens[t];
    for (int64_t c = 0; c < cols; ++c) {
      const int32_t w = c < want.width ? want.indices[t * want.width + c] : -1;
      const int32_t g = got_idx[t * cols + c];
      if (g != w)
        return ::testing::AssertionFailure()
               << what << ": token " << t << " column " << c << " = " << g << " != " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_csr(const std::vector<int32_t>& indptr,
                                    const std::vector<int32_t>& flat,
                                    const std::vector<int32_t>& lens, const RefCsr& want,
                                    const std::vector<RefList>& lists, const char* what) {
  const size_t T = lists.size();
  for (size_t t = 0; t <= T; ++t) {
    if (indptr[t] != want.indptr[t])
      return ::testing::AssertionFailure()
             << what << ": indptr[" << t << "] = " << indptr[t] << " != " << want.indptr[t];
  }
  for (size_t t = 0; t < T; ++t) {
    if (lens[t] != lists[t].length)
      return ::testing::AssertionFailure()
             << what << ": length[" << t << "] = " << lens[t] << " != " << lists[t].length;
  }
  for (size_t i = 0; i < want.indices.size(); ++i) {
    if (flat[i] != want.indices[i])
      return ::testing::AssertionFailure()
             << what << ": flat[" << i << "] = " << flat[i] << " != " << want.indices[i];
  }
  return ::testing::AssertionSuccess();
}

// Every format through dsv4_export_indices against reference_paged.
void check_exports(dsv4_plan* plan, const Layer& l, const Step& s, DeviceBatch& db,
                   const RefPagedLists& ref) {
  const int64_t T = s.batch.num_tokens;
  const int64_t width = ref_cmp_width(l.cfg);
  Exported e;
  ASSERT_EQ(export_lists(plan, l, db, T, DSV4_EXPORT_FLASHMLA, 3, &e), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_TRUE(same_dense(e.swa_idx, e.swa_len, e.swa_cols, ref_to_dense(ref.swa, l.cfg.window),
                         "FlashMLA SWA"));
  if (width > 0) {
    EXPECT_TRUE(same_dense(e.cmp_idx, e.cmp_len, e.cmp_cols, ref_to_dense(ref.cmp, width),
                           "FlashMLA compressed"));
  }
  Exported c;
  ASSERT_EQ(export_lists(plan, l, db, T, DSV4_EXPORT_CSR, 0, &c), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_TRUE(
      same_csr(c.swa_indptr, c.swa_flat, c.swa_len, ref_to_csr(ref.swa), ref.swa, "CSR SWA"));
  if (width > 0) {
    EXPECT_TRUE(same_csr(c.cmp_indptr, c.cmp_flat, c.cmp_len, ref_to_csr(ref.cmp), ref.cmp,
                         "CSR compressed"));
  }
  Exported f;
  ASSERT_EQ(export_lists(plan, l, db, T, DSV4_EXPORT_FLASHINFER, 4, &f), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_TRUE(same_dense(f.comb_idx, f.comb_len, f.comb_cols,
                         ref_flashinfer_matrix(l.cfg, s.batch, ref), "FlashInfer combined"));
}

// ----------------------------------------------------------------------------------------------
// Batch generation
// ----------------------------------------------------------------------------------------------
struct RequestSpec {
  int64_t context;  // tokens before this step's chunk
  int64_t qlen;
};

// Builds block tables (real blocks only for columns a valid token needs; junk elsewhere),
// slot_mapping and C4A top-k for the given requests, `pad` padding rows at the end and the given
// in-request padding tokens.
Step make_step(Rng& rng, const Layer& l, const std::vector<RequestSpec>& reqs, int64_t pad,
               double in_request_pad_rate) {
  const RefPagedConfig& c = l.cfg;
  Step s;
  RefPagedBatch& b = s.batch;
  const int64_t R = static_cast<int64_t>(reqs.size());
  b.query_start_loc.push_back(0);
  for (const RequestSpec& r : reqs) {
    b.seq_lens.push_back(static_cast<int32_t>(r.context + r.qlen));
    b.query_start_loc.push_back(static_cast<int32_t>(b.query_start_loc.back() + r.qlen));
  }
  const int64_t real_tokens = b.query_start_loc.back();
  b.num_tokens = real_tokens + pad;
  b.slot_mapping.assign(b.num_tokens, -1);
  std::vector<bool> padding(b.num_tokens, true);
  for (int64_t t = 0; t < real_tokens; ++t)
    padding[t] = std::uniform_real_distribution<double>(0, 1)(rng.gen()) < in_request_pad_rate;

  // Columns needed per request (SWA: windows of valid tokens; compressed: visible entries).
  int64_t swa_cols = 1, cmp_cols = 1;
  std::vector<int64_t> swa_first(R, 0), swa_last(R, -1), cmp_count(R, 0);
  const int64_t width = ref_cmp_width(c);
  for (int64_t r = 0; r < R; ++r) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1, vis = 0;
    for (int64_t i = 0; i < reqs[r].qlen; ++i) {
      if (padding[b.query_start_loc[r] + i]) continue;
      const int64_t p = reqs[r].context + i;
      lo = std::min(lo, std::max<int64_t>(0, p - c.window + 1));
      hi = std::max(hi, p);
      if (c.compress_ratio > 1) vis = std::max(vis, (p + 1) / c.compress_ratio);
    }
    if (c.compress_ratio == 128) vis = std::min(vis, width);
    if (hi >= 0) {
      swa_first[r] = lo / c.swa_block_size;
      swa_last[r] = hi / c.swa_block_size;
    }
    cmp_count[r] = (vis + c.cmp_block_size - 1) / c.cmp_block_size;
    swa_cols = std::max(swa_cols,
                        (reqs[r].context + reqs[r].qlen + c.swa_block_size - 1) / c.swa_block_size +
                            rng.randint(0, 2));
    cmp_cols = std::max(cmp_cols, cmp_count[r] + rng.randint(0, 2));
  }
  b.swa_bt_cols = swa_cols;
  b.cmp_bt_cols = c.compress_ratio > 1 ? cmp_cols : 0;

  int64_t swa_needed = 0, cmp_needed = 0;
  for (int64_t r = 0; r < R; ++r) {
    swa_needed += swa_last[r] - swa_first[r] + 1;
    cmp_needed += cmp_count[r];
  }
  s.swa_num_blocks = swa_needed + rng.randint(1, 3);
  s.cmp_num_blocks = cmp_needed + rng.randint(1, 3);
  std::vector<int32_t> swa_pool(s.swa_num_blocks), cmp_pool(s.cmp_num_blocks);
  std::iota(swa_pool.begin(), swa_pool.end(), 0);
  std::iota(cmp_pool.begin(), cmp_pool.end(), 0);
  std::shuffle(swa_pool.begin(), swa_pool.end(), rng.gen());
  std::shuffle(cmp_pool.begin(), cmp_pool.end(), rng.gen());
  // Columns nobody needs hold junk (freed SWA blocks, unused tail): never read, never rejected.
  const std::vector<int32_t> junk = {-1, -7, static_cast<int32_t>(s.swa_num_blocks + 5),
                                     std::numeric_limits<int32_t>::max()};
  b.swa_block_table.resize(R * swa_cols);
  size_t next = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t col = 0; col < swa_cols; ++col)
      b.swa_block_table[r * swa_cols + col] =
          (col >= swa_first[r] && col <= swa_last[r]) ? swa_pool[next++] : rng.pick(junk);
  if (c.compress_ratio > 1) {
    b.cmp_block_table.resize(R * cmp_cols);
    next = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t col = 0; col < cmp_cols; ++col)
        b.cmp_block_table[r * cmp_cols + col] =
            col < cmp_count[r] ? cmp_pool[next++] : rng.pick(junk);
  }

  // slot_mapping as the engine writes this step's tokens; top-k as the indexer would.
  if (l.c4a()) b.topk_indices.assign(b.num_tokens * c.index_topk, -1);
  std::vector<int32_t> perm;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < reqs[r].qlen; ++i) {
      const int64_t t = b.query_start_loc[r] + i;
      if (padding[t]) continue;
      const int64_t p = reqs[r].context + i;
      b.slot_mapping[t] = ref_swa_slot(c, &b.swa_block_table[r * swa_cols], swa_cols, p);
      if (!l.c4a()) continue;
      const int64_t vis = (p + 1) / 4;
      const int64_t n = std::min(vis, c.index_topk);
      int32_t* row = &b.topk_indices[t * c.index_topk];
      if (vis <= c.index_topk && rng.randint(0, 1) == 0) {
        for (int64_t k = 0; k < n; ++k) row[k] = static_cast<int32_t>(k);  // short-context fill
      } else {
        perm.resize(vis);
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t k = 0; k < n; ++k) {  // partial Fisher-Yates: n distinct entries, any order
          std::swap(perm[k], perm[rng.randint(k, vis - 1)]);
          row[k] = perm[k];
        }
      }
    }
  }
  // Padding rows carry junk top-k (never read).
  if (l.c4a())
    for (int64_t t = 0; t < b.num_tokens; ++t)
      if (b.slot_mapping[t] < 0)
        for (int64_t k = 0; k < c.index_topk; ++k)
          b.topk_indices[t * c.index_topk + k] = static_cast<int32_t>(rng.randint(-5, 1 << 20));
  return s;
}

const std::vector<int64_t> kPrefixes = {0, 1, 126, 127, 128, 1000, 5000};

// 0..max_prefill prefill chunks and 0..max_decode decode requests (MTP query lengths up to the
// threshold), decodes first.
std::vector<RequestSpec> random_requests(Rng& rng, const Layer& l, int64_t max_decode,
                                         int64_t max_prefill, int64_t max_prefill_q) {
  std::vector<RequestSpec> reqs;
  const int64_t thr = l.cfg.decode_threshold;
  const int64_t nd = rng.randint(0, max_decode);
  const int64_t np = rng.randint(0, max_prefill);
  auto context = [&] {
    return rng.randint(0, 3) == 0 ? rng.randint(0, 6000) : rng.pick(kPrefixes);
  };
  for (int64_t r = 0; r < nd; ++r) reqs.push_back({context(), rng.randint(1, thr)});
  for (int64_t r = 0; r < np; ++r) {
    // The first prefill must exceed the threshold (the split point); later ones may be short.
    const int64_t lo = r == 0 ? thr + 1 : 1;
    reqs.push_back({context(), rng.randint(lo, std::max(lo, max_prefill_q))});
  }
  return reqs;
}

Layer random_layer(Rng& rng) {
  Layer l;
  const int64_t kind = rng.randint(0, 2);
  l.cfg.compress_ratio = kind == 0 ? 1 : kind == 1 ? 4 : 128;
  l.cfg.window = rng.randint(0, 3) == 0 ? rng.pick(std::vector<int64_t>{1, 7, 64, 200}) : 128;
  l.cfg.swa_block_size = rng.pick(std::vector<int64_t>{1, 7, 64, 256});
  l.cfg.cmp_block_size = l.cfg.compress_ratio == 4 ? rng.pick(std::vector<int64_t>{64, 16, 5})
                                                   : rng.pick(std::vector<int64_t>{2, 1, 3});
  l.cfg.index_topk = rng.pick(std::vector<int64_t>{512, 64, 100});
  l.cfg.decode_threshold = rng.pick(std::vector<int64_t>{1, 2, 4});
  l.cfg.max_model_len = rng.pick(std::vector<int64_t>{8192, 65536, 16384 + 1});
  l.layout = rng.pick(std::vector<uint32_t>{DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_V4_584B,
                                            DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR,
                                            DSV4_KV_LAYOUT_FP8_V32_656B});
  l.heads = rng.pick(std::vector<int64_t>{1, 3, 8, 16, 64, 128});
  if (l.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
    // Caches of different scales: the lists' logit and value factors differ.
    l.kv_scale[0] = static_cast<float>(rng.uniform(0.002, 0.004));
    l.kv_scale[1] = static_cast<float>(rng.uniform(0.002, 0.004));
  }
  return l;
}

// ----------------------------------------------------------------------------------------------
// Hand-checked lists at the edges
// ----------------------------------------------------------------------------------------------
class PagedEdges : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
    ctx_ = make_ctx();
    ASSERT_TRUE(ctx_);
  }

  // Decode requests (query_len 1) at the given positions; request r's SWA table is
  // bt(col) = 3 + 2 * col + 100 * r, compressed table 5 + col + 100 * r. Caches large enough.
  Step decode_step(const Layer& l, const std::vector<int64_t>& positions, int64_t pad) {
    Step s;
    RefPagedBatch& b = s.batch;
    const int64_t R = static_cast<int64_t>(positions.size());
    int64_t max_pos = 0;
    for (int64_t p : positions) max_pos = std::max(max_pos, p);
    b.swa_bt_cols = max_pos / l.cfg.swa_block_size + 1;
    b.cmp_bt_cols = l.compressed() ? 70 : 0;
    b.query_start_loc.push_back(0);
    for (int64_t r = 0; r < R; ++r) {
      b.seq_lens.push_back(static_cast<int32_t>(positions[r] + 1));
      b.query_start_loc.push_back(static_cast<int32_t>(r + 1));
      for (int64_t col = 0; col < b.swa_bt_cols; ++col)
        b.swa_block_table.push_back(static_cast<int32_t>(3 + 2 * col + 100 * r));
      for (int64_t col = 0; col < b.cmp_bt_cols; ++col)
        b.cmp_block_table.push_back(static_cast<int32_t>(5 + col + 100 * r));
    }
    b.num_tokens = R + pad;
    b.slot_mapping.assign(b.num_tokens, -1);
    for (int64_t r = 0; r < R; ++r)
      b.slot_mapping[r] =
          ref_swa_slot(l.cfg, &b.swa_block_table[r * b.swa_bt_cols], b.swa_bt_cols, positions[r]);
    s.swa_num_blocks = 100 * R + 2 * b.swa_bt_cols + 4;
    s.cmp_num_blocks = 100 * R + 80;
    if (l.c4a()) b.topk_indices.assign(b.num_tokens * l.cfg.index_topk, -1);
    return s;
  }

  Exported export_flashmla(const Layer& l, const Step& s) {
    DeviceBatch db;
    db.upload(l, s);
    PlanPtr plan;
    dsv4_plan_options o = plan_options(l, s, DSV4_MODE_PAGED);
    dsv4_plan* p = nullptr;
    const dsv4_status st = dsv4_plan_create(ctx_.get(), &o, &p);
    EXPECT_EQ(st, DSV4_STATUS_OK) << status_text(st);
    plan.reset(p);
    Exported e;
    if (!plan) return e;
    const dsv4_status es =
        export_lists(plan.get(), l, db, s.batch.num_tokens, DSV4_EXPORT_FLASHMLA, 0, &e);
    EXPECT_EQ(es, DSV4_STATUS_OK) << status_text(es);
    // Every edge case is also checked in the other formats against the reference.
    check_exports(plan.get(), l, s, db, ref_build_paged_lists(l.cfg, s.batch));
    return e;
  }

  CtxPtr ctx_;
};

int32_t at(const Exported& e, int64_t t, int64_t j) { return e.swa_idx[t * e.swa_cols + j]; }
int32_t cmp_at(const Exported& e, int64_t t, int64_t j) { return e.cmp_idx[t * e.cmp_cols + j]; }

TEST_F(PagedEdges, SwaWindowEdgesBlock64) {
  Layer l;
  l.cfg.swa_block_size = 64;
  const Step s = decode_step(l, {0, 1, 126, 127, 128, 129}, 2);
  const Exported e = export_flashmla(l, s);
  ASSERT_FALSE(e.swa_len.empty());
  // Request r's block of column c is 3 + 2c + 100r; slot = block * 64 + pos % 64.
  EXPECT_EQ(e.swa_len[0], 1);
  EXPECT_EQ(at(e, 0, 0), 192);  // p=0: block 3 entry 0
  EXPECT_EQ(at(e, 0, 1), -1);
  EXPECT_EQ(e.swa_len[1], 2);
  EXPECT_EQ(at(e, 1, 0), 103 * 64);  // request 1: block 103
  EXPECT_EQ(at(e, 1, 1), 103 * 64 + 1);
  EXPECT_EQ(at(e, 1, 2), -1);
  EXPECT_EQ(e.swa_len[2], 127);
  EXPECT_EQ(at(e, 2, 0), 203 * 64);
  EXPECT_EQ(at(e, 2, 126), 205 * 64 + 62);  // p=126: column 1
  EXPECT_EQ(at(e, 2, 127), -1);
  EXPECT_EQ(e.swa_len[3], 128);
  EXPECT_EQ(at(e, 3, 0), 303 * 64);
  EXPECT_EQ(at(e, 3, 63), 303 * 64 + 63);
  EXPECT_EQ(at(e, 3, 64), 305 * 64);
  EXPECT_EQ(at(e, 3, 127), 305 * 64 + 63);
  EXPECT_EQ(e.swa_len[4], 128);  // p=128: positions 1..128
  EXPECT_EQ(at(e, 4, 0), 403 * 64 + 1);
  EXPECT_EQ(at(e, 4, 127), 407 * 64);
  EXPECT_EQ(e.swa_len[5], 128);  // p=129: positions 2..129
  EXPECT_EQ(at(e, 5, 0), 503 * 64 + 2);
  EXPECT_EQ(at(e, 5, 126), 507 * 64);
  EXPECT_EQ(at(e, 5, 127), 507 * 64 + 1);
  for (int64_t t : {6, 7}) {  // padding rows beyond query_start_loc[R]
    EXPECT_EQ(e.swa_len[t], 0);
    for (int64_t j = 0; j < 128; ++j) EXPECT_EQ(at(e, t, j), -1);
  }
}

TEST_F(PagedEdges, SwaBlockBoundaries) {
  // Block size 1: slot = block of the position's own column; 7: crossing every 7 positions;
  // 256: one block covers the whole window.
  {
    Layer l;
    l.cfg.swa_block_size = 1;
    const Exported e = export_flashmla(l, decode_step(l, {129}, 0));
    ASSERT_FALSE(e.swa_len.empty());
    EXPECT_EQ(e.swa_len[0], 128);
    EXPECT_EQ(at(e, 0, 0), 3 + 2 * 2);      // position 2 -> column 2 -> block 7
    EXPECT_EQ(at(e, 0, 127), 3 + 2 * 129);  // position 129 -> block 261
  }
  {
    Layer l;
    l.cfg.swa_block_size = 7;
    const Exported e = export_flashmla(l, decode_step(l, {129, 6, 7}, 0));
    ASSERT_FALSE(e.swa_len.empty());
    EXPECT_EQ(at(e, 0, 0), 3 * 7 + 2);     // position 2: column 0, entry 2
    EXPECT_EQ(at(e, 0, 4), 3 * 7 + 6);     // position 6: column 0, entry 6
    EXPECT_EQ(at(e, 0, 5), 5 * 7);         // position 7: column 1 (block 5), entry 0
    EXPECT_EQ(at(e, 0, 127), 39 * 7 + 3);  // position 129: column 18 (block 39), entry 3
    EXPECT_EQ(e.swa_len[1], 7);
    EXPECT_EQ(at(e, 1, 6), 103 * 7 + 6);
    EXPECT_EQ(e.swa_len[2], 8);
    EXPECT_EQ(at(e, 2, 7), 205 * 7);
  }
  {
    Layer l;
    l.cfg.swa_block_size = 256;
    const Exported e = export_flashmla(l, decode_step(l, {255, 256}, 0));
    ASSERT_FALSE(e.swa_len.empty());
    EXPECT_EQ(at(e, 0, 0), 3 * 256 + 128);
    EXPECT_EQ(at(e, 0, 127), 3 * 256 + 255);
    EXPECT_EQ(at(e, 1, 126), 103 * 256 + 255);
    EXPECT_EQ(at(e, 1, 127), 105 * 256);
  }
}

TEST_F(PagedEdges, C4AFirstEntryAndSaturation) {
  Layer l;
  l.cfg.compress_ratio = 4;
  l.cfg.index_topk = 8;
  l.cfg.cmp_block_size = 64;
  // p=2 sees nothing; p=3 sees entry 0; p=31 = 4K-1 sees exactly K = 8; p=35 sees 9 (K kept).
  Step s = decode_step(l, {2, 3, 31, 35}, 1);
  int32_t* k = s.batch.topk_indices.data();
  k[1 * 8 + 0] = 0;
  for (int i = 0; i < 8; ++i) k[2 * 8 + i] = 7 - i;
  for (int i = 0; i < 8; ++i) k[3 * 8 + i] = i + 1;  // entries 1..8 of the 9 visible
  for (int i = 0; i < 8; ++i) k[4 * 8 + i] = 99;     // padding row: junk never read
  const Exported e = export_flashmla(l, s);
  ASSERT_FALSE(e.cmp_len.empty());
  EXPECT_EQ(e.cmp_len[0], 0);
  EXPECT_EQ(cmp_at(e, 0, 0), -1);
  EXPECT_EQ(e.cmp_len[1], 1);
  EXPECT_EQ(cmp_at(e, 1, 0), 105 * 64);  // request 1, compressed block 5 + 100
  EXPECT_EQ(cmp_at(e, 1, 1), -1);
  EXPECT_EQ(e.cmp_len[2], 8);
  EXPECT_EQ(cmp_at(e, 2, 0), 205 * 64 + 7);
  EXPECT_EQ(cmp_at(e, 2, 7), 205 * 64);
  EXPECT_EQ(e.cmp_len[3], 8);
  EXPECT_EQ(cmp_at(e, 3, 7), 305 * 64 + 8);
  EXPECT_EQ(e.cmp_len[4], 0);
  EXPECT_EQ(e.swa_len[4], 0);
}

TEST_F(PagedEdges, C128AFirstEntryAndWidthCap) {
  Layer l;
  l.cfg.compress_ratio = 128;
  l.cfg.cmp_block_size = 2;
  l.cfg.max_model_len = 128 * 100;  // ceil(100) -> width 128
  l.cfg.swa_block_size = 256;
  // p=126: 0 entries; p=127: 1; p=128*200-1: 200 visible, capped at 128.
  const Exported e = export_flashmla(l, decode_step(l, {126, 127, 128 * 200 - 1}, 0));
  ASSERT_FALSE(e.cmp_len.empty());
  EXPECT_EQ(e.cmp_cols, 128);
  EXPECT_EQ(e.cmp_len[0], 0);
  EXPECT_EQ(e.cmp_len[1], 1);
  EXPECT_EQ(cmp_at(e, 1, 0), 105 * 2);
  EXPECT_EQ(cmp_at(e, 1, 1), -1);
  EXPECT_EQ(e.cmp_len[2], 128);
  EXPECT_EQ(cmp_at(e, 2, 0), 205 * 2);
  EXPECT_EQ(cmp_at(e, 2, 1), 205 * 2 + 1);
  EXPECT_EQ(cmp_at(e, 2, 127), (205 + 63) * 2 + 1);
}

TEST_F(PagedEdges, StepWithoutTokens) {
  // No request and no token: every format succeeds, and CSR's indptr is {0} for both lists (the
  // lists' flat indices are empty tensors, which carry no address: spec 12.3).
  for (int64_t ratio : {1, 4, 128}) {
    SCOPED_TRACE("compress_ratio " + std::to_string(ratio));
    Layer l;
    l.cfg.compress_ratio = ratio;
    l.cfg.index_topk = 8;
    l.cfg.cmp_block_size = ratio == 128 ? 2 : 64;
    export_flashmla(l, decode_step(l, {}, 0));  // checks every format against the reference
  }
}

TEST_F(PagedEdges, PaddingTokensInsideRequestsAndFlashInferLengths) {
  Layer l;
  l.cfg.compress_ratio = 4;
  l.cfg.index_topk = 8;
  l.cfg.decode_threshold = 2;
  // One MTP decode (query_len 2 at positions 40, 41) and one prefill chunk of 3 at 8..10 whose
  // middle token is padding, plus a padding row at the end.
  Step s;
  RefPagedBatch& b = s.batch;
  b.query_start_loc = {0, 2, 5};
  b.seq_lens = {42, 11};
  b.swa_bt_cols = 1;
  b.swa_block_table = {4, 9};
  b.cmp_bt_cols = 1;
  b.cmp_block_table = {2, 6};
  b.num_tokens = 6;
  b.slot_mapping = {4 * 64 + 40, 4 * 64 + 41, 9 * 64 + 8, -1, 9 * 64 + 10, -1};
  b.topk_indices.assign(6 * 8, -1);
  for (int i = 0; i < 8; ++i) b.topk_indices[0 * 8 + i] = i;      // p=40: 10 visible
  for (int i = 0; i < 3; ++i) b.topk_indices[1 * 8 + i] = 9 - i;  // p=41: 3 of 10 (-1 after)
  b.topk_indices[2 * 8 + 0] = 1;                                  // p=8: 2 visible
  b.topk_indices[2 * 8 + 1] = 0;
  b.topk_indices[4 * 8 + 0] = 2;  // p=10: 2 visible, 1 chosen
  s.swa_num_blocks = 10;
  s.cmp_num_blocks = 7;
  DeviceBatch db;
  db.upload(l, s);
  dsv4_plan_options o = plan_options(l, s, DSV4_MODE_PAGED);
  dsv4_plan* p = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx_.get(), &o, &p), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr plan(p);
  // p=10 sees (10+1)/4 = 2 entries, so local 2 is out of range: rejected (CPU value checks).
  if (backend_checks_values(ctx_.get())) {
    Exported bad;
    EXPECT_EQ(export_lists(plan.get(), l, db, 6, DSV4_EXPORT_FLASHINFER, 0, &bad),
              DSV4_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(dsv4_last_error_message()).find("topk_indices"), std::string::npos)
        << dsv4_last_error_message();
    for (int32_t v : bad.comb_idx) ASSERT_EQ(v, kPoison);
  }
  s.batch.topk_indices[4 * 8 + 0] = 1;
  db.upload(l, s);
  Exported e;
  ASSERT_EQ(export_lists(plan.get(), l, db, 6, DSV4_EXPORT_FLASHINFER, 0, &e), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  const int64_t cols = 128 + 8;
  ASSERT_EQ(e.comb_cols, cols);
  EXPECT_EQ(e.comb_len[0], 128 + 8);  // decode: W + count
  EXPECT_EQ(e.comb_len[1], 128 + 3);
  EXPECT_EQ(e.comb_len[2], 128 + 2);  // prefill: W + min((p+1)/4, K)
  EXPECT_EQ(e.comb_len[3], 128);      // padding token inside the request
  EXPECT_EQ(e.comb_len[4], 128 + 2);  // p=10: 2 visible although only one was chosen
  EXPECT_EQ(e.comb_len[5], 128);      // padding row
  EXPECT_EQ(e.comb_idx[0 * cols + 0], 4 * 64);
  EXPECT_EQ(e.comb_idx[0 * cols + 40], 4 * 64 + 40);
  EXPECT_EQ(e.comb_idx[0 * cols + 41], -1);
  EXPECT_EQ(e.comb_idx[0 * cols + 128], 2 * 64);
  EXPECT_EQ(e.comb_idx[0 * cols + 135], 2 * 64 + 7);
  EXPECT_EQ(e.comb_idx[1 * cols + 128], 2 * 64 + 9);
  EXPECT_EQ(e.comb_idx[1 * cols + 131], -1);
  EXPECT_EQ(e.comb_idx[2 * cols + 8], 9 * 64 + 8);
  EXPECT_EQ(e.comb_idx[2 * cols + 128], 6 * 64 + 1);
  EXPECT_EQ(e.comb_idx[2 * cols + 129], 6 * 64);
  EXPECT_EQ(e.comb_idx[2 * cols + 130], -1);
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_EQ(e.comb_idx[3 * cols + c], -1);
    EXPECT_EQ(e.comb_idx[5 * cols + c], -1);
  }
  EXPECT_EQ(e.comb_idx[4 * cols + 128], 6 * 64 + 1);
  EXPECT_EQ(e.comb_idx[4 * cols + 129], -1);
  check_exports(plan.get(), l, s, db, ref_build_paged_lists(l.cfg, s.batch));
}

// ----------------------------------------------------------------------------------------------
// Randomized steps: exported lists vs reference_paged (large batches, lists only)
// ----------------------------------------------------------------------------------------------
TEST(PagedRandom, ExportMatchesReference) {
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  CtxPtr ctx = make_ctx();
  ASSERT_TRUE(ctx);
  Rng rng(case_seed("PagedRandom.ExportMatchesReference"));
  for (int iter = 0; iter < 24; ++iter) {
    const Layer l = random_layer(rng);
    const std::vector<RequestSpec> reqs = random_requests(rng, l, 40, 9, 300);
    const int64_t pad = rng.randint(reqs.empty() ? 1 : 0, 5);
    const Step s = make_step(rng, l, reqs, pad, rng.randint(0, 3) == 0 ? 0.05 : 0.0);
    SCOPED_TRACE("iteration " + std::to_string(iter) + ": " + describe(l, s));
    const RefPagedLists ref = ref_build_paged_lists(l.cfg, s.batch);
    DeviceBatch db;
    db.upload(l, s);
    dsv4_plan_options o = plan_options(l, s, DSV4_MODE_PAGED);
    dsv4_plan* p = nullptr;
    const dsv4_status st = dsv4_plan_create(ctx.get(), &o, &p);
    if (st == DSV4_STATUS_UNSUPPORTED) continue;  // e.g. a layout this backend has no kernel for
    ASSERT_EQ(st, DSV4_STATUS_OK) << status_text(st);
    PlanPtr plan(p);
    check_exports(plan.get(), l, s, db, ref);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

// ----------------------------------------------------------------------------------------------
// Randomized steps: paged attention == explicit attention on the reference lists (bit-exact on
// the CPU backend), and the float64 reference within the spec tolerances
// ----------------------------------------------------------------------------------------------
struct AttentionResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

dsv4_status run_attention(dsv4_ctx* ctx, const Layer& l, const Step& s, DeviceBatch& db,
                          uint32_t mode, const RefPagedLists& ref, DeviceBuffer& q,
                          const std::vector<float>& sink, AttentionResult* r) {
  const dsv4_device dev = g_device->device();
  const int64_t T = s.batch.num_tokens;
  const int64_t H = l.heads;
  dsv4_plan_options o = plan_options(l, s, mode);
  dsv4_plan* p = nullptr;
  dsv4_status st = dsv4_plan_create(ctx, &o, &p);
  if (st != DSV4_STATUS_OK) return st;
  PlanPtr plan(p);
  size_t ws_bytes = 0;
  st = dsv4_plan_get_workspace_size(plan.get(), &ws_bytes);
  if (st != DSV4_STATUS_OK) return st;
  DeviceBuffer ws(g_device, ws_bytes);
  DeviceBuffer out(g_device, static_cast<size_t>(T * H * kDv * 2));
  DeviceBuffer lse(g_device, static_cast<size_t>(T * H * 4));
  out.fill(0xFF);
  lse.fill(0xFF);
  DeviceBuffer sink_buf = to_device(g_device, sink);
  TensorView qt(q.get(), dev, kBf16, {T, H, l.d_qk()});
  TensorView ot(out.get(), dev, kBf16, {T, H, kDv});
  TensorView lt(lse.get(), dev, kF32, {T, H});
  TensorView st_t(sink_buf.get(), dev, kF32, {H});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = qt.get();
  a.out = ot.get();
  a.lse = lt.get();
  a.attn_sink = st_t.get();
  a.swa_cache = db.swa_cache_t.get();
  if (l.compressed()) a.extra_cache = db.cmp_cache_t.get();
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.stream = g_device->stream();
  // Explicit mode: the reference lists as dense [T, width] + lengths.
  DeviceBuffer mi, ml, ei, el;
  TensorView mit, mlt, eit, elt;
  if (mode == DSV4_MODE_PAGED) {
    db.fill(l, &a);
  } else {
    const RefDense swa = ref_to_dense(ref.swa, ref.swa_width);
    mi = to_device(g_device, swa.indices);
    ml = to_device(g_device, swa.lens);
    mit = TensorView(mi.get(), dev, kI32, {T, ref.swa_width});
    mlt = TensorView(ml.get(), dev, kI32, {T});
    a.indices = mit.get();
    a.lengths = mlt.get();
    if (ref.cmp_width > 0) {
      const RefDense cmp = ref_to_dense(ref.cmp, ref.cmp_width);
      ei = to_device(g_device, cmp.indices);
      el = to_device(g_device, cmp.lens);
      eit = TensorView(ei.get(), dev, kI32, {T, ref.cmp_width});
      elt = TensorView(el.get(), dev, kI32, {T});
      a.extra_indices = eit.get();
      a.extra_lengths = elt.get();
    }
  }
  st = dsv4_run(plan.get(), &a);
  if (st != DSV4_STATUS_OK) return st;
  r->out = out.download<uint16_t>();
  r->lse = lse.download<float>();
  return DSV4_STATUS_OK;
}

// Writes random rows into every slot the reference lists reference (engine-like: only rows that
// exist), returns the caches' bytes for the reference.
void write_referenced_rows(dsv4_ctx* ctx, Rng& rng, const Layer& l, const Step& s,
                           const RefPagedLists& ref, DeviceBatch& db) {
  for (int which = 0; which < (l.compressed() ? 2 : 1); ++which) {
    const std::vector<RefList>& lists = which == 0 ? ref.swa : ref.cmp;
    std::set<int32_t> used;
    for (const RefList& list : lists)
      for (int64_t i = 0; i < list.length; ++i)
        if (list.idx[i] >= 0) used.insert(list.idx[i]);
    if (used.empty()) continue;
    std::vector<int32_t> slots(used.begin(), used.end());
    std::shuffle(slots.begin(), slots.end(), rng.gen());
    std::vector<float> values(slots.size() * static_cast<size_t>(l.d_qk()));
    for (float& v : values) v = static_cast<float>(std::clamp(rng.normal() / 10.0, -1.0, 1.0));
    DeviceBuffer vb = to_device(g_device, values);
    DeviceBuffer sb = to_device(g_device, slots);
    TensorView vt(vb.get(), g_device->device(), kF32,
                  {static_cast<int64_t>(slots.size()), l.d_qk()});
    TensorView stt(sb.get(), g_device->device(), kI32, {static_cast<int64_t>(slots.size())});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc.layout = l.layout;
    w.cache_desc.block_size =
        static_cast<int32_t>(which == 0 ? l.cfg.swa_block_size : l.cfg.cmp_block_size);
    w.cache_desc.kv_scale = l.kv_scale[which];
    w.values = vt.get();
    w.slots = stt.get();
    w.cache = which == 0 ? db.swa_cache_t.get() : db.cmp_cache_t.get();
    w.stream = g_device->stream();
    const dsv4_status st = dsv4_kv_write(ctx, &w);
    ASSERT_EQ(st, DSV4_STATUS_OK) << status_text(st);
  }
  g_device->synchronize();
  db.swa_host = db.swa_cache.download<uint8_t>();
  if (l.compressed()) db.cmp_host = db.cmp_cache.download<uint8_t>();
  (void)s;
}

TEST(PagedRandom, AttentionMatchesExplicitAndReference) {
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  CtxPtr ctx = make_ctx();
  ASSERT_TRUE(ctx);
  dsv4_ctx_info info;
  info.struct_size = sizeof(info);
  const bool cpu_backend = dsv4_ctx_get_info(ctx.get(), &info) == DSV4_STATUS_OK &&
                           std::string(info.backend).rfind("cpu", 0) == 0;
  Rng rng(case_seed("PagedRandom.AttentionMatchesExplicitAndReference"));
  int ran = 0;
  for (int iter = 0; iter < 14; ++iter) {
    Layer l = random_layer(rng);
    // Smaller steps than the list test: the float64 reference costs T * H * candidates * 1024.
    if (l.c4a()) l.cfg.index_topk = rng.pick(std::vector<int64_t>{64, 100});
    l.cfg.max_model_len = 8192;
    // Step sizes: iteration 0 is a full-size step (0-40 decodes, 0-9 prefill chunks of up to 300
    // tokens) with few heads; every third one is tiny so that up to 128 heads fit the budget.
    const bool full = iter == 0;
    const bool tiny = iter % 3 == 1;
    if (tiny) l.heads = rng.pick(std::vector<int64_t>{64, 128});
    const std::vector<RequestSpec> reqs = full   ? random_requests(rng, l, 40, 9, 300)
                                          : tiny ? random_requests(rng, l, 4, 1, 6)
                                                 : random_requests(rng, l, 12, 3, 40);
    const int64_t pad = rng.randint(reqs.empty() ? 1 : 0, 3);
    const Step s = make_step(rng, l, reqs, pad, rng.randint(0, 2) == 0 ? 0.1 : 0.0);
    const int64_t T = s.batch.num_tokens;
    const int64_t cand = l.cfg.window + ref_cmp_width(l.cfg);
    const int64_t budget = full ? 1000000 : 250000;  // T * H * candidates
    l.heads =
        std::max<int64_t>(1, std::min<int64_t>(l.heads, budget / std::max<int64_t>(1, T * cand)));
    SCOPED_TRACE("iteration " + std::to_string(iter) + ": " + describe(l, s));
    const RefPagedLists ref = ref_build_paged_lists(l.cfg, s.batch);
    DeviceBatch db;
    db.upload(l, s);
    write_referenced_rows(ctx.get(), rng, l, s, ref, db);
    if (HasFatalFailure()) return;

    const int64_t H = l.heads, d = l.d_qk();
    std::vector<uint16_t> q_bits(static_cast<size_t>(std::max<int64_t>(1, T * H * d)));
    RefProblem prob;
    prob.num_tokens = T;
    prob.num_heads = H;
    prob.head_dim_qk = d;
    prob.q.resize(static_cast<size_t>(T * H * d));
    for (size_t i = 0; i < prob.q.size(); ++i) {
      q_bits[i] = ref_double_to_bf16(std::clamp(rng.normal(), -1.0, 1.0));
      prob.q[i] = ref_bf16_to_double(q_bits[i]);
    }
    std::vector<float> sink(H);
    for (float& v : sink) {
      const int64_t kind = rng.randint(0, 5);
      v = kind == 0   ? -std::numeric_limits<float>::infinity()
          : kind == 1 ? std::numeric_limits<float>::infinity()
                      : static_cast<float>(rng.normal());
    }
    DeviceBuffer q = to_device(g_device, q_bits);

    AttentionResult paged, expl;
    dsv4_status st = run_attention(ctx.get(), l, s, db, DSV4_MODE_PAGED, ref, q, sink, &paged);
    if (st == DSV4_STATUS_UNSUPPORTED) continue;
    ASSERT_EQ(st, DSV4_STATUS_OK) << status_text(st);
    st = run_attention(ctx.get(), l, s, db, DSV4_MODE_EXPLICIT, ref, q, sink, &expl);
    ASSERT_EQ(st, DSV4_STATUS_OK) << status_text(st);
    ++ran;
    if (cpu_backend) {
      ASSERT_EQ(paged.out.size(), expl.out.size());
      EXPECT_EQ(0, std::memcmp(paged.out.data(), expl.out.data(), paged.out.size() * 2))
          << "paged output differs from explicit mode on the reference lists";
      EXPECT_EQ(0, std::memcmp(paged.lse.data(), expl.lse.data(), paged.lse.size() * 4))
          << "paged lse differs from explicit mode on the reference lists";
    }

    prob.scale = 1.0 / std::sqrt(static_cast<double>(d));
    prob.sink.assign(sink.begin(), sink.end());
    prob.main.base = db.swa_host.data();
    prob.main.layout = l.layout;
    prob.main.block_size = l.cfg.swa_block_size;
    prob.main.block_stride_bytes = block_bytes(l.layout, l.cfg.swa_block_size);
    prob.main.num_blocks = s.swa_num_blocks;
    prob.main.kv_scale = l.kv_scale[0];
    prob.main_lists = ref.swa;
    if (l.compressed()) {
      prob.extra.base = db.cmp_host.data();
      prob.extra.layout = l.layout;
      prob.extra.block_size = l.cfg.cmp_block_size;
      prob.extra.block_stride_bytes = block_bytes(l.layout, l.cfg.cmp_block_size);
      prob.extra.num_blocks = s.cmp_num_blocks;
      prob.extra.kv_scale = l.kv_scale[1];
      prob.extra_lists = ref.cmp;
    }
    const RefResult want = reference_attention(prob);
    // Decode tokens use the decode tolerances, prefill and padding rows the prefill ones.
    std::vector<double> got_d, want_d, got_p, want_p, lse_got, lse_want;
    for (int64_t t = 0; t < T; ++t) {
      const bool decode = t < ref.num_decode_tokens;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < kDv; ++j) {
          const size_t at_i = static_cast<size_t>((t * H + h) * kDv + j);
          (decode ? got_d : got_p).push_back(ref_bf16_to_double(paged.out[at_i]));
          (decode ? want_d : want_p).push_back(want.out[at_i]);
        }
        lse_got.push_back(paged.lse[t * H + h]);
        lse_want.push_back(want.lse[t * H + h]);
        if (ref.is_padding[t]) {
          EXPECT_EQ(paged.lse[t * H + h], std::numeric_limits<float>::infinity()) << "token " << t;
        }
      }
      if (ref.is_padding[t]) {
        for (int64_t j = 0; j < H * kDv; ++j)
          ASSERT_EQ(paged.out[t * H * kDv + j], 0) << "padding token " << t << " output not zero";
      }
    }
    EXPECT_TRUE(compare_close(got_d, want_d, kDecodeOutTol, "decode out"));
    EXPECT_TRUE(compare_close(got_p, want_p, kPrefillOutTol, "prefill out"));
    EXPECT_TRUE(compare_close(lse_got, lse_want, kDecodeLseTol, "lse"));
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  std::printf("paged attention: %d of 14 randomized steps ran (others: layout unsupported)\n", ran);
  EXPECT_GT(ran, 0) << "no randomized step could run";
}

// ----------------------------------------------------------------------------------------------
// Malformed batches: status + message naming the problem; outputs untouched
// ----------------------------------------------------------------------------------------------
class PagedBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
    ctx_ = make_ctx();
    ASSERT_TRUE(ctx_);
    Rng rng(case_seed("PagedBadInput"));
    layer_.cfg.compress_ratio = 4;
    layer_.cfg.index_topk = 16;
    layer_.heads = 4;
    layer_.layout = DSV4_KV_LAYOUT_BF16;
    step_ = make_step(rng, layer_, {{130, 1}, {0, 20}}, 1, 0.0);
  }

  // Builds the plan from the good step, applies `mutate` to a copy of the batch, and expects
  // both dsv4_run and dsv4_export_indices to fail with `status` and a message containing `word`,
  // leaving out / the exported lists untouched.
  void expect_rejected(const std::function<void(Step*)>& mutate, dsv4_status status,
                       const std::string& word, bool any_failure = false) {
    dsv4_plan_options o = plan_options(layer_, step_, DSV4_MODE_PAGED);
    dsv4_plan* p = nullptr;
    ASSERT_EQ(dsv4_plan_create(ctx_.get(), &o, &p), DSV4_STATUS_OK) << dsv4_last_error_message();
    PlanPtr plan(p);
    Step bad = step_;
    mutate(&bad);
    DeviceBatch db;
    db.upload(layer_, bad);
    Exported e;
    const dsv4_status es =
        export_lists(plan.get(), layer_, db, bad.batch.num_tokens, DSV4_EXPORT_FLASHMLA, 0, &e);
    if (any_failure) {
      EXPECT_NE(es, DSV4_STATUS_OK);
    } else {
      EXPECT_EQ(es, status) << status_text(es);
    }
    const std::string msg = dsv4_last_error_message();
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
    for (int32_t v : e.swa_idx) ASSERT_EQ(v, kPoison) << "export wrote although it failed";
    for (int32_t v : e.swa_len) ASSERT_EQ(v, kPoison) << "export wrote although it failed";
    for (int32_t v : e.cmp_len) ASSERT_EQ(v, kPoison) << "export wrote although it failed";

    const int64_t T = bad.batch.num_tokens, H = layer_.heads;
    size_t ws_bytes = 0;
    ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);
    DeviceBuffer ws(g_device, ws_bytes);
    std::vector<uint16_t> q_host(static_cast<size_t>(T * H * 512), 0x3F80);
    DeviceBuffer q = to_device(g_device, q_host);
    DeviceBuffer out(g_device, static_cast<size_t>(T * H * kDv * 2));
    out.fill(0xAB);
    const dsv4_device dev = g_device->device();
    TensorView qt(q.get(), dev, kBf16, {T, H, 512});
    TensorView ot(out.get(), dev, kBf16, {T, H, kDv});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    db.fill(layer_, &a);
    a.q = qt.get();
    a.out = ot.get();
    a.workspace = ws.get();
    a.workspace_bytes = ws_bytes;
    a.stream = g_device->stream();
    const dsv4_status rs = dsv4_run(plan.get(), &a);
    if (any_failure) {
      EXPECT_NE(rs, DSV4_STATUS_OK);
    } else {
      EXPECT_EQ(rs, status) << status_text(rs);
    }
    EXPECT_NE(std::string(dsv4_last_error_message()).find(word), std::string::npos)
        << dsv4_last_error_message();
    for (uint8_t byte : out.download<uint8_t>())
      ASSERT_EQ(byte, 0xAB) << "run wrote although it failed";
  }

  CtxPtr ctx_;
  Layer layer_;
  Step step_;
};

// Value checks need the data on the host: only the CPU backend validates values.
#define REQUIRE_VALUE_CHECKS()            \
  if (!backend_checks_values(ctx_.get())) \
  GTEST_SKIP() << "value validation is a CPU-backend feature"

TEST_F(PagedBadInput, SeqLenBelowQueryLen) {
  REQUIRE_VALUE_CHECKS();
  expect_rejected([](Step* s) { s->batch.seq_lens[1] = 19; }, DSV4_STATUS_INVALID_ARGUMENT,
                  "seq_lens");
}

TEST_F(PagedBadInput, QueryStartLocNotMonotone) {
  REQUIRE_VALUE_CHECKS();
  expect_rejected(
      [](Step* s) {
        s->batch.query_start_loc[1] = 5;
        s->batch.query_start_loc[2] = 3;
      },
      DSV4_STATUS_INVALID_ARGUMENT, "query_start_loc");
}

TEST_F(PagedBadInput, QueryStartLocBeyondTokens) {
  REQUIRE_VALUE_CHECKS();
  expect_rejected(
      [](Step* s) {
        s->batch.query_start_loc[2] = 40;
        s->batch.seq_lens[1] = 40;
      },
      DSV4_STATUS_INVALID_ARGUMENT, "query_start_loc");
}

TEST_F(PagedBadInput, SwaBlockOutOfRange) {
  REQUIRE_VALUE_CHECKS();
  // Request 0 decodes at position 130: its window needs columns 0..2.
  expect_rejected(
      [](Step* s) { s->batch.swa_block_table[1] = static_cast<int32_t>(s->swa_num_blocks); },
      DSV4_STATUS_INVALID_ARGUMENT, "swa_block_table");
  expect_rejected([](Step* s) { s->batch.swa_block_table[2] = -1; }, DSV4_STATUS_INVALID_ARGUMENT,
                  "swa_block_table");
}

TEST_F(PagedBadInput, CompressedBlockOutOfRange) {
  REQUIRE_VALUE_CHECKS();
  // Request 0 (p=130) picked top-k entries among 32 visible: make every column bad.
  expect_rejected(
      [](Step* s) {
        for (int64_t c = 0; c < s->batch.cmp_bt_cols; ++c)
          s->batch.cmp_block_table[c] = static_cast<int32_t>(s->cmp_num_blocks + c);
      },
      DSV4_STATUS_INVALID_ARGUMENT, "cmp_block_table");
}

TEST_F(PagedBadInput, TopkEntryBeyondVisibleCount) {
  REQUIRE_VALUE_CHECKS();
  // Token 1 is the first prefill token (p=0): it sees no compressed entry at all.
  expect_rejected([](Step* s) { s->batch.topk_indices[1 * 16 + 0] = 0; },
                  DSV4_STATUS_INVALID_ARGUMENT, "topk_indices");
  // Token 0 (p=130) sees 32 entries: 32 is one too many.
  expect_rejected([](Step* s) { s->batch.topk_indices[0 * 16 + 3] = 32; },
                  DSV4_STATUS_INVALID_ARGUMENT, "topk_indices");
}

TEST_F(PagedBadInput, BlockTableTooNarrow) {
  REQUIRE_VALUE_CHECKS();
  expect_rejected(
      [](Step* s) {
        // Keep only column 0 of each row: position 130 needs column 2.
        RefPagedBatch& b = s->batch;
        std::vector<int32_t> narrow;
        for (size_t r = 0; r < b.seq_lens.size(); ++r)
          narrow.push_back(b.swa_block_table[r * b.swa_bt_cols]);
        b.swa_block_table = narrow;
        b.swa_bt_cols = 1;
      },
      DSV4_STATUS_INVALID_ARGUMENT, "swa_block_table");
}

TEST_F(PagedBadInput, CapacitiesExceeded) {
  // Shape checks: no value is read, so every backend rejects these.
  expect_rejected(
      [](Step* s) {
        s->batch.num_tokens += 1;  // one more padding row than the plan's max_tokens
        s->batch.slot_mapping.push_back(-1);
        s->batch.topk_indices.resize(s->batch.topk_indices.size() + 16, -1);
      },
      DSV4_STATUS_PLAN_MISMATCH, "max_tokens", true);
  expect_rejected(
      [](Step* s) {
        RefPagedBatch& b = s->batch;
        std::vector<int32_t> wide;
        for (size_t r = 0; r < b.seq_lens.size(); ++r) {
          for (int64_t c = 0; c < b.swa_bt_cols; ++c)
            wide.push_back(b.swa_block_table[r * b.swa_bt_cols + c]);
          wide.push_back(0);
        }
        b.swa_block_table = wide;
        b.swa_bt_cols += 1;
      },
      DSV4_STATUS_PLAN_MISMATCH, "max_swa_blocks_per_request", true);
}

// dsv4_export_indices argument checks (shapes / formats / plan mode): every backend.
TEST(PagedExportArgs, RejectedWithMessageAndNothingWritten) {
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  CtxPtr ctx = make_ctx();
  ASSERT_TRUE(ctx);
  Rng rng(case_seed("PagedExportArgs"));
  Layer l;
  l.cfg.compress_ratio = 128;
  l.cfg.cmp_block_size = 2;
  l.cfg.max_model_len = 8192;  // width 128
  l.layout = DSV4_KV_LAYOUT_BF16;
  const Step s = make_step(rng, l, {{300, 1}, {10, 7}}, 2, 0.0);
  const int64_t T = s.batch.num_tokens, W = l.cfg.window;
  DeviceBatch db;
  db.upload(l, s);
  dsv4_plan_options o = plan_options(l, s, DSV4_MODE_PAGED);
  dsv4_plan* p = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &o, &p), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr plan(p);
  const dsv4_device dev = g_device->device();
  DeviceBuffer out =
      to_device(g_device, std::vector<int32_t>(static_cast<size_t>(T * (W + 132)), kPoison));
  DeviceBuffer lens =
      to_device(g_device, std::vector<int32_t>(static_cast<size_t>(T + 1), kPoison));
  auto untouched = [&] {
    for (int32_t v : out.download<int32_t>())
      if (v != kPoison) return false;
    for (int32_t v : lens.download<int32_t>())
      if (v != kPoison) return false;
    return true;
  };
  struct Case {
    const char* what;
    std::function<void(dsv4_export_args*, std::vector<TensorView>*)> mutate;
    dsv4_status status;
  };
  const std::vector<Case> cases = {
      {"args->struct_size",
       [](dsv4_export_args* a, std::vector<TensorView>*) { a->struct_size = 0; },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->format", [](dsv4_export_args* a, std::vector<TensorView>*) { a->format = 7; },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->batch", [](dsv4_export_args* a, std::vector<TensorView>*) { a->batch = nullptr; },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->swa_indices",  // narrower than the window
       [&](dsv4_export_args* a, std::vector<TensorView>* keep) {
         keep->emplace_back(out.get(), dev, kI32, std::vector<int64_t>{T, W - 1});
         a->swa_indices = keep->back().get();
       },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->swa_lengths",
       [](dsv4_export_args* a, std::vector<TensorView>*) { a->swa_lengths = nullptr; },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->combined_indices",
       [&](dsv4_export_args* a, std::vector<TensorView>* keep) {
         keep->emplace_back(out.get(), dev, kI32, std::vector<int64_t>{T, W + 128});
         a->combined_indices = keep->back().get();
       },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->cmp_indices",  // FlashMLA compressed list narrower than the C128A width
       [&](dsv4_export_args* a, std::vector<TensorView>* keep) {
         keep->emplace_back(out.get(), dev, kI32, std::vector<int64_t>{T, 127});
         keep->emplace_back(lens.get(), dev, kI32, std::vector<int64_t>{T});
         a->cmp_indices = (*keep)[keep->size() - 2].get();
         a->cmp_lengths = keep->back().get();
       },
       DSV4_STATUS_INVALID_ARGUMENT},
      {"args->swa_indptr",  // CSR without its offsets
       [](dsv4_export_args* a, std::vector<TensorView>*) { a->format = DSV4_EXPORT_CSR; },
       DSV4_STATUS_INVALID_ARGUMENT},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<TensorView> keep;
    keep.reserve(8);
    dsv4_run_args batch;
    dsv4_run_args_init(&batch);
    db.fill(l, &batch);
    keep.emplace_back(out.get(), dev, kI32, std::vector<int64_t>{T, W});
    keep.emplace_back(lens.get(), dev, kI32, std::vector<int64_t>{T});
    dsv4_export_args a;
    dsv4_export_args_init(&a);
    a.format = DSV4_EXPORT_FLASHMLA;
    a.batch = &batch;
    a.swa_indices = keep[0].get();
    a.swa_lengths = keep[1].get();
    c.mutate(&a, &keep);
    const dsv4_status st = dsv4_export_indices(plan.get(), &a);
    EXPECT_EQ(st, c.status) << status_text(st);
    EXPECT_NE(std::string(dsv4_last_error_message()).find(c.what), std::string::npos)
        << dsv4_last_error_message();
    EXPECT_TRUE(untouched());
  }
  // An explicit-mode plan has no batch description to export.
  dsv4_plan_options eo = plan_options(l, s, DSV4_MODE_EXPLICIT);
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &eo, &p), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr explicit_plan(p);
  dsv4_run_args batch;
  dsv4_run_args_init(&batch);
  db.fill(l, &batch);
  TensorView ot(out.get(), dev, kI32, {T, W}), lt(lens.get(), dev, kI32, {T});
  dsv4_export_args a;
  dsv4_export_args_init(&a);
  a.batch = &batch;
  a.swa_indices = ot.get();
  a.swa_lengths = lt.get();
  EXPECT_EQ(dsv4_export_indices(explicit_plan.get(), &a), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("DSV4_MODE_PAGED"), std::string::npos)
      << dsv4_last_error_message();
  EXPECT_TRUE(untouched());
  EXPECT_EQ(dsv4_export_indices(nullptr, &a), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ((dsv4_export_args_init)(nullptr, sizeof(dsv4_export_args)),
            DSV4_STATUS_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dsv4test
