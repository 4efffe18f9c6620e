// Batch invariance (DSV4_PLAN_FLAG_BATCH_INVARIANT): a row's out, lse and max_logits must be bit
// for bit the same whether its request runs alone, inside a batch, at another place in the batch
// or on a context with another thread count. Random batches (1-256 requests, MTP query lengths
// 1-4, mixed list lengths, invalid entries, NaN-filled unreferenced cache rows), explicit and paged
// mode, through the public API on the test device (DSV4_TEST_DEVICE=cpu|cuda). A backend that
// refuses the flag with UNSUPPORTED is skipped with its reason.
//
// Environment: DSV4_TEST_DEVICE, DSV4_TEST_SEED (reproduce a run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "test_device.h"
#include "test_env.h"
#include "test_util.h"

namespace dsv4test {
namespace {

constexpr int64_t kD = 512;

uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// One KV cache on the device: `blocks` blocks, NaN bytes everywhere except the written slots.
struct Cache {
  dsv4_kv_cache_desc desc{};
  int64_t blocks = 0;
  DeviceBuffer buf;
  TensorView view;
};

void make_cache(TestDevice* dev, dsv4_ctx* ctx, uint32_t layout, int block_size, int64_t blocks,
                const std::vector<int32_t>& slots, Rng& rng, Cache* c) {
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  ASSERT_EQ(dsv4_kv_layout_get_info(layout, block_size, &info), DSV4_STATUS_OK);
  const int64_t stride = info.min_block_stride_bytes + 64 * rng.randint(0, 1);  // padded sometimes
  c->desc = dsv4_kv_cache_desc{layout, block_size, stride, 1.0f, 0};
  c->blocks = blocks;
  c->buf = DeviceBuffer(dev, static_cast<size_t>(blocks * stride));
  c->buf.fill(0xff);  // NaN in every layout: unreferenced rows must never be read
  c->view = TensorView(c->buf.get(), dev->device(), kU8, {blocks, stride});
  if (slots.empty()) return;
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<float> values(static_cast<size_t>(n * kD));
  for (float& v : values) v = static_cast<float>(rng.normal());
  DeviceBuffer dv = to_device(dev, values), ds = to_device(dev, slots);
  TensorView tv(dv.get(), dev->device(), kF32, {n, kD}), ts(ds.get(), dev->device(), kI32, {n});
  dsv4_kv_write_args w;
  dsv4_kv_write_args_init(&w);
  w.cache_desc = c->desc;
  w.values = tv.get();
  w.slots = ts.get();
  w.cache = c->view.get();
  const dsv4_status st = dsv4_kv_write(ctx, &w);
  ASSERT_EQ(st, DSV4_STATUS_OK) << status_text(st);
  dev->synchronize();
}

// What one run produced, per token row: out [H][512] bf16 bits, lse [H], max_logits [H].
struct Rows {
  std::vector<uint16_t> out;
  std::vector<float> lse, max_logits;
};

// Appends token rows [first, first + count) of `all` (H heads) to `dst`.
void append_rows(const Rows& all, int64_t heads, int64_t first, int64_t count, Rows* dst) {
  const auto b = [&](int64_t per) { return static_cast<std::ptrdiff_t>(first * heads * per); };
  const auto e = [&](int64_t per) {
    return static_cast<std::ptrdiff_t>((first + count) * heads * per);
  };
  dst->out.insert(dst->out.end(), all.out.begin() + b(kD), all.out.begin() + e(kD));
  dst->lse.insert(dst->lse.end(), all.lse.begin() + b(1), all.lse.begin() + e(1));
  dst->max_logits.insert(dst->max_logits.end(), all.max_logits.begin() + b(1),
                         all.max_logits.begin() + e(1));
}

void expect_same_bits(const Rows& a, const Rows& b, const std::string& what) {
  ASSERT_EQ(a.out.size(), b.out.size()) << what;
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0) << "out differs " << what;
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0) << "lse differs " << what;
  EXPECT_EQ(std::memcmp(a.max_logits.data(), b.max_logits.data(), a.max_logits.size() * 4), 0)
      << "max_logits differs " << what;
}

// A plan on `ctx`, or an empty pointer with *skip set when the backend refuses the flag.
PlanPtr make_plan(dsv4_ctx* ctx, const dsv4_plan_options& po, std::string* skip) {
  dsv4_plan* plan = nullptr;
  const dsv4_status st = dsv4_plan_create(ctx, &po, &plan);
  if (st == DSV4_STATUS_UNSUPPORTED) {
    *skip = "backend refuses the plan: " + status_text(st);
    return PlanPtr();
  }
  EXPECT_EQ(st, DSV4_STATUS_OK) << status_text(st);
  return PlanPtr(st == DSV4_STATUS_OK ? plan : nullptr);
}

// Runs `args` (q/out/lse/max_logits filled in here from host data) and downloads the rows.
Rows run_rows(TestDevice* dev, dsv4_plan* plan, dsv4_run_args args, const std::vector<uint16_t>& q,
              int64_t tokens, int64_t heads) {
  Rows r;
  DeviceBuffer dq = to_device(dev, q);
  DeviceBuffer dout(dev, static_cast<size_t>(tokens * heads * kD * 2));
  DeviceBuffer dlse(dev, static_cast<size_t>(tokens * heads * 4));
  DeviceBuffer dmax(dev, static_cast<size_t>(tokens * heads * 4));
  TensorView tq(dq.get(), dev->device(), kBf16, {tokens, heads, kD});
  TensorView tout(dout.get(), dev->device(), kBf16, {tokens, heads, kD});
  TensorView tlse(dlse.get(), dev->device(), kF32, {tokens, heads});
  TensorView tmax(dmax.get(), dev->device(), kF32, {tokens, heads});
  size_t ws_bytes = 0;
  EXPECT_EQ(dsv4_plan_get_workspace_size(plan, &ws_bytes), DSV4_STATUS_OK);
  DeviceBuffer ws(dev, ws_bytes);
  args.q = tq.get();
  args.out = tout.get();
  args.lse = tlse.get();
  args.max_logits = tmax.get();
  args.workspace = ws.get();
  args.workspace_bytes = ws_bytes;
  args.stream = dev->stream();
  const dsv4_status st = dsv4_run(plan, &args);
  EXPECT_EQ(st, DSV4_STATUS_OK) << status_text(st);
  if (st != DSV4_STATUS_OK) return r;
  r.out = dout.download<uint16_t>();
  r.lse = dlse.download<float>();
  r.max_logits = dmax.download<float>();
  return r;
}

std::vector<uint16_t> random_q(Rng& rng, int64_t tokens, int64_t heads) {
  std::vector<uint16_t> q(static_cast<size_t>(tokens * heads * kD));
  for (uint16_t& v : q) v = to_bf16(static_cast<float>(rng.normal()));
  return q;
}

// Request r's rows inside a batch laid out in `order`: its first token row.
std::vector<int64_t> first_rows(const std::vector<int>& order, const std::vector<int>& qlen) {
  std::vector<int64_t> first(qlen.size());
  int64_t t = 0;
  for (int r : order) {
    first[static_cast<size_t>(r)] = t;
    t += qlen[static_cast<size_t>(r)];
  }
  return first;
}

struct Contexts {
  CtxPtr one, many;  // 1 worker thread; the default (CPU: every core, at least 3 workers)
};

bool make_contexts(Contexts* c) {
  if (g_device == nullptr) return false;
  std::string err;
  c->one = make_test_ctx(g_device, 1, &err);
  EXPECT_TRUE(c->one) << err;
  c->many = make_test_ctx(g_device, 3, &err);
  EXPECT_TRUE(c->many) << err;
  return c->one && c->many;
}

// ------------------------------------------------------------------------------------------------
// Explicit mode: dense lists [T, topk] + lengths, an extra list, MTP tokens of one request sharing
// their lists (or not).
// ------------------------------------------------------------------------------------------------
struct ExplicitCase {
  std::string name;
  uint32_t layout;
  int heads;
  int requests;
  int topk, extra_topk;
  int block_size;
};

std::ostream& operator<<(std::ostream& os, const ExplicitCase& c) { return os << c.name; }

void run_explicit(const ExplicitCase& c) {
  SCOPED_TRACE(c.name + ", " + seed_note());
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  Contexts ctx;
  ASSERT_TRUE(make_contexts(&ctx));
  Rng rng(case_seed(c.name));
  const int R = c.requests, H = c.heads;
  std::vector<int> qlen(static_cast<size_t>(R));
  for (int& q : qlen) q = static_cast<int>(rng.randint(1, 4));
  const int64_t T = std::accumulate(qlen.begin(), qlen.end(), int64_t{0});

  // Caches: each request owns a random set of rows of each cache; NaN elsewhere.
  const int64_t swa_rows = static_cast<int64_t>(R) * c.topk + 7;
  const int64_t cmp_rows = static_cast<int64_t>(R) * c.extra_topk + 5;
  const int64_t swa_blocks = (swa_rows + c.block_size - 1) / c.block_size;
  const int64_t cmp_blocks = (cmp_rows + c.block_size - 1) / c.block_size;
  const int64_t swa_cap = swa_blocks * c.block_size, cmp_cap = cmp_blocks * c.block_size;
  std::vector<int32_t> swa_perm(static_cast<size_t>(swa_cap)),
      cmp_perm(static_cast<size_t>(cmp_cap));
  std::iota(swa_perm.begin(), swa_perm.end(), 0);
  std::iota(cmp_perm.begin(), cmp_perm.end(), 0);
  std::shuffle(swa_perm.begin(), swa_perm.end(), rng.gen());
  std::shuffle(cmp_perm.begin(), cmp_perm.end(), rng.gen());

  // Per request: its token rows of both lists (per token [topk] + length).
  struct Req {
    std::vector<int32_t> main, extra, main_len, extra_len;
  };
  std::vector<Req> reqs(static_cast<size_t>(R));
  std::vector<int32_t> swa_written, cmp_written;
  const std::vector<int32_t> invalid = {-1, -123456, static_cast<int32_t>(swa_cap) + 3};
  for (int r = 0; r < R; ++r) {
    Req& q = reqs[static_cast<size_t>(r)];
    const bool shared = rng.randint(0, 1) == 1;  // MTP tokens with one list
    for (int s = 0; s < qlen[static_cast<size_t>(r)]; ++s) {
      if (shared && s > 0) {
        const std::vector<int32_t> main0(q.main.begin(), q.main.begin() + c.topk);
        const std::vector<int32_t> extra0(q.extra.begin(), q.extra.begin() + c.extra_topk);
        q.main.insert(q.main.end(), main0.begin(), main0.end());
        q.extra.insert(q.extra.end(), extra0.begin(), extra0.end());
        q.main_len.push_back(q.main_len[0]);
        q.extra_len.push_back(q.extra_len[0]);
        continue;
      }
      // Lengths from 0 to the width (long rows: several chunks of keys, short and empty ones).
      const int ml = static_cast<int>(rng.randint(0, c.topk));
      const int el = static_cast<int>(rng.randint(0, c.extra_topk));
      for (int i = 0; i < c.topk; ++i) {
        int32_t slot = swa_perm[static_cast<size_t>(r * c.topk + i)];
        if (i < ml && rng.randint(0, 15) == 0) slot = rng.pick(invalid);
        if (i >= ml) slot = rng.randint(0, 1) ? -1 : slot;  // beyond the length: anything
        q.main.push_back(slot);
        if (i < ml && slot >= 0 && slot < swa_cap) swa_written.push_back(slot);
      }
      for (int i = 0; i < c.extra_topk; ++i) {
        int32_t slot = cmp_perm[static_cast<size_t>(r * c.extra_topk + i)];
        if (i < el && rng.randint(0, 15) == 0) slot = -1;
        q.extra.push_back(i < el ? slot : -1);
        if (i < el && slot >= 0) cmp_written.push_back(slot);
      }
      q.main_len.push_back(ml);
      q.extra_len.push_back(el);
    }
  }
  std::sort(swa_written.begin(), swa_written.end());
  swa_written.erase(std::unique(swa_written.begin(), swa_written.end()), swa_written.end());
  std::sort(cmp_written.begin(), cmp_written.end());
  cmp_written.erase(std::unique(cmp_written.begin(), cmp_written.end()), cmp_written.end());
  Cache swa, cmp;
  make_cache(g_device, ctx.one.get(), c.layout, c.block_size, swa_blocks, swa_written, rng, &swa);
  make_cache(g_device, ctx.one.get(), c.layout, c.block_size, cmp_blocks, cmp_written, rng, &cmp);
  const std::vector<uint16_t> q_all = random_q(rng, T, H);  // request-major, in request order
  std::vector<float> sink(static_cast<size_t>(H));
  for (float& s : sink) s = static_cast<float>(rng.normal());
  if (H > 1) sink[1] = -INFINITY;
  DeviceBuffer dsink = to_device(g_device, sink);
  TensorView tsink(dsink.get(), g_device->device(), kF32, {H});
  std::vector<int64_t> q_first(static_cast<size_t>(R));
  for (int r = 1; r < R; ++r)
    q_first[static_cast<size_t>(r)] =
        q_first[static_cast<size_t>(r - 1)] + qlen[static_cast<size_t>(r - 1)];

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.flags = DSV4_PLAN_FLAG_BATCH_INVARIANT;
  po.num_heads = H;
  po.max_tokens = static_cast<int32_t>(T);
  po.swa_cache = swa.desc;
  po.extra_cache = cmp.desc;
  po.topk = c.topk;
  po.extra_topk = c.extra_topk;
  std::string skip;
  PlanPtr plan_one = make_plan(ctx.one.get(), po, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  PlanPtr plan_many = make_plan(ctx.many.get(), po, &skip);
  ASSERT_TRUE(plan_one && plan_many);

  // Runs the requests of `order` as one batch on `plan`; returns every request's rows.
  auto run_batch = [&](dsv4_plan* plan, const std::vector<int>& order) {
    std::vector<int32_t> mi, ei, ml, el;
    std::vector<uint16_t> q;
    for (int r : order) {
      const Req& rq = reqs[static_cast<size_t>(r)];
      mi.insert(mi.end(), rq.main.begin(), rq.main.end());
      ei.insert(ei.end(), rq.extra.begin(), rq.extra.end());
      ml.insert(ml.end(), rq.main_len.begin(), rq.main_len.end());
      el.insert(el.end(), rq.extra_len.begin(), rq.extra_len.end());
      const auto qb =
          q_all.begin() + static_cast<std::ptrdiff_t>(q_first[static_cast<size_t>(r)] * H * kD);
      q.insert(q.end(), qb,
               qb + static_cast<std::ptrdiff_t>(qlen[static_cast<size_t>(r)] * H * kD));
    }
    const int64_t n = static_cast<int64_t>(ml.size());
    DeviceBuffer dmi = to_device(g_device, mi), dei = to_device(g_device, ei);
    DeviceBuffer dml = to_device(g_device, ml), del = to_device(g_device, el);
    TensorView tmi(dmi.get(), g_device->device(), kI32, {n, c.topk});
    TensorView tei(dei.get(), g_device->device(), kI32, {n, c.extra_topk});
    TensorView tml(dml.get(), g_device->device(), kI32, {n});
    TensorView tel(del.get(), g_device->device(), kI32, {n});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.swa_cache = swa.view.get();
    a.extra_cache = cmp.view.get();
    a.attn_sink = tsink.get();
    a.indices = tmi.get();
    a.lengths = tml.get();
    a.extra_indices = tei.get();
    a.extra_lengths = tel.get();
    const Rows all = run_rows(g_device, plan, a, q, n, H);
    std::vector<Rows> per(static_cast<size_t>(R));
    if (all.out.empty()) return per;
    const std::vector<int64_t> first = first_rows(order, qlen);
    for (int r : order)
      append_rows(all, H, first[static_cast<size_t>(r)], qlen[static_cast<size_t>(r)],
                  &per[static_cast<size_t>(r)]);
    return per;
  };

  std::vector<int> order(static_cast<size_t>(R));
  std::iota(order.begin(), order.end(), 0);
  const std::vector<Rows> in_order = run_batch(plan_many.get(), order);
  std::shuffle(order.begin(), order.end(), rng.gen());
  const std::vector<Rows> shuffled = run_batch(plan_one.get(), order);
  ASSERT_FALSE(in_order.empty() || in_order[0].out.empty());
  // Sampled requests alone, on both contexts.
  const int samples = std::min(R, 6);
  for (int k = 0; k < samples; ++k) {
    const int r = static_cast<int>(rng.randint(0, R - 1));
    const std::string what = "for request " + std::to_string(r) + " (" +
                             std::to_string(qlen[static_cast<size_t>(r)]) + " tokens)";
    expect_same_bits(in_order[static_cast<size_t>(r)], shuffled[static_cast<size_t>(r)],
                     what + ": batch in order (3 threads) vs shuffled (1 thread)");
    const std::vector<Rows> alone = run_batch(k % 2 ? plan_one.get() : plan_many.get(), {r});
    expect_same_bits(in_order[static_cast<size_t>(r)], alone[static_cast<size_t>(r)],
                     what + ": in the batch vs alone");
  }
}

class Explicit : public ::testing::TestWithParam<ExplicitCase> {};
TEST_P(Explicit, RowsAreBitIdenticalAloneAndInAnyBatch) { run_explicit(GetParam()); }

std::vector<ExplicitCase> explicit_cases() {
  return {
      {"fp8v4_h64_b8", DSV4_KV_LAYOUT_FP8_V4_584B, 64, 8, 128, 512, 64},
      {"fp8v4_h8_b1", DSV4_KV_LAYOUT_FP8_V4_584B, 8, 1, 128, 512, 61},
      {"bf16_h16_b37", DSV4_KV_LAYOUT_BF16, 16, 37, 128, 256, 64},
      {"fp8v4_h8_b256", DSV4_KV_LAYOUT_FP8_V4_584B, 8, 256, 64, 128, 64},
      {"fp16_h4_b100", DSV4_KV_LAYOUT_FP16, 4, 100, 128, 64, 53},
      {"fp8v4_h128_b3", DSV4_KV_LAYOUT_FP8_V4_584B, 128, 3, 128, 1024, 64},
  };
}
INSTANTIATE_TEST_SUITE_P(BatchInvariance, Explicit, ::testing::ValuesIn(explicit_cases()),
                         [](const ::testing::TestParamInfo<ExplicitCase>& i) {
                           return i.param.name;
                         });

// ------------------------------------------------------------------------------------------------
// Paged mode: C4A (SWA window + indexer top-k) or C128A, MTP decodes and prefill chunks, padding
// tokens, requests in any order.
// ------------------------------------------------------------------------------------------------
struct PagedCase {
  std::string name;
  uint32_t layout;
  int heads;
  int requests;
  int ratio;  // 4 or 128
  int swa_block;
};

std::ostream& operator<<(std::ostream& os, const PagedCase& c) { return os << c.name; }

void run_paged(const PagedCase& c) {
  SCOPED_TRACE(c.name + ", " + seed_note());
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  Contexts ctx;
  ASSERT_TRUE(make_contexts(&ctx));
  Rng rng(case_seed(c.name));
  const int R = c.requests, H = c.heads, W = 128, K = 64;
  const int cmp_block = c.ratio == 4 ? 64 : 2;
  std::vector<int> qlen(static_cast<size_t>(R)), seq(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const bool prefill = rng.randint(0, 4) == 0;
    qlen[static_cast<size_t>(r)] =
        static_cast<int>(prefill ? rng.randint(5, 12) : rng.randint(1, 4));
    seq[static_cast<size_t>(r)] = static_cast<int>(rng.randint(qlen[static_cast<size_t>(r)], 700));
  }
  const int max_seq = *std::max_element(seq.begin(), seq.end());
  const int swa_cols = (max_seq + c.swa_block - 1) / c.swa_block;
  const int cmp_entries = max_seq / c.ratio + 1;
  const int cmp_cols = (cmp_entries + cmp_block - 1) / cmp_block;
  // Every request owns its blocks (a random permutation of the pool).
  const int64_t swa_blocks = static_cast<int64_t>(R) * swa_cols + 3;
  const int64_t cmp_blocks = static_cast<int64_t>(R) * cmp_cols + 3;
  std::vector<int32_t> sp(static_cast<size_t>(swa_blocks)), cp(static_cast<size_t>(cmp_blocks));
  std::iota(sp.begin(), sp.end(), 0);
  std::iota(cp.begin(), cp.end(), 0);
  std::shuffle(sp.begin(), sp.end(), rng.gen());
  std::shuffle(cp.begin(), cp.end(), rng.gen());
  std::vector<int32_t> swa_bt(static_cast<size_t>(R) * swa_cols),
      cmp_bt(static_cast<size_t>(R) * cmp_cols);
  std::vector<int32_t> swa_slots, cmp_slots;
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < swa_cols; ++k)
      swa_bt[static_cast<size_t>(r * swa_cols + k)] = sp[static_cast<size_t>(r * swa_cols + k)];
    for (int k = 0; k < cmp_cols; ++k)
      cmp_bt[static_cast<size_t>(r * cmp_cols + k)] = cp[static_cast<size_t>(r * cmp_cols + k)];
    for (int p = std::max(0, seq[static_cast<size_t>(r)] - W - 12); p < seq[static_cast<size_t>(r)];
         ++p)
      swa_slots.push_back(swa_bt[static_cast<size_t>(r * swa_cols + p / c.swa_block)] *
                              c.swa_block +
                          p % c.swa_block);
    for (int e = 0; e < seq[static_cast<size_t>(r)] / c.ratio; ++e)
      cmp_slots.push_back(cmp_bt[static_cast<size_t>(r * cmp_cols + e / cmp_block)] * cmp_block +
                          e % cmp_block);
  }
  Cache swa, cmp;
  make_cache(g_device, ctx.one.get(), c.layout, c.swa_block, swa_blocks, swa_slots, rng, &swa);
  make_cache(g_device, ctx.one.get(), c.layout, cmp_block, cmp_blocks, cmp_slots, rng, &cmp);

  // Per request, per token: q rows, slot mapping (some padding), C4A top-k rows.
  struct Req {
    std::vector<int32_t> slot, topk;
  };
  std::vector<Req> reqs(static_cast<size_t>(R));
  int64_t T = 0;
  for (int r = 0; r < R; ++r) {
    Req& q = reqs[static_cast<size_t>(r)];
    for (int i = 0; i < qlen[static_cast<size_t>(r)]; ++i) {
      const int p = seq[static_cast<size_t>(r)] - qlen[static_cast<size_t>(r)] + i;
      const int32_t slot =
          swa_bt[static_cast<size_t>(r * swa_cols + p / c.swa_block)] * c.swa_block +
          p % c.swa_block;
      q.slot.push_back(rng.randint(0, 19) == 0 ? -1 : slot);
      // Top-k: distinct visible entries in random order as a prefix, -1 after.
      const int visible = (p + 1) / 4;
      std::vector<int32_t> pick(static_cast<size_t>(visible));
      std::iota(pick.begin(), pick.end(), 0);
      std::shuffle(pick.begin(), pick.end(), rng.gen());
      const int n = std::min<int>(visible, static_cast<int>(rng.randint(0, K)));
      for (int k = 0; k < K; ++k) q.topk.push_back(k < n ? pick[static_cast<size_t>(k)] : -1);
    }
    T += qlen[static_cast<size_t>(r)];
  }
  const std::vector<uint16_t> q_all = random_q(rng, T, H);
  std::vector<int64_t> q_first(static_cast<size_t>(R));
  for (int r = 1; r < R; ++r)
    q_first[static_cast<size_t>(r)] =
        q_first[static_cast<size_t>(r - 1)] + qlen[static_cast<size_t>(r - 1)];
  std::vector<float> sink(static_cast<size_t>(H));
  for (float& s : sink) s = static_cast<float>(rng.normal());
  DeviceBuffer dsink = to_device(g_device, sink);
  TensorView tsink(dsink.get(), g_device->device(), kF32, {H});

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.mode = DSV4_MODE_PAGED;
  po.flags = DSV4_PLAN_FLAG_BATCH_INVARIANT;
  po.num_heads = H;
  po.max_tokens = static_cast<int32_t>(T + 3);
  po.max_requests = R;
  po.swa_cache = swa.desc;
  po.extra_cache = cmp.desc;
  po.compress_ratio = c.ratio;
  po.window = W;
  po.index_topk = K;
  po.decode_threshold = 4;
  po.max_model_len = 8192;
  po.compressed_block_tokens = c.ratio * cmp_block;
  po.max_swa_blocks_per_request = swa_cols;
  po.max_cmp_blocks_per_request = cmp_cols;
  std::string skip;
  PlanPtr plan_one = make_plan(ctx.one.get(), po, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  PlanPtr plan_many = make_plan(ctx.many.get(), po, &skip);
  ASSERT_TRUE(plan_one && plan_many);

  auto run_batch = [&](dsv4_plan* plan, const std::vector<int>& order, int pad_rows) {
    std::vector<int32_t> qsl{0}, sl, sbt, cbt, slot, topk;
    std::vector<uint16_t> q;
    for (int r : order) {
      const Req& rq = reqs[static_cast<size_t>(r)];
      qsl.push_back(qsl.back() + qlen[static_cast<size_t>(r)]);
      sl.push_back(seq[static_cast<size_t>(r)]);
      sbt.insert(sbt.end(), swa_bt.begin() + r * swa_cols, swa_bt.begin() + (r + 1) * swa_cols);
      cbt.insert(cbt.end(), cmp_bt.begin() + r * cmp_cols, cmp_bt.begin() + (r + 1) * cmp_cols);
      slot.insert(slot.end(), rq.slot.begin(), rq.slot.end());
      topk.insert(topk.end(), rq.topk.begin(), rq.topk.end());
      const auto qb =
          q_all.begin() + static_cast<std::ptrdiff_t>(q_first[static_cast<size_t>(r)] * H * kD);
      q.insert(q.end(), qb,
               qb + static_cast<std::ptrdiff_t>(qlen[static_cast<size_t>(r)] * H * kD));
    }
    for (int i = 0; i < pad_rows; ++i) {  // CUDA-graph padding rows after the last request
      slot.push_back(-1);
      topk.insert(topk.end(), K, -1);
      q.insert(q.end(), static_cast<size_t>(H * kD), to_bf16(1.0f));
    }
    const int64_t n = static_cast<int64_t>(slot.size()), nr = static_cast<int64_t>(order.size());
    DeviceBuffer dqsl = to_device(g_device, qsl), dsl = to_device(g_device, sl);
    DeviceBuffer dsbt = to_device(g_device, sbt), dcbt = to_device(g_device, cbt);
    DeviceBuffer dslot = to_device(g_device, slot), dtopk = to_device(g_device, topk);
    TensorView tqsl(dqsl.get(), g_device->device(), kI32, {nr + 1});
    TensorView tsl(dsl.get(), g_device->device(), kI32, {nr});
    TensorView tsbt(dsbt.get(), g_device->device(), kI32, {nr, swa_cols});
    TensorView tcbt(dcbt.get(), g_device->device(), kI32, {nr, cmp_cols});
    TensorView tslot(dslot.get(), g_device->device(), kI32, {n});
    TensorView ttopk(dtopk.get(), g_device->device(), kI32, {n, K});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.swa_cache = swa.view.get();
    a.extra_cache = cmp.view.get();
    a.attn_sink = tsink.get();
    a.query_start_loc = tqsl.get();
    a.seq_lens = tsl.get();
    a.swa_block_table = tsbt.get();
    a.cmp_block_table = tcbt.get();
    a.slot_mapping = tslot.get();
    if (c.ratio == 4) a.topk_indices = ttopk.get();
    const Rows all = run_rows(g_device, plan, a, q, n, H);
    std::vector<Rows> per(static_cast<size_t>(R));
    if (all.out.empty()) return per;
    const std::vector<int64_t> first = first_rows(order, qlen);
    for (int r : order)
      append_rows(all, H, first[static_cast<size_t>(r)], qlen[static_cast<size_t>(r)],
                  &per[static_cast<size_t>(r)]);
    return per;
  };

  std::vector<int> order(static_cast<size_t>(R));
  std::iota(order.begin(), order.end(), 0);
  const std::vector<Rows> in_order = run_batch(plan_many.get(), order, 3);
  std::shuffle(order.begin(), order.end(), rng.gen());
  const std::vector<Rows> shuffled = run_batch(plan_one.get(), order, 0);
  ASSERT_FALSE(in_order.empty() || in_order[0].out.empty());
  const int samples = std::min(R, 6);
  for (int k = 0; k < samples; ++k) {
    const int r = static_cast<int>(rng.randint(0, R - 1));
    const std::string what = "for request " + std::to_string(r) + " (query_len " +
                             std::to_string(qlen[static_cast<size_t>(r)]) + ", seq_len " +
                             std::to_string(seq[static_cast<size_t>(r)]) + ")";
    expect_same_bits(in_order[static_cast<size_t>(r)], shuffled[static_cast<size_t>(r)],
                     what + ": batch in order (3 threads) vs shuffled (1 thread)");
    const std::vector<Rows> alone = run_batch(k % 2 ? plan_one.get() : plan_many.get(), {r}, 0);
    expect_same_bits(in_order[static_cast<size_t>(r)], alone[static_cast<size_t>(r)],
                     what + ": in the batch vs alone");
  }
}

class Paged : public ::testing::TestWithParam<PagedCase> {};
TEST_P(Paged, RowsAreBitIdenticalAloneAndInAnyBatch) { run_paged(GetParam()); }

std::vector<PagedCase> paged_cases() {
  return {
      {"c4a_fp8v4_h16_b24", DSV4_KV_LAYOUT_FP8_V4_584B, 16, 24, 4, 64},
      {"c128a_bf16_h8_b200", DSV4_KV_LAYOUT_BF16, 8, 200, 128, 61},
      {"c4a_fp8v4_h64_b2", DSV4_KV_LAYOUT_FP8_V4_584B, 64, 2, 4, 64},
  };
}
INSTANTIATE_TEST_SUITE_P(BatchInvariance, Paged, ::testing::ValuesIn(paged_cases()),
                         [](const ::testing::TestParamInfo<PagedCase>& i) { return i.param.name; });

}  // namespace
}  // namespace dsv4test
