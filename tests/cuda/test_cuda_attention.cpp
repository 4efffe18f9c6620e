// CUDA backend correctness through the public API (dsv4_ctx on DSV4_DEVICE_CUDA): explicit and
// paged mode against the float64 reference (reference/) with the spec's tolerances, every layout,
// heads 1..128, odd block sizes, invalid indices, NaN-filled unreferenced rows, +-inf sinks,
// padding tokens, CSR lists, FlashMLA's [B,H,S] lse strides, strided and unaligned q, unaligned
// workspaces; each kernel family with its splits, CTA pairs, persistent CTAs and token order,
// forced through the module's test hook DSV4_CUDA_FORCE and confirmed by its run log
// (DSV4_CUDA_LOG_RUNS); CUDA-graph capture and replay with new inputs; every explicit case also run
// by the CPU module on host copies; one case of each kernel family on every further GPU.
//
// Each case is a GoogleTest case (a ctest test labelled gpu). Without a usable GPU each one is
// skipped with the reason; DSV4_TEST_REQUIRE_GPU=1 turns that into a failure (scripts/gpu/run.sh
// sets it). DSV4_CUDA_TEST_ON_CPU=1 runs the cases on the CPU module instead (no graphs, no run
// log): the harness's own check, which CI runs on a few cases where no GPU exists.
// DSV4_TEST_SEED=n reruns a seed; DSV4_TEST_VERBOSE=1 prints the library's log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "compare.h"
#include "cuda_harness.h"
#include "reference_paged.h"
#include "test_device.h"
#include "test_util.h"

namespace dsv4cudatest {
namespace {

using dsv4test::CtxPtr;
using dsv4test::DeviceBuffer;
using dsv4test::kBf16;
using dsv4test::kDecodeLseTol;
using dsv4test::kDecodeOutTol;
using dsv4test::kE4m3;
using dsv4test::kF32;
using dsv4test::kI32;
using dsv4test::PlanPtr;
using dsv4test::RefList;
using dsv4test::TensorView;
using dsv4test::TestDevice;

// ---------------------------------------------------------------------------------------------
// GPUs and contexts

// One GPU's test device (buffers, stream) and library context, kept for the whole process: device
// 0's context stays alive while the other devices run.
struct gpu {
  std::unique_ptr<TestDevice> device;
  log_sink log;
  CtxPtr ctx;
};

enum class gpu_state { ok, absent, broken };

struct gpu_slot {
  std::unique_ptr<gpu> g;
  gpu_state state = gpu_state::absent;
  std::string why;
};

// The GPUs opened so far, and the CPU module's context (the cross-check), closed by
// library_environment before main returns: contexts must go before the CUDA runtime does.
std::map<int, gpu_slot>& gpu_slots() {
  static std::map<int, gpu_slot> slots;
  return slots;
}
CtxPtr& cpu_ctx_slot() {
  static CtxPtr ctx;
  return ctx;
}

class library_environment : public ::testing::Environment {
 public:
  void TearDown() override {
    cpu_ctx_slot().reset();
    for (auto& [index, slot] : gpu_slots()) {
      if (slot.g == nullptr) continue;
      slot.g->ctx.reset();
      slot.g->device.reset();
    }
  }
};

bool on_cpu() {
  const char* env = std::getenv("DSV4_CUDA_TEST_ON_CPU");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

// GPU `index` (opened once; with DSV4_CUDA_TEST_ON_CPU, the CPU module in its place); `why` says
// why it is absent (no driver or device: skip) or broken (a GPU the library cannot use: fail).
gpu_state open_gpu(int index, gpu** out, std::string* why) {
  auto& slots = gpu_slots();
  auto found = slots.find(index);
  if (found == slots.end()) {
    gpu_slot s;
    s.g = std::make_unique<gpu>();
    if (on_cpu()) {
      s.g->device = dsv4test::make_test_device(&s.why);
      if (s.g->device != nullptr) s.g->ctx = dsv4test::make_test_ctx(s.g->device.get(), 0, &s.why);
    } else {
      s.g->device = dsv4test::make_cuda_test_device(&s.why, index);
      if (s.g->device != nullptr) s.g->ctx = make_cuda_ctx(index, &s.g->log, &s.why);
    }
    if (s.g->device != nullptr) s.state = s.g->ctx != nullptr ? gpu_state::ok : gpu_state::broken;
    found = slots.emplace(index, std::move(s)).first;
  }
  *out = found->second.g.get();
  *why = found->second.why;
  return found->second.state;
}

bool gpu_required() {
  const char* env = std::getenv("DSV4_TEST_REQUIRE_GPU");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

// In a test body: `var` = GPU `index`, or the test is skipped (no GPU here; a failure with
// DSV4_TEST_REQUIRE_GPU=1) or fails (a GPU the library cannot use).
#define OPEN_GPU_OR_SKIP(var, index)                                                       \
  gpu* var = nullptr;                                                                      \
  {                                                                                        \
    std::string why_;                                                                      \
    const gpu_state state_ = open_gpu(index, &var, &why_);                                 \
    if (state_ == gpu_state::absent) {                                                     \
      if (gpu_required()) FAIL() << "DSV4_TEST_REQUIRE_GPU is set but: " << why_;          \
      GTEST_SKIP() << why_;                                                                \
    }                                                                                      \
    ASSERT_EQ(state_, gpu_state::ok) << "a CUDA device is present but unusable: " << why_; \
  }

// The CPU module's context, for the cross-check (nullptr where the CPU module is not built).
dsv4_ctx* cpu_ctx() {
  CtxPtr& ctx = cpu_ctx_slot();
  if (ctx == nullptr) {
    dsv4_ctx_options o;
    dsv4_ctx_options_init(&o);
    o.backend = "cpu";
    dsv4_ctx* c = nullptr;
    if (dsv4_ctx_create(&o, &c) == DSV4_STATUS_OK) ctx.reset(c);
  }
  return ctx.get();
}

dsv4_plan_options base_options() {
  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  o.max_tokens = 1024;
  o.compress_ratio = 1;
  return o;
}

std::vector<double> bf16_to_doubles(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = bf16_to_double(v[i]);
  return d;
}

// A test name from a case name ("sm90-v4-h40" -> "sm90_v4_h40").
std::string test_name(std::string name) {
  std::replace_if(
      name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
  return name;
}

// ---------------------------------------------------------------------------------------------
// Explicit mode

struct explicit_case {
  std::string name;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  uint32_t extra_layout = DSV4_KV_LAYOUT_NONE;
  int heads = 64;
  int batch = 4;
  int seq_q = 2;
  int topk = 128;
  int extra_topk = 0;
  int block = 64;
  int extra_block = 64;
  int64_t slots = 1024;
  int64_t extra_slots = 1024;
  int64_t stride_pad = 0;
  bool lengths = true;             // main topk_length per (b, s)
  bool lengths_per_batch = false;  // FlashMLA's [B] form (shared by the s_q tokens of a row)
  bool extra_lengths = true;
  bool csr = false;
  bool sink = true;
  bool lse_bhs = false;  // lse / max_logits with FlashMLA's [B, H, S] strides
  bool q_fp8 = false;
  float kv_scale = 1.0f;
  float softmax_scale = 0.0f;  // 0 = d^-0.5
  int max_tokens = 0;          // plan capacity (0 = batch * seq_q)
  bool special_rows = false;   // host_cache::add_special_rows (extreme scales, NaN bytes)
  int q_pad = 0;               // elements after each (token, head) q row: a strided q view
  bool graph = false;          // also check graph capture and replay
  bool lone_nan_key = false;   // token 0's main list: one valid entry, a NaN row (dense lists)
  // DSV4_CUDA_FORCE (the module's test hook; unset fields keep the planner's choice):
  bool small_chunk = false;      // chunk=32: the variant for GPUs with little shared memory
  const char* kernel = nullptr;  // kernel=mma|wgmma|small|small32
  bool row_loads = false;        // small_stage=0: small-head FP8 rows by the producers' loads
  bool no_heads8 = false;        // small_h8=0: 1..8 heads on the 16-head tile's consumer
  int max_splits = 0;            // max_splits=N
  int persistent = -1;           // persistent=N: at most N persistent Hopper CTAs, looping
  int order = -1;                // order=1: tokens longest first wherever possible
  // What the run log must say:
  bool expect_order = false;       // "tokens longest first"
  bool expect_persistent = false;  // "persistent CTAs"
};

std::ostream& operator<<(std::ostream& os, const explicit_case& c) { return os << c.name; }

// The case's DSV4_CUDA_FORCE value.
std::string force_of(const explicit_case& c) {
  std::string f;
  auto add = [&f](const std::string& item) { f += (f.empty() ? "" : ",") + item; };
  if (c.small_chunk) add("chunk=32");
  if (c.kernel != nullptr) add(std::string("kernel=") + c.kernel);
  if (c.row_loads) add("small_stage=0");
  if (c.no_heads8) add("small_h8=0");
  if (c.max_splits > 0) add("max_splits=" + std::to_string(c.max_splits));
  if (c.persistent >= 0) add("persistent=" + std::to_string(c.persistent));
  if (c.order >= 0) add("order=" + std::to_string(c.order));
  return f;
}

// Random list row: `valid` slots below capacity, sprinkled with invalid values.
std::vector<int32_t> random_row(std::mt19937_64& rng, int width, int64_t capacity, int valid) {
  std::vector<int32_t> row(width);
  std::uniform_int_distribution<int64_t> slot(0, capacity - 1);
  static const int32_t kInvalid[] = {-1, -1, -1, INT_MIN, -123456, INT_MAX, 2147480000};
  for (int i = 0; i < width; ++i) {
    if (i < valid) {
      row[i] = static_cast<int32_t>(slot(rng));
    } else {
      const int pick = static_cast<int>(rng() % 8);
      row[i] = pick < 7 ? kInvalid[pick]
                        : static_cast<int32_t>(capacity + static_cast<int64_t>(rng() % 100));
    }
  }
  // Invalid entries inside the valid prefix too (vLLM never does this; the rule allows it).
  if (width > 4 && rng() % 3 == 0) row[rng() % std::max(1, valid)] = -1;
  std::shuffle(row.begin(), row.begin() + std::min(valid + 2, width), rng);
  return row;
}

struct list_data {
  std::vector<int32_t> dense;    // [T][width]
  std::vector<int32_t> indptr;   // CSR [T+1]
  std::vector<int32_t> flat;     // CSR
  std::vector<int32_t> lengths;  // [B][S] or [B]
  std::vector<RefList> ref;
};

list_data make_lists(std::mt19937_64& rng, const explicit_case& c, int width, int64_t capacity,
                     bool use_lengths) {
  const int T = c.batch * c.seq_q;
  list_data d;
  d.ref.resize(T);
  std::uniform_int_distribution<int> count(0, width);
  if (use_lengths) {
    d.lengths.resize(c.lengths_per_batch ? c.batch : T);
    for (auto& l : d.lengths) l = (rng() % 9 == 0) ? 0 : count(rng);
    if (!d.lengths.empty() && rng() % 2) d.lengths[0] = width;  // full row
  }
  d.indptr.push_back(0);
  for (int t = 0; t < T; ++t) {
    const int b = t / c.seq_q;
    int valid = width;
    if (rng() % 5 == 0) valid = count(rng);
    std::vector<int32_t> row = random_row(rng, width, capacity, valid);
    int64_t len = -1;
    if (use_lengths) len = c.lengths_per_batch ? d.lengths[b] : d.lengths[t];
    if (c.csr) {
      // CSR rows carry their own length (<= width); lengths, when given, cap them further.
      const int n = static_cast<int>(rng() % (width + 1));
      row.resize(n);
      d.flat.insert(d.flat.end(), row.begin(), row.end());
      d.indptr.push_back(static_cast<int32_t>(d.flat.size()));
    } else {
      d.dense.insert(d.dense.end(), row.begin(), row.end());
    }
    d.ref[t].idx = row;
    d.ref[t].length = len;
  }
  return d;
}

// Poisons with NaN bytes every cache slot that no list references validly.
void poison_unreferenced(host_cache& cache, const std::vector<RefList>& lists) {
  std::vector<char> used(static_cast<size_t>(cache.capacity()), 0);
  for (const auto& l : lists) {
    const int64_t n = l.length < 0
                          ? static_cast<int64_t>(l.idx.size())
                          : std::min<int64_t>(l.length, static_cast<int64_t>(l.idx.size()));
    for (int64_t i = 0; i < n; ++i)
      if (l.idx[i] >= 0 && l.idx[i] < cache.capacity()) used[l.idx[i]] = 1;
  }
  for (int64_t s = 0; s < cache.capacity(); ++s)
    if (!used[s]) cache.poison(s);
}

// Leaves token 0's main list one valid entry, at position 0, on a row of NaN bytes. A key split
// that covers only that list's chunks of token 0 then sees no other valid key: its running max
// stays -inf (max ignores NaN) while its sum and O are NaN, and the merge must still carry the NaN.
// Dense lists only; call before poison_unreferenced.
void isolate_nan_key(const explicit_case& c, list_data& d, int width) {
  if (c.csr) throw std::logic_error(c.name + ": lone_nan_key needs dense lists");
  std::vector<int32_t>& row = d.ref[0].idx;
  std::fill(row.begin(), row.end(), -1);
  row[0] = 5;
  std::copy(row.begin(), row.end(), d.dense.begin());
  if (d.lengths.empty()) return;
  d.lengths[0] = width;  // token 0's length, or batch row 0's (shared by its seq_q tokens)
  const int tokens = c.lengths_per_batch ? c.seq_q : 1;
  for (int t = 0; t < tokens; ++t) d.ref[t].length = width;
}

// One explicit problem: host inputs, its float64 reference problem, and the device buffers.
struct explicit_problem {
  explicit_case c;
  dsv4_plan_options options{};
  host_cache cache[2];  // main, extra
  list_data lists[2];
  std::vector<uint16_t> q_bf16;
  std::vector<uint8_t> q_fp8;
  std::vector<float> sink;
  dsv4test::RefProblem ref;
  // On the GPU:
  DeviceBuffer d_q, d_cache[2], d_sink, d_out, d_lse, d_ml, d_idx[2], d_ptr[2], d_len[2];

  int tokens() const { return c.batch * c.seq_q; }
  bool has_extra() const { return c.extra_layout != DSV4_KV_LAYOUT_NONE; }
  int dqk() const { return dsv4::layout_head_dim_qk(c.layout); }
  bool uses_lengths(int list) const { return list == 0 ? c.lengths : c.extra_lengths; }
  int width(int list) const { return list == 0 ? c.topk : c.extra_topk; }
  // New random q values (in q_bf16 or q_fp8, and in ref.q).
  void draw_q(std::mt19937_64& rng);
  // q on the device: each (token, head) row at a pitch of d_qk + q_pad elements.
  void upload_q(TestDevice* dev);
};

void explicit_problem::draw_q(std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t qn = static_cast<size_t>(tokens()) * c.heads * dqk();
  ref.q.resize(qn);
  if (c.q_fp8) {
    q_fp8.resize(qn);
    for (size_t i = 0; i < qn; ++i) {
      q_fp8[i] = dsv4::f32_to_fp8_e4m3(std::fmax(-1.f, std::fmin(1.f, nd(rng))) * 100.0f);
      ref.q[i] = dsv4test::ref_e4m3fn_to_double(q_fp8[i]) * 0.01;
    }
  } else {
    q_bf16.resize(qn);
    for (size_t i = 0; i < qn; ++i) {
      q_bf16[i] = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
      ref.q[i] = bf16_to_double(q_bf16[i]);
    }
  }
}

void explicit_problem::upload_q(TestDevice* dev) {
  const size_t es = c.q_fp8 ? 1 : 2;
  const uint8_t* host = c.q_fp8 ? q_fp8.data() : reinterpret_cast<const uint8_t*>(q_bf16.data());
  const size_t row = static_cast<size_t>(dqk()) * es, pitch = row + c.q_pad * es;
  const size_t rows = static_cast<size_t>(tokens()) * c.heads;
  std::vector<uint8_t> pitched(rows * pitch, 0);
  for (size_t r = 0; r < rows; ++r) std::memcpy(&pitched[r * pitch], host + r * row, row);
  d_q.upload(pitched);
}

// Builds the inputs, their reference problem and plan options, and uploads them to `dev`.
void build_explicit(explicit_problem& P, std::mt19937_64& rng, TestDevice* dev) {
  const explicit_case& c = P.c;
  const int T = P.tokens(), H = c.heads, dqk = P.dqk();
  const int lists = P.has_extra() ? 2 : 1;
  P.cache[0].init(c.layout, c.block, c.slots, c.stride_pad, c.kv_scale, rng);
  if (P.has_extra())
    P.cache[1].init(c.extra_layout, c.extra_block, c.extra_slots, c.stride_pad, c.kv_scale, rng);
  for (int i = 0; i < lists && c.special_rows; ++i) P.cache[i].add_special_rows();
  for (int i = 0; i < lists; ++i)
    P.lists[i] = make_lists(rng, c, P.width(i), P.cache[i].capacity(), P.uses_lengths(i));
  if (c.lone_nan_key) isolate_nan_key(c, P.lists[0], c.topk);
  for (int i = 0; i < lists; ++i) poison_unreferenced(P.cache[i], P.lists[i].ref);
  if (c.lone_nan_key) P.cache[0].poison(P.lists[0].ref[0].idx[0]);

  P.draw_q(rng);
  if (c.sink) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    P.sink.resize(H);
    for (auto& s : P.sink) {
      const float m = nd(rng);
      s = m < -1.2f ? -INFINITY : (m > 1.2f ? INFINITY : nd(rng));
    }
  }

  dsv4_plan_options& o = P.options;
  o = base_options();
  o.num_heads = H;
  o.head_dim_qk = dqk;
  o.softmax_scale = c.softmax_scale;
  if (c.q_fp8) {
    o.q_dtype = kE4m3;
    o.q_scale = 0.01f;
  }
  o.max_tokens = c.max_tokens > 0 ? c.max_tokens : T;
  o.swa_cache = P.cache[0].desc();
  if (P.has_extra()) o.extra_cache = P.cache[1].desc();
  o.index_format = c.csr ? DSV4_INDEX_CSR : DSV4_INDEX_DENSE;
  o.topk = c.topk;
  o.extra_topk = P.has_extra() ? c.extra_topk : 0;

  dsv4test::RefProblem& ref = P.ref;
  ref.num_tokens = T;
  ref.num_heads = H;
  ref.head_dim_qk = dqk;
  ref.scale = c.softmax_scale != 0.0f ? c.softmax_scale : 1.0 / std::sqrt(static_cast<double>(dqk));
  ref.scale = static_cast<double>(static_cast<float>(ref.scale));
  ref.sink.assign(P.sink.begin(), P.sink.end());
  ref.main = P.cache[0].ref();
  ref.main_lists = P.lists[0].ref;
  if (P.has_extra()) {
    ref.extra = P.cache[1].ref();
    ref.extra_lists = P.lists[1].ref;
  }

  const size_t q_bytes = static_cast<size_t>(T) * H * (dqk + c.q_pad) * (c.q_fp8 ? 1 : 2);
  P.d_q = DeviceBuffer(dev, q_bytes);
  P.upload_q(dev);
  for (int i = 0; i < lists; ++i) {
    P.d_cache[i] = dsv4test::to_device(dev, P.cache[i].bytes);
    const list_data& l = P.lists[i];
    const std::vector<int32_t>& idx = c.csr ? l.flat : l.dense;
    P.d_idx[i] = DeviceBuffer(dev, std::max<size_t>(1, idx.size()) * 4);
    if (!idx.empty()) P.d_idx[i].upload(idx);
    if (c.csr) P.d_ptr[i] = dsv4test::to_device(dev, l.indptr);
    if (!l.lengths.empty()) P.d_len[i] = dsv4test::to_device(dev, l.lengths);
  }
  if (c.sink) P.d_sink = dsv4test::to_device(dev, P.sink);
  P.d_out = DeviceBuffer(dev, static_cast<size_t>(T) * H * 512 * 2);
  P.d_lse = DeviceBuffer(dev, static_cast<size_t>(T) * H * 4);
  P.d_ml = DeviceBuffer(dev, static_cast<size_t>(T) * H * 4);
}

// Where the tensors of one run point: the GPU buffers, or host copies for the CPU module.
struct explicit_data {
  void* q = nullptr;
  int64_t q_pitch = 0;  // elements between (token, head) rows
  void* cache[2] = {nullptr, nullptr};
  void* sink = nullptr;
  void* out = nullptr;
  void* lse = nullptr;
  void* ml = nullptr;
  void* idx[2] = {nullptr, nullptr};
  void* ptr[2] = {nullptr, nullptr};
  void* len[2] = {nullptr, nullptr};
};

// The public tensors of one explicit run: q [B, S, H, d] (rows at q_pitch), out [B, S, H, 512],
// lse / max_logits [B, S, H] or [B, H, S], caches [blocks, stride] bytes, dense lists
// [B, S, width] or CSR [nnz] + [T + 1], lengths [B] or [B, S].
class explicit_tensors {
 public:
  explicit_tensors(const explicit_problem& P, const explicit_data& d, dsv4_device dev) : P_(P) {
    const explicit_case& c = P.c;
    const int64_t B = c.batch, S = c.seq_q, H = c.heads, p = d.q_pitch, T = P.tokens();
    q_ =
        TensorView(d.q, dev, c.q_fp8 ? kE4m3 : kBf16, {B, S, H, P.dqk()}, {S * H * p, H * p, p, 1});
    out_ = TensorView(d.out, dev, kBf16, {B, S, H, 512});
    const std::vector<int64_t> stat =
        c.lse_bhs ? std::vector<int64_t>{B, H, S} : std::vector<int64_t>{B, S, H};
    lse_ = TensorView(d.lse, dev, kF32, stat);
    ml_ = TensorView(d.ml, dev, kF32, stat);
    if (c.sink) sink_ = TensorView(d.sink, dev, kF32, {H});
    for (int i = 0; i < (P.has_extra() ? 2 : 1); ++i) {
      cache_[i] = P.cache[i].tensor(d.cache[i], dev, P.cache[i].num_blocks);
      if (c.csr) {
        idx_[i] = TensorView(d.idx[i], dev, kI32, {static_cast<int64_t>(P.lists[i].flat.size())});
        ptr_[i] = TensorView(d.ptr[i], dev, kI32, {T + 1});
      } else {
        idx_[i] = TensorView(d.idx[i], dev, kI32, {B, S, P.width(i)});
      }
      if (P.uses_lengths(i))
        len_[i] = c.lengths_per_batch ? TensorView(d.len[i], dev, kI32, {B})
                                      : TensorView(d.len[i], dev, kI32, {B, S});
    }
  }
  dsv4_run_args args(void* workspace, size_t workspace_bytes, void* stream) {
    const explicit_case& c = P_.c;
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.q = q_.get();
    a.out = out_.get();
    a.lse = lse_.get();
    a.max_logits = ml_.get();
    a.attn_sink = c.sink ? sink_.get() : nullptr;
    a.swa_cache = cache_[0].get();
    a.indices = idx_[0].get();
    a.indptr = c.csr ? ptr_[0].get() : nullptr;
    a.lengths = P_.uses_lengths(0) ? len_[0].get() : nullptr;
    if (P_.has_extra()) {
      a.extra_cache = cache_[1].get();
      a.extra_indices = idx_[1].get();
      a.extra_indptr = c.csr ? ptr_[1].get() : nullptr;
      a.extra_lengths = P_.uses_lengths(1) ? len_[1].get() : nullptr;
    }
    a.workspace = workspace;
    a.workspace_bytes = workspace_bytes;
    a.stream = stream;
    return a;
  }

 private:
  const explicit_problem& P_;
  TensorView q_, out_, lse_, ml_, sink_, cache_[2], idx_[2], ptr_[2], len_[2];
};

// out / lse / max_logits of a run in [T][H](*512) order as doubles (lse stored [B,S,H] or [B,H,S]).
struct results {
  std::vector<double> out, lse, ml;
};

results gather_results(const explicit_case& c, const std::vector<uint16_t>& out,
                       const std::vector<float>& lse, const std::vector<float>& ml) {
  const int T = c.batch * c.seq_q, H = c.heads, S = c.seq_q;
  results r;
  r.out = bf16_to_doubles(out);
  r.lse.resize(static_cast<size_t>(T) * H);
  r.ml.resize(r.lse.size());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int b = t / S, s = t % S;
      const size_t src =
          c.lse_bhs ? (static_cast<size_t>(b) * H + h) * S + s : static_cast<size_t>(t) * H + h;
      r.lse[static_cast<size_t>(t) * H + h] = lse[src];
      r.ml[static_cast<size_t>(t) * H + h] = ml[src];
    }
  }
  return r;
}

results download(const explicit_problem& P) {
  return gather_results(P.c, P.d_out.download<uint16_t>(), P.d_lse.download<float>(),
                        P.d_ml.download<float>());
}

void expect_matches(const results& got, const dsv4test::RefResult& want, const std::string& what) {
  EXPECT_TRUE(dsv4test::compare_close(got.out, want.out, kDecodeOutTol, what + " out"));
  EXPECT_TRUE(dsv4test::compare_close(got.lse, want.lse, kDecodeLseTol, what + " lse"));
  EXPECT_TRUE(
      dsv4test::compare_close(got.ml, want.max_logits, kDecodeLseTol, what + " max_logits"));
}

// The same problem through the CPU module on host copies of every input: both must agree within
// the spec's tolerances (they round P and the outputs differently).
void cross_check_cpu(const explicit_problem& P, const results& gpu_results) {
  dsv4_ctx* ctx = cpu_ctx();
  ASSERT_NE(ctx, nullptr) << "the CPU module is built but no CPU context opens: "
                          << dsv4_last_error_message();
  const explicit_case& c = P.c;
  dsv4_plan* raw = nullptr;
  ASSERT_EQ(dsv4_plan_create(ctx, &P.options, &raw), DSV4_STATUS_OK)
      << "CPU plan: " << dsv4_last_error_message();
  PlanPtr plan(raw);
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);
  std::vector<uint8_t> ws(ws_bytes + 1);
  const size_t rows = static_cast<size_t>(P.tokens()) * c.heads;
  std::vector<uint16_t> out(rows * 512);
  std::vector<float> lse(rows), ml(rows);
  std::vector<uint8_t> caches[2] = {P.cache[0].bytes, P.cache[1].bytes};
  std::vector<int32_t> idx[2], ptr[2], len[2];
  explicit_data d;
  d.q = c.q_fp8 ? static_cast<void*>(const_cast<uint8_t*>(P.q_fp8.data()))
                : static_cast<void*>(const_cast<uint16_t*>(P.q_bf16.data()));
  d.q_pitch = P.dqk();  // the host copy of q is contiguous
  d.sink = const_cast<float*>(P.sink.data());
  d.out = out.data();
  d.lse = lse.data();
  d.ml = ml.data();
  for (int i = 0; i < 2; ++i) {
    const list_data& l = P.lists[i];
    idx[i] = c.csr ? l.flat : l.dense;
    idx[i].push_back(-1);  // never empty: a valid pointer even for an empty CSR list
    ptr[i] = l.indptr;
    len[i] = l.lengths;
    d.cache[i] = caches[i].data();
    d.idx[i] = idx[i].data();
    d.ptr[i] = ptr[i].data();
    d.len[i] = len[i].data();
  }
  explicit_tensors tensors(P, d, dsv4_device{DSV4_DEVICE_CPU, 0});
  const dsv4_run_args a = tensors.args(ws.data(), ws_bytes, nullptr);
  ASSERT_EQ(dsv4_run(plan.get(), &a), DSV4_STATUS_OK) << "CPU run: " << dsv4_last_error_message();
  const results cpu = gather_results(c, out, lse, ml);
  EXPECT_TRUE(dsv4test::compare_close(gpu_results.out, cpu.out, kDecodeOutTol, "out vs CPU"));
  EXPECT_TRUE(dsv4test::compare_close(gpu_results.lse, cpu.lse, kDecodeLseTol, "lse vs CPU"));
  EXPECT_TRUE(dsv4test::compare_close(gpu_results.ml, cpu.ml, kDecodeLseTol, "max_logits vs CPU"));
}

bool is_gpu(const gpu& g) { return g.device->device().device_type == DSV4_DEVICE_CUDA; }

// A run's log must say `what` when the case expects it (GPU runs only).
void expect_logged(const gpu& g, bool expected, const char* what) {
  if (!expected || !is_gpu(g)) return;
  EXPECT_NE(g.log.last_run().find(what), std::string::npos)
      << "the run's log does not say \"" << what << "\" (log: \"" << g.log.last_run() << "\")";
}

// A captured graph and its executable, destroyed with the object.
struct captured_graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  captured_graph() = default;
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

// Runs one explicit case on `g`: the reference, the CPU module (cross_check) and, with
// `graph_check`, a
// captured graph replayed on new inputs.
void run_explicit_case(gpu& g, const explicit_case& c, bool graph_check, bool cross_check) {
  TestDevice* dev = g.device.get();
  SCOPED_TRACE(c.name + ", DSV4_CUDA_FORCE=\"" + force_of(c) + "\", " + dsv4test::seed_note());
  std::mt19937_64 rng(dsv4test::case_seed(c.name));
  explicit_problem P;
  P.c = c;
  build_explicit(P, rng, dev);
  PlanPtr plan;
  ASSERT_EQ(create_plan(g.ctx.get(), P.options, force_of(c), true, &plan), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);
  // The workspace pointer is deliberately not 16-byte aligned (the ABI promises no alignment).
  // Outputs and workspace start as NaN bytes: every element must be written, and the combine
  // must read only what the attention grid stored.
  DeviceBuffer ws(dev, ws_bytes + 16);
  ws.fill(0xff);
  P.d_out.fill(0xff);
  P.d_lse.fill(0xff);
  P.d_ml.fill(0xff);
  explicit_data d;
  d.q = P.d_q.get();
  d.q_pitch = P.dqk() + c.q_pad;
  d.sink = P.d_sink.get();
  d.out = P.d_out.get();
  d.lse = P.d_lse.get();
  d.ml = P.d_ml.get();
  for (int i = 0; i < 2; ++i) {
    d.cache[i] = P.d_cache[i].get();
    d.idx[i] = P.d_idx[i].get();
    d.ptr[i] = P.d_ptr[i].get();
    d.len[i] = P.d_len[i].get();
  }
  explicit_tensors tensors(P, d, dev->device());
  dsv4_run_args args = tensors.args(static_cast<uint8_t*>(ws.get()) + 4, ws_bytes, dev->stream());
  g.log.clear();
  ASSERT_EQ(dsv4_run(plan.get(), &args), DSV4_STATUS_OK) << dsv4_last_error_message();
  dev->synchronize();
  SCOPED_TRACE("run log: " + g.log.last_run());
  expect_logged(g, c.expect_order, "longest first");
  expect_logged(g, c.expect_persistent, "persistent CTAs");
  const dsv4test::RefResult want = dsv4test::reference_attention(P.ref);
  const results got = download(P);
  expect_matches(got, want, "");
  if (cross_check) cross_check_cpu(P, got);
  if (!graph_check || !is_gpu(g) || ::testing::Test::HasFailure()) return;

  // One run captured into a graph, replayed with new q in the same buffers: the same bits as an
  // eager run on the new q, and the reference's values.
  cudaStream_t stream = static_cast<cudaStream_t>(dev->stream());
  captured_graph graph;
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const dsv4_status st = dsv4_run(plan.get(), &args);
  const std::string capture_error = dsv4_last_error_message();
  DSV4_CUDA_CHECK(cudaStreamEndCapture(stream, &graph.graph));
  ASSERT_EQ(st, DSV4_STATUS_OK) << "run under capture: " << capture_error;
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));
  P.draw_q(rng);
  P.upload_q(dev);
  P.d_out.fill(0xff);
  DSV4_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream));
  dev->synchronize();
  const results replayed = download(P);
  P.d_out.fill(0xff);
  ASSERT_EQ(dsv4_run(plan.get(), &args), DSV4_STATUS_OK) << dsv4_last_error_message();
  dev->synchronize();
  const results eager = download(P);
  EXPECT_EQ(
      0, std::memcmp(replayed.out.data(), eager.out.data(), replayed.out.size() * sizeof(double)))
      << "graph replay differs from an eager run on the same inputs";
  expect_matches(replayed, dsv4test::reference_attention(P.ref), "graph replay");
}

std::vector<explicit_case> explicit_cases() {
  std::vector<explicit_case> v;
  auto add = [&](explicit_case c) { v.push_back(c); };
  // Per-tensor FP8 caches (kv_scale 0.0125) read by an e4m3 q.
  auto per_tensor_fp8_q = [](explicit_case& c) {
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
    c.q_fp8 = true;
    c.kv_scale = 0.0125f;
  };
  // FlashMLA-like decode: main SWA list + extra compressed list, every head count.
  for (int h : {1, 8, 16, 24, 64, 128}) {
    explicit_case c;
    c.name = "v4-decode-h" + std::to_string(h);
    c.heads = h;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.extra_block = 2;
    c.extra_slots = 2048;
    c.graph = h == 1;
    add(c);
  }
  {  // one split per CTA (many tokens): the direct-finalise path, prefill-like
    explicit_case c;
    c.name = "v4-prefill-T300";
    c.batch = 150;
    c.seq_q = 2;
    c.topk = 192;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 320;
    c.lengths_per_batch = true;
    add(c);
  }
  {
    explicit_case c;
    c.name = "v4-odd-blocks-sq3";
    c.seq_q = 3;
    c.block = 61;
    c.topk = 100;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_block = 69;
    c.extra_topk = 130;
    c.lse_bhs = true;
    c.softmax_scale = 0.0323f;
    add(c);
  }
  {
    explicit_case c;
    c.name = "bf16-h32-sq1";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.heads = 32;
    c.seq_q = 1;
    c.batch = 9;
    c.topk = 64;
    c.extra_topk = 200;
    add(c);
  }
  {
    explicit_case c;
    c.name = "v32-656-h64";
    c.layout = DSV4_KV_LAYOUT_FP8_V32_656B;
    c.topk = 256;
    c.block = 64;
    c.stride_pad = 656;  // FlashMLA's helper allocates B+1 rows per block
    add(c);
  }
  {
    // 64-head plans run 32-head tiles when few tokens leave the device idle; enough tokens here
    // (160) keep the 64-head tiles.
    explicit_case c;
    c.name = "v32-656-h64-b80";
    c.layout = DSV4_KV_LAYOUT_FP8_V32_656B;
    c.batch = 80;
    c.topk = 100;
    c.block = 64;
    add(c);
  }
  {
    // The mma.sync kernel with 64-head tiles (Hopper uses the wgmma kernel by default).
    explicit_case c;
    c.name = "mma-v4-decode-h64-b80";
    c.kernel = "mma";
    c.batch = 80;
    c.topk = 96;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 64;
    add(c);
  }
  {
    explicit_case c;  // 16-head tile: Q K^T split over two head-dim halves of 288
    c.name = "v32-656-h16";
    c.layout = DSV4_KV_LAYOUT_FP8_V32_656B;
    c.heads = 16;
    c.topk = 192;
    c.block = 64;
    add(c);
  }
  {
    explicit_case c;
    c.name = "v32-656-h24";
    c.layout = DSV4_KV_LAYOUT_FP8_V32_656B;
    c.heads = 24;
    c.topk = 130;
    c.block = 64;
    add(c);
  }
  {
    explicit_case c;
    c.name = "per-tensor-fp8-q";
    per_tensor_fp8_q(c);
    c.heads = 16;
    c.topk = 128;
    c.extra_topk = 128;
    add(c);
  }
  // fp16 rows (spec 12.1) through each kernel family that serves bf16 rows: the wgmma kernel, the
  // small-head kernel's tiles and the mma.sync kernel, with splits and persistent CTAs.
  {
    explicit_case c;
    c.name = "sm90-fp16-h64";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP16;
    c.block = 61;
    c.topk = 200;
    c.extra_topk = 130;
    c.extra_block = 5;
    add(c);
    c.name = "sm90-fp16-h128-splits5";
    c.heads = 128;
    c.batch = 1;
    c.topk = 448;
    c.extra_topk = 512;
    c.max_splits = 5;
    add(c);
    c = explicit_case{};
    c.name = "sm90s-fp16-h16";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP16;
    c.heads = 16;
    c.topk = 300;
    c.block = 37;
    c.extra_topk = 200;
    c.extra_block = 3;
    add(c);
    c.name = "sm90-persist3-fp16-h64";
    c.heads = 64;
    c.batch = 7;
    c.persistent = 3;
    add(c);
    c = explicit_case{};
    c.name = "mma-fp16-h64-sq1";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP16;
    c.kernel = "mma";
    c.seq_q = 1;
    c.batch = 9;
    c.topk = 64;
    c.extra_topk = 257;
    add(c);
  }
  // Shapes aimed at the Hopper kernel (> 32 heads, one 512-dim layout): partial 64-head groups,
  // CTA pairs with a partial second group, every layout it serves, fp8 q, and mixed layouts (which
  // fall back to the mma.sync kernel).
  for (int h : {40, 96}) {
    explicit_case c;
    c.name = "sm90-v4-h" + std::to_string(h);
    c.heads = h;
    c.topk = 200;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 130;
    c.block = 61;
    c.extra_block = 2;
    c.special_rows = h == 96;  // the CTA pairs' fix-up path for inexact groups
    add(c);
    if (h == 96) {
      c.name = "mma-v4-h96";
      c.kernel = "mma";
      add(c);
    }
  }
  {
    explicit_case c;
    c.name = "sm90-bf16-h128-sq1";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.heads = 128;
    c.seq_q = 1;
    c.batch = 9;
    c.topk = 64;
    c.extra_topk = 257;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90-per-tensor-fp8-q-h64";
    c.special_rows = true;
    per_tensor_fp8_q(c);
    c.heads = 64;
    c.topk = 70;
    c.extra_topk = 128;
    add(c);
  }
  {
    // softmax_scale x q_scale x kv_scale underflows to 0 in fp32. The module clamps the kernels'
    // logit scale to FLT_MIN: every weight equal, as in the reference, where 0 would turn the
    // Hopper softmax's masked keys (unscaled -inf logits times the scale) into NaN.
    explicit_case c;
    c.name = "sm90-per-tensor-fp8-q-h64-scale-underflow";
    per_tensor_fp8_q(c);
    c.heads = 64;
    c.topk = 70;
    c.extra_topk = 64;
    c.softmax_scale = 1e-45f;
    add(c);
  }
  {
    explicit_case c;  // FP8 64 heads, splits over 160 tokens
    c.name = "sm90-v4-decode-h64-b80";
    c.special_rows = true;
    c.batch = 80;
    c.topk = 96;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 64;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90-csr-v4-h64-T300";
    c.csr = true;
    c.lengths = false;
    c.batch = 150;
    c.topk = 150;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 70;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90-mixed-layouts-h64";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.topk = 128;
    c.extra_topk = 64;
    add(c);
  }
  {
    // Strided q rows (pitch 576): the tensor-map Q load with a head stride, 96 heads.
    explicit_case c;
    c.name = "sm90-bf16-h96-qpad";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.heads = 96;
    c.q_pad = 64;
    add(c);
  }
  {
    // bf16 rows over many chunks (12 and 13 per token) with a sharp softmax, so the running max and
    // the rescaling of O move a lot from chunk to chunk; odd block sizes.
    explicit_case c;
    c.name = "sm90-bf16-h64-sq3-sharp";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.seq_q = 3;
    c.batch = 2;
    c.topk = 700;
    c.block = 37;
    c.extra_topk = 90;
    c.extra_block = 5;
    c.softmax_scale = 0.4f;
    add(c);
    // Persistent CTAs over items of 0, 1 or 2 chunks (per-row lengths): buffer phases and the next
    // item's Q carried across items that are empty or end on either buffer.
    c.name = "sm90-persist3-bf16-h64-short";
    c.seq_q = 1;
    c.batch = 17;
    c.topk = 64;
    c.block = 64;
    c.extra_topk = 33;
    c.softmax_scale = 0.0f;
    c.persistent = 3;
    add(c);
  }
  {
    explicit_case c;  // q rows not 16-byte aligned (pitch 516): the Hopper kernel loads Q itself
    c.name = "sm90-v4-h64-qodd";
    c.heads = 64;
    c.q_pad = 4;
    add(c);
  }
  // Key splits of the wgmma kernel and their combine: 15 chunks per token split 2, 3, 5, 8 or 15
  // ways, 12 chunks 12 ways (up to 12 splits: the combine's one-pass merge); partial head groups,
  // every layout, NaN rows and extreme scales, per-batch lengths, unaligned q, and graph replay.
  // 65..128 heads over FP8 run unpaired when the split run fits the device in one wave (96 and
  // 128 heads below) and as CTA pairs otherwise (the b8 case: 160 CTAs).
  {
    explicit_case c;
    c.batch = 1;
    c.topk = 448;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.extra_block = 2;
    c.extra_slots = 2048;
    auto split_case = [&](const char* name, int splits, int heads, auto&& tweak) {
      explicit_case d = c;
      d.name = name;
      d.max_splits = splits;
      d.heads = heads;
      tweak(d);
      add(d);
    };
    split_case("sm90-splits3-v4-h40", 3, 40, [](explicit_case&) {});
    split_case("sm90-splits15-v4-h96", 15, 96, [](explicit_case& d) { d.special_rows = true; });
    // An odd head count on the small-head kernel, merged by the general merge (more than 12
    // splits).
    split_case("sm90-splits15-v4-h13", 15, 13, [](explicit_case& d) { d.special_rows = true; });
    split_case("sm90-splits5-bf16-h128", 5, 128, [](explicit_case& d) {
      d.layout = d.extra_layout = DSV4_KV_LAYOUT_BF16;
      d.graph = true;
    });
    split_case("sm90-splits8-v4-h64-b3", 8, 64, [](explicit_case& d) {
      d.batch = 3;
      d.stride_pad = 1168;  // out rows stay aligned; caches with spare rows per block
      d.lengths_per_batch = true;
    });
    split_case("sm90-splits2-per-tensor-h72", 2, 72, [&](explicit_case& d) {
      per_tensor_fp8_q(d);
      d.special_rows = true;
    });
    split_case("sm90-splits5-v4-h64-qodd", 5, 64, [](explicit_case& d) { d.q_pad = 4; });
    split_case("sm90-splits5-v4-h128-b8", 5, 128, [](explicit_case& d) {
      d.batch = 8;
      d.special_rows = true;
    });
    // The largest split count of the combine's one-pass merge (kCombineFastSplits), CTA pairs.
    split_case("sm90-splits12-v4-h128-b2", 12, 128, [](explicit_case& d) {
      d.topk = 256;  // 4 + 8 chunks: one per split
      d.batch = 2;
      d.special_rows = true;
      d.lengths_per_batch = true;
    });
  }
  // A key split whose only valid key is a NaN row (isolate_nan_key): its max stays -inf while its
  // sum and O are NaN, and the merge must carry the NaN into the row as the reference does. One
  // token's lists are 2 + 8 chunks (or 2 + 14: the general merge of more than 12 splits), one
  // chunk per split, in each kernel and in persistent CTAs.
  {
    explicit_case c;
    c.batch = 1;
    c.topk = 128;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.lone_nan_key = true;
    c.name = "sm90-lone-nan-key-v4-h64";
    add(c);
    explicit_case d = c;
    d.name = "sm90-lone-nan-key-v4-h128-splits16";
    d.heads = 128;
    d.extra_topk = 896;
    d.kernel = "wgmma";  // 64-head CTAs: 16 splits (16-head tiles would take 2 chunks per split)
    add(d);
    d = c;
    d.name = "sm90s-lone-nan-key-per-tensor-h4";
    per_tensor_fp8_q(d);
    d.heads = 4;
    add(d);
    d = c;
    d.name = "sm90s-lone-nan-key-v4-h4";
    d.heads = 4;
    add(d);
    d = c;
    d.name = "mma-lone-nan-key-bf16-h16";
    d.layout = d.extra_layout = DSV4_KV_LAYOUT_BF16;
    d.kernel = "mma";
    d.heads = 16;
    add(d);
    d = c;
    d.name = "sm90-persist2-lone-nan-key-bf16-h64";
    d.layout = d.extra_layout = DSV4_KV_LAYOUT_BF16;
    d.persistent = 2;
    add(d);
  }
  // Persistent CTAs of the wgmma kernel (forced few, so each loops over >= 4 work items): CTA
  // pairs, a partial head group, head groups alternating per CTA (odd CTA counts), splits with
  // their combine, every layout, NaN rows and extreme scales, graph replay.
  {
    explicit_case c;
    c.name = "sm90-persist4-v4-h128";
    c.heads = 128;
    c.batch = 7;
    c.topk = 200;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 130;
    c.block = 61;
    c.extra_block = 2;
    c.special_rows = true;
    c.persistent = 4;
    add(c);
    c.name = "sm90-persist5-bf16-h120";
    c.heads = 120;
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.special_rows = false;
    c.persistent = 5;
    c.graph = true;
    add(c);
    c.name = "sm90-persist3-per-tensor-h64";
    c.heads = 64;
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
    c.kv_scale = 0.75f;
    c.batch = 13;
    c.seq_q = 1;
    c.persistent = 3;
    c.graph = false;
    add(c);
    c.name = "sm90-persist3-splits3-v4-h96";
    c.heads = 96;
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.kv_scale = 1.0f;
    c.batch = 3;
    c.seq_q = 2;
    c.topk = 448;
    c.extra_topk = 512;
    c.extra_slots = 2048;
    c.max_splits = 3;
    c.persistent = 4;
    add(c);
  }
  {
    // The planner's own choice: uniform items (dense lists, no lengths), > 4 waves of CTAs on an
    // H100 or H200 (132 SMs: 560 items).
    explicit_case c;
    c.name = "sm90-persist-default-v4-h64-T560";
    c.batch = 280;
    c.topk = 64;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 64;
    c.lengths = false;
    c.extra_lengths = false;
    add(c);
  }
  // Tokens longest first (token_order.cu): the order forced on runs of one wave (the wgmma kernel,
  // one split) over every layout, CTA pairs and unpaired 128-head runs, CSR rows, zero lengths, NaN
  // and extreme rows, graph replay; and the planner's own choice over 300 uneven tokens.
  {
    explicit_case c;
    c.order = 1;
    c.expect_order = true;
    c.kernel = "wgmma";
    c.max_splits = 1;
    c.name = "order-v4-h64-b20";
    c.batch = 20;
    c.topk = 128;
    c.block = 61;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.extra_block = 2;
    c.extra_slots = 2048;
    c.special_rows = true;
    c.graph = true;
    add(c);
    c.name = "order-v4-h128-pairs-b7";
    c.heads = 128;
    c.batch = 7;
    c.graph = false;
    add(c);
    c.name = "order-bf16-h96-csr";
    c.heads = 96;
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.special_rows = false;
    c.csr = true;
    c.batch = 9;
    add(c);
    c = explicit_case{};
    c.name = "order-default-v4-h64-T300";
    c.expect_order = true;
    c.batch = 150;
    c.topk = 64;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 192;
    add(c);
  }
  // The small-head kernel's 16- and 32-head tiles for > 32 heads (what the planner picks for runs
  // of few tokens and for medium runs): several head groups per token, partial last groups (120
  // heads = 7 x 16 + 8 = 3 x 32 + 24, 40 = 2 x 16 + 8 = 32 + 8), splits, every layout.
  for (const bool tiles32 : {false, true}) {
    const std::string prefix = tiles32 ? "sm90s-wide32-" : "sm90s-wide-";
    explicit_case c;
    c.name = prefix + "v4-h64";
    c.kernel = tiles32 ? "small32" : "small";
    c.special_rows = true;
    c.batch = 1;
    c.topk = 448;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.extra_block = 2;
    c.extra_slots = 2048;
    add(c);
    if (tiles32) {
      c.block = 37;  // here and in the cases below
      explicit_case g = c;
      g.name = prefix + "v4-h128-b5-graph";
      g.heads = 128;
      g.batch = 5;
      g.graph = true;
      add(g);
    }
    c.name = prefix + "bf16-h120-sq1";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.special_rows = false;
    c.heads = 120;
    c.seq_q = 1;
    c.batch = 3;
    add(c);
    c.name = prefix + "per-tensor-fp8-q-h40";
    per_tensor_fp8_q(c);
    c.heads = 40;
    add(c);
  }
  // Shapes aimed at the Hopper small-head kernel (1..32 heads: 16- and 32-head tiles, partial
  // tiles, every layout it serves, splits, fix-up of inexact groups, fp8 and unaligned q), and the
  // mma.sync kernel it replaces there.
  for (int h : {8, 20, 32}) {
    explicit_case c;
    c.name = "sm90s-v4-h" + std::to_string(h);
    c.heads = h;
    c.topk = 200;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 130;
    c.block = 61;
    c.extra_block = 2;
    c.special_rows = h != 20;
    add(c);
    if (h == 8) {
      // Small-head tiles gather FP8 rows by the bulk-copy engine; the producers' own loads stay
      // covered.
      explicit_case d = c;
      d.name = "sm90s-loads-v4-h8";
      d.row_loads = true;
      add(d);
      // 1..8 heads run the 8-head consumer; the 16-head tile's consumer stays covered for them.
      d.name = "sm90s-h16-consumer-v4-h8";
      d.row_loads = false;
      d.no_heads8 = true;
      add(d);
      c.name = "mma-v4-h8";
      c.kernel = "mma";
      add(c);
    }
    if (h == 32) {
      // 32-head tiles stage the FP8 bytes and copy the rope by cp.async; their loads path too.
      explicit_case d = c;
      d.name = "sm90s-loads-v4-h32";
      d.row_loads = true;
      add(d);
    }
  }
  {
    explicit_case c;  // splits over 160 tokens, 16 heads
    c.name = "sm90s-v4-decode-h16-b80";
    c.heads = 16;
    c.batch = 80;
    c.topk = 96;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 700;
    add(c);
    c.name = "sm90s-loads-v4-decode-h16-b80";
    c.row_loads = true;
    add(c);
  }
  // Partial tiles of the 584 B layout with splits, odd block sizes, extreme-scale and NaN-byte rows
  // and short lengths: 16-head tiles (1, 5, 13 heads) and staged 32-head tiles with a partial
  // second half (24 heads).
  for (int h : {1, 5, 13, 24}) {
    explicit_case c;
    c.name = "sm90s-v4-h" + std::to_string(h) + "-b1-splits";
    c.special_rows = true;
    c.heads = h;
    c.batch = 1;
    c.topk = 300;
    c.block = 37;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 200;
    c.extra_block = 3;
    add(c);
  }
  {
    explicit_case c;  // many tokens, no lengths (every chunk full), a graph replayed
    c.name = "sm90s-v4-h16-b40-graph";
    c.heads = 16;
    c.batch = 40;
    c.lengths = false;
    c.extra_lengths = false;
    c.topk = 128;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 512;
    c.graph = true;
    add(c);
    c.name = "sm90s-v4-h7-b40-splits3";
    c.heads = 7;
    c.graph = false;
    c.max_splits = 3;
    c.special_rows = true;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90s-bf16-h24-sq1";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.extra_layout = DSV4_KV_LAYOUT_BF16;
    c.heads = 24;
    c.seq_q = 1;
    c.batch = 9;
    c.topk = 64;
    c.extra_topk = 257;
    add(c);
    // The 8-head consumer behind the bf16 producers' copies, with splits (two tokens) and odd
    // blocks.
    c.name = "sm90s-bf16-h6-b1-splits";
    c.heads = 6;
    c.seq_q = 2;
    c.batch = 1;
    c.topk = 333;
    c.block = 29;
    c.extra_block = 5;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90s-per-tensor-fp8-q-h4";
    c.special_rows = true;
    per_tensor_fp8_q(c);
    c.heads = 4;
    c.topk = 70;
    c.extra_topk = 128;
    add(c);
  }
  {
    // 32-head tiles (the wgmma consumer; heads 16..27 a partial second half), few tokens: splits.
    explicit_case c;
    c.name = "sm90s-per-tensor-fp8-q-h28";
    c.special_rows = true;
    per_tensor_fp8_q(c);
    c.heads = 28;
    c.batch = 1;
    c.topk = 300;
    c.extra_topk = 200;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90s-csr-v4-h16-T300";
    c.csr = true;
    c.lengths = false;
    c.heads = 16;
    c.batch = 150;
    c.topk = 150;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 70;
    add(c);
  }
  {
    explicit_case c;  // q rows not 16-byte aligned (pitch 516)
    c.name = "sm90s-v4-h32-qodd";
    c.heads = 32;
    c.q_pad = 4;
    add(c);
  }
  // Persistent small-head CTAs (16-head tiles of staged rows, one split), forced few so that each
  // runs several work items in turn: items crossed inside the producers' two-slot stream, empty
  // items (zero lengths), the 8- and 16-head consumers, every FP8 layout, NaN rows and extreme
  // scales, fp8 q, head groups alternating per CTA (40 heads on 16-head tiles), a graph replayed;
  // and the planner's own choice over 440 tokens of full lists (> 3 waves on an H100 or H200).
  {
    explicit_case c;
    c.name = "sm90s-persist3-v4-h8";
    c.heads = 8;
    c.batch = 7;
    c.topk = 200;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 130;
    c.block = 61;
    c.extra_block = 2;
    c.special_rows = true;
    c.max_splits = 1;
    c.persistent = 3;
    c.expect_persistent = true;
    add(c);
    c.name = "sm90s-persist2-v4-h13";
    c.heads = 13;
    c.persistent = 2;
    add(c);
    c.name = "sm90s-persist4-v4-h16-graph";
    c.heads = 16;
    c.block = 37;
    c.persistent = 4;
    c.graph = true;
    add(c);
    c.name = "sm90s-persist3-per-tensor-fp8-q-h5";
    per_tensor_fp8_q(c);
    c.heads = 5;
    c.persistent = 3;
    c.graph = false;
    add(c);
    c.name = "sm90s-persist5-wide-v4-h40";
    c.layout = c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.q_fp8 = false;
    c.kv_scale = 1.0f;
    c.kernel = "small";
    c.heads = 40;
    c.batch = 5;
    c.persistent = 5;
    add(c);
  }
  {
    explicit_case c;
    c.name = "sm90s-persist-default-v4-h8-T440";
    c.heads = 8;
    c.batch = 220;
    c.lengths = false;
    c.extra_lengths = false;
    c.topk = 64;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 128;
    c.expect_persistent = true;
    add(c);
  }
  {
    explicit_case c;
    c.name = "per-tensor-bf16-q";
    c.layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
    c.heads = 8;
    c.topk = 300;
    c.kv_scale = 0.5f;
    add(c);
  }
  {
    explicit_case c;
    c.name = "csr-v4-h64";
    c.csr = true;
    c.lengths = false;
    c.extra_lengths = true;
    c.topk = 150;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_topk = 90;
    add(c);
  }
  {
    explicit_case c;
    c.name = "unaligned-stride";
    c.stride_pad = 8;  // block stride not a multiple of 16: the byte-copy staging path
    c.heads = 16;
    c.block = 3;
    c.topk = 77;
    add(c);
  }
  {
    explicit_case c;
    c.name = "no-sink-no-lengths";
    c.sink = false;
    c.lengths = false;
    c.heads = 128;
    c.topk = 640;
    add(c);
  }
  {  // the small-shared-memory variant (sm_86/89), forced here
    explicit_case c;
    c.name = "small-chunk-v4-h8";
    c.small_chunk = true;
    c.heads = 8;
    c.block = 61;
    c.topk = 100;
    c.extra_layout = DSV4_KV_LAYOUT_FP8_V4_584B;
    c.extra_block = 2;
    c.extra_topk = 300;
    add(c);
    c.name = "small-chunk-v32-h64";
    c.layout = DSV4_KV_LAYOUT_FP8_V32_656B;
    c.extra_layout = DSV4_KV_LAYOUT_NONE;
    c.heads = 64;
    c.block = 64;
    c.topk = 256;
    add(c);
    c.name = "small-chunk-bf16-h128-T300";
    c.layout = DSV4_KV_LAYOUT_BF16;
    c.heads = 128;
    c.batch = 150;
    c.topk = 96;
    c.lse_bhs = true;
    add(c);
  }
  // The cases named for the wgmma kernel stay on it (the planner may pick the small-head kernel's
  // tiles for their few tokens).
  for (explicit_case& c : v) {
    if (c.kernel == nullptr && c.name.rfind("sm90-", 0) == 0) c.kernel = "wgmma";
  }
  return v;
}

class CudaExplicit : public ::testing::TestWithParam<explicit_case> {};

TEST_P(CudaExplicit, MatchesTheReferenceAndTheCpuModule) {
  OPEN_GPU_OR_SKIP(g, 0);
  run_explicit_case(*g, GetParam(), GetParam().graph, DSV4_CUDA_TEST_CPU_CROSS_CHECK != 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaExplicit, ::testing::ValuesIn(explicit_cases()),
                         [](const auto& i) { return test_name(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Paged mode: the lists built on the device from an engine's batch description.

struct paged_case {
  std::string name;
  int ratio = 4;  // 1, 4, 128
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int heads = 64;
  int decodes = 6;
  int decode_len = 2;  // MTP
  int prefills = 2;
  int max_prefill_len = 40;
  int max_seq = 700;
  int swa_block = 64;
  int index_topk = 64;
  int64_t max_model_len = 4096;
  int padding_tokens = 3;  // extra tokens beyond the last request
  bool order = false;      // DSV4_CUDA_FORCE order=1 on the wgmma kernel, one split
};

std::ostream& operator<<(std::ostream& os, const paged_case& c) { return os << c.name; }

void run_paged_case(gpu& g, const paged_case& c) {
  TestDevice* dev = g.device.get();
  const std::string force = c.order ? "order=1,kernel=wgmma,max_splits=1" : "";
  SCOPED_TRACE(c.name + ", DSV4_CUDA_FORCE=\"" + force + "\", " + dsv4test::seed_note());
  std::mt19937_64 rng(dsv4test::case_seed(c.name));
  dsv4test::RefPagedConfig cfg;
  cfg.compress_ratio = c.ratio;
  cfg.window = 128;
  cfg.swa_block_size = c.swa_block;
  cfg.cmp_block_size = c.ratio > 1 ? 256 / c.ratio : 64;
  cfg.index_topk = c.index_topk;
  cfg.decode_threshold = c.decode_len;
  cfg.max_model_len = c.max_model_len;

  dsv4test::RefPagedBatch b;
  const int R = c.decodes + c.prefills;
  std::vector<int> qlen(R), seq(R);
  for (int r = 0; r < R; ++r) {
    const bool dec = r < c.decodes;
    qlen[r] = dec ? 1 + static_cast<int>(rng() % c.decode_len)
                  : c.decode_len + 1 + static_cast<int>(rng() % c.max_prefill_len);
    seq[r] = qlen[r] + static_cast<int>(rng() % (c.max_seq - qlen[r]));
  }
  b.query_start_loc.push_back(0);
  for (int r = 0; r < R; ++r) b.query_start_loc.push_back(b.query_start_loc.back() + qlen[r]);
  b.seq_lens.assign(seq.begin(), seq.end());
  const int T = b.query_start_loc.back() + c.padding_tokens;
  b.num_tokens = T;
  // Block tables: random distinct blocks.
  const int swa_cols = (c.max_seq + c.swa_block - 1) / c.swa_block;
  const int64_t swa_blocks = static_cast<int64_t>(R) * swa_cols + 3;
  std::vector<int32_t> perm(swa_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  b.swa_bt_cols = swa_cols;
  b.swa_block_table.assign(perm.begin(), perm.begin() + static_cast<int64_t>(R) * swa_cols);
  int64_t cmp_blocks = 0;
  if (c.ratio > 1) {
    const int cmp_cols = (c.max_seq / c.ratio + cfg.cmp_block_size - 1) / cfg.cmp_block_size + 1;
    cmp_blocks = static_cast<int64_t>(R) * cmp_cols + 2;
    std::vector<int32_t> cp(cmp_blocks);
    std::iota(cp.begin(), cp.end(), 0);
    std::shuffle(cp.begin(), cp.end(), rng);
    b.cmp_bt_cols = cmp_cols;
    b.cmp_block_table.assign(cp.begin(), cp.begin() + static_cast<int64_t>(R) * cmp_cols);
  }
  b.slot_mapping.assign(T, 0);
  for (int t = 0; t < T; ++t)
    b.slot_mapping[t] = (t >= b.query_start_loc.back() || rng() % 11 == 0) ? -1 : t;
  if (c.ratio == 4) {
    b.topk_indices.assign(static_cast<size_t>(T) * c.index_topk, -1);
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < qlen[r]; ++i) {
        const int t = b.query_start_loc[r] + i;
        const int p = seq[r] - qlen[r] + i;
        const int n = (p + 1) / 4;
        std::vector<int32_t> cand(n);
        std::iota(cand.begin(), cand.end(), 0);
        std::shuffle(cand.begin(), cand.end(), rng);
        const int k = std::min(n, c.index_topk);
        for (int j = 0; j < k; ++j)
          b.topk_indices[static_cast<size_t>(t) * c.index_topk + j] = cand[j];
      }
    }
  }
  SCOPED_TRACE("batch: " + dsv4test::ref_describe_batch(b));
  const dsv4test::RefPagedLists lists = dsv4test::ref_build_paged_lists(cfg, b);

  host_cache swa, cmp;
  swa.init(c.layout, c.swa_block, swa_blocks * c.swa_block, 0, 1.0f, rng);
  poison_unreferenced(swa, lists.swa);
  if (c.ratio > 1) {
    cmp.init(c.layout, static_cast<int32_t>(cfg.cmp_block_size), cmp_blocks * cfg.cmp_block_size, 0,
             1.0f, rng);
    poison_unreferenced(cmp, lists.cmp);
  }
  const int H = c.heads;
  const int dqk = dsv4::layout_head_dim_qk(c.layout);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> q(static_cast<size_t>(T) * H * dqk);
  dsv4test::RefProblem ref;
  ref.q.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
    ref.q[i] = bf16_to_double(q[i]);
  }
  std::vector<float> sink(H);
  for (auto& s : sink) s = nd(rng);
  sink[0] = -INFINITY;
  if (H > 1) sink[1] = INFINITY;

  ref.num_tokens = T;
  ref.num_heads = H;
  ref.head_dim_qk = dqk;
  ref.scale = static_cast<double>(1.0f / std::sqrt(static_cast<float>(dqk)));
  ref.sink.assign(sink.begin(), sink.end());
  ref.main = swa.ref();
  ref.main_lists = lists.swa;
  if (c.ratio > 1) {
    ref.extra = cmp.ref();
    ref.extra_lists = lists.cmp;
  }

  dsv4_plan_options o = base_options();
  o.mode = DSV4_MODE_PAGED;
  o.num_heads = H;
  o.head_dim_qk = dqk;
  o.max_tokens = T + 5;
  o.swa_cache = swa.desc();
  if (c.ratio > 1) o.extra_cache = cmp.desc();
  o.compress_ratio = c.ratio;
  o.window = 128;
  o.index_topk = c.index_topk;
  o.decode_threshold = c.decode_len;
  o.max_model_len = c.max_model_len;
  o.max_requests = R;
  o.max_swa_blocks_per_request = swa_cols;
  o.max_cmp_blocks_per_request = static_cast<int32_t>(std::max<int64_t>(1, b.cmp_bt_cols));
  PlanPtr plan;
  ASSERT_EQ(create_plan(g.ctx.get(), o, force, true, &plan), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  size_t ws_bytes = 0;
  ASSERT_EQ(dsv4_plan_get_workspace_size(plan.get(), &ws_bytes), DSV4_STATUS_OK);

  const dsv4_device d = dev->device();
  DeviceBuffer d_q = dsv4test::to_device(dev, q), d_swa = dsv4test::to_device(dev, swa.bytes),
               d_cmp = dsv4test::to_device(dev, cmp.bytes), d_sink = dsv4test::to_device(dev, sink);
  DeviceBuffer d_qsl = dsv4test::to_device(dev, b.query_start_loc),
               d_seq = dsv4test::to_device(dev, b.seq_lens),
               d_sbt = dsv4test::to_device(dev, b.swa_block_table),
               d_cbt = dsv4test::to_device(dev, b.cmp_block_table),
               d_slot = dsv4test::to_device(dev, b.slot_mapping),
               d_topk = dsv4test::to_device(dev, b.topk_indices);
  DeviceBuffer d_out(dev, static_cast<size_t>(T) * H * 512 * 2),
      d_lse(dev, static_cast<size_t>(T) * H * 4), d_ml(dev, static_cast<size_t>(T) * H * 4),
      d_ws(dev, ws_bytes + 16);
  d_ws.fill(0xff);
  d_out.fill(0xff);
  d_lse.fill(0xff);
  d_ml.fill(0xff);

  TensorView tq(d_q.get(), d, kBf16, {T, H, dqk}), tout(d_out.get(), d, kBf16, {T, H, 512});
  TensorView tlse(d_lse.get(), d, kF32, {T, H}), tml(d_ml.get(), d, kF32, {T, H});
  TensorView tsink(d_sink.get(), d, kF32, {H});
  TensorView tswa = swa.tensor(d_swa.get(), d, swa.num_blocks);
  TensorView tcmp = cmp.tensor(d_cmp.get(), d, cmp.num_blocks);
  TensorView tqsl(d_qsl.get(), d, kI32, {R + 1}), tseq(d_seq.get(), d, kI32, {R});
  TensorView tsbt(d_sbt.get(), d, kI32, {R, b.swa_bt_cols});
  TensorView tcbt(d_cbt.get(), d, kI32, {R, b.cmp_bt_cols});
  TensorView tslot(d_slot.get(), d, kI32, {T}), ttopk(d_topk.get(), d, kI32, {T, c.index_topk});
  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = tq.get();
  a.out = tout.get();
  a.lse = tlse.get();
  a.max_logits = tml.get();
  a.attn_sink = tsink.get();
  a.swa_cache = tswa.get();
  a.extra_cache = c.ratio > 1 ? tcmp.get() : nullptr;
  a.query_start_loc = tqsl.get();
  a.seq_lens = tseq.get();
  a.swa_block_table = tsbt.get();
  a.cmp_block_table = c.ratio > 1 ? tcbt.get() : nullptr;
  a.slot_mapping = tslot.get();
  a.topk_indices = c.ratio == 4 ? ttopk.get() : nullptr;
  a.workspace = static_cast<uint8_t*>(d_ws.get()) + 8;  // not 16-byte aligned on purpose
  a.workspace_bytes = ws_bytes;
  a.stream = dev->stream();
  g.log.clear();
  ASSERT_EQ(dsv4_run(plan.get(), &a), DSV4_STATUS_OK) << dsv4_last_error_message();
  dev->synchronize();
  SCOPED_TRACE("run log: " + g.log.last_run());
  expect_logged(g, c.order, "longest first");

  results got;
  got.out = bf16_to_doubles(d_out.download<uint16_t>());
  const std::vector<float> lse = d_lse.download<float>(), ml = d_ml.download<float>();
  got.lse.assign(lse.begin(), lse.end());
  got.ml.assign(ml.begin(), ml.end());
  expect_matches(got, dsv4test::reference_attention(ref), "");
}

std::vector<paged_case> paged_cases() {
  std::vector<paged_case> v;
  paged_case c;
  c.name = "paged-c4a-h64";
  v.push_back(c);
  c.name = "paged-c128a-h16";
  c.ratio = 128;
  c.heads = 16;
  c.max_seq = 1500;
  v.push_back(c);
  c.name = "paged-swa-h8-bf16";
  c.ratio = 1;
  c.heads = 8;
  c.layout = DSV4_KV_LAYOUT_BF16;
  c.swa_block = 256;
  v.push_back(c);
  c = paged_case{};
  c.name = "paged-c4a-h128-prefill";
  c.heads = 128;
  c.decodes = 1;
  c.prefills = 5;
  c.max_prefill_len = 90;
  c.index_topk = 128;
  v.push_back(c);
  c.name = "paged-c4a-h128-prefill-order";
  c.order = true;
  v.push_back(c);
  c = paged_case{};
  c.name = "paged-c128a-h64-order";
  c.ratio = 128;
  c.max_seq = 1500;
  c.order = true;
  v.push_back(c);
  return v;
}

class CudaPaged : public ::testing::TestWithParam<paged_case> {};

TEST_P(CudaPaged, MatchesTheReference) {
  OPEN_GPU_OR_SKIP(g, 0);
  run_paged_case(*g, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaPaged, ::testing::ValuesIn(paged_cases()),
                         [](const auto& i) { return test_name(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Several GPUs per process: while device 0's context lives, a context on each other device runs
// one case of every kernel family there (CTA pairs with a graph replay, mma.sync, wgmma alone,
// splits, the small-head kernel's 16- and 32-head tiles, paged list building).

class CudaOtherDevices : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOtherDevices, MatchTheReference) {
  OPEN_GPU_OR_SKIP(first, 0);
  std::string why;
  const int count = is_gpu(*first) ? cuda_device_count(&why) : 0;
  if (count < 2) GTEST_SKIP() << "one CUDA device: no other device to run on";
  const std::string& name = GetParam();
  const std::vector<explicit_case> explicit_list = explicit_cases();
  const std::vector<paged_case> paged_list = paged_cases();
  const auto e = std::find_if(explicit_list.begin(), explicit_list.end(),
                              [&](const explicit_case& c) { return c.name == name; });
  const auto p = std::find_if(paged_list.begin(), paged_list.end(),
                              [&](const paged_case& c) { return c.name == name; });
  ASSERT_TRUE(e != explicit_list.end() || p != paged_list.end())
      << "no case named " << name << ": the list of other-device cases must follow a rename";
  for (int d = 1; d < count; ++d) {
    SCOPED_TRACE("CUDA device " + std::to_string(d));
    OPEN_GPU_OR_SKIP(other, d);
    if (e != explicit_list.end()) {
      // The first case also captures and replays a graph on this device.
      run_explicit_case(*other, *e, name == "v4-decode-h128", false);
    } else {
      run_paged_case(*other, *p);
    }
    ASSERT_FALSE(HasFatalFailure());
  }
}

INSTANTIATE_TEST_SUITE_P(Named, CudaOtherDevices,
                         ::testing::Values("v4-decode-h128", "mma-v4-h8", "sm90-v4-decode-h64-b80",
                                           "sm90-lone-nan-key-v4-h128-splits16",
                                           "sm90s-v4-decode-h16-b80", "sm90s-per-tensor-fp8-q-h28",
                                           "paged-c4a-h64"),
                         [](const auto& i) { return test_name(i.param); });

// ---------------------------------------------------------------------------------------------
// The test hook itself: what it cannot parse fails plan creation, naming the item.

TEST(CudaForceHook, RejectsUnknownKeysAndBadValues) {
  OPEN_GPU_OR_SKIP(g, 0);
  if (!is_gpu(*g)) GTEST_SKIP() << "the CPU module has no DSV4_CUDA_FORCE";
  dsv4_plan_options o = base_options();
  o.swa_cache = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_BF16, 64, 0, 1.0f, 0};
  o.topk = 64;
  for (const char* force : {"no_such_knob=1", "kernel=tensor", "chunk=48", "order=2"}) {
    SCOPED_TRACE(std::string("DSV4_CUDA_FORCE=") + force);
    PlanPtr plan;
    EXPECT_EQ(create_plan(g->ctx.get(), o, force, false, &plan), DSV4_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(plan, nullptr);
    EXPECT_NE(std::string(dsv4_last_error_message()).find("DSV4_CUDA_FORCE"), std::string::npos)
        << dsv4_last_error_message();
  }
  PlanPtr plan;
  EXPECT_EQ(create_plan(g->ctx.get(), o, "kernel=mma,max_splits=2,order=0", false, &plan),
            DSV4_STATUS_OK)
      << dsv4_last_error_message();
}

}  // namespace
}  // namespace dsv4cudatest

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new dsv4cudatest::library_environment);
  return RUN_ALL_TESTS();
}
