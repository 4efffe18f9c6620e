// `dsv4 run`: one realistic DeepSeek-V4 engine step through paged mode, checked against the
// independent float64 reference and timed.
//
// The step mixes decode requests (MTP, 2 query tokens each, contexts 200..5000) with two prefill
// chunks whose prefixes exceed the sliding window, plus padding tokens (slot_mapping -1, beyond
// query_start_loc[R]). For each model configuration (Flash: 64 heads, C4A top-k 512; Pro: 128
// heads, top-k 1024) and each layer kind (SWA-only, C4A, C128A) it fills FP8 584 B caches as an
// engine does (dsv4_kv_write at each position's slot; compressed entry c when position
// c*ratio + ratio - 1 is written), with random block tables and random indexer top-k, runs the
// layer, and compares every output of a sample of tokens with the reference.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "compare_rule.h"
#include "device_memory.h"
#include "reference.h"
#include "reference_paged.h"

namespace dsv4cli {
namespace {

struct ModelConfig {
  const char* name;
  int32_t heads;
  int32_t index_topk;
};
constexpr ModelConfig kFlash{"flash", 64, 512};
constexpr ModelConfig kPro{"pro", 128, 1024};

struct LayerKind {
  const char* name;
  int32_t ratio;           // 1 = SWA-only
  int32_t cmp_block_size;  // compressed entries per block (256 logical tokens / ratio)
};
constexpr LayerKind kLayerKinds[] = {{"swa", 1, 0}, {"c4a", 4, 64}, {"c128a", 128, 2}};

constexpr int32_t kDim = 512;
constexpr int32_t kWindow = 128;
constexpr int32_t kSwaBlockSize = 64;
constexpr int32_t kCompressedBlockTokens = 256;
constexpr int64_t kMaxModelLen = 65536;
constexpr int32_t kDecodeQueryLen = 2;  // MTP: one verified + one speculative token
constexpr int32_t kPaddingTokens = 3;
constexpr uint32_t kLayout = DSV4_KV_LAYOUT_FP8_V4_584B;

using dsv4test::kDecodeLseTol;
using dsv4test::kDecodeOutTol;
using dsv4test::kPrefillLseTol;
using dsv4test::kPrefillOutTol;
using dsv4test::Tolerance;

struct RunOptions {
  std::string config = "both";
  int tokens = 0;  // 0 = default for the mode
  uint64_t seed = 0;
  bool seed_given = false;
  int threads = 0;
  bool check = true;
  int check_tokens = -1;    // -1 = default; 0 = all
  int repeats = -1;         // -1 = default
  double budget_ms = 3000;  // per layer, after which timing stops (once 3 runs are done)
  bool quick = false;
};

// splitmix64: small, fast and good enough for test data.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u = std::max(uniform(), 1e-300);
    const double r = std::sqrt(-2.0 * std::log(u));
    const double a = 6.283185307179586 * uniform();
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// The requests of one step: decodes first, then prefill chunks, then padding tokens.
struct StepShape {
  std::vector<int32_t> query_len;
  std::vector<int32_t> seq_len;
  int32_t num_decodes = 0;
  int32_t num_prefills = 0;
  int32_t real_tokens = 0;
  int32_t num_tokens = 0;  // real + padding
};

StepShape make_step_shape(int tokens, Rng& rng) {
  StepShape s;
  // About a third of the tokens are decode tokens, two thirds prefill tokens in two chunks.
  s.num_decodes = std::max(1, tokens / 6);
  const int32_t chunk = std::max(kDecodeQueryLen + 1, tokens / 3);
  for (int32_t i = 0; i < s.num_decodes; ++i) {
    s.query_len.push_back(kDecodeQueryLen);
    s.seq_len.push_back(static_cast<int32_t>(rng.between(200, 5000)));
  }
  // Prefill chunks continue long prompts: prefixes beyond the window (one short, one long).
  const int32_t prefixes[2] = {static_cast<int32_t>(rng.between(kWindow + 1, 700)),
                               static_cast<int32_t>(rng.between(1500, 4000))};
  for (int32_t prefix : prefixes) {
    s.query_len.push_back(chunk);
    s.seq_len.push_back(prefix + chunk);
  }
  s.num_prefills = 2;
  s.real_tokens = std::accumulate(s.query_len.begin(), s.query_len.end(), 0);
  s.num_tokens = s.real_tokens + kPaddingTokens;
  return s;
}

// Everything one layer of one configuration needs on the host.
struct LayerData {
  dsv4test::RefPagedConfig config;
  dsv4test::RefPagedBatch batch;
  int64_t swa_num_blocks = 0;
  int64_t swa_block_bytes = 0;
  int64_t cmp_num_blocks = 0;
  int64_t cmp_block_bytes = 0;
  std::vector<uint16_t> q;  // [T][H][512] bf16
  std::vector<float> sink;  // [H]
};

int64_t min_block_bytes(int32_t block_size) {
  dsv4_kv_layout_info info;
  dsv4_kv_layout_info_init(&info);
  const dsv4_status st = dsv4_kv_layout_get_info(kLayout, block_size, &info);
  if (st != DSV4_STATUS_OK) {
    throw std::runtime_error(std::string("dsv4_kv_layout_get_info: ") + dsv4_status_string(st) +
                             ": " + dsv4_last_error_message());
  }
  return info.min_block_stride_bytes;
}

// Random block tables: every logical block a run may read gets its own physical block, in random
// order. Block 0 is never handed out: it stays NaN-filled and fills every column nobody may read
// (SWA blocks older than the window, table padding), so reading one would poison the result.
std::vector<int32_t> make_block_table(const std::vector<int64_t>& first_block,
                                      const std::vector<int64_t>& end_block, int64_t cols, Rng& rng,
                                      int64_t* out_num_blocks) {
  const size_t reqs = first_block.size();
  int64_t needed = 0;
  for (size_t r = 0; r < reqs; ++r) needed += end_block[r] - first_block[r];
  std::vector<int32_t> physical(static_cast<size_t>(needed));
  std::iota(physical.begin(), physical.end(), 1);
  for (int64_t i = needed - 1; i > 0; --i) std::swap(physical[i], physical[rng.below(i + 1)]);
  std::vector<int32_t> table(reqs * static_cast<size_t>(cols), 0);
  size_t next = 0;
  for (size_t r = 0; r < reqs; ++r) {
    for (int64_t c = first_block[r]; c < end_block[r]; ++c) table[r * cols + c] = physical[next++];
  }
  *out_num_blocks = needed + 1;
  return table;
}

LayerData make_layer(const ModelConfig& model, const LayerKind& kind, const StepShape& shape,
                     Rng& rng) {
  LayerData L;
  L.config.compress_ratio = kind.ratio;
  L.config.window = kWindow;
  L.config.swa_block_size = kSwaBlockSize;
  L.config.cmp_block_size = kind.ratio > 1 ? kind.cmp_block_size : 64;
  L.config.index_topk = model.index_topk;
  L.config.decode_threshold = kDecodeQueryLen;
  L.config.max_model_len = kMaxModelLen;

  const int32_t reqs = static_cast<int32_t>(shape.query_len.size());
  dsv4test::RefPagedBatch& b = L.batch;
  b.num_tokens = shape.num_tokens;
  b.query_start_loc.assign(1, 0);
  for (int32_t r = 0; r < reqs; ++r)
    b.query_start_loc.push_back(b.query_start_loc.back() + shape.query_len[r]);
  b.seq_lens = shape.seq_len;

  // SWA: the blocks holding positions first_query_pos - W + 1 .. seq - 1.
  std::vector<int64_t> first(reqs), end(reqs);
  int64_t swa_cols = 1;
  for (int32_t r = 0; r < reqs; ++r) {
    const int64_t first_pos = shape.seq_len[r] - shape.query_len[r];
    first[r] = std::max<int64_t>(0, first_pos - kWindow + 1) / kSwaBlockSize;
    end[r] = (shape.seq_len[r] - 1) / kSwaBlockSize + 1;
    swa_cols = std::max(swa_cols, end[r]);
  }
  b.swa_bt_cols = swa_cols;
  b.swa_block_table = make_block_table(first, end, swa_cols, rng, &L.swa_num_blocks);
  L.swa_block_bytes = min_block_bytes(kSwaBlockSize);

  if (kind.ratio > 1) {
    // Compressed: every entry completed so far (seq / ratio of them).
    int64_t cmp_cols = 1;
    for (int32_t r = 0; r < reqs; ++r) {
      const int64_t entries = shape.seq_len[r] / kind.ratio;
      first[r] = 0;
      end[r] = (entries + kind.cmp_block_size - 1) / kind.cmp_block_size;
      cmp_cols = std::max<int64_t>(
          cmp_cols, (shape.seq_len[r] + kCompressedBlockTokens - 1) / kCompressedBlockTokens);
    }
    b.cmp_bt_cols = cmp_cols;
    b.cmp_block_table = make_block_table(first, end, cmp_cols, rng, &L.cmp_num_blocks);
    L.cmp_block_bytes = min_block_bytes(kind.cmp_block_size);
  }

  b.slot_mapping.assign(static_cast<size_t>(shape.num_tokens), -1);
  if (kind.ratio == 4)
    b.topk_indices.assign(static_cast<size_t>(shape.num_tokens) * model.index_topk, -1);
  std::vector<int32_t> local;
  for (int32_t r = 0; r < reqs; ++r) {
    const int32_t* bt_row = &b.swa_block_table[static_cast<size_t>(r) * swa_cols];
    for (int32_t i = 0; i < shape.query_len[r]; ++i) {
      const int64_t t = b.query_start_loc[r] + i;
      const int64_t pos = shape.seq_len[r] - shape.query_len[r] + i;
      b.slot_mapping[t] = dsv4test::ref_swa_slot(L.config, bt_row, swa_cols, pos);
      if (kind.ratio != 4) continue;
      // Indexer output: min(n, K) distinct visible entries in arbitrary (score) order, -1 padded.
      const int64_t visible = (pos + 1) / 4;
      const int64_t keep = std::min<int64_t>(visible, model.index_topk);
      local.resize(static_cast<size_t>(visible));
      std::iota(local.begin(), local.end(), 0);
      int32_t* row = &b.topk_indices[static_cast<size_t>(t) * model.index_topk];
      for (int64_t k = 0; k < keep; ++k) {
        std::swap(local[k], local[k + rng.below(visible - k)]);
        row[k] = local[k];
      }
    }
  }

  L.q.resize(static_cast<size_t>(shape.num_tokens) * model.heads * kDim);
  for (uint16_t& v : L.q) v = dsv4test::ref_double_to_bf16(rng.normal());
  L.sink.resize(static_cast<size_t>(model.heads));
  // Sinks near the typical lse (log of ~100..1000 keys) so that they visibly scale the output.
  for (float& s : L.sink) s = static_cast<float>(rng.normal() + 4.0);
  L.sink[0] = -std::numeric_limits<float>::infinity();  // a head without sink
  return L;
}

// KV values are N(0, kKvStd^2): logits then have a standard deviation of kKvStd (q is N(0,1)), and
// the bf16 rounding of softmax weights that FlashMLA-style kernels do stays well inside the spec's
// absolute tolerances, which were set for FlashMLA's generator (KV = randn / 10).
constexpr double kKvStd = 0.25;

// Writes random KV rows (fp32) at `slots` through dsv4_kv_write.
void write_rows(dsv4_ctx* ctx, DeviceMemory& mem, const dsv4_kv_cache_desc& desc,
                dsv4_tensor* cache, const std::vector<int32_t>& slots, Rng& rng) {
  if (slots.empty()) return;
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<float> values(static_cast<size_t>(n) * kDim);
  for (float& v : values) v = static_cast<float>(kKvStd * rng.normal());
  DeviceBuffer dvalues(&mem, values.size() * sizeof(float));
  DeviceBuffer dslots(&mem, slots.size() * sizeof(int32_t));
  mem.upload(dvalues.data(), values.data(), dvalues.bytes());
  mem.upload(dslots.data(), slots.data(), dslots.bytes());
  Tensor tvalues(dvalues.data(), mem.device(), kF32, {n, kDim});
  Tensor tslots(dslots.data(), mem.device(), kI32, {n});
  dsv4_kv_write_args args;
  dsv4_kv_write_args_init(&args);
  args.cache_desc = desc;
  args.values = tvalues.get();
  args.slots = tslots.get();
  args.cache = cache;
  const dsv4_status st = dsv4_kv_write(ctx, &args);
  if (st != DSV4_STATUS_OK) {
    throw std::runtime_error(std::string(dsv4_last_error_message()) + " [" +
                             dsv4_status_string(st) + "]");
  }
  mem.synchronize();  // the value buffers are released on return
}

// Running agreement of one output kind (spec 2.4 rule), naming its first failing element.
struct Agreement {
  dsv4test::CompareAccumulator rule;
  std::string first_failure;

  void add(double got, double want, const Tolerance& tol, const std::string& where) {
    if (rule.add(got, want, tol) || rule.failures() != 1) return;
    char text[160];
    std::snprintf(text, sizeof text, "%s: got %.9g, want %.9g", where.c_str(), got, want);
    first_failure = text;
  }
  bool passed(const Tolerance& tol) const { return rule.result(tol).passed; }
};

struct LayerResult {
  double median_ms = 0;
  int runs = 0;
  double gflop = 0;
  double keys_per_token = 0;
  std::string kernel;
  bool checked = false;
  bool passed = true;
  int64_t checked_tokens = 0;
  Agreement out_decode, out_prefill, lse, max_logits;
};

std::vector<int64_t> pick_check_tokens(const StepShape& shape, int count, Rng& rng) {
  const int64_t T = shape.num_tokens;
  if (count <= 0 || count >= T) {
    std::vector<int64_t> all(static_cast<size_t>(T));
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int64_t first_prefill = static_cast<int64_t>(shape.num_decodes) * kDecodeQueryLen;
  // Always: both tokens of the first decode, the first and last prefill tokens, one padding token.
  std::vector<int64_t> picks = {0, 1, first_prefill, shape.real_tokens - 1, T - 1};
  while (static_cast<int64_t>(picks.size()) < count) {
    const int64_t t = rng.below(T);
    if (std::find(picks.begin(), picks.end(), t) == picks.end()) picks.push_back(t);
  }
  std::sort(picks.begin(), picks.end());
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  return picks;
}

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

// Runs and checks one layer. Returns false (after saying why) when a library call fails.
bool run_layer(dsv4_ctx* ctx, DeviceMemory& mem, const ModelConfig& model, const LayerKind& kind,
               const StepShape& shape, const RunOptions& opt, Rng& rng, Console& console,
               LayerResult* res) {
  Progress& progress = console.progress();
  const std::string label = std::string(model.name) + " " + kind.name;
  progress.step(label + ": writing the caches");
  LayerData L = make_layer(model, kind, shape, rng);
  const dsv4test::RefPagedBatch& b = L.batch;
  const dsv4_device dev = mem.device();
  const int64_t T = shape.num_tokens;
  const int64_t R = static_cast<int64_t>(shape.query_len.size());
  const int64_t H = model.heads;
  const bool compressed = kind.ratio > 1;

  // Caches, NaN-filled (0xff is NaN as e4m3, UE8M0 and bf16) before the engine writes them.
  DeviceBuffer swa_cache(&mem, static_cast<size_t>(L.swa_num_blocks * L.swa_block_bytes));
  DeviceBuffer cmp_cache(
      &mem, compressed ? static_cast<size_t>(L.cmp_num_blocks * L.cmp_block_bytes) : 0);
  mem.fill(swa_cache.data(), 0xff, swa_cache.bytes());
  if (compressed) mem.fill(cmp_cache.data(), 0xff, cmp_cache.bytes());
  Tensor swa_t(swa_cache.data(), dev, kU8, {L.swa_num_blocks, L.swa_block_bytes});
  Tensor cmp_t(cmp_cache.data(), dev, kU8, {L.cmp_num_blocks, L.cmp_block_bytes});
  const dsv4_kv_cache_desc swa_desc{kLayout, kSwaBlockSize, L.swa_block_bytes, 1.0f, 0};
  const dsv4_kv_cache_desc cmp_desc{kLayout, kind.cmp_block_size, L.cmp_block_bytes, 1.0f, 0};

  // Fill the caches as the engine's earlier steps (and this step's inserts) did: the SWA row of
  // every position still inside some query's window, and every completed compressed entry.
  std::vector<int32_t> slots;
  for (int64_t r = 0; r < R; ++r) {
    progress.detail("request " + std::to_string(r + 1) + " of " + std::to_string(R));
    const int32_t* swa_row = &b.swa_block_table[static_cast<size_t>(r * b.swa_bt_cols)];
    const int64_t first_pos = shape.seq_len[r] - shape.query_len[r];
    slots.clear();
    for (int64_t p = std::max<int64_t>(0, first_pos - kWindow + 1); p < shape.seq_len[r]; ++p) {
      slots.push_back(dsv4test::ref_swa_slot(L.config, swa_row, b.swa_bt_cols, p));
    }
    write_rows(ctx, mem, swa_desc, swa_t.get(), slots, rng);
    if (!compressed) continue;
    const int32_t* cmp_row = &b.cmp_block_table[static_cast<size_t>(r * b.cmp_bt_cols)];
    slots.clear();
    // Entry c is completed by the token at position c*ratio + ratio - 1, i.e. (p+1) % ratio == 0.
    for (int64_t p = 0; p < shape.seq_len[r]; ++p) {
      if ((p + 1) % kind.ratio != 0) continue;
      slots.push_back(dsv4test::ref_cmp_slot(L.config, cmp_row, b.cmp_bt_cols, p / kind.ratio));
    }
    write_rows(ctx, mem, cmp_desc, cmp_t.get(), slots, rng);
  }

  // The step's batch description and activations on the device.
  auto upload = [&](const void* src, size_t bytes) {
    DeviceBuffer buf(&mem, bytes);
    if (bytes > 0) mem.upload(buf.data(), src, bytes);
    return buf;
  };
  DeviceBuffer d_qsl = upload(b.query_start_loc.data(), b.query_start_loc.size() * 4);
  DeviceBuffer d_seq = upload(b.seq_lens.data(), b.seq_lens.size() * 4);
  DeviceBuffer d_swa_bt = upload(b.swa_block_table.data(), b.swa_block_table.size() * 4);
  DeviceBuffer d_cmp_bt = upload(b.cmp_block_table.data(), b.cmp_block_table.size() * 4);
  DeviceBuffer d_slots = upload(b.slot_mapping.data(), b.slot_mapping.size() * 4);
  DeviceBuffer d_topk = upload(b.topk_indices.data(), b.topk_indices.size() * 4);
  DeviceBuffer d_q = upload(L.q.data(), L.q.size() * 2);
  DeviceBuffer d_sink = upload(L.sink.data(), L.sink.size() * 4);
  DeviceBuffer d_out(&mem, static_cast<size_t>(T * H * kDim * 2));
  DeviceBuffer d_lse(&mem, static_cast<size_t>(T * H * 4));
  DeviceBuffer d_max(&mem, static_cast<size_t>(T * H * 4));

  Tensor t_qsl(d_qsl.data(), dev, kI32, {R + 1});
  Tensor t_seq(d_seq.data(), dev, kI32, {R});
  Tensor t_swa_bt(d_swa_bt.data(), dev, kI32, {R, b.swa_bt_cols});
  Tensor t_cmp_bt(d_cmp_bt.data(), dev, kI32, {R, b.cmp_bt_cols});
  Tensor t_slots(d_slots.data(), dev, kI32, {T});
  Tensor t_topk(d_topk.data(), dev, kI32, {T, model.index_topk});
  Tensor t_q(d_q.data(), dev, kBf16, {T, H, kDim});
  Tensor t_sink(d_sink.data(), dev, kF32, {H});
  Tensor t_out(d_out.data(), dev, kBf16, {T, H, kDim});
  Tensor t_lse(d_lse.data(), dev, kF32, {T, H});
  Tensor t_max(d_max.data(), dev, kF32, {T, H});

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.mode = DSV4_MODE_PAGED;
  po.num_heads = model.heads;
  po.max_tokens = static_cast<int32_t>(T);
  po.swa_cache = swa_desc;
  if (compressed) po.extra_cache = cmp_desc;
  po.compress_ratio = kind.ratio;
  po.window = kWindow;
  po.index_topk = model.index_topk;
  po.decode_threshold = kDecodeQueryLen;
  po.max_model_len = kMaxModelLen;
  po.max_requests = static_cast<int32_t>(R);
  po.max_swa_blocks_per_request = static_cast<int32_t>(b.swa_bt_cols);
  po.max_cmp_blocks_per_request = static_cast<int32_t>(std::max<int64_t>(1, b.cmp_bt_cols));
  po.compressed_block_tokens = kCompressedBlockTokens;
  dsv4_plan* plan = nullptr;
  dsv4_status st = dsv4_plan_create(ctx, &po, &plan);
  if (st != DSV4_STATUS_OK) {
    console.library_error("dsv4_plan_create", st);
    return false;
  }
  std::unique_ptr<dsv4_plan, void (*)(dsv4_plan*)> plan_owner(plan, dsv4_plan_destroy);
  dsv4_plan_info pinfo;
  std::memset(&pinfo, 0, sizeof pinfo);
  pinfo.struct_size = sizeof pinfo;
  if (dsv4_plan_get_info(plan, &pinfo) == DSV4_STATUS_OK) res->kernel = pinfo.kernel;
  size_t ws_bytes = 0;
  st = dsv4_plan_get_workspace_size(plan, &ws_bytes);
  if (st != DSV4_STATUS_OK) {
    console.library_error("dsv4_plan_get_workspace_size", st);
    return false;
  }
  DeviceBuffer workspace(&mem, ws_bytes);

  dsv4_run_args args;
  dsv4_run_args_init(&args);
  args.q = t_q.get();
  args.swa_cache = swa_t.get();
  args.extra_cache = compressed ? cmp_t.get() : nullptr;
  args.attn_sink = t_sink.get();
  args.out = t_out.get();
  args.lse = t_lse.get();
  args.max_logits = t_max.get();
  args.query_start_loc = t_qsl.get();
  args.seq_lens = t_seq.get();
  args.swa_block_table = t_swa_bt.get();
  args.cmp_block_table = compressed ? t_cmp_bt.get() : nullptr;
  args.slot_mapping = t_slots.get();
  args.topk_indices = kind.ratio == 4 ? t_topk.get() : nullptr;
  args.workspace = workspace.data();
  args.workspace_bytes = ws_bytes;

  // A warm-up run, then timed runs until `repeats` of them, or the layer's time budget once three
  // runs are done. The warm-up counts only when fewer than three runs were timed after it.
  std::vector<double> times;
  double spent = 0;
  progress.step(label + ": timing dsv4_run");
  for (int i = 0; i <= opt.repeats; ++i) {
    progress.detail(i == 0 ? std::string("warm-up run")
                           : "run " + std::to_string(i) + " of " + std::to_string(opt.repeats));
    const double t0 = now_ms();
    st = dsv4_run(plan, &args);
    if (st == DSV4_STATUS_OK) mem.synchronize();
    const double dt = now_ms() - t0;
    if (st != DSV4_STATUS_OK) {
      console.library_error("dsv4_run", st);
      return false;
    }
    times.push_back(dt);
    spent += dt;
    if (i >= 2 && spent > opt.budget_ms) break;
  }
  if (times.size() >= 4) times.erase(times.begin());
  std::sort(times.begin(), times.end());
  res->runs = static_cast<int>(times.size());
  res->median_ms = times[times.size() / 2];
  if (times.size() % 2 == 0) res->median_ms = 0.5 * (times[times.size() / 2 - 1] + res->median_ms);

  // The lists the step implies (independent builder); their lengths give the FLOP count.
  const dsv4test::RefPagedLists lists = dsv4test::ref_build_paged_lists(L.config, b);
  double keys = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (lists.is_padding[t]) continue;
    keys += static_cast<double>(std::max<int64_t>(0, lists.swa[t].length));
    if (compressed) keys += static_cast<double>(std::max<int64_t>(0, lists.cmp[t].length));
  }
  res->keys_per_token = keys / shape.real_tokens;
  res->gflop = 2.0 * H * keys * (kDim + kDim) * 1e-9;
  if (!opt.check) return true;

  // Check a sample of tokens (the float64 reference costs ~H * keys * 1024 multiply-adds each).
  const std::vector<int64_t> picks = pick_check_tokens(shape, opt.check_tokens, rng);
  const int64_t S = static_cast<int64_t>(picks.size());
  progress.step(label + ": float64 reference check");
  std::vector<uint8_t> swa_host(swa_cache.bytes()), cmp_host(cmp_cache.bytes());
  mem.download(swa_host.data(), swa_cache.data(), swa_host.size());
  if (compressed) mem.download(cmp_host.data(), cmp_cache.data(), cmp_host.size());
  std::vector<uint16_t> out_host(static_cast<size_t>(T * H * kDim));
  std::vector<float> lse_host(static_cast<size_t>(T * H)), max_host(static_cast<size_t>(T * H));
  mem.download(out_host.data(), d_out.data(), out_host.size() * 2);
  mem.download(lse_host.data(), d_lse.data(), lse_host.size() * 4);
  mem.download(max_host.data(), d_max.data(), max_host.size() * 4);

  // One token per reference call, so that the progress line can say how far the check is.
  dsv4test::RefProblem p;
  p.num_tokens = 1;
  p.num_heads = H;
  p.head_dim_qk = kDim;
  p.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  p.q.resize(static_cast<size_t>(H * kDim));
  p.sink.assign(L.sink.begin(), L.sink.end());
  p.main = dsv4test::RefCache{swa_host.data(),   kLayout,          kSwaBlockSize,
                              L.swa_block_bytes, L.swa_num_blocks, 1.0};
  if (compressed) {
    p.extra = dsv4test::RefCache{cmp_host.data(),   kLayout,          kind.cmp_block_size,
                                 L.cmp_block_bytes, L.cmp_num_blocks, 1.0};
  }

  const int64_t num_decode_tokens = lists.num_decode_tokens;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t t = picks[i];
    progress.detail("token " + std::to_string(i + 1) + " of " + std::to_string(S));
    const uint16_t* src = &L.q[static_cast<size_t>(t * H * kDim)];
    for (int64_t j = 0; j < H * kDim; ++j) p.q[j] = dsv4test::ref_bf16_to_double(src[j]);
    p.main_lists.assign(1, lists.swa[t]);
    if (compressed) p.extra_lists.assign(1, lists.cmp[t]);
    const dsv4test::RefResult want = dsv4test::reference_attention(p);
    const bool decode = t < num_decode_tokens || lists.is_padding[t];
    Agreement& out_agree = decode ? res->out_decode : res->out_prefill;
    const Tolerance& out_tol = decode ? kDecodeOutTol : kPrefillOutTol;
    const Tolerance& lse_tol = decode ? kDecodeLseTol : kPrefillLseTol;
    for (int64_t h = 0; h < H; ++h) {
      const std::string where = "token " + std::to_string(t) + " head " + std::to_string(h);
      for (int64_t d = 0; d < kDim; ++d) {
        const double got =
            dsv4test::ref_bf16_to_double(out_host[static_cast<size_t>((t * H + h) * kDim + d)]);
        out_agree.add(got, want.out[static_cast<size_t>(h * kDim + d)], out_tol,
                      d == 0 ? where + " out" : where + " out dim " + std::to_string(d));
      }
      res->lse.add(lse_host[static_cast<size_t>(t * H + h)], want.lse[static_cast<size_t>(h)],
                   lse_tol, where + " lse");
      res->max_logits.add(max_host[static_cast<size_t>(t * H + h)],
                          want.max_logits[static_cast<size_t>(h)], kPrefillLseTol,
                          where + " max_logits");
    }
  }
  res->checked = true;
  res->checked_tokens = S;
  res->passed = res->out_decode.passed(kDecodeOutTol) && res->out_prefill.passed(kPrefillOutTol) &&
                res->lse.passed(kDecodeLseTol) && res->max_logits.passed(kPrefillLseTol);
  return true;
}

using json = nlohmann::ordered_json;

void print_agreement(const char* name, const Agreement& a, const Tolerance& tol) {
  const dsv4test::CompareResult r = a.rule.result(tol);
  if (r.elements == 0) return;
  std::printf("      %-12s max abs err %.2e, max rel err %.2e", name, r.max_abs_err, r.max_rel_err);
  if (tol.cos_tol >= 0) std::printf(", cos diff %.2e (tol %.0e)", r.cos_diff, tol.cos_tol);
  std::printf(", %" PRId64 " of %" PRId64 " elements outside tolerance%s%s\n", r.failures,
              r.elements, r.failures > 0 ? "; first: " : "", a.first_failure.c_str());
}

// JSON numbers cannot be NaN or infinite: those become null.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json agreement_json(const Agreement& a, const Tolerance& tol) {
  const dsv4test::CompareResult r = a.rule.result(tol);
  if (r.elements == 0) return nullptr;
  json j = {{"passed", r.passed},
            {"elements", r.elements},
            {"failures", r.failures},
            {"max_abs_err", number(r.max_abs_err)},
            {"max_rel_err", number(r.max_rel_err)}};
  if (tol.cos_tol >= 0) j["cos_diff"] = number(r.cos_diff);
  if (r.failures > 0) j["first_failure"] = a.first_failure;
  return j;
}

json layer_json(const LayerKind& kind, const LayerResult& res) {
  json j = {{"layer", kind.name},
            {"median_ms", res.median_ms},
            {"runs", res.runs},
            {"gflop_per_s", res.gflop / (res.median_ms * 1e-3)},
            {"keys_per_token", res.keys_per_token},
            {"kernel", res.kernel}};
  if (!res.checked) {
    j["check"] = nullptr;
    return j;
  }
  j["check"] = {{"passed", res.passed},
                {"tokens", res.checked_tokens},
                {"out_decode", agreement_json(res.out_decode, kDecodeOutTol)},
                {"out_prefill", agreement_json(res.out_prefill, kPrefillOutTol)},
                {"lse", agreement_json(res.lse, kDecodeLseTol)},
                {"max_logits", agreement_json(res.max_logits, kPrefillLseTol)}};
  return j;
}

void print_usage() {
  std::printf(
      "usage: dsv4 [options] run [run options]\n"
      "Runs one DeepSeek-V4 engine step in paged mode: decode requests (MTP, 2 query tokens,\n"
      "contexts 200..5000) mixed with two prefill chunks whose prefixes exceed the window and a\n"
      "few padding tokens; FP8 584 B caches written with dsv4_kv_write; random block tables and\n"
      "C4A top-k. For each configuration and layer kind (SWA-only, C4A, C128A) it times the layer\n"
      "and checks outputs, lse and max_logits against the float64 reference (FlashMLA\n"
      "tolerances). Progress goes to stderr, results to stdout (--json: one JSON document).\n"
      "\n"
      "run options:\n"
      "  --config flash|pro|both  Flash: 64 heads, top-k 512; Pro: 128 heads, top-k 1024 (both)\n"
      "  --tokens N               about N query tokens: N/6 decode requests and two prefill\n"
      "                           chunks of N/3 tokens (default 192: 32 decodes, chunks of 64;\n"
      "                           --quick 24)\n"
      "  --seed S                 random seed (default: fresh, printed)\n"
      "  --threads N              CPU backend worker threads (default DSV4_CPU_THREADS, then\n"
      "                           cores)\n"
      "  --repeats N              timed runs after one warm-up; the median is shown (default 5,\n"
      "                           fewer once a layer has taken 3 s; --quick 0: the warm-up only)\n"
      "  --check-tokens N         tokens checked against the reference per layer (default 12;\n"
      "                           0 = all; the float64 reference is the slow part)\n"
      "  --no-check               time only\n"
      "  --quick                  small step, one timed run (for tests)\n"
      "options of every command: --device, --backend, --module-dir, --json, --no-progress\n"
      "exit status: 0 all checks passed, 1 a check failed or a library call failed, 2 bad usage\n");
}

// Parses the run options; kExitOk, kExitUsage after one message, or -1 for --help.
int parse_run_options(CommonOptions* common, int argc, char** argv, RunOptions* opt) {
  enum { kConfig, kTokens, kSeed, kThreads, kRepeats, kCheckTokens, kNoCheck, kQuick };
  const std::vector<CommandOption> options = {{"config", true, "flash|pro|both"},
                                              {"tokens", true, "N"},
                                              {"seed", true, "S"},
                                              {"threads", true, "N"},
                                              {"repeats", true, "N"},
                                              {"check-tokens", true, "N"},
                                              {"no-check", false, nullptr},
                                              {"quick", false, nullptr}};
  const auto integer = [&](size_t which, const char* value, long long lo, long long hi,
                           long long* out) {
    if (parse_int(value, lo, hi, out)) return true;
    std::fprintf(stderr, "dsv4 run: --%s needs an integer in [%lld, %lld], got '%s'\n",
                 options[which].name, lo, hi, value);
    return false;
  };
  return parse_command("run", argc, argv, common, options, [&](size_t which, const char* value) {
    long long v = 0;
    switch (which) {
      case kConfig:
        opt->config = value;
        if (opt->config == "flash" || opt->config == "pro" || opt->config == "both") return true;
        std::fprintf(stderr, "dsv4 run: --config: expected flash, pro or both, got '%s'\n", value);
        return false;
      case kTokens:
        if (!integer(which, value, 12, 8192, &v)) return false;
        opt->tokens = static_cast<int>(v);
        return true;
      case kSeed:
        if (!integer(which, value, 0, std::numeric_limits<long long>::max(), &v)) return false;
        opt->seed = static_cast<uint64_t>(v);
        opt->seed_given = true;
        return true;
      case kThreads:
        if (!integer(which, value, 0, 4096, &v)) return false;
        opt->threads = static_cast<int>(v);
        return true;
      case kRepeats:
        if (!integer(which, value, 0, 1000, &v)) return false;
        opt->repeats = static_cast<int>(v);
        return true;
      case kCheckTokens:
        if (!integer(which, value, 0, 1 << 20, &v)) return false;
        opt->check_tokens = static_cast<int>(v);
        return true;
      case kNoCheck:
        opt->check = false;
        return true;
      case kQuick:
        opt->quick = true;
        return true;
      default:
        return false;
    }
  });
}

}  // namespace

int command_run(CommonOptions common, int argc, char** argv) {
  RunOptions opt;
  const int parsed = parse_run_options(&common, argc, argv, &opt);
  if (parsed == -1) {
    print_usage();
    return kExitOk;
  }
  if (parsed != kExitOk) return parsed;
  if (opt.tokens == 0) opt.tokens = opt.quick ? 24 : 192;
  if (opt.repeats < 0) opt.repeats = opt.quick ? 0 : 5;
  if (opt.check_tokens < 0) opt.check_tokens = opt.quick ? 6 : 12;
  if (!opt.seed_given) {
    opt.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               0x5eed5eedull;
    opt.seed &= 0x7fffffffffffull;
  }
  Console console(common);
  console.command = "dsv4 run";
  const bool text = !common.json;
  json doc;
  // With --json, a failure still ends in a document: what was done, and the error.
  const auto failed = [&](int status) {
    if (!text) {
      console.progress().clear();
      doc["passed"] = false;
      doc["error"] = console.last_error();
      doc["warnings"] = console.warnings();
      std::printf("%s\n", doc.dump(2).c_str());
    }
    return status;
  };

  dsv4_ctx_options co = make_ctx_options(common, &console);
  co.num_threads = opt.threads;
  dsv4_ctx* ctx = nullptr;
  dsv4_status st = dsv4_ctx_create(&co, &ctx);
  if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_ctx_create", st));
  std::unique_ptr<dsv4_ctx, void (*)(dsv4_ctx*)> ctx_owner(ctx, dsv4_ctx_destroy);
  std::string why;
  std::unique_ptr<DeviceMemory> mem = make_device_memory(common.device, &why);
  if (!mem) return failed(console.error(device_name(common.device) + ": " + why));
  dsv4_ctx_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  st = dsv4_ctx_get_info(ctx, &info);
  if (st != DSV4_STATUS_OK) return failed(console.library_error("dsv4_ctx_get_info", st));

  doc["library"] = {{"version", dsv4_get_version_string()}};
  doc["backend"] = {{"name", info.backend},
                    {"path", info.path},
                    {"reason", info.reason},
                    {"device", device_name(info.device)},
                    {"threads", info.num_threads}};
  doc["seed"] = opt.seed;
  doc["tokens"] = opt.tokens;
  doc["configs"] = json::array();
  if (text) {
    std::printf("dsv4 run: libdsv4 %s, backend %s (%s; %s), device %s", dsv4_get_version_string(),
                info.backend, info.path, info.reason, device_name(info.device).c_str());
    if (info.device.device_type == DSV4_DEVICE_CPU)
      std::printf(", %d threads", static_cast<int>(info.num_threads));
    std::printf(", seed %" PRIu64 "\n", opt.seed);
  }

  std::vector<ModelConfig> models;
  if (opt.config != "pro") models.push_back(kFlash);
  if (opt.config != "flash") models.push_back(kPro);

  bool all_passed = true;
  int config_index = 0;
  for (const ModelConfig& model : models) {
    Rng rng(opt.seed * 1000003ull + static_cast<uint64_t>(config_index++));
    const StepShape shape = make_step_shape(opt.tokens, rng);
    const auto ctx_minmax =
        std::minmax_element(shape.seq_len.begin(), shape.seq_len.begin() + shape.num_decodes);
    json config = {{"name", model.name},
                   {"heads", model.heads},
                   {"index_topk", model.index_topk},
                   {"window", kWindow},
                   {"decode_requests", shape.num_decodes},
                   {"decode_contexts", {*ctx_minmax.first, *ctx_minmax.second}},
                   {"prefill_chunks", json::array()},
                   {"padding_tokens", kPaddingTokens},
                   {"tokens", shape.num_tokens},
                   {"layers", json::array()}};
    for (int32_t r = shape.num_decodes; r < shape.num_decodes + shape.num_prefills; ++r) {
      config["prefill_chunks"].push_back(
          {{"tokens", shape.query_len[r]}, {"prefix", shape.seq_len[r] - shape.query_len[r]}});
    }
    if (text) {
      console.progress().clear();
      std::printf(
          "\n%s: %d heads, C4A top-k %d, window %d, FP8 584 B caches (SWA 64 tokens/block, "
          "C4 64 and C128 2 entries/block)\n",
          model.name, static_cast<int>(model.heads), static_cast<int>(model.index_topk), kWindow);
      std::printf("  step: %d decode requests (MTP, %d query tokens, contexts %d..%d)",
                  static_cast<int>(shape.num_decodes), kDecodeQueryLen,
                  static_cast<int>(*ctx_minmax.first), static_cast<int>(*ctx_minmax.second));
      for (int32_t r = shape.num_decodes; r < shape.num_decodes + shape.num_prefills; ++r) {
        std::printf(", prefill chunk %d tokens after a %d-token prefix",
                    static_cast<int>(shape.query_len[r]),
                    static_cast<int>(shape.seq_len[r] - shape.query_len[r]));
      }
      std::printf(", %d padding tokens: %d tokens\n", kPaddingTokens,
                  static_cast<int>(shape.num_tokens));
    }
    for (const LayerKind& kind : kLayerKinds) {
      LayerResult res;
      bool ok = false;
      try {
        ok = run_layer(ctx, *mem, model, kind, shape, opt, rng, console, &res);
      } catch (const std::exception& e) {  // device memory, dsv4_kv_write
        console.error(e.what());
      }
      if (!ok) {
        doc["configs"].push_back(config);
        return failed(kExitFailure);
      }
      all_passed = all_passed && (!res.checked || res.passed);
      config["layers"].push_back(layer_json(kind, res));
      if (!text) continue;
      console.progress().clear();
      std::printf(
          "  %-6s %-6s %8.3f ms (median of %d runs)  %8.1f GFLOP/s  %6.1f keys/token  kernel %s\n",
          model.name, kind.name, res.median_ms, res.runs, res.gflop / (res.median_ms * 1e-3),
          res.keys_per_token, res.kernel.c_str());
      if (!res.checked) continue;
      std::printf("    check %s: %" PRId64 " of %d tokens%s against the float64 reference\n",
                  res.passed ? "PASS" : "FAIL", res.checked_tokens,
                  static_cast<int>(shape.num_tokens),
                  res.checked_tokens < shape.num_tokens
                      ? " (random sample + first/last decode, prefill and padding tokens)"
                      : "");
      print_agreement("out decode", res.out_decode, kDecodeOutTol);
      print_agreement("out prefill", res.out_prefill, kPrefillOutTol);
      print_agreement("lse", res.lse, kDecodeLseTol);
      print_agreement("max_logits", res.max_logits, kPrefillLseTol);
    }
    doc["configs"].push_back(config);
  }
  console.progress().clear();
  if (!text) {
    doc["checked"] = opt.check;
    doc["passed"] = opt.check ? json(all_passed) : json(nullptr);
    doc["warnings"] = console.warnings();
    std::printf("%s\n", doc.dump(2).c_str());
    return !opt.check || all_passed ? kExitOk : kExitFailure;
  }
  std::printf(
      "\nFLOP = 2 x heads x valid keys x (512 + 512); time is dsv4_run (index building + "
      "attention), synchronised.\n");
  if (!opt.check) {
    std::printf("results not checked (--no-check)\n");
    return kExitOk;
  }
  std::printf("%s (seed %" PRIu64 ")\n", all_passed ? "ALL CHECKS PASSED" : "SOME CHECKS FAILED",
              opt.seed);
  return all_passed ? kExitOk : kExitFailure;
}

}  // namespace dsv4cli
