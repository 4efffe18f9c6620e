// A key row of NaN values propagates through the CPU module's key splits: a token whose only
// valid key is a NaN row gets NaN out and lse (spec 2.3: NaN in, NaN out), with one worker and
// with several, whose key splits each hold a state of their own. The split holding the NaN key
// keeps its running max at -inf (max ignores NaN) with a NaN sum, and the merge of the splits'
// states must carry that NaN rather than take the split for an empty one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dsv4/dsv4.h"

namespace {

constexpr int kHeads = 8;
constexpr int kDim = 512;
constexpr int kTopk = 256;  // four 64-key chunks (AVX2), one 256-key chunk elsewhere
constexpr int kBlock = 64;
constexpr int kBlocks = 8;
constexpr int64_t kRowBytes = kDim * 2;  // bf16 layout
constexpr int kNanRow = 5;

dsv4_dtype dtype(uint8_t code, uint8_t bits) { return dsv4_dtype{code, bits, 1}; }

struct Tensor {
  std::vector<int64_t> shape;
  dsv4_tensor t{};
  Tensor(void* data, std::vector<int64_t> dims, dsv4_dtype type) : shape(std::move(dims)) {
    t.data = data;
    t.device = dsv4_device{DSV4_DEVICE_CPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = type;
    t.shape = shape.data();
  }
};

uint16_t bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// Runs one token whose main list holds the NaN row, then the keys `tail` more valid rows after
// it (0: none), on a CPU context of `threads` workers; returns out and lse.
void run(int threads, int tail, std::vector<uint16_t>* out, std::vector<float>* lse) {
  dsv4_ctx_options co;
  dsv4_ctx_options_init(&co);
  co.backend = "cpu";
  co.num_threads = threads;
  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&co, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = kHeads;
  po.max_tokens = 1;
  po.topk = kTopk;
  po.swa_cache.layout = DSV4_KV_LAYOUT_BF16;
  po.swa_cache.block_size = kBlock;
  dsv4_plan* plan = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx, &po, &plan), DSV4_STATUS_OK) << dsv4_last_error_message();

  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> cache(static_cast<size_t>(kBlocks * kBlock) * kDim);
  for (auto& x : cache) x = bf16(nd(rng));
  std::fill_n(cache.begin() + kNanRow * kDim, kDim, uint16_t{0x7fc0});  // a quiet NaN row
  std::vector<uint16_t> q(static_cast<size_t>(kHeads) * kDim);
  for (auto& x : q) x = bf16(0.1f * nd(rng));
  std::vector<int32_t> idx(kTopk, -1);
  idx[0] = kNanRow;  // first, so that it lands in the first key split
  for (int i = 0; i < tail; ++i) idx[static_cast<size_t>(kTopk - 1 - i)] = 100 + i;
  out->assign(static_cast<size_t>(kHeads) * kDim, 0);
  lse->assign(kHeads, 0.0f);

  Tensor tq(q.data(), {1, kHeads, kDim}, dtype(DSV4_DTYPE_CODE_BFLOAT, 16));
  Tensor tc(cache.data(), {kBlocks, kBlock * kRowBytes}, dtype(DSV4_DTYPE_CODE_UINT, 8));
  Tensor ti(idx.data(), {1, kTopk}, dtype(DSV4_DTYPE_CODE_INT, 32));
  Tensor to(out->data(), {1, kHeads, kDim}, dtype(DSV4_DTYPE_CODE_BFLOAT, 16));
  Tensor tl(lse->data(), {1, kHeads}, dtype(DSV4_DTYPE_CODE_FLOAT, 32));
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan, &ws_bytes), DSV4_STATUS_OK);
  std::vector<uint8_t> ws(ws_bytes + 1);
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = &tq.t;
  a.swa_cache = &tc.t;
  a.indices = &ti.t;
  a.out = &to.t;
  a.lse = &tl.t;
  a.workspace = ws.data();
  a.workspace_bytes = ws_bytes;
  EXPECT_EQ(dsv4_run(plan, &a), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_plan_destroy(plan);
  dsv4_ctx_destroy(ctx);
}

bool is_nan_bf16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

TEST(CpuNanKey, ALoneNanKeyGivesNanWhateverTheSplits) {
  for (int threads : {1, 2, 4, 8}) {
    for (int tail : {0, 3}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", valid keys after the NaN row " +
                   std::to_string(tail));
      std::vector<uint16_t> out;
      std::vector<float> lse;
      run(threads, tail, &out, &lse);
      for (int h = 0; h < kHeads; ++h) {
        EXPECT_TRUE(std::isnan(lse[static_cast<size_t>(h)]))
            << "head " << h << " lse " << lse[static_cast<size_t>(h)];
        int not_nan = 0;
        for (int d = 0; d < kDim; ++d)
          not_nan += !is_nan_bf16(out[static_cast<size_t>(h) * kDim + static_cast<size_t>(d)]);
        EXPECT_EQ(not_nan, 0) << "head " << h;
      }
    }
  }
}

}  // namespace
