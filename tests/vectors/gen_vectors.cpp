// dsv4_gen_vectors: writes the binding test vectors (tests/vectors/README.md): a few attention
// cases with their inputs and the independent float64 reference's outputs, for every language
// binding's test to run through its own binding and compare with the same tolerances.
//
//   dsv4_gen_vectors <out dir>        (DSV4_TEST_SEED=n replays a seed; else a fresh one)
//
// Cache bytes are written here from the spec's byte layouts (random but well-formed values), not
// through libdsv4: the vectors depend on the reference alone. Rows no valid candidate references
// stay NaN (0xff bytes), lists hold invalid entries (-1, other negatives, beyond the capacity,
// beyond the length), sinks mix finite, -inf and +inf heads, and block sizes are odd.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare_rule.h"
#include "dsv4/dsv4.h"
#include "reference.h"
#include "reference_paged.h"

namespace {

using dsv4test::RefCache;
using dsv4test::RefList;
using dsv4test::Tolerance;

constexpr int64_t kDim = 512;
constexpr double kInf = std::numeric_limits<double>::infinity();

// One case: plan options, input tensors, outputs and their expected values.
class Case {
 public:
  explicit Case(std::string name) : name_(std::move(name)) {}

  void option(const std::string& key, int64_t value) { options_.push_back({key, value}); }
  // The libdsv4 call the case makes: "run" (dsv4_run through a plan) or "merge" (dsv4_merge).
  void op(const char* name) { op_ = name; }

  template <typename T>
  void input(const std::string& name, const char* dtype, std::vector<int64_t> shape,
             const std::vector<T>& data) {
    Blob b{name, dtype, std::move(shape), {}};
    b.bytes.resize(data.size() * sizeof(T));
    if (!data.empty()) std::memcpy(b.bytes.data(), data.data(), b.bytes.size());
    inputs_.push_back(std::move(b));
  }

  void output(const std::string& name, const char* dtype, std::vector<int64_t> shape,
              std::vector<double> want, const Tolerance& tol) {
    outputs_.push_back({name, dtype, std::move(shape), std::move(want), tol});
  }

  // Appends the case to the manifest and writes its files into `dir`.
  void write(const std::string& dir, FILE* manifest) const {
    std::fprintf(manifest, "case %s\nop %s\n", name_.c_str(), op_.c_str());
    for (const auto& o : options_)
      std::fprintf(manifest, "option %s %" PRId64 "\n", o.first.c_str(), o.second);
    for (const Blob& b : inputs_) {
      const std::string file = name_ + "." + b.name + ".bin";
      write_file(dir + "/" + file, b.bytes.data(), b.bytes.size());
      std::fprintf(manifest, "input %s %s %s %s\n", b.name.c_str(), b.dtype.c_str(), file.c_str(),
                   dims(b.shape).c_str());
    }
    for (const Output& o : outputs_) {
      const std::string file = name_ + "." + o.name + ".want.bin";
      write_file(dir + "/" + file, o.want.data(), o.want.size() * sizeof(double));
      std::fprintf(manifest, "output %s %s %s %s\n", o.name.c_str(), o.dtype.c_str(),
                   dims(o.shape).c_str(), file.c_str());
      std::fprintf(manifest, "tolerance %s %.17g %.17g %.17g\n", o.name.c_str(), o.tol.abs_tol,
                   o.tol.rel_tol, o.tol.cos_tol);
    }
    std::fprintf(manifest, "end\n");
  }

 private:
  struct Blob {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  struct Output {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<double> want;
    Tolerance tol;
  };

  static std::string dims(const std::vector<int64_t>& shape) {
    std::string s = std::to_string(shape.size());
    for (int64_t d : shape) s += " " + std::to_string(d);
    return s;
  }

  static void write_file(const std::string& path, const void* data, size_t bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    const bool ok = bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
    if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path);
  }

  std::string name_;
  std::string op_ = "run";
  std::vector<std::pair<std::string, int64_t>> options_;
  std::vector<Blob> inputs_;
  std::vector<Output> outputs_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen_); }
  int64_t randint(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(gen_) < p; }

 private:
  std::mt19937_64 gen_;
};

// A host cache: NaN bytes everywhere until a row is written.
struct Cache {
  uint32_t layout = 0;
  uint32_t flags = 0;  // DSV4_KV_CACHE_FLAG_*
  int64_t block_size = 0, stride = 0, num_blocks = 0;
  std::vector<uint8_t> bytes;
  std::vector<bool> written;

  // NaN bytes: 0xff for bf16, fp16, OCP e4m3 and UE8M0; 0x80 for e4m3 FNUZ.
  Cache(uint32_t layout_, int64_t block_size_, int64_t num_blocks_, int64_t extra_stride,
        uint32_t flags_ = 0)
      : layout(layout_), flags(flags_), block_size(block_size_), num_blocks(num_blocks_) {
    stride = dsv4test::ref_layout_min_block_bytes(layout, block_size) + extra_stride;
    bytes.assign(static_cast<size_t>(stride * num_blocks), fnuz() ? 0x80 : 0xff);
    written.assign(static_cast<size_t>(capacity()), false);
  }
  bool fnuz() const { return (flags & DSV4_KV_CACHE_FLAG_FP8_FNUZ) != 0; }
  int64_t capacity() const { return num_blocks * block_size; }

  // Random well-formed content for `slot` (KV values of about N(0, 0.25^2), as in `dsv4 run`).
  void write(int64_t slot, Rng& rng) {
    if (written[slot]) return;
    written[slot] = true;
    uint8_t* block = bytes.data() + (slot / block_size) * stride;
    const int64_t e = slot % block_size;
    auto put16 = [](uint8_t* p, uint16_t b) {
      p[0] = static_cast<uint8_t>(b & 0xff);
      p[1] = static_cast<uint8_t>(b >> 8);
    };
    auto put_bf16 = [&](uint8_t* p, double v) { put16(p, dsv4test::ref_double_to_bf16(v)); };
    if (layout == DSV4_KV_LAYOUT_BF16 || layout == DSV4_KV_LAYOUT_FP16) {
      for (int64_t d = 0; d < kDim; ++d) {
        const double v = 0.25 * rng.normal();
        put16(block + e * 1024 + 2 * d, layout == DSV4_KV_LAYOUT_BF16
                                            ? dsv4test::ref_double_to_bf16(v)
                                            : dsv4test::ref_double_to_fp16(v));
      }
    } else if (layout == DSV4_KV_LAYOUT_FP8_V4_584B) {
      uint8_t* data = block + e * 576;
      // Any e4m3 byte but the NaNs (OCP: 0x7f, 0xff; FNUZ: 0x80); UE8M0 scales 2^-12 .. 2^-8.
      for (int64_t d = 0; d < 448; ++d) {
        do {
          data[d] = static_cast<uint8_t>(rng.randint(0, 0x7e) | (rng.chance(0.5) ? 0x80 : 0));
        } while (fnuz() && data[d] == 0x80);
      }
      for (int64_t j = 0; j < 64; ++j) put_bf16(data + 448 + 2 * j, 0.25 * rng.normal());
      uint8_t* scales = block + block_size * 576 + e * 8;
      for (int k = 0; k < 7; ++k) scales[k] = static_cast<uint8_t>(127 - rng.randint(8, 12));
      scales[7] = 0;
    } else {
      throw std::logic_error("gen_vectors: layout without a writer");
    }
  }

  RefCache ref() const {
    RefCache c;
    c.base = bytes.data();
    c.layout = layout;
    c.block_size = block_size;
    c.block_stride_bytes = stride;
    c.num_blocks = num_blocks;
    c.flags = flags;
    return c;
  }

  void describe(Case& k, const std::string& prefix) const {
    k.option(prefix + ".layout", layout);
    k.option(prefix + ".block_size", block_size);
    k.option(prefix + ".block_stride_bytes", stride);
    if (flags != 0) k.option(prefix + ".flags", flags);
  }

  void add_input(Case& k, const std::string& name) const {
    k.input(name, "uint8", {num_blocks, stride}, bytes);
  }
};

std::vector<uint16_t> random_q(int64_t T, int64_t H, Rng& rng, std::vector<double>* values) {
  std::vector<uint16_t> q(static_cast<size_t>(T * H * kDim));
  values->resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = dsv4test::ref_double_to_bf16(rng.normal());
    (*values)[i] = dsv4test::ref_bf16_to_double(q[i]);
  }
  return q;
}

// Finite sinks near the typical lse, and (with `infinite`) one head each at -inf and +inf.
std::vector<float> random_sink(int64_t H, bool infinite, Rng& rng) {
  std::vector<float> sink(static_cast<size_t>(H));
  for (float& s : sink) s = static_cast<float>(rng.normal() + 3.0);
  if (infinite) {
    sink[0] = -std::numeric_limits<float>::infinity();
    sink[1] = std::numeric_limits<float>::infinity();
  }
  return sink;
}

// Explicit-mode list of width `width` over `cache`: mostly valid slots, some invalid entries, a
// random length (token 0: the whole width). Valid rows are written.
RefList random_list(int64_t t, int64_t width, Cache& cache, Rng& rng);

// A CSR row: 0..width entries (token 0: width) capped by a random length.
RefList random_csr_row(int64_t t, int64_t width, Cache& cache, Rng& rng) {
  RefList row = random_list(0, t == 0 ? width : rng.randint(0, width), cache, rng);
  row.length = t == 0 ? static_cast<int64_t>(row.idx.size())
                      : rng.randint(0, static_cast<int64_t>(row.idx.size()));
  return row;
}

RefList random_list(int64_t t, int64_t width, Cache& cache, Rng& rng) {
  RefList list;
  list.idx.resize(static_cast<size_t>(width));
  for (int32_t& v : list.idx) {
    const int64_t kind = rng.randint(0, 19);
    if (kind == 0) {
      v = -1;
    } else if (kind == 1) {
      v = static_cast<int32_t>(-rng.randint(2, 9));
    } else if (kind == 2) {
      v = static_cast<int32_t>(cache.capacity() + rng.randint(0, 5));
    } else {
      v = static_cast<int32_t>(rng.randint(0, cache.capacity() - 1));
    }
  }
  list.length = t == 0 ? width : rng.randint(0, width);
  for (int64_t i = 0; i < list.length; ++i) {
    if (list.idx[i] >= 0 && list.idx[i] < cache.capacity()) cache.write(list.idx[i], rng);
  }
  return list;
}

void add_reference_outputs(Case& k, const dsv4test::RefResult& ref, int64_t T, int64_t H,
                           bool prefill, bool max_logits) {
  k.output("out", "bfloat16", {T, H, kDim}, ref.out,
           prefill ? dsv4test::kPrefillOutTol : dsv4test::kDecodeOutTol);
  const Tolerance lse_tol = prefill ? dsv4test::kPrefillLseTol : dsv4test::kDecodeLseTol;
  k.output("lse", "float32", {T, H}, ref.lse, lse_tol);
  if (max_logits) k.output("max_logits", "float32", {T, H}, ref.max_logits, lse_tol);
}

struct ExplicitSpec {
  const char* name;
  uint32_t layout;
  int64_t block_size, num_blocks, extra_stride;
  uint32_t extra_layout;  // DSV4_KV_LAYOUT_NONE: no extra list
  int64_t extra_block_size, extra_num_blocks;
  int64_t tokens, heads, topk, extra_topk;
  bool sink, prefill;
  bool csr = false;  // CSR lists (indptr + flat indices; rows of 0..topk entries) instead of dense
  uint32_t cache_flags = 0;  // DSV4_KV_CACHE_FLAG_* of both caches
  uint32_t plan_flags = 0;   // DSV4_PLAN_FLAG_*
};

Case explicit_case(const ExplicitSpec& s, Rng& rng) {
  Case k(s.name);
  Cache cache(s.layout, s.block_size, s.num_blocks, s.extra_stride, s.cache_flags);
  const bool extra = s.extra_layout != DSV4_KV_LAYOUT_NONE;
  Cache extra_cache(extra ? s.extra_layout : s.layout, s.extra_block_size, s.extra_num_blocks, 0,
                    s.cache_flags);
  dsv4test::RefProblem p;
  p.num_tokens = s.tokens;
  p.num_heads = s.heads;
  p.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  const std::vector<uint16_t> q = random_q(s.tokens, s.heads, rng, &p.q);
  std::vector<int32_t> indices, lengths, extra_indices, extra_lengths, indptr(1, 0);
  for (int64_t t = 0; t < s.tokens; ++t) {
    p.main_lists.push_back(s.csr ? random_csr_row(t, s.topk, cache, rng)
                                 : random_list(t, s.topk, cache, rng));
    indptr.push_back(indptr.back() + static_cast<int32_t>(p.main_lists.back().idx.size()));
    indices.insert(indices.end(), p.main_lists.back().idx.begin(), p.main_lists.back().idx.end());
    lengths.push_back(static_cast<int32_t>(p.main_lists.back().length));
    if (!extra) continue;
    p.extra_lists.push_back(random_list(t, s.extra_topk, extra_cache, rng));
    extra_indices.insert(extra_indices.end(), p.extra_lists.back().idx.begin(),
                         p.extra_lists.back().idx.end());
    extra_lengths.push_back(static_cast<int32_t>(p.extra_lists.back().length));
  }
  // One token without any candidate: output 0, lse +inf whatever its sink.
  lengths.back() = 0;
  p.main_lists.back().length = 0;
  if (extra) {
    extra_lengths.back() = 0;
    p.extra_lists.back().length = 0;
  }
  std::vector<float> sink;
  if (s.sink) {
    sink = random_sink(s.heads, true, rng);
    p.sink.assign(sink.begin(), sink.end());
  }
  p.main = cache.ref();
  if (extra) p.extra = extra_cache.ref();

  k.option("mode", DSV4_MODE_EXPLICIT);
  k.option("num_heads", s.heads);
  k.option("max_tokens", s.tokens);
  k.option("topk", s.topk);
  if (s.csr) k.option("index_format", DSV4_INDEX_CSR);
  if (s.plan_flags != 0) k.option("flags", s.plan_flags);
  cache.describe(k, "swa_cache");
  if (extra) {
    extra_cache.describe(k, "extra_cache");
    k.option("extra_topk", s.extra_topk);
  }
  k.input("q", "bfloat16", {s.tokens, s.heads, kDim}, q);
  cache.add_input(k, "swa_cache");
  if (s.csr) {
    k.input("indptr", "int32", {s.tokens + 1}, indptr);
    k.input("indices", "int32", {static_cast<int64_t>(indices.size())}, indices);
  } else {
    k.input("indices", "int32", {s.tokens, s.topk}, indices);
  }
  k.input("lengths", "int32", {s.tokens}, lengths);
  if (extra) {
    extra_cache.add_input(k, "extra_cache");
    k.input("extra_indices", "int32", {s.tokens, s.extra_topk}, extra_indices);
    k.input("extra_lengths", "int32", {s.tokens}, extra_lengths);
  }
  if (s.sink) k.input("attn_sink", "float32", {s.heads}, sink);
  add_reference_outputs(k, dsv4test::reference_attention(p), s.tokens, s.heads, s.prefill,
                        s.prefill);
  return k;
}

struct PagedSpec {
  const char* name;
  uint32_t layout;
  int64_t ratio;  // 1: SWA-only, 4: C4A, 128: C128A
  int64_t swa_block_size, cmp_block_size, window, index_topk, decode_threshold, max_model_len;
  std::vector<int32_t> query_len, context_len;  // per request; seq_len = context + query
  int64_t padding_rows;                         // rows after the last request
  bool pad_last_token;                          // the last request's last token: slot -1
  int64_t heads;
  bool sink, prefill;
  uint32_t plan_flags = 0;  // DSV4_PLAN_FLAG_*
};

// Random block tables: each needed logical block gets its own physical block (from 1 on, in
// random order); block 0 stays NaN and fills the columns no token may read, and one extra column
// holds junk (never read).
std::vector<int32_t> block_table(const std::vector<int64_t>& first, const std::vector<int64_t>& end,
                                 int64_t cols, Rng& rng, int64_t* num_blocks) {
  int64_t needed = 0;
  for (size_t r = 0; r < first.size(); ++r) needed += end[r] - first[r];
  std::vector<int32_t> physical(static_cast<size_t>(needed));
  std::iota(physical.begin(), physical.end(), 1);
  std::shuffle(physical.begin(), physical.end(), std::mt19937_64(rng.randint(0, 1 << 30)));
  std::vector<int32_t> table(first.size() * static_cast<size_t>(cols), 0);
  size_t next = 0;
  for (size_t r = 0; r < first.size(); ++r) {
    for (int64_t c = first[r]; c < end[r]; ++c) table[r * cols + c] = physical[next++];
    table[r * cols + cols - 1] = -7;  // junk beyond every needed column
  }
  *num_blocks = needed + 1;
  return table;
}

Case paged_case(const PagedSpec& s, Rng& rng) {
  Case k(s.name);
  dsv4test::RefPagedConfig cfg;
  cfg.compress_ratio = s.ratio;
  cfg.window = s.window;
  cfg.swa_block_size = s.swa_block_size;
  cfg.cmp_block_size = s.cmp_block_size;
  cfg.index_topk = s.index_topk;
  cfg.decode_threshold = s.decode_threshold;
  cfg.max_model_len = s.max_model_len;
  const bool compressed = s.ratio > 1;
  const int64_t R = static_cast<int64_t>(s.query_len.size());

  dsv4test::RefPagedBatch b;
  b.query_start_loc.assign(1, 0);
  for (int64_t r = 0; r < R; ++r) {
    b.query_start_loc.push_back(b.query_start_loc.back() + s.query_len[r]);
    b.seq_lens.push_back(s.context_len[r] + s.query_len[r]);
  }
  const int64_t T = b.query_start_loc.back() + s.padding_rows;
  b.num_tokens = T;

  std::vector<int64_t> first(R), end(R);
  int64_t cols = 0;
  for (int64_t r = 0; r < R; ++r) {
    first[r] = std::max<int64_t>(0, s.context_len[r] - s.window + 1) / s.swa_block_size;
    end[r] = (b.seq_lens[r] - 1) / s.swa_block_size + 1;
    cols = std::max(cols, end[r] + 1);
  }
  int64_t swa_blocks = 0, cmp_blocks = 1;
  b.swa_bt_cols = cols;
  b.swa_block_table = block_table(first, end, cols, rng, &swa_blocks);
  if (compressed) {
    cols = 0;
    for (int64_t r = 0; r < R; ++r) {
      first[r] = 0;
      end[r] = (b.seq_lens[r] / s.ratio + s.cmp_block_size - 1) / s.cmp_block_size;
      cols = std::max(cols, end[r] + 1);
    }
    b.cmp_bt_cols = cols;
    b.cmp_block_table = block_table(first, end, cols, rng, &cmp_blocks);
  }

  b.slot_mapping.assign(static_cast<size_t>(T), -1);
  if (s.ratio == 4) {
    // Padding rows' top-k is junk: nothing of a padding token may be read.
    b.topk_indices.assign(static_cast<size_t>(T * s.index_topk), 1 << 20);
  }
  for (int64_t r = 0; r < R; ++r) {
    const int32_t* bt = &b.swa_block_table[static_cast<size_t>(r * b.swa_bt_cols)];
    for (int64_t i = 0; i < s.query_len[r]; ++i) {
      const int64_t t = b.query_start_loc[r] + i;
      const int64_t pos = s.context_len[r] + i;
      b.slot_mapping[t] = dsv4test::ref_swa_slot(cfg, bt, b.swa_bt_cols, pos);
      if (s.ratio != 4) continue;
      // The indexer's top-k: min(visible, K) distinct visible entries in score order, -1 after.
      const int64_t visible = (pos + 1) / 4;
      std::vector<int32_t> local(static_cast<size_t>(visible));
      std::iota(local.begin(), local.end(), 0);
      std::shuffle(local.begin(), local.end(), std::mt19937_64(rng.randint(0, 1 << 30)));
      for (int64_t j = 0; j < s.index_topk; ++j)
        b.topk_indices[t * s.index_topk + j] = j < visible ? local[j] : -1;
    }
  }
  if (s.pad_last_token) b.slot_mapping[b.query_start_loc.back() - 1] = -1;

  const dsv4test::RefPagedLists lists = dsv4test::ref_build_paged_lists(cfg, b);
  Cache swa(s.layout, s.swa_block_size, swa_blocks, 0);
  Cache cmp(s.layout, s.cmp_block_size, cmp_blocks, 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < lists.swa[t].length; ++i) swa.write(lists.swa[t].idx[i], rng);
    if (!compressed) continue;
    for (int64_t i = 0; i < lists.cmp[t].length; ++i) cmp.write(lists.cmp[t].idx[i], rng);
  }

  dsv4test::RefProblem p;
  p.num_tokens = T;
  p.num_heads = s.heads;
  p.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  const std::vector<uint16_t> q = random_q(T, s.heads, rng, &p.q);
  std::vector<float> sink;
  if (s.sink) {
    sink = random_sink(s.heads, true, rng);
    p.sink.assign(sink.begin(), sink.end());
  }
  p.main = swa.ref();
  p.main_lists = lists.swa;
  if (compressed) {
    p.extra = cmp.ref();
    p.extra_lists = lists.cmp;
  }

  k.option("mode", DSV4_MODE_PAGED);
  k.option("num_heads", s.heads);
  k.option("max_tokens", T);
  swa.describe(k, "swa_cache");
  if (compressed) cmp.describe(k, "extra_cache");
  k.option("compress_ratio", s.ratio);
  k.option("window", s.window);
  k.option("index_topk", s.index_topk);
  k.option("decode_threshold", s.decode_threshold);
  k.option("max_model_len", s.max_model_len);
  k.option("max_requests", R);
  k.option("max_swa_blocks_per_request", b.swa_bt_cols);
  k.option("max_cmp_blocks_per_request", std::max<int64_t>(1, b.cmp_bt_cols));
  k.option("compressed_block_tokens", s.ratio * s.cmp_block_size);
  if (s.plan_flags != 0) k.option("flags", s.plan_flags);

  k.input("q", "bfloat16", {T, s.heads, kDim}, q);
  swa.add_input(k, "swa_cache");
  if (compressed) cmp.add_input(k, "extra_cache");
  if (s.sink) k.input("attn_sink", "float32", {s.heads}, sink);
  k.input("query_start_loc", "int32", {R + 1}, b.query_start_loc);
  k.input("seq_lens", "int32", {R}, b.seq_lens);
  k.input("swa_block_table", "int32", {R, b.swa_bt_cols}, b.swa_block_table);
  if (compressed) k.input("cmp_block_table", "int32", {R, b.cmp_bt_cols}, b.cmp_block_table);
  k.input("slot_mapping", "int32", {T}, b.slot_mapping);
  if (s.ratio == 4) k.input("topk_indices", "int32", {T, s.index_topk}, b.topk_indices);
  add_reference_outputs(k, dsv4test::reference_attention(p), T, s.heads, s.prefill, s.prefill);
  return k;
}

// dsv4_merge (spec 12.2): every token's candidates split into `parts` disjoint parts; each part's
// partial (out as fp32, lse; no sink) comes from the reference, and the expected result is the
// reference over the union with the sink. One token has no candidate (out 0, lse +inf), and a
// part without keys has lse +inf.
Case merge_case(const char* name, int64_t parts, int64_t T, int64_t H, Rng& rng) {
  Case k(name);
  k.op("merge");
  Cache cache(DSV4_KV_LAYOUT_BF16, 9, 8, 0);
  dsv4test::RefProblem whole;
  whole.num_tokens = T;
  whole.num_heads = H;
  whole.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  random_q(T, H, rng, &whole.q);
  for (int64_t t = 0; t < T; ++t) whole.main_lists.push_back(random_list(t, 32, cache, rng));
  whole.main_lists.back().length = 0;
  whole.main = cache.ref();
  std::vector<std::vector<RefList>> part_lists(static_cast<size_t>(parts), whole.main_lists);
  for (int64_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < whole.main_lists[t].idx.size(); ++i) {
      const int64_t owner = rng.randint(0, parts - 1);  // the one part that keeps entry i
      for (int64_t q = 0; q < parts; ++q)
        if (q != owner) part_lists[q][t].idx[i] = -1;
    }
  }
  std::vector<float> out_parts, lse_parts;
  for (int64_t q = 0; q < parts; ++q) {
    dsv4test::RefProblem part = whole;
    part.main_lists = part_lists[q];
    const dsv4test::RefResult r = dsv4test::reference_attention(part);
    out_parts.insert(out_parts.end(), r.out.begin(), r.out.end());
    lse_parts.insert(lse_parts.end(), r.lse.begin(), r.lse.end());
  }
  const std::vector<float> sink = random_sink(H, true, rng);
  whole.sink.assign(sink.begin(), sink.end());
  k.input("out_parts", "float32", {parts, T, H, kDim}, out_parts);
  k.input("lse_parts", "float32", {parts, T, H}, lse_parts);
  k.input("attn_sink", "float32", {H}, sink);
  add_reference_outputs(k, dsv4test::reference_attention(whole), T, H, false, false);
  return k;
}

uint64_t run_seed() {
  const char* env = std::getenv("DSV4_TEST_SEED");
  if (env != nullptr && *env != '\0') return std::strtoull(env, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t seed = run_seed();
  size_t cases_written = 0;
  try {
    std::filesystem::create_directories(dir);
    Rng rng(seed);
    std::vector<Case> cases;
    // Explicit mode: a bf16 cache with 13-entry blocks and a sink with +-inf heads (decode
    // tolerances); FP8 584 B main and extra caches (5-entry blocks, padded block stride), no
    // sink, lse and max_logits (prefill tolerances).
    cases.push_back(explicit_case({"explicit_bf16_sink", DSV4_KV_LAYOUT_BF16, 13, 7, 0,
                                   DSV4_KV_LAYOUT_NONE, 0, 0, 5, 8, 24, 0, true, false},
                                  rng));
    cases.push_back(explicit_case({"explicit_fp8_extra", DSV4_KV_LAYOUT_FP8_V4_584B, 64, 2, 576,
                                   DSV4_KV_LAYOUT_FP8_V4_584B, 5, 6, 6, 16, 32, 16, false, true},
                                  rng));
    // CSR lists over a bf16 cache with 7-entry blocks, rows of any length capped by lengths.
    cases.push_back(explicit_case({"explicit_csr_bf16", DSV4_KV_LAYOUT_BF16, 7, 9, 0,
                                   DSV4_KV_LAYOUT_NONE, 0, 0, 6, 8, 40, 0, true, true, true},
                                  rng));
    // Paged mode: an MTP decode step of a C4A layer over FP8 584 B caches with a sink, and a
    // chunked prefill of a C128A layer over bf16 caches with odd block sizes and padding.
    cases.push_back(paged_case(
        {"paged_c4a_fp8_mtp",
         DSV4_KV_LAYOUT_FP8_V4_584B,
         4,
         64,
         64,
         128,
         24,
         2,
         65536,
         {2, 2, 1, 2},
         {static_cast<int32_t>(rng.randint(130, 900)), static_cast<int32_t>(rng.randint(2, 60)),
          static_cast<int32_t>(rng.randint(300, 1200)), 127},
         2,
         false,
         16,
         true,
         false},
        rng));
    cases.push_back(paged_case({"paged_c128a_bf16_prefill",
                                DSV4_KV_LAYOUT_BF16,
                                128,
                                37,
                                3,
                                128,
                                512,
                                1,
                                8192,
                                {7, 5, 4},
                                {static_cast<int32_t>(rng.randint(256, 700)), 0,
                                 static_cast<int32_t>(rng.randint(1200, 1500))},
                                1,
                                true,
                                8,
                                false,
                                true},
                               rng));
    // 0.2: fp16 rows (ggml's KV type) in a batch-invariant SWA-only MTP decode step; FP8 FNUZ
    // bytes through the reference kernel; dsv4_merge of partial results.
    PagedSpec fp16{
        "paged_swa_fp16_mtp",
        DSV4_KV_LAYOUT_FP16,
        1,
        11,
        1,
        64,
        8,
        2,
        4096,
        {2, 1, 2},
        {static_cast<int32_t>(rng.randint(70, 300)), 0, static_cast<int32_t>(rng.randint(5, 40))},
        1,
        false,
        8,
        true,
        false};
    fp16.plan_flags = DSV4_PLAN_FLAG_BATCH_INVARIANT;
    cases.push_back(paged_case(fp16, rng));
    ExplicitSpec fnuz{"explicit_fp8_fnuz",
                      DSV4_KV_LAYOUT_FP8_V4_584B,
                      64,
                      3,
                      0,
                      DSV4_KV_LAYOUT_NONE,
                      0,
                      0,
                      4,
                      8,
                      48,
                      0,
                      false,
                      true};
    fnuz.cache_flags = DSV4_KV_CACHE_FLAG_FP8_FNUZ;
    fnuz.plan_flags = DSV4_PLAN_FLAG_REFERENCE_KERNEL;
    cases.push_back(explicit_case(fnuz, rng));
    cases.push_back(merge_case("merge_fp32_parts", 3, 5, 8, rng));
    FILE* manifest = std::fopen((dir + "/manifest.txt").c_str(), "w");
    if (manifest == nullptr) throw std::runtime_error("cannot write " + dir + "/manifest.txt");
    std::fprintf(manifest, "dsv4-vectors 1\nseed %" PRIu64 "\n", seed);
    for (const Case& c : cases) c.write(dir, manifest);
    cases_written = cases.size();
    if (std::fclose(manifest) != 0) throw std::runtime_error("cannot write the manifest");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4_gen_vectors: %s (seed %" PRIu64 ")\n", e.what(), seed);
    return 1;
  }
  std::printf("dsv4_gen_vectors: %zu cases in %s (seed %" PRIu64 ", DSV4_TEST_SEED replays it)\n",
              cases_written, dir.c_str(), seed);
  return 0;
}
