// CUDA backend correctness: explicit and paged mode against the float64 reference, every layout,
// heads 1..128, odd block sizes, invalid indices, NaN rows, +-inf sinks, padding tokens, CSR lists,
// FlashMLA's [B,H,S] lse strides, both the one-split and split+combine paths, and CUDA-graph
// capture + replay. Usage: test_cuda_attention <path to libdsv4-cuda.so> [filter]
// Exit 0 = pass, 1 = failure, 77 = skipped (no GPU / driver).
#include <algorithm>
#include <climits>
#include <iterator>
#include <memory>
#include <numeric>

#include "common/paged_index.h"
#include "cuda_harness.h"
#include "reference_paged.h"

using namespace dsv4cudatest;

namespace {

uint64_t g_seed = 0;
const dsv4_backend_iface* g_cpu = nullptr;  // optional: the CPU module, for a cross-check
void* g_cpu_ctx = nullptr;

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
  bool small_chunk = false;    // DSV4_CUDA_CHUNK=32: the variant for GPUs with little shared memory
  const char* kernel = nullptr;  // DSV4_CUDA_KERNEL: "mma" keeps Hopper on the mma.sync kernel
  bool row_loads = false;  // DSV4_CUDA_SMALL_STAGE=0: small-head FP8 rows by the producers' loads
  bool no_heads8 = false;  // DSV4_CUDA_SMALL_H8=0: 1..8 heads on the 16-head tile's consumer
  bool special_rows = false;  // host_cache::add_special_rows (extreme scales, NaN bytes)
  int q_pad = 0;              // elements after each (token, head) q row: a strided q view
  int max_splits = 0;         // DSV4_CUDA_MAX_SPLITS (0: the planner's choice)
  bool graph = false;         // also check graph capture and replay
  int persistent =
      -1;  // DSV4_CUDA_PERSISTENT: at most this many persistent Hopper CTAs, looping (-1: unset)
  int order = -1;  // DSV4_CUDA_ORDER: 1 tokens longest first wherever possible (-1: unset)
  bool expect_order =
      false;  // the run must hand its CTAs their tokens longest first (its log says so)
  bool expect_persistent = false;  // the run must take persistent CTAs (its log says so)
  bool lone_nan_key = false;       // token 0's main list: one valid entry, a NaN row (dense lists)
};

// Environment variables the module reads at plan creation, set for one plan.
struct scoped_env {
  std::vector<std::string> names;
  void set(const char* name, const std::string& value) {
    setenv(name, value.c_str(), 1);
    names.push_back(name);
  }
  ~scoped_env() {
    for (const std::string& n : names) unsetenv(n.c_str());
  }
};

// A case that expects its run to take its tokens longest first, or persistent CTAs
// (DSV4_CUDA_LOG_RUNS=1 set for its plan), checks the run's log line for `what`.
bool check_logged(const std::string& name, bool expected, const char* what) {
  if (!expected || last_log().find(what) != std::string::npos) return true;
  std::printf("FAIL %s: the run's log does not say \"%s\" (log: \"%s\")\n", name.c_str(), what,
              last_log().c_str());
  return false;
}

struct context_holder {
  const dsv4_backend_iface* iface;
  void* ctx = nullptr;
  context_holder(const dsv4_backend_iface* i, int device) : iface(i) {
    dsv4_mod_ctx_config cfg{sizeof(dsv4_mod_ctx_config), device, 0, 0};
    DSV4_OK(iface->ctx_create(&cfg, &ctx));
  }
  ~context_holder() { iface->ctx_destroy(ctx); }
};

struct plan_holder {
  const dsv4_backend_iface* iface;
  void* plan = nullptr;
  size_t workspace = 0;
  plan_holder(const dsv4_backend_iface* i, void* ctx, const dsv4_plan_options& o) : iface(i) {
    const dsv4_mod_plan mod = mod_plan_of(o);
    DSV4_OK(iface->plan_create(ctx, &mod, &plan));
    DSV4_OK(iface->plan_get_workspace_size(plan, &workspace));
  }
  ~plan_holder() { iface->plan_destroy(plan); }
};

dsv4_plan_options base_options() {
  dsv4_plan_options o{};
  o.struct_size = sizeof o;
  o.mode = DSV4_MODE_EXPLICIT;
  o.num_heads = 64;
  o.head_dim_qk = 512;
  o.head_dim_v = 512;
  o.q_dtype = dsv4_dtype{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
  o.q_scale = 1.0f;
  o.max_tokens = 1024;
  o.index_format = DSV4_INDEX_DENSE;
  o.compress_ratio = 1;
  o.window = 128;
  o.decode_threshold = 1;
  o.max_model_len = 65536;
  o.max_requests = 256;
  o.compressed_block_tokens = 256;
  return o;
}

// Random list row: `valid` distinct slots below capacity, sprinkled with invalid values.
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
  std::vector<dsv4test::RefList> ref;
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

// Marks every cache slot that no list references validly, and poisons it with NaN bytes.
void poison_unreferenced(host_cache& cache, const std::vector<dsv4test::RefList>& lists) {
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
  if (c.csr) {
    std::fprintf(stderr, "%s: lone_nan_key needs dense lists\n", c.name.c_str());
    std::abort();
  }
  std::vector<int32_t>& row = d.ref[0].idx;
  std::fill(row.begin(), row.end(), -1);
  row[0] = 5;
  std::copy(row.begin(), row.end(), d.dense.begin());
  if (d.lengths.empty()) return;
  d.lengths[0] = width;  // token 0's length, or batch row 0's (shared by its seq_q tokens)
  const int tokens = c.lengths_per_batch ? c.seq_q : 1;
  for (int t = 0; t < tokens; ++t) d.ref[t].length = width;
}

dsv4_mod_index_list mod_list(const explicit_case& c, const list_data& d, const dbuf& idx,
                             const dbuf& ptr, const dbuf& len, int width, bool use_lengths) {
  dsv4_mod_index_list l{};
  l.indices = idx.as<int32_t>();
  l.width = width;
  if (c.csr) {
    l.format = DSV4_INDEX_CSR;
    l.indptr = ptr.as<int32_t>();
    l.num_entries = static_cast<int64_t>(d.flat.size());
  } else {
    l.format = DSV4_INDEX_DENSE;
    l.stride_b = static_cast<int64_t>(c.seq_q) * width;
    l.stride_s = width;
    l.stride_k = 1;
  }
  if (use_lengths) {
    l.lengths = len.as<int32_t>();
    l.len_stride_b = c.lengths_per_batch ? 1 : c.seq_q;
    l.len_stride_s = c.lengths_per_batch ? 0 : 1;
  }
  return l;
}

// Everything one explicit run needs on the device, plus the reference problem.
struct explicit_problem {
  explicit_case c;
  dsv4_plan_options options;
  host_cache main, extra;
  list_data main_lists, extra_lists;
  std::vector<uint16_t> q_bf16;
  std::vector<uint8_t> q_fp8;
  std::vector<float> sink;
  dsv4test::RefProblem ref;
  // device
  dbuf d_q, d_main, d_extra, d_sink, d_out, d_lse, d_ml;
  dbuf d_idx[2], d_ptr[2], d_len[2];
  dbuf d_ws;
  dsv4_mod_run run{};
};

// q to the device: contiguous, or each (token, head) row at a pitch of d_qk + q_pad elements.
void upload_q(explicit_problem& P) {
  const explicit_case& c = P.c;
  const size_t es = c.q_fp8 ? 1 : 2;
  const void* host = c.q_fp8 ? static_cast<const void*>(P.q_fp8.data())
                             : static_cast<const void*>(P.q_bf16.data());
  const size_t dqk = static_cast<size_t>(dsv4::layout_head_dim_qk(c.layout));
  const size_t rows = static_cast<size_t>(c.batch) * c.seq_q * c.heads;
  CUDA_OK(cudaMemcpy2D(P.d_q.p, (dqk + c.q_pad) * es, host, dqk * es, dqk * es, rows,
                       cudaMemcpyHostToDevice));
}

void build_explicit(explicit_problem& P, std::mt19937_64& rng) {
  const explicit_case& c = P.c;
  const int T = c.batch * c.seq_q;
  const int H = c.heads;
  const bool has_extra = c.extra_layout != DSV4_KV_LAYOUT_NONE;
  P.main.init(c.layout, c.block, c.slots, c.stride_pad, c.kv_scale, rng);
  if (has_extra)
    P.extra.init(c.extra_layout, c.extra_block, c.extra_slots, c.stride_pad, c.kv_scale, rng);
  if (c.special_rows) {
    P.main.add_special_rows();
    if (has_extra) P.extra.add_special_rows();
  }
  const int dqk = dsv4::layout_head_dim_qk(c.layout);
  P.main_lists = make_lists(rng, c, c.topk, P.main.capacity(), c.lengths);
  if (has_extra)
    P.extra_lists = make_lists(rng, c, c.extra_topk, P.extra.capacity(), c.extra_lengths);
  if (c.lone_nan_key) isolate_nan_key(c, P.main_lists, c.topk);
  poison_unreferenced(P.main, P.main_lists.ref);
  if (c.lone_nan_key) P.main.poison(P.main_lists.ref[0].idx[0]);
  if (has_extra) poison_unreferenced(P.extra, P.extra_lists.ref);

  // q [B, S, H, dqk]
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t qn = static_cast<size_t>(T) * H * dqk;
  P.ref.q.resize(qn);
  if (c.q_fp8) {
    P.q_fp8.resize(qn);
    for (size_t i = 0; i < qn; ++i) {
      P.q_fp8[i] = dsv4::f32_to_fp8_e4m3(std::fmax(-1.f, std::fmin(1.f, nd(rng))) * 100.0f);
      P.ref.q[i] = dsv4test::ref_e4m3fn_to_double(P.q_fp8[i]) * 0.01;
    }
  } else {
    P.q_bf16.resize(qn);
    for (size_t i = 0; i < qn; ++i) {
      P.q_bf16[i] = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
      P.ref.q[i] = bf16_to_double(P.q_bf16[i]);
    }
  }
  if (c.sink) {
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
    o.q_dtype = dsv4_dtype{DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1};
    o.q_scale = 0.01f;
  }
  o.max_tokens = c.max_tokens > 0 ? c.max_tokens : T;
  o.swa_cache = P.main.desc();
  if (has_extra) o.extra_cache = P.extra.desc();
  o.index_format = c.csr ? DSV4_INDEX_CSR : DSV4_INDEX_DENSE;
  o.topk = c.topk;
  o.extra_topk = has_extra ? c.extra_topk : 0;

  P.ref.num_tokens = T;
  P.ref.num_heads = H;
  P.ref.head_dim_qk = dqk;
  P.ref.scale =
      c.softmax_scale != 0.0f ? c.softmax_scale : 1.0 / std::sqrt(static_cast<double>(dqk));
  P.ref.scale = static_cast<double>(static_cast<float>(P.ref.scale));
  P.ref.sink.assign(P.sink.begin(), P.sink.end());
  P.ref.main = P.main.ref();
  if (has_extra) P.ref.extra = P.extra.ref();
  P.ref.main_lists = P.main_lists.ref;
  if (has_extra) P.ref.extra_lists = P.extra_lists.ref;

  // Device copies.
  P.d_q = dbuf(qn / dqk * (dqk + c.q_pad) * (c.q_fp8 ? 1 : 2));
  upload_q(P);
  P.d_main = dbuf(P.main.bytes.size());
  P.d_main.upload(P.main.bytes);
  if (has_extra) {
    P.d_extra = dbuf(P.extra.bytes.size());
    P.d_extra.upload(P.extra.bytes);
  }
  if (c.sink) {
    P.d_sink = dbuf(H * sizeof(float));
    P.d_sink.upload(P.sink);
  }
  P.d_out = dbuf(static_cast<size_t>(T) * H * 512 * 2);
  P.d_lse = dbuf(static_cast<size_t>(T) * H * 4);
  P.d_ml = dbuf(static_cast<size_t>(T) * H * 4);
  const list_data* ld[2] = {&P.main_lists, &P.extra_lists};
  for (int i = 0; i < (has_extra ? 2 : 1); ++i) {
    const auto& src = c.csr ? ld[i]->flat : ld[i]->dense;
    P.d_idx[i] = dbuf(std::max<size_t>(1, src.size()) * 4);
    if (!src.empty()) P.d_idx[i].upload(src);
    if (c.csr) {
      P.d_ptr[i] = dbuf(ld[i]->indptr.size() * 4);
      P.d_ptr[i].upload(ld[i]->indptr);
    }
    if (!ld[i]->lengths.empty()) {
      P.d_len[i] = dbuf(ld[i]->lengths.size() * 4);
      P.d_len[i].upload(ld[i]->lengths);
    }
  }

  dsv4_mod_run& r = P.run;
  r = dsv4_mod_run{};
  r.struct_size = sizeof r;
  r.mode = DSV4_MODE_EXPLICIT;
  r.num_tokens = T;
  r.seq_q = c.seq_q;
  const int64_t qs = static_cast<int64_t>(H) * (dqk + c.q_pad);
  r.q = dsv4_mod_token_view{P.d_q.p, c.seq_q * qs, qs, dqk + c.q_pad};
  r.out = dsv4_mod_token_view{P.d_out.p, static_cast<int64_t>(c.seq_q) * H * 512,
                              static_cast<int64_t>(H) * 512, 512};
  if (c.lse_bhs) {
    r.lse = dsv4_mod_token_view{P.d_lse.p, static_cast<int64_t>(H) * c.seq_q, 1, c.seq_q};
  } else {
    r.lse = dsv4_mod_token_view{P.d_lse.p, static_cast<int64_t>(c.seq_q) * H, H, 1};
  }
  r.max_logits = r.lse;
  r.max_logits.data = P.d_ml.p;
  r.swa_cache = P.main.mod(P.d_main.p);
  if (has_extra) r.extra_cache = P.extra.mod(P.d_extra.p);
  r.attn_sink = c.sink ? P.d_sink.as<float>() : nullptr;
  r.main_list = mod_list(c, P.main_lists, P.d_idx[0], P.d_ptr[0], P.d_len[0], c.topk, c.lengths);
  if (has_extra)
    r.extra_list = mod_list(c, P.extra_lists, P.d_idx[1], P.d_ptr[1], P.d_len[1], c.extra_topk,
                            c.extra_lengths);
}

// Downloads out / lse / max_logits in [T][H](*512) order as doubles.
void download_results(const explicit_problem& P, int T, int H, int S, std::vector<double>* out,
                      std::vector<double>* lse, std::vector<double>* ml) {
  const auto o = P.d_out.download<uint16_t>(static_cast<size_t>(T) * H * 512);
  out->resize(o.size());
  for (size_t i = 0; i < o.size(); ++i) (*out)[i] = bf16_to_double(o[i]);
  const auto l = P.d_lse.download<float>(static_cast<size_t>(T) * H);
  const auto m = P.d_ml.download<float>(static_cast<size_t>(T) * H);
  lse->resize(l.size());
  ml->resize(m.size());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int b = t / S, s = t % S;
      const size_t src =
          P.c.lse_bhs ? (static_cast<size_t>(b) * H + h) * S + s : static_cast<size_t>(t) * H + h;
      (*lse)[static_cast<size_t>(t) * H + h] = l[src];
      (*ml)[static_cast<size_t>(t) * H + h] = m[src];
    }
  }
}

bool check_against_reference(const dsv4test::RefProblem& ref, const std::vector<double>& out,
                             const std::vector<double>& lse, const std::vector<double>& ml,
                             const std::string& name) {
  const dsv4test::RefResult want = dsv4test::reference_attention(ref);
  std::string msg;
  bool ok = compare(out, want.out, kOutTol, "out", &msg) &&
            compare(lse, want.lse, kLseTol, "lse", &msg) &&
            compare(ml, want.max_logits, kLseTol, "max_logits", &msg);
  if (!ok)
    std::printf("FAIL %s: %s (seed %llu)\n", name.c_str(), msg.c_str(),
                static_cast<unsigned long long>(g_seed));
  return ok;
}

// Runs the same explicit problem through the CPU module on host copies of every input and
// compares with the CUDA results (FlashMLA tolerances: both round P / outputs differently).
bool cross_check_cpu(const explicit_problem& P, const std::vector<double>& out,
                     const std::vector<double>& lse, const std::vector<double>& ml) {
  if (g_cpu == nullptr) return true;
  const explicit_case& c = P.c;
  const int T = c.batch * c.seq_q, H = c.heads;
  void* plan = nullptr;
  const dsv4_mod_plan mod = mod_plan_of(P.options);
  DSV4_OK(g_cpu->plan_create(g_cpu_ctx, &mod, &plan));
  size_t ws_bytes = 0;
  DSV4_OK(g_cpu->plan_get_workspace_size(plan, &ws_bytes));
  std::vector<uint8_t> ws(ws_bytes + 64);
  std::vector<uint16_t> h_out(static_cast<size_t>(T) * H * 512);
  std::vector<float> h_lse(static_cast<size_t>(T) * H), h_ml(static_cast<size_t>(T) * H);
  dsv4_mod_run r = P.run;
  r.q.data = c.q_fp8 ? static_cast<void*>(const_cast<uint8_t*>(P.q_fp8.data()))
                     : static_cast<void*>(const_cast<uint16_t*>(P.q_bf16.data()));
  const int64_t dqk = dsv4::layout_head_dim_qk(c.layout);  // the host copy of q is contiguous
  r.q.stride_h = dqk;
  r.q.stride_s = static_cast<int64_t>(H) * dqk;
  r.q.stride_b = static_cast<int64_t>(c.seq_q) * H * dqk;
  r.out.data = h_out.data();
  r.lse.data = h_lse.data();
  r.max_logits.data = h_ml.data();
  r.swa_cache.base = const_cast<uint8_t*>(P.main.bytes.data());
  if (r.extra_cache.base != nullptr)
    r.extra_cache.base = const_cast<uint8_t*>(P.extra.bytes.data());
  r.attn_sink = c.sink ? P.sink.data() : nullptr;
  const list_data* ld[2] = {&P.main_lists, &P.extra_lists};
  dsv4_mod_index_list* ml_[2] = {&r.main_list, &r.extra_list};
  for (int i = 0; i < 2; ++i) {
    if (ml_[i]->indices == nullptr) continue;
    ml_[i]->indices = c.csr ? ld[i]->flat.data() : ld[i]->dense.data();
    if (c.csr) ml_[i]->indptr = ld[i]->indptr.data();
    if (ml_[i]->lengths != nullptr) ml_[i]->lengths = ld[i]->lengths.data();
  }
  r.workspace = ws_bytes > 0 ? ws.data() : nullptr;
  r.workspace_bytes = ws_bytes;
  r.stream = nullptr;
  const dsv4_status st = g_cpu->run(plan, &r);
  g_cpu->plan_destroy(plan);
  DSV4_OK(st);
  std::vector<double> cout_(h_out.size()), clse(h_lse.size()), cml(h_ml.size());
  for (size_t i = 0; i < h_out.size(); ++i) cout_[i] = bf16_to_double(h_out[i]);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int b = t / c.seq_q, s = t % c.seq_q;
      const size_t src = c.lse_bhs ? (static_cast<size_t>(b) * H + h) * c.seq_q + s
                                   : static_cast<size_t>(t) * H + h;
      clse[static_cast<size_t>(t) * H + h] = h_lse[src];
      cml[static_cast<size_t>(t) * H + h] = h_ml[src];
    }
  }
  std::string msg;
  const bool ok = compare(out, cout_, kOutTol, "out vs cpu", &msg) &&
                  compare(lse, clse, kLseTol, "lse vs cpu", &msg) &&
                  compare(ml, cml, kLseTol, "max_logits vs cpu", &msg);
  if (!ok)
    std::printf("FAIL %s: %s (seed %llu)\n", c.name.c_str(), msg.c_str(),
                static_cast<unsigned long long>(g_seed));
  return ok;
}

bool run_explicit_case(const module& m, void* ctx, const explicit_case& c, bool graph_check) {
  std::mt19937_64 rng(g_seed ^ std::hash<std::string>{}(c.name));
  explicit_problem P;
  P.c = c;
  build_explicit(P, rng);
  std::unique_ptr<plan_holder> plan_ptr;
  {
    scoped_env env;
    if (c.small_chunk) env.set("DSV4_CUDA_CHUNK", "32");
    if (c.kernel != nullptr) env.set("DSV4_CUDA_KERNEL", c.kernel);
    if (c.row_loads) env.set("DSV4_CUDA_SMALL_STAGE", "0");
    if (c.no_heads8) env.set("DSV4_CUDA_SMALL_H8", "0");
    if (c.max_splits > 0) env.set("DSV4_CUDA_MAX_SPLITS", std::to_string(c.max_splits));
    if (c.persistent >= 0) env.set("DSV4_CUDA_PERSISTENT", std::to_string(c.persistent));
    if (c.order >= 0) env.set("DSV4_CUDA_ORDER", std::to_string(c.order));
    if (c.expect_order || c.expect_persistent) env.set("DSV4_CUDA_LOG_RUNS", "1");
    plan_ptr = std::make_unique<plan_holder>(m.iface, ctx, P.options);
  }
  plan_holder& plan = *plan_ptr;
  // The workspace pointer is deliberately not 16-byte aligned (the ABI promises no alignment).
  P.d_ws = dbuf(plan.workspace + 16);
  P.run.workspace = plan.workspace > 0 ? static_cast<uint8_t*>(P.d_ws.p) + 4 : nullptr;
  P.run.workspace_bytes = plan.workspace;
  const int T = c.batch * c.seq_q;
  // Poison outputs (every element must be written) and the workspace (NaN partials: the combine
  // must read only what the attention grid stored).
  CUDA_OK(cudaMemset(P.d_ws.p, 0xff, P.d_ws.bytes));
  CUDA_OK(cudaMemset(P.d_out.p, 0xff, P.d_out.bytes));
  CUDA_OK(cudaMemset(P.d_lse.p, 0xff, P.d_lse.bytes));
  CUDA_OK(cudaMemset(P.d_ml.p, 0xff, P.d_ml.bytes));
  last_log().clear();
  DSV4_OK(m.iface->run(plan.plan, &P.run));
  CUDA_OK(cudaDeviceSynchronize());
  if (!check_logged(c.name, c.expect_order, "longest first") ||
      !check_logged(c.name, c.expect_persistent, "persistent CTAs"))
    return false;
  std::vector<double> out, lse, ml;
  download_results(P, T, c.heads, c.seq_q, &out, &lse, &ml);
  if (!check_against_reference(P.ref, out, lse, ml, c.name)) return false;
  if (!cross_check_cpu(P, out, lse, ml)) return false;

  if (graph_check) {
    // Capture one run into a graph, then replay it with new q and cache contents in the same
    // buffers.
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    P.run.stream = stream;
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const dsv4_status st = m.iface->run(plan.plan, &P.run);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    DSV4_OK(st);
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < P.q_bf16.size(); ++i) {
      P.q_bf16[i] = dsv4::f32_to_bf16(std::fmax(-1.f, std::fmin(1.f, nd(rng))));
      P.ref.q[i] = bf16_to_double(P.q_bf16[i]);
    }
    upload_q(P);
    CUDA_OK(cudaMemset(P.d_out.p, 0xff, P.d_out.bytes));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<double> gout, glse, gml;
    download_results(P, T, c.heads, c.seq_q, &gout, &glse, &gml);
    // Eager run on the same new inputs must give the same bits.
    CUDA_OK(cudaMemset(P.d_out.p, 0xff, P.d_out.bytes));
    DSV4_OK(m.iface->run(plan.plan, &P.run));
    CUDA_OK(cudaStreamSynchronize(stream));
    download_results(P, T, c.heads, c.seq_q, &out, &lse, &ml);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::memcmp(&out[i], &gout[i], sizeof(double)) != 0) {
        std::printf("FAIL %s: graph replay differs from eager at %zu (seed %llu)\n", c.name.c_str(),
                    i, static_cast<unsigned long long>(g_seed));
        return false;
      }
    }
    if (!check_against_reference(P.ref, gout, glse, gml, c.name + "/graph")) return false;
  }
  return true;
}

// ------------------------------------------------------------------------------------------------
// Paged mode
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
  bool order = false;      // DSV4_CUDA_ORDER=1 on the wgmma kernel, one split: tokens longest first
};

bool run_paged_case(const module& m, void* ctx, const paged_case& c) {
  std::mt19937_64 rng(g_seed ^ std::hash<std::string>{}(c.name));
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
  std::unique_ptr<plan_holder> plan_ptr;
  {
    scoped_env env;
    if (c.order) {
      env.set("DSV4_CUDA_ORDER", "1");
      env.set("DSV4_CUDA_KERNEL", "wgmma");
      env.set("DSV4_CUDA_MAX_SPLITS", "1");
      env.set("DSV4_CUDA_LOG_RUNS", "1");
    }
    plan_ptr = std::make_unique<plan_holder>(m.iface, ctx, o);
  }
  plan_holder& plan = *plan_ptr;

  dbuf d_q(q.size() * 2), d_swa(swa.bytes.size()), d_cmp(std::max<size_t>(1, cmp.bytes.size())),
      d_sink(H * 4);
  d_q.upload(q);
  d_swa.upload(swa.bytes);
  if (c.ratio > 1) d_cmp.upload(cmp.bytes);
  d_sink.upload(sink);
  dbuf d_qsl(b.query_start_loc.size() * 4), d_seq(b.seq_lens.size() * 4),
      d_sbt(b.swa_block_table.size() * 4), d_cbt(std::max<size_t>(1, b.cmp_block_table.size()) * 4),
      d_slot(b.slot_mapping.size() * 4), d_topk(std::max<size_t>(1, b.topk_indices.size()) * 4);
  d_qsl.upload(b.query_start_loc);
  d_seq.upload(b.seq_lens);
  d_sbt.upload(b.swa_block_table);
  if (!b.cmp_block_table.empty()) d_cbt.upload(b.cmp_block_table);
  d_slot.upload(b.slot_mapping);
  if (!b.topk_indices.empty()) d_topk.upload(b.topk_indices);
  dbuf d_out(static_cast<size_t>(T) * H * 512 * 2), d_lse(static_cast<size_t>(T) * H * 4),
      d_ml(static_cast<size_t>(T) * H * 4), d_ws(plan.workspace + 16);
  CUDA_OK(cudaMemset(d_ws.p, 0xff, d_ws.bytes));
  CUDA_OK(cudaMemset(d_out.p, 0xff, d_out.bytes));
  CUDA_OK(cudaMemset(d_lse.p, 0xff, d_lse.bytes));
  CUDA_OK(cudaMemset(d_ml.p, 0xff, d_ml.bytes));

  dsv4_mod_run r{};
  r.struct_size = sizeof r;
  r.mode = DSV4_MODE_PAGED;
  r.num_tokens = T;
  r.seq_q = 1;
  r.q = dsv4_mod_token_view{d_q.p, static_cast<int64_t>(H) * dqk, 0, dqk};
  r.out = dsv4_mod_token_view{d_out.p, static_cast<int64_t>(H) * 512, 0, 512};
  r.lse = dsv4_mod_token_view{d_lse.p, H, 0, 1};
  r.max_logits = dsv4_mod_token_view{d_ml.p, H, 0, 1};
  r.swa_cache = swa.mod(d_swa.p);
  if (c.ratio > 1) r.extra_cache = cmp.mod(d_cmp.p);
  r.attn_sink = d_sink.as<float>();
  r.paged.num_reqs = R;
  r.paged.query_start_loc = d_qsl.as<int32_t>();
  r.paged.seq_lens = d_seq.as<int32_t>();
  r.paged.swa_block_table = d_sbt.as<int32_t>();
  r.paged.swa_bt_stride = b.swa_bt_cols;
  r.paged.swa_bt_cols = static_cast<int32_t>(b.swa_bt_cols);
  if (c.ratio > 1) {
    r.paged.cmp_block_table = d_cbt.as<int32_t>();
    r.paged.cmp_bt_stride = b.cmp_bt_cols;
    r.paged.cmp_bt_cols = static_cast<int32_t>(b.cmp_bt_cols);
  }
  r.paged.slot_mapping = d_slot.as<int32_t>();
  if (c.ratio == 4) {
    r.paged.topk_indices = d_topk.as<int32_t>();
    r.paged.topk_stride = c.index_topk;
  }
  r.workspace = static_cast<uint8_t*>(d_ws.p) + 8;  // not 16-byte aligned on purpose
  r.workspace_bytes = plan.workspace;
  last_log().clear();
  DSV4_OK(m.iface->run(plan.plan, &r));
  CUDA_OK(cudaDeviceSynchronize());
  if (!check_logged(c.name, c.order, "longest first")) return false;

  const auto o16 = d_out.download<uint16_t>(static_cast<size_t>(T) * H * 512);
  std::vector<double> out(o16.size());
  for (size_t i = 0; i < o16.size(); ++i) out[i] = bf16_to_double(o16[i]);
  const auto lf = d_lse.download<float>(static_cast<size_t>(T) * H);
  const auto mf = d_ml.download<float>(static_cast<size_t>(T) * H);
  return check_against_reference(ref, out, std::vector<double>(lf.begin(), lf.end()),
                                 std::vector<double>(mf.begin(), mf.end()),
                                 c.name + " [" + dsv4test::ref_describe_batch(b) + "]");
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
    explicit_case
        c;  // the mma.sync kernel with 64-head tiles (Hopper uses the wgmma kernel by default)
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
    explicit_case
        c;  // strided q rows (pitch 576): the tensor-map Q load with a head stride, 96 heads
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
    explicit_case c;  // 32-head tiles (the wgmma consumer; heads 16..27 a partial second half), few
                      // tokens: splits
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <libdsv4-cuda.so> [name filter]\n", argv[0]);
    return 2;
  }
  const char* env_seed = std::getenv("DSV4_TEST_SEED");
  g_seed = env_seed != nullptr ? std::strtoull(env_seed, nullptr, 0)
                               : std::random_device{}() * 0x100000001ull;
  const std::string filter = argc > 2 ? argv[2] : "";
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress is visible even if a case hangs
  try {
    module m(argv[1]);
    std::unique_ptr<module> cpu;
    if (argc > 3 && m.skip_reason.empty()) {
      cpu = std::make_unique<module>(argv[3]);
      g_cpu = cpu->iface;
      dsv4_mod_ctx_config cfg{sizeof(dsv4_mod_ctx_config), 0, 0, 0};
      DSV4_OK(g_cpu->ctx_create(&cfg, &g_cpu_ctx));
      std::printf("cross-checking against the CPU module %s\n", argv[3]);
    }
    if (!m.skip_reason.empty()) {
      std::printf("skipped: %s\n", m.skip_reason.c_str());
      return kSkip;
    }
    context_holder ctx(m.iface, 0);
    int failures = 0, passed = 0;
    bool graph_done = false;
    for (const auto& c : explicit_cases()) {
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      const bool graph = (!graph_done && !c.q_fp8) || c.graph;
      graph_done = true;
      const bool ok = run_explicit_case(m, ctx.ctx, c, graph);
      std::printf("%s %s%s\n", ok ? "ok  " : "FAIL", c.name.c_str(),
                  graph ? " (+graph replay)" : "");
      ok ? ++passed : ++failures;
    }
    for (const auto& c : paged_cases()) {
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      const bool ok = run_paged_case(m, ctx.ctx, c);
      std::printf("%s %s\n", ok ? "ok  " : "FAIL", c.name.c_str());
      ok ? ++passed : ++failures;
    }
    // Several contexts on several GPUs: while device 0's context lives, a context on each other
    // device runs one case of every kernel family there (CTA pairs with a graph replay, mma.sync,
    // wgmma alone, splits, the small-head kernel's 16- and 32-head tiles, paged list building).
    const char* const other_device_cases[] = {"v4-decode-h128",
                                              "mma-v4-h8",
                                              "sm90-v4-decode-h64-b80",
                                              "sm90-lone-nan-key-v4-h128-splits16",
                                              "sm90s-v4-decode-h16-b80",
                                              "sm90s-per-tensor-fp8-q-h28",
                                              "paged-c4a-h64"};
    auto on_other_device = [&](const std::string& name) {
      for (const char* n : other_device_cases)
        if (name == n) return true;
      return false;
    };
    for (int d = 1; d < m.device_count && filter.empty(); ++d) {
      CUDA_OK(cudaSetDevice(d));  // the test's buffers live on device d
      {
        context_holder other(m.iface, d);
        const std::string tag = " (device " + std::to_string(d) + ")";
        size_t run = 0;
        for (const auto& c : explicit_cases()) {
          if (!on_other_device(c.name)) continue;
          const bool graph = c.name == other_device_cases[0];  // a graph captured on device d too
          const bool ok = run_explicit_case(m, other.ctx, c, graph);
          std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", c.name.c_str(), tag.c_str(),
                      graph ? " (+graph replay)" : "");
          ok ? ++passed : ++failures;
          ++run;
        }
        for (const auto& c : paged_cases()) {
          if (!on_other_device(c.name)) continue;
          const bool ok = run_paged_case(m, other.ctx, c);
          std::printf("%s %s%s\n", ok ? "ok  " : "FAIL", c.name.c_str(), tag.c_str());
          ok ? ++passed : ++failures;
          ++run;
        }
        if (run != std::size(other_device_cases)) {  // a case was renamed: the list must follow
          std::printf("FAIL device %d ran %zu of the %zu named cases\n", d, run,
                      std::size(other_device_cases));
          ++failures;
        }
      }
      CUDA_OK(cudaSetDevice(0));
    }
    if (g_cpu != nullptr) g_cpu->ctx_destroy(g_cpu_ctx);
    std::printf("%d passed, %d failed (seed %llu)\n", passed, failures,
                static_cast<unsigned long long>(g_seed));
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s (seed %llu)\n", e.what(), static_cast<unsigned long long>(g_seed));
    return 1;
  }
}
