// A llama.cpp-style engine over libdsv4 (dsv4.hpp): the engine owns a paged KV pool per layer (a
// sliding-window cache and, for compressed layers, a compressed cache; fp16 rows, ggml's default
// KV type), writes each step's new tokens into it with dsv4_kv_write, and steps a few requests
// through chunked prefill and MTP decode over a small stack of SWA, C4A (top-k from a toy indexer)
// and C128A layers in paged mode, on whichever backend the probe picks. Activations and caches are
// ggml-style tensors (ne/nb, fastest dimension first) handed to libdsv4 as they are, without
// copies. Every layer's output of every step is checked against the independent float64
// reference; the exit status says whether all agreed.
//
//   example_engine [--steps N] [--seed S]
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dsv4/dsv4.hpp>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare_rule.h"
#include "reference.h"
#include "reference_paged.h"

namespace {

// ------------------------------------------------------------------------------------------------
// The model: a few layers of DeepSeek-V4 attention (everything around attention is a toy).
// ------------------------------------------------------------------------------------------------
constexpr int64_t kHeads = 8;  // this rank's share of the heads
constexpr int64_t kDim = 512;
constexpr int32_t kWindow = 128;
constexpr int32_t kSwaBlock = 16;   // tokens per SWA block
constexpr int32_t kIndexTopk = 32;  // C4A indexer top-k
constexpr int64_t kMaxModelLen = 4096;
constexpr int32_t kMtpTokens = 2;    // MTP decode: one verified and one draft token
constexpr int32_t kStepBudget = 64;  // query tokens per step
constexpr int32_t kMaxRequests = 8;
constexpr uint32_t kLayout = DSV4_KV_LAYOUT_FP16;  // ggml's default KV type: fp16 rows
constexpr dsv4_dtype kKvType = dsv4::kFloat16;

struct LayerKind {
  const char* name;
  int32_t ratio;      // 1: SWA only, 4: C4A, 128: C128A
  int32_t cmp_block;  // compressed entries per block
};
constexpr LayerKind kLayers[] = {{"swa", 1, 0}, {"c4a", 4, 16}, {"c128a", 128, 2}, {"swa", 1, 0}};
constexpr int kNumLayers = sizeof kLayers / sizeof kLayers[0];

// Deterministic pseudo-random values from a few integers (the toy model's "weights").
uint64_t mix(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull ^ b * 0xbf58476d1ce4e5b9ull ^ c * 0x94d049bb133111ebull ^
               d * 0xd6e8feb86659fd93ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double toy(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {  // uniform in [-1, 1)
  return static_cast<double>(mix(a, b, c, d) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

uint16_t to_bf16(double x) { return dsv4test::ref_double_to_bf16(x); }
double from_bf16(uint16_t b) { return dsv4test::ref_bf16_to_double(b); }

// ------------------------------------------------------------------------------------------------
// ggml-style tensors: ne[i] elements and nb[i] bytes along dimension i, fastest first.
// ------------------------------------------------------------------------------------------------
struct GgmlTensor {
  void* data = nullptr;
  dsv4_dtype type{};
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  size_t nb[4] = {0, 0, 0, 0};
};

// A compact tensor over `storage` (like ggml_new_tensor_3d).
GgmlTensor new_tensor(std::vector<uint16_t>& storage, dsv4_dtype type, int64_t ne0, int64_t ne1,
                      int64_t ne2) {
  GgmlTensor t;
  t.data = storage.data();
  t.type = type;
  t.n_dims = 3;
  t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = ne2;
  t.nb[0] = 2, t.nb[1] = t.nb[0] * ne0, t.nb[2] = t.nb[1] * ne1;
  return t;
}

// A view into `parent` (like ggml_view_3d / ggml_view_2d): new extents, the parent's strides.
GgmlTensor view(const GgmlTensor& parent, int n_dims, const int64_t* ne, size_t offset) {
  GgmlTensor t = parent;
  t.data = static_cast<char*>(parent.data) + offset;
  t.n_dims = n_dims;
  for (int i = 0; i < 4; ++i) t.ne[i] = i < n_dims ? ne[i] : 1;
  if (n_dims == 2) t.nb[1] = parent.nb[2];  // rows of a 2-D view step over the parent's dim 2
  return t;
}

// The dsv4_tensor of a ggml tensor: same memory, dimensions reversed, strides in elements.
dsv4::Tensor wrap(const GgmlTensor& t) {
  return dsv4::Tensor::from_byte_strides(t.data, t.type, t.ne, t.nb, t.n_dims);
}

// ------------------------------------------------------------------------------------------------
// The engine's KV pool of one cache: fixed-size blocks, a free list, 16-bit rows.
// ------------------------------------------------------------------------------------------------
constexpr uint16_t kNaN16 = 0xffff;  // NaN as fp16 and as bf16
class KvPool {
 public:
  KvPool(int32_t block_size, int64_t num_blocks)
      : block_size_(block_size),
        storage_(static_cast<size_t>(num_blocks * block_size * kDim), kNaN16) {
    tensor_ = new_tensor(storage_, kKvType, kDim, block_size, num_blocks);
    for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  }
  int32_t allocate() {
    if (free_.empty()) throw std::runtime_error("KV pool exhausted");
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  // A freed block is NaN-filled: nothing may read it until it is written again.
  void release(int32_t b) {
    std::fill_n(&storage_[static_cast<size_t>(b) * block_size_ * kDim], block_size_ * kDim, 0xffff);
    free_.push_back(b);
  }
  dsv4_kv_cache_desc desc() const { return dsv4::cache_desc(kLayout, block_size_); }
  const GgmlTensor& tensor() const { return tensor_; }
  int32_t block_size() const { return block_size_; }
  dsv4test::RefCache ref() const {
    dsv4test::RefCache c;
    c.base = reinterpret_cast<const uint8_t*>(storage_.data());
    c.layout = kLayout;
    c.block_size = block_size_;
    c.block_stride_bytes = static_cast<int64_t>(tensor_.nb[2]);
    c.num_blocks = tensor_.ne[2];
    return c;
  }

 private:
  int32_t block_size_;
  std::vector<uint16_t> storage_;
  GgmlTensor tensor_;
  std::vector<int32_t> free_;
};

// One request: its prompt, how far it has come, and its blocks in every layer's pools.
struct Request {
  int id = 0;
  int32_t prompt_len = 0;
  int32_t pos = 0;          // tokens whose KV is final (prompt + accepted tokens)
  int32_t decode_left = 0;  // MTP steps still to run
  std::vector<std::vector<int32_t>> swa_blocks, cmp_blocks;  // [layer][logical block] (-1 freed)
};

// One layer: its pools, its plan (built once), its sink and toy indexer.
struct Layer {
  LayerKind kind;
  KvPool swa;
  KvPool cmp;
  dsv4::Plan plan;
  std::vector<float> sink;
};

// What one step runs: per token its request and position; per request its query span.
struct StepBatch {
  std::vector<Request*> reqs;  // decodes first, then prefill chunks
  std::vector<int32_t> query_len;
  std::vector<int32_t> token_req, token_pos;
  int32_t num_decode_tokens = 0;
};

// ------------------------------------------------------------------------------------------------
// The engine
// ------------------------------------------------------------------------------------------------
class Engine {
 public:
  explicit Engine(uint64_t seed) : seed_(seed) {
    const dsv4_ctx_info info = ctx_.info();
    std::printf("backend %s (%s)\n", info.backend, info.reason);
    for (int l = 0; l < kNumLayers; ++l) {
      const LayerKind& k = kLayers[l];
      const int32_t cmp_block = k.ratio > 1 ? k.cmp_block : 1;
      Layer layer{k, KvPool(kSwaBlock, 96), KvPool(cmp_block, k.ratio > 1 ? 64 : 1), {}, {}};
      dsv4::PlanOptions po;
      po.mode = DSV4_MODE_PAGED;
      po.num_heads = kHeads;
      po.max_tokens = kStepBudget;
      po.swa_cache = layer.swa.desc();
      if (k.ratio > 1) po.extra_cache = layer.cmp.desc();
      po.compress_ratio = k.ratio;
      po.window = kWindow;
      po.index_topk = kIndexTopk;
      po.decode_threshold = kMtpTokens;
      po.max_model_len = kMaxModelLen;
      po.max_requests = kMaxRequests;
      po.max_swa_blocks_per_request = kMaxModelLen / kSwaBlock;
      po.max_cmp_blocks_per_request = k.ratio > 1 ? kMaxModelLen / (k.ratio * cmp_block) : 1;
      po.compressed_block_tokens = k.ratio > 1 ? k.ratio * cmp_block : 256;
      layer.plan = dsv4::Plan(ctx_, po);
      for (int64_t h = 0; h < kHeads; ++h)
        layer.sink.push_back(static_cast<float>(2.0 + toy(seed_, l, h, 7)));
      layer.sink[0] = -std::numeric_limits<float>::infinity();  // a head without sink
      workspace_bytes_ = std::max(workspace_bytes_, layer.plan.workspace_size());
      layers_.push_back(std::move(layer));
    }
    workspace_.resize(workspace_bytes_);
  }

  void add_request(int32_t prompt_len, int32_t decode_steps) {
    Request r;
    r.id = static_cast<int>(requests_.size());
    r.prompt_len = prompt_len;
    r.decode_left = decode_steps;
    r.swa_blocks.resize(kNumLayers);
    r.cmp_blocks.resize(kNumLayers);
    requests_.push_back(r);
  }

  bool done() const {
    for (const Request& r : requests_)
      if (r.pos < r.prompt_len || r.decode_left > 0) return false;
    return true;
  }

  // One forward step: schedule, run every layer, check it, advance the requests.
  bool step() {
    StepBatch b = schedule();
    const int32_t T = static_cast<int32_t>(b.token_pos.size());
    // Activations: per token a fused [q heads | kv row] projection (ggml: ne = {512, H+1, T}).
    std::vector<uint16_t> qkv_storage(static_cast<size_t>(T * (kHeads + 1) * kDim));
    GgmlTensor qkv = new_tensor(qkv_storage, dsv4::kBFloat16, kDim, kHeads + 1, T);
    std::vector<uint16_t> out_storage(static_cast<size_t>(T * kHeads * kDim));
    GgmlTensor out = new_tensor(out_storage, dsv4::kBFloat16, kDim, kHeads, T);
    const int64_t q_ne[3] = {kDim, kHeads, T}, kv_ne[2] = {kDim, T};
    const GgmlTensor q = view(qkv, 3, q_ne, 0);  // strided over tokens
    const GgmlTensor kv = view(qkv, 2, kv_ne, static_cast<size_t>(kHeads) * kDim * 2);  // rows
    bool ok = true;
    for (int l = 0; l < kNumLayers; ++l) {
      project(l, b, qkv_storage, out_storage);
      ok &= run_layer(l, b, q, kv, out);
    }
    advance(b);
    return ok;
  }

 private:
  // Decodes first (MTP: kMtpTokens query tokens each), then prefill chunks within the budget.
  StepBatch schedule() {
    StepBatch b;
    int32_t budget = kStepBudget;
    for (Request& r : requests_) {
      if (r.pos < r.prompt_len || r.decode_left == 0 || budget < kMtpTokens) continue;
      b.reqs.push_back(&r);
      b.query_len.push_back(kMtpTokens);
      budget -= kMtpTokens;
    }
    for (Request& r : requests_) {
      if (r.pos >= r.prompt_len || budget == 0) continue;
      b.reqs.push_back(&r);
      b.query_len.push_back(std::min(budget, r.prompt_len - r.pos));
      budget -= b.query_len.back();
    }
    for (size_t i = 0; i < b.reqs.size(); ++i) {
      for (int32_t j = 0; j < b.query_len[i]; ++j) {
        b.token_req.push_back(static_cast<int32_t>(i));
        b.token_pos.push_back(b.reqs[i]->pos + j);
      }
      if (b.query_len[i] == kMtpTokens && b.reqs[i]->pos >= b.reqs[i]->prompt_len)
        b.num_decode_tokens += kMtpTokens;
    }
    return b;
  }

  // Toy projections of layer l: q and the token's KV row from the token and the previous layer's
  // attention output (so the stack is a real stack), rounded to bf16.
  void project(int l, const StepBatch& b, std::vector<uint16_t>& qkv,
               const std::vector<uint16_t>& prev_out) const {
    const size_t T = b.token_pos.size();
    for (size_t t = 0; t < T; ++t) {
      const int id = b.reqs[b.token_req[t]]->id;
      const int32_t p = b.token_pos[t];
      for (int64_t h = 0; h <= kHeads; ++h) {
        for (int64_t d = 0; d < kDim; ++d) {
          double v = 1.7 * toy(seed_ + l, id, p, h * kDim + d);
          if (h < kHeads && l > 0) v += 4.0 * from_bf16(prev_out[(t * kHeads + h) * kDim + d]);
          if (h == kHeads) v = 0.5 * toy(seed_ + l, id, p, 1 << 20 | d);  // the KV row
          qkv[(t * (kHeads + 1) + h) * kDim + d] = to_bf16(v);
        }
      }
    }
  }

  // Block tables of one layer's pool for the step's requests (allocating what the new tokens
  // need, freeing SWA blocks that left every query's window), as a [R, cols] int32 matrix.
  std::vector<int32_t> block_table(int l, const StepBatch& b, bool compressed, int32_t* cols) {
    Layer& layer = layers_[l];
    KvPool& pool = compressed ? layer.cmp : layer.swa;
    const int32_t per_block = compressed ? layer.kind.ratio * pool.block_size() : kSwaBlock;
    *cols = 1;
    for (size_t i = 0; i < b.reqs.size(); ++i) {
      Request& r = *b.reqs[i];
      std::vector<int32_t>& blocks = compressed ? r.cmp_blocks[l] : r.swa_blocks[l];
      const int32_t end = r.pos + b.query_len[i];
      while (static_cast<int32_t>(blocks.size()) * per_block < end)
        blocks.push_back(pool.allocate());
      if (!compressed) {  // llama.cpp's SWA cache: blocks wholly before the window are freed
        const int32_t first_needed = std::max(0, r.pos - kWindow + 1) / kSwaBlock;
        for (int32_t c = 0; c < first_needed; ++c) {
          if (blocks[c] >= 0) pool.release(blocks[c]);
          blocks[c] = -1;
        }
      }
      *cols = std::max(*cols, static_cast<int32_t>(blocks.size()));
    }
    std::vector<int32_t> table(b.reqs.size() * *cols, -1);
    for (size_t i = 0; i < b.reqs.size(); ++i) {
      const std::vector<int32_t>& blocks =
          compressed ? b.reqs[i]->cmp_blocks[l] : b.reqs[i]->swa_blocks[l];
      std::copy(blocks.begin(), blocks.end(), table.begin() + i * *cols);
    }
    return table;
  }

  bool run_layer(int l, const StepBatch& b, const GgmlTensor& q, const GgmlTensor& kv,
                 const GgmlTensor& out) {
    Layer& layer = layers_[l];
    const int32_t ratio = layer.kind.ratio;
    const int32_t T = static_cast<int32_t>(b.token_pos.size());
    const int32_t R = static_cast<int32_t>(b.reqs.size());
    dsv4test::RefPagedConfig cfg;
    cfg.compress_ratio = ratio;
    cfg.window = kWindow;
    cfg.swa_block_size = kSwaBlock;
    cfg.cmp_block_size = ratio > 1 ? layer.cmp.block_size() : 1;
    cfg.index_topk = kIndexTopk;
    cfg.decode_threshold = kMtpTokens;
    cfg.max_model_len = kMaxModelLen;

    // The batch description, as vLLM or llama.cpp would hold it.
    dsv4test::RefPagedBatch batch;
    batch.num_tokens = T;
    batch.query_start_loc.assign(1, 0);
    for (int32_t i = 0; i < R; ++i) {
      batch.query_start_loc.push_back(batch.query_start_loc.back() + b.query_len[i]);
      batch.seq_lens.push_back(b.reqs[i]->pos + b.query_len[i]);
    }
    int32_t swa_cols = 0, cmp_cols = 0;
    batch.swa_block_table = block_table(l, b, false, &swa_cols);
    batch.swa_bt_cols = swa_cols;
    if (ratio > 1) {
      batch.cmp_block_table = block_table(l, b, true, &cmp_cols);
      batch.cmp_bt_cols = cmp_cols;
    }
    for (int32_t t = 0; t < T; ++t) {
      const int32_t* row = &batch.swa_block_table[static_cast<size_t>(b.token_req[t]) * swa_cols];
      batch.slot_mapping.push_back(dsv4test::ref_swa_slot(cfg, row, swa_cols, b.token_pos[t]));
    }

    // New tokens' KV rows into the SWA pool: the kv view is strided (rows inside qkv).
    const dsv4::Tensor slots(batch.slot_mapping, {T});
    dsv4::Tensor swa_cache = wrap(layer.swa.tensor());
    ctx_.kv_write(dsv4::KvWriteArgs(layer.swa.desc(), wrap(kv), slots, swa_cache));

    // The compressor: entry c is completed by position c*ratio + ratio - 1 (toy values).
    dsv4::Tensor cmp_cache = wrap(layer.cmp.tensor());
    if (ratio > 1) compress(l, b, batch, cfg);

    // The toy indexer (C4A): the top-k visible entries by a score, best first, -1 padded.
    if (ratio == 4) batch.topk_indices = indexer(l, b);

    // Every tensor lives until the run: RunArgs only points at them.
    const dsv4::Tensor q_t = wrap(q), qsl(batch.query_start_loc, {R + 1}), seq(batch.seq_lens, {R});
    dsv4::Tensor out_t = wrap(out);
    const dsv4::Tensor swa_bt(batch.swa_block_table, {R, swa_cols}), sink(layer.sink, {kHeads});
    std::optional<dsv4::Tensor> cmp_bt, topk;
    dsv4::RunArgs args;
    args.q(q_t)
        .swa_cache(swa_cache)
        .attn_sink(sink)
        .out(out_t)
        .query_start_loc(qsl)
        .seq_lens(seq)
        .swa_block_table(swa_bt)
        .slot_mapping(slots)
        .workspace(workspace_);
    if (ratio > 1) {
      cmp_bt.emplace(batch.cmp_block_table, std::initializer_list<int64_t>{R, cmp_cols});
      args.extra_cache(cmp_cache).cmp_block_table(*cmp_bt);
    }
    if (ratio == 4) {
      topk.emplace(batch.topk_indices, std::initializer_list<int64_t>{T, kIndexTopk});
      args.topk_indices(*topk);
    }
    layer.plan.run(args);
    return check(l, b, cfg, batch, q, out);
  }

  void compress(int l, const StepBatch& b, const dsv4test::RefPagedBatch& batch,
                const dsv4test::RefPagedConfig& cfg) {
    Layer& layer = layers_[l];
    const int32_t ratio = layer.kind.ratio;
    std::vector<int32_t> slots;
    std::vector<float> rows;
    for (size_t t = 0; t < b.token_pos.size(); ++t) {
      const int32_t p = b.token_pos[t];
      if ((p + 1) % ratio != 0) continue;
      const int32_t r = b.token_req[t];
      const int32_t* row = &batch.cmp_block_table[static_cast<size_t>(r) * batch.cmp_bt_cols];
      slots.push_back(dsv4test::ref_cmp_slot(cfg, row, batch.cmp_bt_cols, p / ratio));
      for (int64_t d = 0; d < kDim; ++d)
        rows.push_back(
            static_cast<float>(0.5 * toy(seed_ + l, b.reqs[r]->id, p / ratio, 3 << 20 | d)));
    }
    if (slots.empty()) return;
    const int64_t n = static_cast<int64_t>(slots.size());
    dsv4::Tensor cache = wrap(layer.cmp.tensor());
    ctx_.kv_write(dsv4::KvWriteArgs(layer.cmp.desc(), dsv4::Tensor(rows, {n, kDim}),
                                    dsv4::Tensor(slots, {n}), cache));
  }

  std::vector<int32_t> indexer(int l, const StepBatch& b) const {
    const size_t T = b.token_pos.size();
    std::vector<int32_t> topk(T * kIndexTopk, -1);
    std::vector<std::pair<double, int32_t>> scored;
    for (size_t t = 0; t < T; ++t) {
      const int id = b.reqs[b.token_req[t]]->id;
      const int32_t visible = (b.token_pos[t] + 1) / 4;
      scored.clear();
      for (int32_t c = 0; c < visible; ++c) scored.push_back({toy(seed_ + l, id, c, t), c});
      const int32_t keep = std::min(visible, kIndexTopk);
      std::partial_sort(scored.begin(), scored.begin() + keep, scored.end(),
                        [](const auto& x, const auto& y) { return x.first > y.first; });
      for (int32_t k = 0; k < keep; ++k) topk[t * kIndexTopk + k] = scored[k].second;
    }
    return topk;
  }

  // The layer's output against the float64 reference (spec 2.4; decode and prefill tolerances).
  bool check(int l, const StepBatch& b, const dsv4test::RefPagedConfig& cfg,
             const dsv4test::RefPagedBatch& batch, const GgmlTensor& q, const GgmlTensor& out) {
    Layer& layer = layers_[l];
    const int64_t T = batch.num_tokens;
    const dsv4test::RefPagedLists lists = dsv4test::ref_build_paged_lists(cfg, batch);
    dsv4test::RefProblem p;
    p.num_tokens = T;
    p.num_heads = kHeads;
    p.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
    p.q.resize(static_cast<size_t>(T * kHeads * kDim));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < kHeads; ++h)
        for (int64_t d = 0; d < kDim; ++d) {
          const char* at = static_cast<const char*>(q.data) + t * q.nb[2] + h * q.nb[1] + d * 2;
          uint16_t bits;
          std::memcpy(&bits, at, 2);
          p.q[(t * kHeads + h) * kDim + d] = from_bf16(bits);
        }
    p.sink.assign(layer.sink.begin(), layer.sink.end());
    p.main = layer.swa.ref();
    p.main_lists = lists.swa;
    if (layer.kind.ratio > 1) {
      p.extra = layer.cmp.ref();
      p.extra_lists = lists.cmp;
    }
    const dsv4test::RefResult ref = dsv4test::reference_attention(p);
    dsv4test::CompareAccumulator decode, prefill;
    const uint16_t* got = static_cast<const uint16_t*>(out.data);
    for (int64_t t = 0; t < T; ++t) {
      const bool is_decode = t < b.num_decode_tokens;
      for (int64_t i = t * kHeads * kDim; i < (t + 1) * kHeads * kDim; ++i) {
        if (is_decode)
          decode.add(from_bf16(got[i]), ref.out[i], dsv4test::kDecodeOutTol);
        else
          prefill.add(from_bf16(got[i]), ref.out[i], dsv4test::kPrefillOutTol);
      }
    }
    const dsv4test::CompareResult d = decode.result(dsv4test::kDecodeOutTol);
    const dsv4test::CompareResult f = prefill.result(dsv4test::kPrefillOutTol);
    const bool ok = d.passed && f.passed;
    std::printf("  layer %d %-5s: %3" PRId64 " tokens (%d decode), %s (max abs err %.2e)\n", l,
                layer.kind.name, T, b.num_decode_tokens, ok ? "ok" : "MISMATCH",
                std::max(d.max_abs_err, f.max_abs_err));
    if (!ok) {
      const dsv4test::CompareResult& bad = d.passed ? f : d;
      std::printf("    first failure [%" PRId64 "]: got %.6g want %.6g, cos_diff %.3g\n",
                  bad.first_failure, bad.first_got, bad.first_want, bad.cos_diff);
    }
    return ok;
  }

  // Prefill chunks move on; MTP decodes accept their draft token or not (the draft's KV is then
  // overwritten next step, as engines do).
  void advance(const StepBatch& b) {
    for (size_t i = 0; i < b.reqs.size(); ++i) {
      Request& r = *b.reqs[i];
      if (r.pos < r.prompt_len) {
        r.pos += b.query_len[i];
      } else {
        r.pos += (mix(seed_, r.id, r.pos) & 1) ? kMtpTokens : 1;
        --r.decode_left;
      }
    }
  }

  uint64_t seed_;
  dsv4::Context ctx_;
  std::vector<Layer> layers_;
  std::vector<Request> requests_;
  size_t workspace_bytes_ = 0;
  std::vector<uint8_t> workspace_;
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 0x5eed;
  int max_steps = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 0);
    if (std::strcmp(argv[i], "--steps") == 0) max_steps = std::atoi(argv[i + 1]);
  }
  try {
    Engine engine(seed);
    engine.add_request(300, 4);  // chunked over several steps, prefix beyond the window
    engine.add_request(150, 6);
    engine.add_request(41, 8);
    bool ok = true;
    int step = 0;
    for (; step < max_steps && !engine.done(); ++step) {
      std::printf("step %d\n", step);
      ok &= engine.step();
    }
    std::printf("%d steps, %s\n", step, ok ? "every layer agrees with the reference" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine: %s\n", e.what());
    return 1;
  }
}
