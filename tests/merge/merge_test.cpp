// dsv4_merge (spec 12.2): attention over a key set split into 2-8 random disjoint parts, each part
// run through dsv4_run without the sink, then merged with the sink, equals the float64 reference
// over the whole set within the spec's tolerances. Runs on the test device (DSV4_TEST_DEVICE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compare.h"
#include "dsv4/dsv4.h"
#include "reference.h"
#include "test_device.h"
#include "test_env.h"
#include "test_util.h"

namespace dsv4test {
namespace {

constexpr int64_t kDv = 512;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};

// Where the parts come from: dsv4_run with bf16 out, dsv4_run with fp32 out (out_dtype), or the
// float64 reference rounded to fp32.
enum class Parts { kRunBf16, kRunF32, kReferenceF32 };

struct MergeCase {
  std::string name;
  uint32_t layout;
  int heads;
  int tokens;
  int topk;
  int parts;
  bool sink;
  Parts source;
  bool f32() const { return source != Parts::kRunBf16; }
};

std::ostream& operator<<(std::ostream& os, const MergeCase& c) { return os << c.name; }

class Merge : public ::testing::TestWithParam<MergeCase> {
 protected:
  void SetUp() override {
    if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
    std::string error;
    ctx_ = make_test_ctx(g_device, 0, &error);
    ASSERT_TRUE(ctx_) << error;
  }
  CtxPtr ctx_;
};

// One run of explicit-mode attention over `lists` ([T][topk], -1 = none) without the sink: out
// (bf16, or fp32 with out_dtype) and fp32 lse written at the given device addresses. Sets
// *unsupported (and runs nothing) when the backend refuses the plan as UNSUPPORTED.
void run_part(dsv4_ctx* ctx, const MergeCase& c, const dsv4_kv_cache_desc& desc,
              DeviceBuffer& cache, int64_t num_blocks, DeviceBuffer& q,
              const std::vector<int32_t>& lists, void* out, void* lse, std::string* unsupported) {
  TestDevice* dev = g_device;
  const int64_t T = c.tokens, H = c.heads;
  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = c.heads;
  po.max_tokens = c.tokens;
  po.swa_cache = desc;
  po.topk = c.topk;
  if (c.f32()) po.out_dtype = kF32;
  dsv4_plan* raw = nullptr;
  const dsv4_status st = dsv4_plan_create(ctx, &po, &raw);
  if (st == DSV4_STATUS_UNSUPPORTED) {
    *unsupported = dsv4_last_error_message();
    return;
  }
  ASSERT_EQ(st, DSV4_STATUS_OK) << dsv4_last_error_message();
  PlanPtr plan(raw);
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);
  DeviceBuffer ws(dev, ws_bytes);
  DeviceBuffer idx = to_device(dev, lists);
  const dsv4_device d = dev->device();
  TensorView tq(q.get(), d, kBf16, {T, H, kDv});
  TensorView tc(cache.get(), d, kU8, {num_blocks, desc.block_stride_bytes});
  TensorView ti(idx.get(), d, kI32, {T, c.topk});
  TensorView to(out, d, c.f32() ? kF32 : kBf16, {T, H, kDv});
  TensorView tl(lse, d, kF32, {T, H});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = tq.get();
  a.swa_cache = tc.get();
  a.indices = ti.get();
  a.out = to.get();
  a.lse = tl.get();
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.stream = dev->stream();
  ASSERT_EQ(dsv4_run(plan.get(), &a), DSV4_STATUS_OK) << dsv4_last_error_message();
}

TEST_P(Merge, PartsMergeToTheWholeSet) {
  const MergeCase& c = GetParam();
  SCOPED_TRACE(c.name + ", " + seed_note());
  Rng rng(case_seed(c.name));
  TestDevice* dev = g_device;
  const dsv4_device d = dev->device();
  const int64_t T = c.tokens, H = c.heads, K = c.topk, P = c.parts, bs = 61;
  const int64_t num_blocks = (2 * K + bs - 1) / bs + 1;
  const int64_t capacity = num_blocks * bs;

  // Cache: NaN-filled, the slots a list references written with dsv4_kv_write.
  dsv4_kv_cache_desc desc{};
  desc.layout = c.layout;
  desc.block_size = static_cast<int32_t>(bs);
  desc.block_stride_bytes = ref_layout_min_block_bytes(c.layout, bs);
  desc.kv_scale = 1.0f;
  DeviceBuffer cache(dev, static_cast<size_t>(num_blocks * desc.block_stride_bytes));
  cache.fill(0xFF);

  // Whole lists: K distinct slots per token (a few invalid, some tokens with nothing valid).
  std::vector<int32_t> whole(static_cast<size_t>(T * K), -1);
  std::vector<char> used(static_cast<size_t>(capacity), 0);
  for (int64_t t = 0; t < T; ++t) {
    if (t == T - 1) continue;  // a token with no key in any part
    std::vector<int32_t> slots(static_cast<size_t>(capacity));
    for (int64_t i = 0; i < capacity; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::shuffle(slots.begin(), slots.end(), rng.gen());
    const int64_t n = rng.randint(K / 2, K);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = rng.uniform(0, 1) < 0.05 ? -1 : slots[static_cast<size_t>(i)];
      whole[static_cast<size_t>(t * K + i)] = s;
      if (s >= 0) used[static_cast<size_t>(s)] = 1;
    }
  }
  std::vector<int32_t> written;
  for (int64_t s = 0; s < capacity; ++s)
    if (used[static_cast<size_t>(s)]) written.push_back(static_cast<int32_t>(s));
  {
    std::vector<float> values(written.size() * kDv);
    for (float& v : values) v = static_cast<float>(std::clamp(rng.normal(), -1.0, 1.0));
    DeviceBuffer vb = to_device(dev, values);
    DeviceBuffer sb = to_device(dev, written);
    const int64_t n = static_cast<int64_t>(written.size());
    TensorView tv(vb.get(), d, kF32, {n, kDv});
    TensorView ts(sb.get(), d, kI32, {n});
    TensorView tc(cache.get(), d, kU8, {num_blocks, desc.block_stride_bytes});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = desc;
    w.values = tv.get();
    w.slots = ts.get();
    w.cache = tc.get();
    w.stream = dev->stream();
    ASSERT_EQ(dsv4_kv_write(ctx_.get(), &w), DSV4_STATUS_OK) << dsv4_last_error_message();
  }
  const std::vector<uint8_t> host_cache = cache.download<uint8_t>();

  // q and the sink (finite, -inf and +inf heads).
  std::vector<uint16_t> q(static_cast<size_t>(T * H * kDv));
  for (auto& x : q) x = ref_double_to_bf16(std::clamp(rng.normal(), -1.0, 1.0));
  DeviceBuffer qb = to_device(dev, q);
  std::vector<float> sink;
  if (c.sink) {
    for (int64_t h = 0; h < H; ++h) sink.push_back(static_cast<float>(2.0 + 2.0 * rng.normal()));
    if (H >= 3) {
      sink[1] = -std::numeric_limits<float>::infinity();
      sink[2] = std::numeric_limits<float>::infinity();
    }
  }

  // Each list position goes to one random part (its place in the other parts' lists holds -1).
  std::vector<std::vector<int32_t>> part_lists(static_cast<size_t>(P),
                                               std::vector<int32_t>(whole.size(), -1));
  for (size_t i = 0; i < whole.size(); ++i)
    part_lists[static_cast<size_t>(rng.randint(0, P - 1))][i] = whole[i];

  RefProblem ref;
  ref.num_tokens = T;
  ref.num_heads = H;
  ref.head_dim_qk = kDv;
  ref.q.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) ref.q[i] = ref_bf16_to_double(q[i]);
  ref.scale = static_cast<double>(1.0f / std::sqrt(512.0f));
  ref.main.base = host_cache.data();
  ref.main.layout = c.layout;
  ref.main.block_size = bs;
  ref.main.block_stride_bytes = desc.block_stride_bytes;
  ref.main.num_blocks = num_blocks;
  auto lists_of = [&](const std::vector<int32_t>& flat) {
    std::vector<RefList> l(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      l[static_cast<size_t>(t)].idx.assign(flat.begin() + t * K, flat.begin() + (t + 1) * K);
    return l;
  };

  // Parts: [P, T, H, 512] and [P, T, H], from dsv4_run (bf16) or the float64 reference (fp32).
  const size_t part_elems = static_cast<size_t>(T * H * kDv);
  const size_t part_bytes = part_elems * (c.f32() ? 4 : 2);
  DeviceBuffer parts(dev, static_cast<size_t>(P) * part_bytes);
  DeviceBuffer lse_parts(dev, static_cast<size_t>(P * T * H) * sizeof(float));
  if (c.source == Parts::kReferenceF32) {
    std::vector<float> o(static_cast<size_t>(P) * part_elems), l(static_cast<size_t>(P * T * H));
    for (int64_t p = 0; p < P; ++p) {
      ref.main_lists = lists_of(part_lists[static_cast<size_t>(p)]);
      const RefResult r = reference_attention(ref);
      for (size_t i = 0; i < part_elems; ++i) o[p * part_elems + i] = static_cast<float>(r.out[i]);
      for (int64_t i = 0; i < T * H; ++i) l[p * T * H + i] = static_cast<float>(r.lse[i]);
    }
    parts.upload(o);
    lse_parts.upload(l);
  } else {
    for (int64_t p = 0; p < P; ++p) {
      std::string unsupported;
      run_part(ctx_.get(), c, desc, cache, num_blocks, qb, part_lists[static_cast<size_t>(p)],
               static_cast<uint8_t*>(parts.get()) + p * part_bytes,
               static_cast<uint8_t*>(lse_parts.get()) + p * T * H * 4, &unsupported);
      if (::testing::Test::HasFatalFailure()) return;
      if (!unsupported.empty()) GTEST_SKIP() << "backend refuses the partial plan: " << unsupported;
    }
  }

  // Merge with the sink into poisoned outputs.
  DeviceBuffer out(dev, part_elems * 2), lse(dev, static_cast<size_t>(T * H) * 4);
  out.fill(0x7F);
  lse.fill(0x7F);
  DeviceBuffer sink_b = to_device(dev, sink);
  TensorView tparts(parts.get(), d, c.f32() ? kF32 : kBf16, {P, T, H, kDv});
  TensorView tlse_parts(lse_parts.get(), d, kF32, {P, T, H});
  TensorView tsink(sink_b.get(), d, kF32, {H});
  TensorView tout(out.get(), d, kBf16, {T, H, kDv});
  TensorView tlse(lse.get(), d, kF32, {T, H});
  dsv4_merge_args m;
  dsv4_merge_args_init(&m);
  m.out_parts = tparts.get();
  m.lse_parts = tlse_parts.get();
  m.attn_sink = c.sink ? tsink.get() : nullptr;
  m.out = tout.get();
  m.lse = tlse.get();
  m.stream = dev->stream();
  ASSERT_EQ(dsv4_merge(ctx_.get(), &m), DSV4_STATUS_OK) << dsv4_last_error_message();

  // The whole set through the reference, with the sink.
  ref.main_lists = lists_of(whole);
  for (float s : sink) ref.sink.push_back(static_cast<double>(s));
  const RefResult want = reference_attention(ref);
  const std::vector<uint16_t> got_bits = out.download<uint16_t>();
  const std::vector<float> got_lse_f = lse.download<float>();
  std::vector<double> got(got_bits.size()), got_lse(got_lse_f.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = ref_bf16_to_double(got_bits[i]);
  for (size_t i = 0; i < got_lse.size(); ++i) got_lse[i] = got_lse_f[i];
  if (c.f32()) {
    // fp32 parts carry no rounding of their own: the spec's tolerances hold as they are.
    EXPECT_TRUE(compare_close(got, want.out, kDecodeOutTol, "merged out"));
  } else {
    // bf16 parts add one rounding step each (spec 12.2): an element may also be off by the parts'
    // own rounding, sum_p w_p |o_p| 2^-8 times the sink factor, which cancellation between parts
    // of opposite signs can make larger than the spec's absolute tolerance.
    const std::vector<uint16_t> part_bits = parts.download<uint16_t>();
    const std::vector<float> part_lse = lse_parts.download<float>();
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const double l = want.lse[static_cast<size_t>(t * H + h)];
        if (!std::isfinite(l)) continue;  // the lonely token is checked below
        const double f =
            sink.empty() ? 1.0 : 1.0 / (1.0 + std::exp(static_cast<double>(sink[h]) - l));
        for (int64_t k = 0; k < kDv; ++k) {
          double bound = 0.0;
          for (int64_t p = 0; p < P; ++p) {
            const double lp = part_lse[static_cast<size_t>((p * T + t) * H + h)];
            if (!std::isfinite(lp)) continue;
            const double o = ref_bf16_to_double(
                part_bits[static_cast<size_t>(p) * part_elems + ((t * H + h) * kDv + k)]);
            bound += std::exp(lp - l) * std::fabs(o) * std::ldexp(1.0, -8);
          }
          const size_t i = static_cast<size_t>((t * H + h) * kDv + k);
          const double err = std::fabs(got[i] - want.out[i]);
          const double spec =
              std::max(kDecodeOutTol.abs_tol, kDecodeOutTol.rel_tol * std::fabs(want.out[i]));
          if (!(err <= spec + bound * f)) {
            if (bad++ == 0)
              ADD_FAILURE() << "merged out (t " << t << ", h " << h << ", d " << k << "): got "
                            << got[i] << ", want " << want.out[i] << ", allowed "
                            << spec + bound * f;
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << "elements of the merged out beyond the spec's tolerance plus the parts' "
                         "own bf16 rounding";
  }
  EXPECT_TRUE(compare_close(got_lse, want.lse, kDecodeLseTol, "merged lse"));
  // The token with no key anywhere: out 0 and lse +inf whatever the sink.
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(got_lse[static_cast<size_t>((T - 1) * H + h)], kInf);
    for (int64_t k = 0; k < kDv; ++k)
      EXPECT_EQ(got_bits[static_cast<size_t>(((T - 1) * H + h) * kDv + k)], 0u);
  }
}

std::vector<MergeCase> merge_cases() {
  return {
      {"fp8v4_h16_p2_sink", DSV4_KV_LAYOUT_FP8_V4_584B, 16, 6, 128, 2, true, Parts::kRunBf16},
      {"fp8v4_h64_p5_nosink", DSV4_KV_LAYOUT_FP8_V4_584B, 64, 3, 200, 5, false, Parts::kRunBf16},
      {"bf16_h3_p8_sink", DSV4_KV_LAYOUT_BF16, 3, 9, 96, 8, true, Parts::kRunBf16},
      {"fp16_h8_p3_sink", DSV4_KV_LAYOUT_FP16, 8, 5, 64, 3, true, Parts::kRunBf16},
      {"fp8v4_h16_p6_f32run", DSV4_KV_LAYOUT_FP8_V4_584B, 16, 5, 192, 6, true, Parts::kRunF32},
      {"bf16_h64_p8_f32run", DSV4_KV_LAYOUT_BF16, 64, 3, 256, 8, false, Parts::kRunF32},
      {"bf16_h16_p4_f32ref", DSV4_KV_LAYOUT_BF16, 16, 4, 160, 4, true, Parts::kReferenceF32},
      {"fp8v4_h1_p7_f32ref", DSV4_KV_LAYOUT_FP8_V4_584B, 1, 7, 64, 7, false, Parts::kReferenceF32},
  };
}

INSTANTIATE_TEST_SUITE_P(Merge, Merge, ::testing::ValuesIn(merge_cases()),
                         [](const ::testing::TestParamInfo<MergeCase>& i) { return i.param.name; });

// Arguments: each problem named, nothing written.
TEST(MergeArgs, BadInputNamesTheArgument) {
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  std::string error;
  CtxPtr ctx = make_test_ctx(g_device, 0, &error);
  ASSERT_TRUE(ctx) << error;
  const dsv4_device d = g_device->device();
  const int64_t P = 2, T = 3, H = 4;
  DeviceBuffer parts(g_device, static_cast<size_t>(P * T * H * kDv * 2));
  DeviceBuffer lse_parts(g_device, static_cast<size_t>(P * T * H * 4));
  DeviceBuffer out(g_device, static_cast<size_t>(T * H * kDv * 2));
  parts.fill(0);
  lse_parts.fill(0);
  out.fill(0x5A);
  struct Case {
    const char* what;
    std::vector<int64_t> parts_shape, lse_shape, out_shape;
    dsv4_dtype parts_dtype;
    const char* expect;
  };
  const Case cases[] = {
      {"parts 3-D", {P, T, H}, {P, T, H}, {T, H, kDv}, kBf16, "args->out_parts->ndim"},
      {"parts int32", {P, T, H, kDv}, {P, T, H}, {T, H, kDv}, kI32, "args->out_parts->dtype"},
      {"parts dim 511", {P, T, H, 511}, {P, T, H}, {T, H, kDv}, kBf16, "args->out_parts->shape[3]"},
      {"no parts", {0, T, H, kDv}, {0, T, H}, {T, H, kDv}, kBf16, "at least one part"},
      {"lse heads", {P, T, H, kDv}, {P, T, H + 1}, {T, H, kDv}, kBf16, "args->lse_parts->shape[2]"},
      {"out tokens", {P, T, H, kDv}, {P, T, H}, {T + 1, H, kDv}, kBf16, "args->out->shape[0]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TensorView tp(parts.get(), d, c.parts_dtype, c.parts_shape);
    TensorView tl(lse_parts.get(), d, kF32, c.lse_shape);
    TensorView to(out.get(), d, kBf16, c.out_shape);
    dsv4_merge_args m;
    dsv4_merge_args_init(&m);
    m.out_parts = tp.get();
    m.lse_parts = tl.get();
    m.out = to.get();
    EXPECT_EQ(dsv4_merge(ctx.get(), &m), DSV4_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(dsv4_last_error_message()).find(c.expect), std::string::npos)
        << dsv4_last_error_message();
  }
  dsv4_merge_args m;
  dsv4_merge_args_init(&m);
  EXPECT_EQ(dsv4_merge(ctx.get(), &m), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsv4_last_error_message()).find("args->out_parts"), std::string::npos);
  EXPECT_EQ(dsv4_merge(ctx.get(), nullptr), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dsv4_merge(nullptr, &m), DSV4_STATUS_INVALID_ARGUMENT);
  const std::vector<uint8_t> after = out.download<uint8_t>();
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == 0x5A; }))
      << "a rejected merge wrote its output";
}

}  // namespace
}  // namespace dsv4test
