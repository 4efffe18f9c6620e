// dsv4_run captured in a graph (CUDA graph / hipGraph) and replayed with new inputs: a paged C4A
// step (MTP decodes, a prefill chunk, padding rows) whose batch description, caches, q and sinks
// all change between replays in the same device buffers, as an engine's persistent graph buffers
// do. The first replay must equal an eager dsv4_run of the same inputs bit for bit, and every
// replay the float64 reference (spec 2.4 decode tolerances). Devices without graphs (CPU) skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "compare.h"
#include "dsv4/dsv4.h"
#include "reference.h"
#include "reference_paged.h"
#include "test_device.h"
#include "test_env.h"
#include "test_util.h"

namespace dsv4test {
namespace {

constexpr int kTokens = 12;  // rows of q (the graph's fixed shape); the tail is padding
constexpr int kRequests = 4;
constexpr int kHeads = 16;
constexpr int kWindow = 32;
constexpr int kTopk = 24;
constexpr int kSwaBlock = 16;
constexpr int kCmpBlock = 8;  // compressed entries per block (32 tokens at ratio 4)
constexpr int kMaxSeq = 300;  // context + query of any request
constexpr int kSwaCols = 20;  // ceil(kMaxSeq / kSwaBlock) + spare
constexpr int kCmpCols = 12;  // ceil(kMaxSeq / 4 / kCmpBlock) + spare
constexpr int kDv = 512;

// One step's inputs (host side).
struct StepInputs {
  RefPagedBatch batch;
  std::vector<uint16_t> q;      // [T][H][512] bf16
  std::vector<float> sink;      // [H]
  std::vector<float> swa_rows;  // every SWA slot's row, [slots][512]
  std::vector<float> cmp_rows;  // every compressed slot's row
};

RefPagedConfig config() {
  RefPagedConfig c;
  c.compress_ratio = 4;
  c.window = kWindow;
  c.swa_block_size = kSwaBlock;
  c.cmp_block_size = kCmpBlock;
  c.index_topk = kTopk;
  c.decode_threshold = 2;
  return c;
}

constexpr int64_t kSwaBlocks = kRequests * kSwaCols;
constexpr int64_t kCmpBlocks = kRequests * kCmpCols;

// A random mixed step: MTP decodes (query_len 1-2) first, then prefill chunks, a padding token
// inside a request now and then, and padding rows after the last request.
StepInputs make_step(Rng& rng) {
  StepInputs s;
  RefPagedBatch& b = s.batch;
  b.num_tokens = kTokens;
  b.swa_bt_cols = kSwaCols;
  b.cmp_bt_cols = kCmpCols;
  std::vector<int> qlen(kRequests);
  int used = 0;
  for (int r = 0; r < kRequests; ++r) {
    const int left = kTokens - used - (kRequests - 1 - r);
    qlen[static_cast<size_t>(r)] = r < 2 ? static_cast<int>(rng.randint(1, 2))
                                         : static_cast<int>(rng.randint(1, std::max(1, left - 1)));
    used += qlen[static_cast<size_t>(r)];
  }
  b.query_start_loc.assign(1, 0);
  for (int r = 0; r < kRequests; ++r) {
    b.query_start_loc.push_back(b.query_start_loc.back() + qlen[static_cast<size_t>(r)]);
    b.seq_lens.push_back(static_cast<int32_t>(
        rng.randint(qlen[static_cast<size_t>(r)], kMaxSeq)));  // context of any length
  }
  // Block tables: each request's blocks a random choice of the cache's blocks.
  auto table = [&](int64_t blocks, int cols) {
    std::vector<int32_t> perm(static_cast<size_t>(blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen());
    return std::vector<int32_t>(perm.begin(), perm.begin() + kRequests * cols);
  };
  b.swa_block_table = table(kSwaBlocks, kSwaCols);
  b.cmp_block_table = table(kCmpBlocks, kCmpCols);
  b.slot_mapping.assign(kTokens, -1);
  b.topk_indices.assign(static_cast<size_t>(kTokens * kTopk), -1);
  for (int r = 0; r < kRequests; ++r) {
    const int first = b.query_start_loc[static_cast<size_t>(r)];
    const int n = qlen[static_cast<size_t>(r)];
    for (int i = 0; i < n; ++i) {
      const int t = first + i;
      const int64_t p = b.seq_lens[static_cast<size_t>(r)] - n + i;
      b.slot_mapping[static_cast<size_t>(t)] =
          rng.uniform(0, 1) < 0.1
              ? -1
              : b.swa_block_table[static_cast<size_t>(r * kSwaCols + p / kSwaBlock)] * kSwaBlock +
                    static_cast<int32_t>(p % kSwaBlock);
      // The indexer's choice: distinct visible entries, best first, -1 after.
      const int64_t visible = (p + 1) / 4;
      std::vector<int32_t> local(static_cast<size_t>(visible));
      std::iota(local.begin(), local.end(), 0);
      std::shuffle(local.begin(), local.end(), rng.gen());
      for (int64_t k = 0; k < std::min<int64_t>(visible, kTopk); ++k)
        b.topk_indices[static_cast<size_t>(t * kTopk + k)] = local[static_cast<size_t>(k)];
    }
  }
  s.q.resize(static_cast<size_t>(kTokens * kHeads * kDv));
  for (auto& x : s.q) x = ref_double_to_bf16(std::clamp(rng.normal(), -1.0, 1.0));
  s.sink.resize(kHeads);
  for (auto& x : s.sink) x = static_cast<float>(2.0 + rng.normal());
  s.sink[0] = -std::numeric_limits<float>::infinity();
  s.sink[1] = std::numeric_limits<float>::infinity();
  auto rows = [&](int64_t slots) {
    std::vector<float> v(static_cast<size_t>(slots * kDv));
    for (auto& x : v) x = static_cast<float>(std::clamp(rng.normal() / 10.0, -1.0, 1.0));
    return v;
  };
  s.swa_rows = rows(kSwaBlocks * kSwaBlock);
  s.cmp_rows = rows(kCmpBlocks * kCmpBlock);
  return s;
}

class GraphReplay : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GraphReplay, NewInputsBetweenReplaysMatchTheReference) {
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  const uint32_t layout = GetParam();
  std::string err;
  CtxPtr ctx = make_test_ctx(g_device, 0, &err);
  ASSERT_TRUE(ctx) << err;
  const dsv4_device dev = g_device->device();
  Rng rng(case_seed("graph_replay_" + std::to_string(layout)));

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.mode = DSV4_MODE_PAGED;
  po.num_heads = kHeads;
  po.max_tokens = kTokens;
  po.swa_cache.layout = layout;
  po.swa_cache.block_size = kSwaBlock;
  po.extra_cache.layout = layout;
  po.extra_cache.block_size = kCmpBlock;
  po.compress_ratio = 4;
  po.compressed_block_tokens = 4 * kCmpBlock;
  po.window = kWindow;
  po.index_topk = kTopk;
  po.decode_threshold = 2;
  po.max_requests = kRequests;
  po.max_swa_blocks_per_request = kSwaCols;
  po.max_cmp_blocks_per_request = kCmpCols;
  dsv4_plan* raw = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx.get(), &po, &raw), DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr plan(raw);
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);

  // The persistent buffers every step writes into.
  const int64_t swa_stride = ref_layout_min_block_bytes(layout, kSwaBlock);
  const int64_t cmp_stride = ref_layout_min_block_bytes(layout, kCmpBlock);
  DeviceBuffer swa(g_device, static_cast<size_t>(kSwaBlocks * swa_stride));
  DeviceBuffer cmp(g_device, static_cast<size_t>(kCmpBlocks * cmp_stride));
  DeviceBuffer q(g_device, static_cast<size_t>(kTokens * kHeads * kDv * 2));
  DeviceBuffer out(g_device, static_cast<size_t>(kTokens * kHeads * kDv * 2));
  DeviceBuffer lse(g_device, static_cast<size_t>(kTokens * kHeads * 4));
  DeviceBuffer sink(g_device, kHeads * 4);
  DeviceBuffer qsl(g_device, (kRequests + 1) * 4), seq(g_device, kRequests * 4);
  DeviceBuffer swa_bt(g_device, kRequests * kSwaCols * 4),
      cmp_bt(g_device, kRequests * kCmpCols * 4);
  DeviceBuffer slots(g_device, kTokens * 4), topk(g_device, kTokens * kTopk * 4);
  DeviceBuffer ws(g_device, ws_bytes);
  DeviceBuffer row_values(g_device, static_cast<size_t>(kSwaBlocks * kSwaBlock * kDv * 4));
  DeviceBuffer row_slots(g_device, static_cast<size_t>(kSwaBlocks * kSwaBlock * 4));

  TensorView qt(q.get(), dev, kBf16, {kTokens, kHeads, kDv});
  TensorView ot(out.get(), dev, kBf16, {kTokens, kHeads, kDv});
  TensorView lt(lse.get(), dev, kF32, {kTokens, kHeads});
  TensorView st(sink.get(), dev, kF32, {kHeads});
  TensorView swa_t(swa.get(), dev, kU8, {kSwaBlocks, swa_stride});
  TensorView cmp_t(cmp.get(), dev, kU8, {kCmpBlocks, cmp_stride});
  TensorView qsl_t(qsl.get(), dev, kI32, {kRequests + 1});
  TensorView seq_t(seq.get(), dev, kI32, {kRequests});
  TensorView swa_bt_t(swa_bt.get(), dev, kI32, {kRequests, kSwaCols});
  TensorView cmp_bt_t(cmp_bt.get(), dev, kI32, {kRequests, kCmpCols});
  TensorView slots_t(slots.get(), dev, kI32, {kTokens});
  TensorView topk_t(topk.get(), dev, kI32, {kTokens, kTopk});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = qt.get();
  a.swa_cache = swa_t.get();
  a.extra_cache = cmp_t.get();
  a.attn_sink = st.get();
  a.out = ot.get();
  a.lse = lt.get();
  a.query_start_loc = qsl_t.get();
  a.seq_lens = seq_t.get();
  a.swa_block_table = swa_bt_t.get();
  a.cmp_block_table = cmp_bt_t.get();
  a.slot_mapping = slots_t.get();
  a.topk_indices = topk_t.get();
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.stream = g_device->stream();

  // Every slot of a cache rewritten through dsv4_kv_write (outside the graph, like an engine's
  // KV insert); the host copy feeds the reference.
  auto write_cache = [&](DeviceBuffer& cache, int64_t blocks, int64_t block, int64_t stride,
                         const std::vector<float>& values) {
    const int64_t n = blocks * block;
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    row_values.upload(values);
    row_slots.upload(all);
    TensorView vt(row_values.get(), dev, kF32, {n, kDv});
    TensorView sl(row_slots.get(), dev, kI32, {n});
    TensorView ct(cache.get(), dev, kU8, {blocks, stride});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc.layout = layout;
    w.cache_desc.block_size = static_cast<int32_t>(block);
    w.cache_desc.block_stride_bytes = stride;
    w.values = vt.get();
    w.slots = sl.get();
    w.cache = ct.get();
    w.stream = g_device->stream();
    EXPECT_EQ(dsv4_kv_write(ctx.get(), &w), DSV4_STATUS_OK) << dsv4_last_error_message();
    return cache.download<uint8_t>();
  };

  auto upload = [&](const StepInputs& s, std::vector<uint8_t>* swa_host,
                    std::vector<uint8_t>* cmp_host) {
    *swa_host = write_cache(swa, kSwaBlocks, kSwaBlock, swa_stride, s.swa_rows);
    *cmp_host = write_cache(cmp, kCmpBlocks, kCmpBlock, cmp_stride, s.cmp_rows);
    q.upload(s.q);
    sink.upload(s.sink);
    qsl.upload(s.batch.query_start_loc);
    seq.upload(s.batch.seq_lens);
    swa_bt.upload(s.batch.swa_block_table);
    cmp_bt.upload(s.batch.cmp_block_table);
    slots.upload(s.batch.slot_mapping);
    topk.upload(s.batch.topk_indices);
    out.fill(0xFF);
    lse.fill(0xFF);
  };

  auto check = [&](const StepInputs& s, const std::vector<uint8_t>& swa_host,
                   const std::vector<uint8_t>& cmp_host, int step) {
    SCOPED_TRACE("step " + std::to_string(step) + ": " + ref_describe_batch(s.batch) + ", " +
                 seed_note());
    const RefPagedLists lists = ref_build_paged_lists(config(), s.batch);
    RefProblem rp;
    rp.num_tokens = kTokens;
    rp.num_heads = kHeads;
    rp.head_dim_qk = 512;
    rp.scale = 1.0 / std::sqrt(512.0);
    rp.scale = static_cast<double>(static_cast<float>(rp.scale));
    for (uint16_t x : s.q) rp.q.push_back(ref_bf16_to_double(x));
    for (float x : s.sink) rp.sink.push_back(static_cast<double>(x));
    rp.main = RefCache{swa_host.data(), layout, kSwaBlock, swa_stride, kSwaBlocks, 1.0, 0};
    rp.extra = RefCache{cmp_host.data(), layout, kCmpBlock, cmp_stride, kCmpBlocks, 1.0, 0};
    rp.main_lists = lists.swa;
    rp.extra_lists = lists.cmp;
    const RefResult want = reference_attention(rp);
    const std::vector<uint16_t> got_out = out.download<uint16_t>();
    const std::vector<float> got_lse = lse.download<float>();
    std::vector<double> got_o, got_l;
    for (uint16_t x : got_out) got_o.push_back(ref_bf16_to_double(x));
    for (float x : got_lse) got_l.push_back(static_cast<double>(x));
    EXPECT_TRUE(compare_close(got_o, want.out, kDecodeOutTol, "out"));
    EXPECT_TRUE(compare_close(got_l, want.lse, kDecodeLseTol, "lse"));
    return got_out;
  };

  // Step 0: eager, then the same inputs captured and replayed: identical bits.
  StepInputs s0 = make_step(rng);
  std::vector<uint8_t> swa_host, cmp_host;
  upload(s0, &swa_host, &cmp_host);
  ASSERT_EQ(dsv4_run(plan.get(), &a), DSV4_STATUS_OK) << dsv4_last_error_message();
  g_device->synchronize();
  const std::vector<uint16_t> eager = check(s0, swa_host, cmp_host, 0);
  if (!g_device->begin_capture()) GTEST_SKIP() << "the test device has no graphs";
  const dsv4_status captured = dsv4_run(plan.get(), &a);
  ASSERT_TRUE(g_device->end_capture());
  ASSERT_EQ(captured, DSV4_STATUS_OK) << dsv4_last_error_message();
  out.fill(0xFF);
  lse.fill(0xFF);
  ASSERT_TRUE(g_device->replay());
  g_device->synchronize();
  EXPECT_TRUE(out.download<uint16_t>() == eager) << "the replay differs from the eager run";

  // New batch, caches, q and sinks in the same buffers before every replay.
  for (int step = 1; step <= 3; ++step) {
    const StepInputs s = make_step(rng);
    upload(s, &swa_host, &cmp_host);
    ASSERT_TRUE(g_device->replay());
    g_device->synchronize();
    check(s, swa_host, cmp_host, step);
  }
}

std::string layout_name(const ::testing::TestParamInfo<uint32_t>& p) {
  return p.param == DSV4_KV_LAYOUT_BF16 ? "bf16" : "fp8v4";
}

INSTANTIATE_TEST_SUITE_P(Layouts, GraphReplay,
                         ::testing::Values(DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16),
                         layout_name);

}  // namespace
}  // namespace dsv4test
