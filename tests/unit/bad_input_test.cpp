// Bad-input suite on the CPU backend: every malformed call returns the expected status, names the
// argument at fault in dsv4_last_error_message(), and leaves outputs byte-identical (poisoned
// buffers compared before/after).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"

namespace {

constexpr unsigned char kPoison = 0xA5;
constexpr int kHeads = 8;
constexpr int kDim = 512;
constexpr int kTopk = 32;
constexpr int kTokens = 2;     // tokens of the valid call
constexpr int kMaxTokens = 4;  // plan capacity
constexpr int kBlock = 64;
constexpr int kBlocks = 2;
constexpr int64_t kBlockBytes = 37440;  // 584 B layout, 64 entries

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

uint32_t fresh_seed() { return std::random_device{}(); }

dsv4_dtype dtype(uint8_t code, uint8_t bits) { return dsv4_dtype{code, bits, 1}; }
const dsv4_dtype kBf16 = dtype(DSV4_DTYPE_CODE_BFLOAT, 16);
const dsv4_dtype kF32 = dtype(DSV4_DTYPE_CODE_FLOAT, 32);
const dsv4_dtype kI32 = dtype(DSV4_DTYPE_CODE_INT, 32);
const dsv4_dtype kI64 = dtype(DSV4_DTYPE_CODE_INT, 64);
const dsv4_dtype kU8 = dtype(DSV4_DTYPE_CODE_UINT, 8);

// A host tensor that owns its storage and metadata; view() is valid while the Buffer lives.
struct Buffer {
  std::vector<unsigned char> bytes;
  std::vector<int64_t> shape;
  dsv4_tensor tensor{};

  Buffer(std::initializer_list<int64_t> dims, dsv4_dtype type, size_t storage_bytes = 0)
      : shape(dims) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const size_t needed = static_cast<size_t>(count) * type.bits / 8;
    bytes.assign(std::max(needed, storage_bytes), 0);
    tensor.data = bytes.data();
    tensor.device = dsv4_device{DSV4_DEVICE_CPU, 0};
    tensor.ndim = static_cast<int32_t>(shape.size());
    tensor.dtype = type;
    tensor.shape = shape.data();
    tensor.strides = nullptr;
    tensor.byte_offset = 0;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void poison() { std::memset(bytes.data(), kPoison, bytes.size()); }
};

uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// A tensor variant with its own shape/strides arrays (for the malformed cases).
struct Variant {
  int64_t shape[8];
  int64_t strides[8];
  dsv4_tensor tensor;
  Variant(const dsv4_tensor& base, std::initializer_list<int64_t> dims,
          std::initializer_list<int64_t> stride_list = {}) {
    tensor = base;
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
    tensor.ndim = i;
    tensor.shape = shape;
    i = 0;
    for (int64_t s : stride_list) strides[i++] = s;
    tensor.strides = stride_list.size() ? strides : nullptr;
  }
  Variant(const dsv4_tensor& base, dsv4_dtype type) : shape{}, strides{}, tensor(base) {
    tensor.dtype = type;  // shares the base's shape and strides
  }
};

// A different failing call, so a stale message can never satisfy the check: picks a reset whose
// message does not contain `expected`.
void reset_last_error(const std::string& expected) {
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_BF16, 0, &info);
  if (contains(dsv4_last_error_message(), expected))
    (dsv4_run_args_init)(nullptr, sizeof(dsv4_run_args));
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = fresh_seed();
    std::mt19937 rng(seed_);
    dsv4_ctx_options options;
    ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
    options.backend = "cpu";
    ASSERT_EQ(dsv4_ctx_create(&options, &ctx_), DSV4_STATUS_OK) << dsv4_last_error_message();

    ASSERT_EQ(dsv4_plan_options_init(&plan_options_), DSV4_STATUS_OK);
    plan_options_.num_heads = kHeads;
    plan_options_.topk = kTopk;
    plan_options_.max_tokens = kMaxTokens;
    ASSERT_EQ(dsv4_plan_create(ctx_, &plan_options_, &plan_), DSV4_STATUS_OK)
        << dsv4_last_error_message();

    // q: random bf16; storage for kMaxTokens + 4 tokens so a wrongly accepted shape stays in
    // bounds.
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    auto* q16 = reinterpret_cast<uint16_t*>(q_.bytes.data());
    for (size_t i = 0; i < q_.bytes.size() / 2; ++i) q16[i] = to_bf16(uni(rng));
    auto* sink = reinterpret_cast<float*>(sink_.bytes.data());
    for (int h = 0; h < kHeads; ++h) sink[h] = uni(rng);

    // Cache: written with random rows through dsv4_kv_write (every slot of both blocks).
    Buffer values({kBlocks * kBlock, kDim}, kF32);
    Buffer slots({kBlocks * kBlock}, kI32);
    auto* v = reinterpret_cast<float*>(values.bytes.data());
    for (int i = 0; i < kBlocks * kBlock * kDim; ++i) v[i] = 2.0f * uni(rng);
    auto* s = reinterpret_cast<int32_t*>(slots.bytes.data());
    for (int i = 0; i < kBlocks * kBlock; ++i) s[i] = i;
    dsv4_kv_write_args write;
    ASSERT_EQ(dsv4_kv_write_args_init(&write), DSV4_STATUS_OK);
    write.cache_desc = plan_options_.swa_cache;
    write.values = &values.tensor;
    write.slots = &slots.tensor;
    write.cache = &cache_.tensor;
    ASSERT_EQ(dsv4_kv_write(ctx_, &write), DSV4_STATUS_OK) << dsv4_last_error_message();

    auto* idx = reinterpret_cast<int32_t*>(indices_.bytes.data());
    std::uniform_int_distribution<int32_t> slot(-1, kBlocks * kBlock - 1);
    for (int i = 0; i < kTokens * kTopk; ++i) idx[i] = slot(rng);

    ASSERT_EQ(dsv4_run_args_init(&args_), DSV4_STATUS_OK);
    args_.q = &q_view_.tensor;
    args_.swa_cache = &cache_.tensor;
    args_.attn_sink = &sink_.tensor;
    args_.out = &out_view_.tensor;
    args_.lse = &lse_view_.tensor;
    args_.indices = &indices_.tensor;

    // The valid call must succeed; every case below changes exactly one thing.
    ASSERT_EQ(dsv4_run(plan_, &args_), DSV4_STATUS_OK) << dsv4_last_error_message();
  }

  void TearDown() override {
    dsv4_plan_destroy(plan_);
    dsv4_ctx_destroy(ctx_);
  }

  // Runs `args`, expects a status in `allowed`, the message to name `name`, outputs untouched.
  void expect_rejected(const dsv4_plan* plan, const dsv4_run_args* args,
                       std::initializer_list<dsv4_status> allowed, const std::string& name) {
    out_.poison();
    lse_.poison();
    const std::vector<unsigned char> out_before = out_.bytes;
    const std::vector<unsigned char> lse_before = lse_.bytes;
    reset_last_error(name);
    const dsv4_status status = dsv4_run(plan, args);
    const std::string message = dsv4_last_error_message();
    bool ok = false;
    std::string names;
    for (dsv4_status a : allowed) {
      ok = ok || status == a;
      names += std::string(dsv4_status_string(a)) + " ";
    }
    EXPECT_TRUE(ok) << "got " << dsv4_status_string(status) << " (" << message
                    << "), expected one of " << names << "(seed " << seed_ << ")";
    EXPECT_TRUE(contains(message, name)) << "message \"" << message << "\" does not name " << name;
    EXPECT_TRUE(out_.bytes == out_before) << "out was written by a failing dsv4_run";
    EXPECT_TRUE(lse_.bytes == lse_before) << "lse was written by a failing dsv4_run";
  }

  // Shorthand: a copy of the valid args with one change.
  void expect_run_rejected(const std::function<void(dsv4_run_args&)>& change,
                           std::initializer_list<dsv4_status> allowed, const std::string& name) {
    dsv4_run_args args = args_;
    change(args);
    expect_rejected(plan_, &args, allowed, name);
  }

  uint32_t seed_ = 0;
  dsv4_ctx* ctx_ = nullptr;
  dsv4_plan* plan_ = nullptr;
  dsv4_plan_options plan_options_{};
  Buffer q_{{kMaxTokens + 4, kHeads, kDim}, kBf16};
  Buffer out_{{kMaxTokens + 4, kHeads, kDim}, kBf16};
  Buffer lse_{{kMaxTokens + 4, kHeads}, kF32};
  Buffer cache_{{kBlocks, kBlockBytes}, kU8};
  Buffer sink_{{kHeads}, kF32};
  Buffer indices_{{kTokens, kTopk}, kI32, 4 * kMaxTokens* kTopk * 4};
  Variant q_view_{q_.tensor, {kTokens, kHeads, kDim}};
  Variant out_view_{out_.tensor, {kTokens, kHeads, kDim}};
  Variant lse_view_{lse_.tensor, {kTokens, kHeads}};
  dsv4_run_args args_{};
};

constexpr dsv4_status kInvalid = DSV4_STATUS_INVALID_ARGUMENT;
constexpr dsv4_status kMismatch = DSV4_STATUS_PLAN_MISMATCH;

// ------------------------------------------------------------------------------ NULL pointers
TEST_F(BadInput, NullHandlesAndArgs) {
  expect_rejected(nullptr, &args_, {kInvalid}, "plan");
  expect_rejected(plan_, nullptr, {kInvalid}, "args");
}

TEST_F(BadInput, NullRequiredTensors) {
  expect_run_rejected([](dsv4_run_args& a) { a.q = nullptr; }, {kInvalid}, "args->q");
  expect_run_rejected([](dsv4_run_args& a) { a.out = nullptr; }, {kInvalid}, "args->out");
  expect_run_rejected([](dsv4_run_args& a) { a.swa_cache = nullptr; }, {kInvalid},
                      "args->swa_cache");
  expect_run_rejected([](dsv4_run_args& a) { a.indices = nullptr; }, {kInvalid}, "args->indices");
}

TEST_F(BadInput, NullTensorFields) {
  Variant q(q_view_.tensor, {kTokens, kHeads, kDim});
  q.tensor.data = nullptr;
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &q.tensor; }, {kInvalid}, "args->q");
  Variant q2(q_view_.tensor, {kTokens, kHeads, kDim});
  q2.tensor.shape = nullptr;
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &q2.tensor; }, {kInvalid}, "args->q");
  Variant out(out_view_.tensor, {kTokens, kHeads, kDim});
  out.tensor.data = nullptr;
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &out.tensor; }, {kInvalid}, "args->out");
}

TEST_F(BadInput, ArgsStructSizeAndReserved) {
  expect_run_rejected([](dsv4_run_args& a) { a.struct_size = 0; }, {kInvalid}, "args->struct_size");
  expect_run_rejected([](dsv4_run_args& a) { a.struct_size = 8; }, {kInvalid}, "args->struct_size");
  expect_run_rejected([](dsv4_run_args& a) { a.reserved = 3; }, {kInvalid}, "args->reserved");
}

// ------------------------------------------------------------------------------------ q vs plan
TEST_F(BadInput, QMismatchesPlan) {
  Variant dtype_f32(q_view_.tensor, kF32);
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &dtype_f32.tensor; }, {kMismatch}, "args->q");
  Variant heads(q_view_.tensor, {kTokens, kHeads / 2, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &heads.tensor; }, {kMismatch}, "args->q");
  Variant dim(q_view_.tensor, {kTokens, kHeads, 576});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &dim.tensor; }, {kMismatch}, "args->q");
  Variant rank2(q_view_.tensor, {kTokens * kHeads, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &rank2.tensor; }, {kInvalid, kMismatch},
                      "args->q");
  Variant device(q_view_.tensor, {kTokens, kHeads, kDim});
  device.tensor.device = dsv4_device{DSV4_DEVICE_CUDA, 0};
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &device.tensor; }, {kInvalid, kMismatch},
                      "args->q");
  Variant device_id(q_view_.tensor, {kTokens, kHeads, kDim});
  device_id.tensor.device = dsv4_device{DSV4_DEVICE_CPU, 3};
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &device_id.tensor; }, {kInvalid, kMismatch},
                      "args->q");
}

TEST_F(BadInput, QStrides) {
  // The last dimension must be contiguous.
  Variant strided_full(q_view_.tensor, {kTokens, kHeads, kDim}, {kHeads * kDim * 2, kDim * 2, 2});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &strided_full.tensor; }, {kInvalid, kMismatch},
                      "args->q");
  Variant negative(q_view_.tensor, {kTokens, kHeads, kDim}, {-kHeads * kDim, kDim, 1});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &negative.tensor; }, {kInvalid, kMismatch},
                      "args->q");
}

TEST_F(BadInput, TokensBeyondMaxTokens) {
  Variant q(q_view_.tensor, {kMaxTokens + 1, kHeads, kDim});
  Variant out(out_view_.tensor, {kMaxTokens + 1, kHeads, kDim});
  Buffer indices({kMaxTokens + 1, kTopk}, kI32);
  expect_run_rejected(
      [&](dsv4_run_args& a) {
        a.q = &q.tensor;
        a.out = &out.tensor;
        a.indices = &indices.tensor;
        a.lse = nullptr;
      },
      {kMismatch}, "args->q");
}

TEST_F(BadInput, NegativeAndOverflowingSizes) {
  Variant negative(q_view_.tensor, {-1, kHeads, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &negative.tensor; }, {kInvalid}, "args->q");
  Variant huge(q_view_.tensor, {int64_t{1} << 62, kHeads, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &huge.tensor; }, {kInvalid, kMismatch},
                      "args->q");
  Variant huge_cache(cache_.tensor, {int64_t{1} << 62, kBlockBytes});
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &huge_cache.tensor; }, {kInvalid},
                      "args->swa_cache");
  // Strides whose byte extent overflows int64.
  Variant overflow(q_view_.tensor, {kTokens, kHeads, kDim}, {int64_t{1} << 62, kDim, 1});
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &overflow.tensor; }, {kInvalid, kMismatch},
                      "args->q");
  Variant offset(q_view_.tensor, {kTokens, kHeads, kDim});
  offset.tensor.byte_offset = ~uint64_t{0} - 16;
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &offset.tensor; }, {kInvalid}, "args->q");
  Variant ndim(q_view_.tensor, {kTokens, kHeads, kDim});
  ndim.tensor.ndim = -3;
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &ndim.tensor; }, {kInvalid}, "args->q");
}

// ---------------------------------------------------------------- alignment (spec 12.3)
TEST_F(BadInput, MisalignedTensors) {
  // data + byte_offset must be a multiple of the element size; the views stay inside their storage.
  const auto shifted = [](const dsv4_tensor& base, std::initializer_list<int64_t> dims,
                          uint64_t offset) {
    Variant v(base, dims);
    v.tensor.byte_offset = offset;
    return v;
  };
  Variant q = shifted(q_.tensor, {kTokens, kHeads, kDim}, 1);
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &q.tensor; }, {kInvalid}, "args->q");
  Variant q_data(q_.tensor, {kTokens, kHeads, kDim});
  q_data.tensor.data = q_.bytes.data() + 3;  // the data pointer itself, offset 0
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &q_data.tensor; }, {kInvalid}, "args->q");
  Variant out = shifted(out_.tensor, {kTokens, kHeads, kDim}, 3);
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &out.tensor; }, {kInvalid}, "args->out");
  Variant lse = shifted(lse_.tensor, {kTokens, kHeads}, 2);
  expect_run_rejected([&](dsv4_run_args& a) { a.lse = &lse.tensor; }, {kInvalid}, "args->lse");
  Buffer sink_storage({kHeads + 1}, kF32);
  Variant sink = shifted(sink_storage.tensor, {kHeads}, 6);
  expect_run_rejected([&](dsv4_run_args& a) { a.attn_sink = &sink.tensor; }, {kInvalid},
                      "args->attn_sink");
  Variant idx = shifted(indices_.tensor, {kTokens, kTopk}, 2);
  expect_run_rejected([&](dsv4_run_args& a) { a.indices = &idx.tensor; }, {kInvalid},
                      "args->indices");
  // The 584 B layout's block base must be 16-byte aligned although its dtype is one byte.
  Buffer cache({kBlocks + 1, kBlockBytes}, kU8);
  std::memcpy(cache.bytes.data() + 8, cache_.bytes.data(), cache_.bytes.size());
  Variant cache8 = shifted(cache.tensor, {kBlocks, kBlockBytes}, 8);
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &cache8.tensor; }, {kInvalid},
                      "args->swa_cache");

  // Aligned views are accepted: the cache moved to a 16-byte offset reads the same rows, and q one
  // element (2 bytes) in is fine.
  out_.poison();
  ASSERT_EQ(dsv4_run(plan_, &args_), DSV4_STATUS_OK) << dsv4_last_error_message();
  const std::vector<unsigned char> expected = out_.bytes;
  std::memcpy(cache.bytes.data() + 16, cache_.bytes.data(), cache_.bytes.size());
  Variant cache16 = shifted(cache.tensor, {kBlocks, kBlockBytes}, 16);
  dsv4_run_args moved = args_;
  moved.swa_cache = &cache16.tensor;
  out_.poison();
  ASSERT_EQ(dsv4_run(plan_, &moved), DSV4_STATUS_OK) << dsv4_last_error_message();
  EXPECT_TRUE(out_.bytes == expected) << "a cache moved to a 16-byte offset reads differently";
  Variant q2 = shifted(q_.tensor, {kTokens, kHeads, kDim}, 2);
  moved = args_;
  moved.q = &q2.tensor;
  EXPECT_EQ(dsv4_run(plan_, &moved), DSV4_STATUS_OK) << dsv4_last_error_message();
}

TEST_F(BadInput, EmptyTensorsAreValidWhateverTheirAddress) {
  // Spec 12.3: zero elements, any data and byte_offset (UBSan reports a pointer formed from them).
  Variant q(q_view_.tensor, {0, kHeads, kDim});
  q.tensor.data = reinterpret_cast<void*>(uintptr_t{3});
  q.tensor.byte_offset = ~uint64_t{0} - 1;
  Variant out(out_view_.tensor, {0, kHeads, kDim});
  out.tensor.data = nullptr;
  out.tensor.byte_offset = 12345;
  Variant lse(lse_view_.tensor, {0, kHeads});
  lse.tensor.data = reinterpret_cast<void*>(~uintptr_t{0});
  lse.tensor.byte_offset = ~uint64_t{0};
  Variant idx(indices_.tensor, {0, kTopk});
  idx.tensor.data = reinterpret_cast<void*>(uintptr_t{1});
  idx.tensor.byte_offset = uint64_t{1} << 63;
  dsv4_run_args args = args_;
  args.q = &q.tensor;
  args.out = &out.tensor;
  args.lse = &lse.tensor;
  args.indices = &idx.tensor;
  EXPECT_EQ(dsv4_run(plan_, &args), DSV4_STATUS_OK) << dsv4_last_error_message();

  // A KV write of zero rows, likewise.
  Buffer cache({kBlocks, kBlockBytes}, kU8);
  cache.poison();
  const std::vector<unsigned char> before = cache.bytes;
  Buffer values_storage({1, kDim}, kF32);
  Variant values(values_storage.tensor, {0, kDim});
  values.tensor.data = reinterpret_cast<void*>(uintptr_t{7});
  values.tensor.byte_offset = ~uint64_t{0} - 5;
  Buffer slots_storage({1}, kI32);
  Variant slots(slots_storage.tensor, {0});
  slots.tensor.data = nullptr;
  slots.tensor.byte_offset = ~uint64_t{0};
  dsv4_kv_write_args write;
  ASSERT_EQ(dsv4_kv_write_args_init(&write), DSV4_STATUS_OK);
  write.cache_desc = plan_options_.swa_cache;
  write.values = &values.tensor;
  write.slots = &slots.tensor;
  write.cache = &cache.tensor;
  EXPECT_EQ(dsv4_kv_write(ctx_, &write), DSV4_STATUS_OK) << dsv4_last_error_message();
  EXPECT_TRUE(cache.bytes == before);
}

TEST_F(BadInput, AddressRangeWrap) {
  // data + byte_offset + extent must not wrap the address space (the module would read low memory).
  Variant q(q_view_.tensor, {kTokens, kHeads, kDim});
  q.tensor.data = reinterpret_cast<void*>(~uintptr_t{0} - 4095);
  q.tensor.byte_offset = 8192;
  expect_run_rejected([&](dsv4_run_args& a) { a.q = &q.tensor; }, {kInvalid}, "args->q");
  Variant out(out_view_.tensor, {kTokens, kHeads, kDim});
  out.tensor.data = reinterpret_cast<void*>(~uintptr_t{0} - 1023);
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &out.tensor; }, {kInvalid}, "args->out");
}

// --------------------------------------------------------------------------------- outputs
TEST_F(BadInput, OutWrongShapeOrDtype) {
  Variant heads(out_view_.tensor, {kTokens, kHeads - 1, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &heads.tensor; }, {kInvalid, kMismatch},
                      "args->out");
  Variant tokens(out_view_.tensor, {kTokens + 1, kHeads, kDim});
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &tokens.tensor; }, {kInvalid, kMismatch},
                      "args->out");
  Variant dim(out_view_.tensor, {kTokens, kHeads, 256});
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &dim.tensor; }, {kInvalid, kMismatch},
                      "args->out");
  Variant f32(out_view_.tensor, kF32);
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &f32.tensor; }, {kInvalid, kMismatch},
                      "args->out");
  Variant device(out_view_.tensor, {kTokens, kHeads, kDim});
  device.tensor.device = dsv4_device{DSV4_DEVICE_CUDA, 0};
  expect_run_rejected([&](dsv4_run_args& a) { a.out = &device.tensor; }, {kInvalid, kMismatch},
                      "args->out");
}

TEST_F(BadInput, LseWrongShapeOrDtype) {
  Variant shape(lse_.tensor, {kTokens, kHeads / 2});
  expect_run_rejected([&](dsv4_run_args& a) { a.lse = &shape.tensor; }, {kInvalid, kMismatch},
                      "args->lse");
  Variant bf16(lse_.tensor, {kTokens, kHeads});
  bf16.tensor.dtype = kBf16;
  expect_run_rejected([&](dsv4_run_args& a) { a.lse = &bf16.tensor; }, {kInvalid, kMismatch},
                      "args->lse");
  Variant ml(lse_.tensor, {kTokens + 1, kHeads});
  expect_run_rejected([&](dsv4_run_args& a) { a.max_logits = &ml.tensor; }, {kInvalid, kMismatch},
                      "args->max_logits");
}

TEST_F(BadInput, AttnSinkWrongShapeOrDtype) {
  Variant shape(sink_.tensor, {kHeads + 1});
  expect_run_rejected([&](dsv4_run_args& a) { a.attn_sink = &shape.tensor; }, {kInvalid, kMismatch},
                      "args->attn_sink");
  Variant bf16(sink_.tensor, kBf16);
  expect_run_rejected([&](dsv4_run_args& a) { a.attn_sink = &bf16.tensor; }, {kInvalid, kMismatch},
                      "args->attn_sink");
}

// ----------------------------------------------------------------------------------- caches
TEST_F(BadInput, CacheBlockStrideDiffersFromPlan) {
  Buffer padded({kBlocks, kBlockBytes + 576}, kU8);
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &padded.tensor; }, {kMismatch},
                      "args->swa_cache");
  Variant strided(cache_.tensor, {1, kBlockBytes}, {kBlockBytes + 576, 1});
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &strided.tensor; }, {kMismatch},
                      "args->swa_cache");
}

TEST_F(BadInput, EmptyCacheWithOverflowingStrides) {
  // A cache of 0 blocks is empty, so no extent check bounds its inner strides: the bytes a block
  // spans must still be computed without overflow (UBSan: signed overflow; fuzz_run,
  // fuzz_kv_write).
  Variant empty(cache_.tensor, {0, 25152, 8}, {kBlockBytes, INT64_MAX, 1});
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &empty.tensor; }, {kInvalid},
                      "args->swa_cache");
}

TEST_F(BadInput, CacheTooSmallOrWrongDtype) {
  Variant small(cache_.tensor, {kBlocks, 1000});
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &small.tensor; }, {kInvalid, kMismatch},
                      "args->swa_cache");
  Variant f32(cache_.tensor, {kBlocks, kBlockBytes / 4});
  f32.tensor.dtype = kF32;
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &f32.tensor; }, {kInvalid, kMismatch},
                      "args->swa_cache");
  Variant device(cache_.tensor, {kBlocks, kBlockBytes});
  device.tensor.device = dsv4_device{DSV4_DEVICE_CUDA, 0};
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_cache = &device.tensor; },
                      {kInvalid, kMismatch}, "args->swa_cache");
}

TEST_F(BadInput, ExtraListOrCacheWithoutPlanExtraCache) {
  expect_run_rejected([&](dsv4_run_args& a) { a.extra_indices = &indices_.tensor; },
                      {kInvalid, kMismatch}, "extra");
  expect_run_rejected([&](dsv4_run_args& a) { a.extra_cache = &cache_.tensor; },
                      {kInvalid, kMismatch}, "args->extra_cache");
}

// ---------------------------------------------------------------------------------- indices
TEST_F(BadInput, IndicesMismatch) {
  Variant width(indices_.tensor, {kTokens, kTopk / 2});
  expect_run_rejected([&](dsv4_run_args& a) { a.indices = &width.tensor; }, {kMismatch},
                      "args->indices");
  Variant rows(indices_.tensor, {kTokens + 1, kTopk});
  expect_run_rejected([&](dsv4_run_args& a) { a.indices = &rows.tensor; }, {kInvalid, kMismatch},
                      "args->indices");
  Variant i64(indices_.tensor, {kTokens, kTopk / 2});
  i64.tensor.dtype = kI64;
  expect_run_rejected([&](dsv4_run_args& a) { a.indices = &i64.tensor; }, {kInvalid, kMismatch},
                      "args->indices");
  Buffer lengths({kTokens + 3}, kI32);
  expect_run_rejected([&](dsv4_run_args& a) { a.lengths = &lengths.tensor; }, {kInvalid, kMismatch},
                      "args->lengths");
  expect_run_rejected([&](dsv4_run_args& a) { a.indptr = &indices_.tensor; }, {kInvalid, kMismatch},
                      "args->indptr");
}

TEST_F(BadInput, PagedTensorsInExplicitMode) {
  Buffer qsl({2}, kI32);
  expect_run_rejected([&](dsv4_run_args& a) { a.query_start_loc = &qsl.tensor; },
                      {kInvalid, kMismatch}, "args->query_start_loc");
  Buffer slot_mapping({kTokens}, kI32);
  expect_run_rejected([&](dsv4_run_args& a) { a.slot_mapping = &slot_mapping.tensor; },
                      {kInvalid, kMismatch}, "args->slot_mapping");
  Buffer table({1, 4}, kI32);
  expect_run_rejected([&](dsv4_run_args& a) { a.swa_block_table = &table.tensor; },
                      {kInvalid, kMismatch}, "args->swa_block_table");
}

TEST_F(BadInput, CsrIndptrWrongLength) {
  dsv4_plan_options options = plan_options_;
  options.index_format = DSV4_INDEX_CSR;
  dsv4_plan* plan = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx_, &options, &plan), DSV4_STATUS_OK) << dsv4_last_error_message();
  Buffer indptr({kTokens + 1}, kI32);
  auto* p = reinterpret_cast<int32_t*>(indptr.bytes.data());
  for (int t = 0; t <= kTokens; ++t) p[t] = t * 10;
  Buffer flat({kTokens * 10}, kI32);
  auto* f = reinterpret_cast<int32_t*>(flat.bytes.data());
  for (int i = 0; i < kTokens * 10; ++i) f[i] = (i * 37) % (kBlocks * kBlock);
  dsv4_run_args args = args_;
  args.indices = &flat.tensor;
  args.indptr = &indptr.tensor;
  ASSERT_EQ(dsv4_run(plan, &args), DSV4_STATUS_OK) << dsv4_last_error_message();

  Variant short_indptr(indptr.tensor, {kTokens});
  dsv4_run_args bad = args;
  bad.indptr = &short_indptr.tensor;
  expect_rejected(plan, &bad, {kInvalid, kMismatch}, "args->indptr");
  bad = args;
  bad.indptr = nullptr;
  expect_rejected(plan, &bad, {kInvalid}, "args->indptr");
  dsv4_plan_destroy(plan);
}

// -------------------------------------------------------------------------------- workspace
TEST_F(BadInput, WorkspaceTooSmall) {
  // Explicit plans may need no workspace; a paged SWA plan with one does.
  size_t explicit_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan_, &explicit_bytes), DSV4_STATUS_OK);
  if (explicit_bytes > 0) {
    std::vector<unsigned char> ws(explicit_bytes);
    expect_run_rejected(
        [&](dsv4_run_args& a) {
          a.workspace = ws.data();
          a.workspace_bytes = explicit_bytes - 1;
        },
        {DSV4_STATUS_WORKSPACE_TOO_SMALL}, "args->workspace");
  }

  dsv4_plan_options options = plan_options_;
  options.mode = DSV4_MODE_PAGED;
  options.compress_ratio = 1;
  options.window = 128;
  options.max_requests = 2;
  options.max_swa_blocks_per_request = 4;
  dsv4_plan* plan = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx_, &options, &plan), DSV4_STATUS_OK) << dsv4_last_error_message();
  size_t bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan, &bytes), DSV4_STATUS_OK);
  ASSERT_GT(bytes + explicit_bytes, 0u) << "neither plan reports a workspace: nothing to test";

  // Two decode requests of 70 and 5 tokens of context, one block table row each.
  Buffer qsl({3}, kI32), seq_lens({2}, kI32), table({2, 4}, kI32), slot_mapping({kTokens}, kI32);
  const int32_t qsl_v[] = {0, 1, 2}, seq_v[] = {70, 5}, table_v[] = {0, 1, -1, -1, 1, -1, -1, -1};
  const int32_t slot_v[] = {69, 64 + 4};
  std::memcpy(qsl.bytes.data(), qsl_v, sizeof(qsl_v));
  std::memcpy(seq_lens.bytes.data(), seq_v, sizeof(seq_v));
  std::memcpy(table.bytes.data(), table_v, sizeof(table_v));
  std::memcpy(slot_mapping.bytes.data(), slot_v, sizeof(slot_v));
  dsv4_run_args args = args_;
  args.indices = nullptr;
  args.query_start_loc = &qsl.tensor;
  args.seq_lens = &seq_lens.tensor;
  args.swa_block_table = &table.tensor;
  args.slot_mapping = &slot_mapping.tensor;
  std::vector<unsigned char> ws(bytes + 64);
  args.workspace = bytes ? ws.data() : nullptr;
  args.workspace_bytes = bytes;
  ASSERT_EQ(dsv4_run(plan, &args), DSV4_STATUS_OK) << dsv4_last_error_message();
  if (bytes > 0) {
    dsv4_run_args bad = args;
    bad.workspace_bytes = bytes - 1;
    expect_rejected(plan, &bad, {DSV4_STATUS_WORKSPACE_TOO_SMALL}, "args->workspace");
    bad = args;
    bad.workspace = nullptr;
    expect_rejected(plan, &bad, {DSV4_STATUS_WORKSPACE_TOO_SMALL, kInvalid}, "args->workspace");
  }
  // Explicit-mode lists on a paged plan.
  dsv4_run_args mixed = args;
  mixed.indices = &indices_.tensor;
  expect_rejected(plan, &mixed, {kInvalid, kMismatch}, "args->indices");
  dsv4_plan_destroy(plan);
}

// ------------------------------------------------------------------------------- plan_create
// A per-tensor FP8 SWA cache of kv_scale `main_scale` and an extra cache of `extra_layout`.
void per_tensor_pair(dsv4_plan_options& o, float main_scale, uint32_t extra_layout,
                     float extra_scale) {
  o.swa_cache.layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
  o.swa_cache.block_stride_bytes = 0;
  o.swa_cache.kv_scale = main_scale;
  o.extra_cache = o.swa_cache;
  o.extra_cache.layout = extra_layout;
  o.extra_cache.kv_scale = extra_scale;
  o.extra_topk = 16;
}

TEST_F(BadInput, PlanCreateRejectsBadOptions) {
  struct Case {
    const char* what;
    std::function<void(dsv4_plan_options&)> change;
    std::vector<dsv4_status> allowed;
    const char* name;
  };
  const std::vector<Case> cases = {
      {"layout 99",
       [](dsv4_plan_options& o) { o.swa_cache.layout = 99; },
       {kInvalid, DSV4_STATUS_UNSUPPORTED},
       "swa_cache"},
      {"head_dim 256",
       [](dsv4_plan_options& o) { o.head_dim_qk = 256; },
       {kInvalid, DSV4_STATUS_UNSUPPORTED},
       "options->head_dim_qk"},
      {"head_dim 576 with 584B",
       [](dsv4_plan_options& o) { o.head_dim_qk = 576; },
       {kInvalid, DSV4_STATUS_UNSUPPORTED},
       "head_dim_qk"},
      {"heads 0", [](dsv4_plan_options& o) { o.num_heads = 0; }, {kInvalid}, "options->num_heads"},
      {"heads 129",
       [](dsv4_plan_options& o) { o.num_heads = 129; },
       {kInvalid},
       "options->num_heads"},
      {"heads -1",
       [](dsv4_plan_options& o) { o.num_heads = -1; },
       {kInvalid},
       "options->num_heads"},
      {"max_tokens 0",
       [](dsv4_plan_options& o) { o.max_tokens = 0; },
       {kInvalid},
       "options->max_tokens"},
      {"topk 0", [](dsv4_plan_options& o) { o.topk = 0; }, {kInvalid}, "options->topk"},
      {"topk -5", [](dsv4_plan_options& o) { o.topk = -5; }, {kInvalid}, "options->topk"},
      {"block_size 0",
       [](dsv4_plan_options& o) { o.swa_cache.block_size = 0; },
       {kInvalid},
       "block_size"},
      {"block stride below minimum",
       [](dsv4_plan_options& o) { o.swa_cache.block_stride_bytes = 100; },
       {kInvalid},
       "block_stride_bytes"},
      {"negative block stride",
       [](dsv4_plan_options& o) { o.swa_cache.block_stride_bytes = -37440; },
       {kInvalid},
       "block_stride_bytes"},
      {"cache flags unknown bit",
       [](dsv4_plan_options& o) { o.swa_cache.flags = 0x100; },
       {kInvalid},
       "options->swa_cache.flags"},
      {"FNUZ flag on a bf16 cache",
       [](dsv4_plan_options& o) {
         o.swa_cache.layout = DSV4_KV_LAYOUT_BF16;
         o.swa_cache.flags = DSV4_KV_CACHE_FLAG_FP8_FNUZ;
       },
       {kInvalid},
       "FNUZ"},
      {"per-tensor FP8 caches 2^65 apart",
       [](dsv4_plan_options& o) {
         per_tensor_pair(o, 0x1p-40f, DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, 0x1p25f);
       },
       {kInvalid},
       "options->extra_cache.kv_scale"},
      {"per-tensor FP8 cache 2^70 below a bf16 one",
       [](dsv4_plan_options& o) { per_tensor_pair(o, 0x1p-70f, DSV4_KV_LAYOUT_BF16, 1.0f); },
       {kInvalid},
       "options->extra_cache.kv_scale"},
      {"plan flags unknown bit",
       [](dsv4_plan_options& o) { o.flags = 0x80; },
       {kInvalid},
       "options->flags"},
      {"C128A max_model_len INT64_MAX",
       [](dsv4_plan_options& o) {
         o.mode = DSV4_MODE_PAGED;
         o.compress_ratio = 128;
         o.extra_cache = o.swa_cache;
         o.extra_cache.block_size = 2;
         o.compressed_block_tokens = 256;
         o.max_model_len = INT64_MAX;
       },
       {kInvalid},
       "max_model_len"},
      {"mode 7", [](dsv4_plan_options& o) { o.mode = 7; }, {kInvalid}, "options->mode"},
      {"index_format 5",
       [](dsv4_plan_options& o) { o.index_format = 5; },
       {kInvalid},
       "options->index_format"},
      {"extra_topk without extra cache",
       [](dsv4_plan_options& o) { o.extra_topk = 16; },
       {kInvalid},
       "extra"},
      {"q dtype fp32",
       [](dsv4_plan_options& o) { o.q_dtype = kF32; },
       {kInvalid, DSV4_STATUS_UNSUPPORTED},
       "options->q_dtype"},
      {"flags", [](dsv4_plan_options& o) { o.flags = 0x80000000u; }, {kInvalid}, "options->flags"},
      {"head_dim_v",
       [](dsv4_plan_options& o) { o.head_dim_v = 256; },
       {kInvalid, DSV4_STATUS_UNSUPPORTED},
       "options->head_dim_v"},
      {"softmax_scale -1",
       [](dsv4_plan_options& o) { o.softmax_scale = -1.0f; },
       {kInvalid},
       "options->softmax_scale"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    dsv4_plan_options options = plan_options_;
    c.change(options);
    reset_last_error(c.name);
    dsv4_plan* const sentinel = reinterpret_cast<dsv4_plan*>(static_cast<uintptr_t>(0x4444440));
    dsv4_plan* plan = sentinel;
    const dsv4_status status = dsv4_plan_create(ctx_, &options, &plan);
    bool ok = false;
    for (dsv4_status a : c.allowed) ok = ok || status == a;
    EXPECT_TRUE(ok) << "got " << dsv4_status_string(status) << ": " << dsv4_last_error_message();
    EXPECT_TRUE(contains(dsv4_last_error_message(), c.name)) << dsv4_last_error_message();
    EXPECT_EQ(plan, sentinel) << "failing dsv4_plan_create wrote *out_plan";
    if (status == DSV4_STATUS_OK && plan != sentinel) dsv4_plan_destroy(plan);
  }
  // Boundaries that are valid: 1 and 128 heads.
  for (int heads : {1, 128}) {
    dsv4_plan_options options = plan_options_;
    options.num_heads = heads;
    dsv4_plan* plan = nullptr;
    EXPECT_EQ(dsv4_plan_create(ctx_, &options, &plan), DSV4_STATUS_OK)
        << heads << ": " << dsv4_last_error_message();
    dsv4_plan_destroy(plan);
  }
}

// ----------------------------------------------------------------- NULL for every function
TEST_F(BadInput, NullPointersEveryFunction) {
  const auto expect_null = [](dsv4_status status, const char* name) {
    EXPECT_EQ(status, kInvalid) << name;
    EXPECT_TRUE(contains(dsv4_last_error_message(), name)) << dsv4_last_error_message();
  };
  dsv4_ctx_options options;
  ASSERT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  reset_last_error("out_ctx");
  expect_null(dsv4_ctx_create(&options, nullptr), "out_ctx");
  reset_last_error("ctx");
  dsv4_ctx_info ctx_info;
  std::memset(&ctx_info, 0, sizeof(ctx_info));
  ctx_info.struct_size = sizeof(ctx_info);
  expect_null(dsv4_ctx_get_info(nullptr, &ctx_info), "ctx");
  reset_last_error("out_info");
  expect_null(dsv4_ctx_get_info(ctx_, nullptr), "out_info");

  int32_t count = -9;
  reset_last_error("out");
  expect_null(dsv4_enumerate_backends(nullptr, nullptr, 4, &count), "out");
  EXPECT_EQ(count, -9);
  reset_last_error("out_count");
  dsv4_backend_info info[1];
  std::memset(info, 0, sizeof(info));
  info[0].struct_size = sizeof(info[0]);
  expect_null(dsv4_enumerate_backends(nullptr, info, 1, nullptr), "out_count");
  reset_last_error("capacity");
  expect_null(dsv4_enumerate_backends(nullptr, info, -1, &count), "capacity");

  reset_last_error("out_info");
  expect_null(dsv4_get_device_info(nullptr, "cpu", 0, nullptr), "out_info");
  dsv4_device_info device;
  std::memset(&device, 0, sizeof(device));
  device.struct_size = sizeof(device);
  reset_last_error("index");
  expect_null(dsv4_get_device_info(nullptr, "cpu", -1, &device), "index");

  reset_last_error("ctx");
  dsv4_plan* plan = nullptr;
  expect_null(dsv4_plan_create(nullptr, &plan_options_, &plan), "ctx");
  EXPECT_EQ(plan, nullptr);
  reset_last_error("options");
  expect_null(dsv4_plan_create(ctx_, nullptr, &plan), "options");
  reset_last_error("out_plan");
  expect_null(dsv4_plan_create(ctx_, &plan_options_, nullptr), "out_plan");

  size_t bytes = 12345;
  reset_last_error("plan");
  expect_null(dsv4_plan_get_workspace_size(nullptr, &bytes), "plan");
  EXPECT_EQ(bytes, 12345u);
  reset_last_error("out_bytes");
  expect_null(dsv4_plan_get_workspace_size(plan_, nullptr), "out_bytes");
  dsv4_plan_info plan_info;
  std::memset(&plan_info, 0, sizeof(plan_info));
  plan_info.struct_size = sizeof(plan_info);
  reset_last_error("plan");
  expect_null(dsv4_plan_get_info(nullptr, &plan_info), "plan");
  reset_last_error("out_info");
  expect_null(dsv4_plan_get_info(plan_, nullptr), "out_info");

  dsv4_kv_write_args write;
  ASSERT_EQ(dsv4_kv_write_args_init(&write), DSV4_STATUS_OK);
  reset_last_error("ctx");
  expect_null(dsv4_kv_write(nullptr, &write), "ctx");
  reset_last_error("args");
  expect_null(dsv4_kv_write(ctx_, nullptr), "args");

  dsv4_export_args export_args;
  ASSERT_EQ(dsv4_export_args_init(&export_args), DSV4_STATUS_OK);
  reset_last_error("plan");
  expect_null(dsv4_export_indices(nullptr, &export_args), "plan");
  reset_last_error("args");
  expect_null(dsv4_export_indices(plan_, nullptr), "args");
  export_args.batch = &args_;
  reset_last_error("plan");
  expect_null(dsv4_export_indices(plan_, &export_args), "plan");  // explicit plan: paged only

  dsv4_ctx_destroy(nullptr);
  dsv4_plan_destroy(nullptr);

  // The valid info calls work and agree with the plan.
  ASSERT_EQ(dsv4_plan_get_info(plan_, &plan_info), DSV4_STATUS_OK) << dsv4_last_error_message();
  EXPECT_EQ(plan_info.num_heads, kHeads);
  EXPECT_EQ(plan_info.head_dim_qk, kDim);
  EXPECT_EQ(plan_info.mode, DSV4_MODE_EXPLICIT);
  EXPECT_STREQ(plan_info.backend, "cpu");
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan_, &bytes), DSV4_STATUS_OK);
  EXPECT_EQ(plan_info.workspace_bytes, bytes);
}

// -------------------------------------------------------------------------------- kv_write
class BadKvWrite : public BadInput {
 protected:
  // Writes `args`, expects a status in `allowed`, the message to name `name`, cache untouched.
  void expect_write_rejected(const dsv4_kv_write_args& args,
                             std::initializer_list<dsv4_status> allowed, const std::string& name) {
    target_.poison();
    const std::vector<unsigned char> before = target_.bytes;
    reset_last_error(name);
    const dsv4_status status = dsv4_kv_write(ctx_, &args);
    bool ok = false;
    for (dsv4_status a : allowed) ok = ok || status == a;
    EXPECT_TRUE(ok) << "got " << dsv4_status_string(status) << ": " << dsv4_last_error_message();
    EXPECT_TRUE(contains(dsv4_last_error_message(), name)) << dsv4_last_error_message();
    EXPECT_TRUE(target_.bytes == before) << "the cache was written by a failing dsv4_kv_write";
  }

  dsv4_kv_write_args valid_args() {
    std::mt19937 rng(seed_ + 1);
    std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
    auto* v = reinterpret_cast<float*>(values_.bytes.data());
    for (int i = 0; i < 3 * kDim; ++i) v[i] = uni(rng);
    const int32_t slot_v[] = {5, 70, 127};
    std::memcpy(slots_.bytes.data(), slot_v, sizeof(slot_v));
    dsv4_kv_write_args args;
    dsv4_kv_write_args_init(&args);
    args.cache_desc = plan_options_.swa_cache;
    args.values = &values_.tensor;
    args.slots = &slots_.tensor;
    args.cache = &target_.tensor;
    return args;
  }

  Buffer target_{{kBlocks, kBlockBytes}, kU8};
  Buffer values_{{3, kDim}, kF32};
  Buffer slots_{{3}, kI32};
};

TEST_F(BadKvWrite, Rejected) {
  const dsv4_kv_write_args valid = valid_args();
  target_.poison();
  ASSERT_EQ(dsv4_kv_write(ctx_, &valid), DSV4_STATUS_OK) << dsv4_last_error_message();

  // A slot beyond the capacity (2 blocks x 64 = 128 slots): nothing written, not even slot 5.
  int32_t beyond[] = {5, 70, 128};
  Buffer slots_beyond({3}, kI32);
  std::memcpy(slots_beyond.bytes.data(), beyond, sizeof(beyond));
  // Slot values are checked by the backend (the host never reads device values), whose message
  // names the element ("slots[2] = 128 beyond capacity 128") rather than "args->slots".
  dsv4_kv_write_args args = valid;
  args.slots = &slots_beyond.tensor;
  expect_write_rejected(args, {kInvalid}, "slots");

  int32_t far_beyond[] = {0x7FFFFFFF, 1, 2};
  std::memcpy(slots_beyond.bytes.data(), far_beyond, sizeof(far_beyond));
  expect_write_rejected(args, {kInvalid}, "slots");

  args = valid;
  args.cache = nullptr;
  expect_write_rejected(args, {kInvalid}, "args->cache");
  args = valid;
  args.values = nullptr;
  expect_write_rejected(args, {kInvalid}, "args->values");
  args = valid;
  args.slots = nullptr;
  expect_write_rejected(args, {kInvalid}, "args->slots");

  Variant dim(values_.tensor, {3, 256});
  args = valid;
  args.values = &dim.tensor;
  expect_write_rejected(args, {kInvalid, kMismatch}, "args->values");
  Variant i32(values_.tensor, kI32);
  args = valid;
  args.values = &i32.tensor;
  expect_write_rejected(args, {kInvalid, kMismatch, DSV4_STATUS_UNSUPPORTED}, "args->values");
  Variant short_slots(slots_.tensor, {2});
  args = valid;
  args.slots = &short_slots.tensor;
  expect_write_rejected(args, {kInvalid, kMismatch}, "args->slots");
  Variant i64_slots(slots_.tensor, kI64);
  args = valid;
  args.slots = &i64_slots.tensor;
  expect_write_rejected(args, {kInvalid, kMismatch}, "args->slots");

  args = valid;
  args.cache_desc.layout = 99;
  expect_write_rejected(args, {kInvalid, DSV4_STATUS_UNSUPPORTED}, "layout");
  args = valid;
  args.cache_desc.block_size = 0;
  expect_write_rejected(args, {kInvalid}, "block_size");
  Variant small(target_.tensor, {kBlocks, 1000});
  args = valid;
  args.cache = &small.tensor;
  expect_write_rejected(args, {kInvalid, kMismatch}, "args->cache");
  Variant negative(target_.tensor, {-2, kBlockBytes});
  args = valid;
  args.cache = &negative.tensor;
  expect_write_rejected(args, {kInvalid}, "args->cache");
  args = valid;
  args.reserved = 1;
  expect_write_rejected(args, {kInvalid}, "args->reserved");

  // Alignment (spec 12.3): fp32 values, int32 slots, the 584 B cache's 16-byte block base.
  Buffer values_storage({4, kDim}, kF32);
  Variant values(values_storage.tensor, {3, kDim});
  values.tensor.byte_offset = 2;
  args = valid;
  args.values = &values.tensor;
  expect_write_rejected(args, {kInvalid}, "args->values");
  Buffer slot_storage({4}, kI32);
  Variant slots(slot_storage.tensor, {3});
  slots.tensor.byte_offset = 1;
  args = valid;
  args.slots = &slots.tensor;
  expect_write_rejected(args, {kInvalid}, "args->slots");
  Buffer cache_storage({kBlocks + 1, kBlockBytes}, kU8);
  Variant cache(cache_storage.tensor, {kBlocks, kBlockBytes});
  cache.tensor.byte_offset = 4;
  args = valid;
  args.cache = &cache.tensor;
  cache_storage.poison();
  const std::vector<unsigned char> before = cache_storage.bytes;
  EXPECT_EQ(dsv4_kv_write(ctx_, &args), kInvalid);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "args->cache")) << dsv4_last_error_message();
  EXPECT_TRUE(cache_storage.bytes == before);
}

}  // namespace
