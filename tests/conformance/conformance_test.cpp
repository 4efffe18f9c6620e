// Explicit-mode conformance: every backend against the independent float64 reference, on inputs
// generated like FlashMLA's sparse decode / prefill tests (spec 6.4, 6.5). Only the public API is
// used: caches are built with dsv4_kv_write, attention runs through dsv4_run.
//
// Environment: DSV4_TEST_DEVICE (cpu|cuda), DSV4_BACKEND (then options.backend is left unset),
// DSV4_TEST_SEED (reproduce a run), DSV4_CONFORMANCE_FULL=1 (FlashMLA's full matrix sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
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

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kDv = 512;

bool full_matrix() {
  const char* env = std::getenv("DSV4_CONFORMANCE_FULL");
  return env != nullptr && std::string(env) == "1";
}

// ----------------------------------------------------------------------------------------------
// Case description
// ----------------------------------------------------------------------------------------------
enum class Lengths { kNone, kPerToken, kPerBatchRow };  // kPerBatchRow: FlashMLA's [B] (4-D q)
enum class Sink { kNone, kFinite, kMixed };             // kMixed: finite, -inf and +inf heads
enum class Style { kDecode, kPrefill };                 // generator and tolerance (spec 6.4)

struct ScopeSpec {
  int block_size = 64;
  int topk = 64;
  int s_k = 512;  // decode: keys per batch row; prefill: keys shared by all tokens
  Lengths lengths = Lengths::kPerToken;
  bool only_invalid = false;  // every value invalid: the other list holds every key
};

struct CaseSpec {
  std::string name;
  Style style = Style::kDecode;
  uint32_t layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  int heads = 64;
  int batch = 4;
  int seq_q = 1;
  bool q4d = false;          // q [B,S,H,d] (else [T,H,d])
  bool q_strided = false;    // q viewed inside a [.., H, 2d] allocation with a byte offset
  bool out_strided = false;  // out viewed inside a [.., H, 640] allocation
  bool q_fp8 = false;        // e4m3 q with q_scale (per-tensor FP8 layout only)
  bool fnuz = false;         // 584 B cache holding FP8 FNUZ bytes (ROCm gfx942's flavour)
  bool csr = false;
  bool lse_bhs = false;  // lse / max_logits as FlashMLA's [B,H,S] (4-D q only)
  bool want_lse = true;
  bool want_max_logits = true;
  Sink sink = Sink::kMixed;
  bool varlen = true;          // decode: per-row key counts vary
  bool zero_seqlen = false;    // decode: some batch rows have no keys at all
  bool all_invalid = false;    // some tokens' lists hold only invalid values
  bool inject_invalid = true;  // invalid values at random positions inside the lengths
  int block_pad_bytes = 0;     // padded block stride
  float kv_scale[2] = {0, 0};  // per-tensor FP8: the main / extra cache's kv_scale (0: random)
  ScopeSpec main;
  bool extra = false;
  ScopeSpec extra_scope;

  int64_t tokens() const { return static_cast<int64_t>(batch) * seq_q; }
  int64_t d_qk() const { return layout == DSV4_KV_LAYOUT_FP8_V32_656B ? 576 : 512; }
  int64_t cost() const { return tokens() * heads * (main.topk + (extra ? extra_scope.topk : 0)); }
};

std::ostream& operator<<(std::ostream& os, const CaseSpec& c) { return os << c.name; }

// ----------------------------------------------------------------------------------------------
// Input generation
// ----------------------------------------------------------------------------------------------
// The invalid values FlashMLA's generators use (those >= capacity only; smaller ones would be
// valid slots). `capacity` itself is the first out-of-range slot.
std::vector<int32_t> invalid_values(int64_t capacity) {
  std::vector<int32_t> v = {std::numeric_limits<int32_t>::min(), -123456, -1,
                            std::numeric_limits<int32_t>::max()};
  if (capacity <= std::numeric_limits<int32_t>::max()) v.push_back(static_cast<int32_t>(capacity));
  for (int64_t x : {114514ll, 1919810ll, 2147480000ll})
    if (x >= capacity) v.push_back(static_cast<int32_t>(x));
  return v;
}

// One cache plus the candidate lists of every token into it.
struct Scope {
  ScopeSpec spec;
  int64_t num_blocks = 0;
  int64_t stride_bytes = 0;
  float kv_scale = 1.0f;
  std::vector<int32_t> dense;       // [T][topk]
  std::vector<int32_t> lengths;     // per spec.lengths: [T], [B] or empty
  std::vector<int32_t> indptr;      // CSR: [T+1]
  std::vector<int32_t> flat;        // CSR: [nnz]
  std::vector<RefList> lists;       // [T], what the reference sees
  std::vector<uint8_t> host_cache;  // cache bytes after dsv4_kv_write
  DeviceBuffer cache;

  int64_t capacity() const { return num_blocks * spec.block_size; }
};

// Builds block geometry and index lists (decode: FlashMLA generate_testcase_for_decode; prefill:
// generate_testcase), then lengths, injected invalid values, all-invalid rows and CSR rows.
void generate_lists(const CaseSpec& c, Rng& rng, Scope* s) {
  const ScopeSpec& sp = s->spec;
  const int64_t B = c.batch, S = c.seq_q, T = c.tokens(), K = sp.topk, bs = sp.block_size;
  // Keys per batch row (prefill: one row of s_k keys that every token sees).
  const int64_t rows = c.style == Style::kDecode ? B : 1;
  std::vector<int64_t> seqlen(static_cast<size_t>(rows), sp.s_k);
  if (c.style == Style::kDecode) {
    for (auto& n : seqlen) {
      if (c.varlen)
        n = std::clamp<int64_t>(std::llround(sp.s_k + rng.normal() * sp.s_k / 2.0), S, 2 * sp.s_k);
      if (c.zero_seqlen && rng.normal() > 0) n = 0;
    }
    if (c.zero_seqlen) seqlen[static_cast<size_t>(rng.randint(0, rows - 1))] = 0;
  }
  // Block tables over a random permutation of the blocks, plus unused (all-NaN) blocks.
  int64_t used = 0;
  std::vector<int64_t> first_block(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    first_block[static_cast<size_t>(r)] = used;
    used += (seqlen[static_cast<size_t>(r)] + bs - 1) / bs;
  }
  s->num_blocks = used + rng.randint(1, 3);
  std::vector<int64_t> perm(static_cast<size_t>(s->num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  s->stride_bytes = ref_layout_min_block_bytes(c.layout, bs) + c.block_pad_bytes;
  const int64_t cap = s->capacity();
  const std::vector<int32_t> bad = invalid_values(cap);
  auto random_bad = [&] { return bad[static_cast<size_t>(rng.randint(0, bad.size() - 1))]; };
  auto slot_of = [&](int64_t r, int64_t pos) {
    return perm[static_cast<size_t>(first_block[static_cast<size_t>(r)] + pos / bs)] * bs +
           pos % bs;
  };

  s->dense.assign(static_cast<size_t>(T * K), -1);
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = c.style == Style::kDecode ? t / S : 0;
    const int64_t n = seqlen[static_cast<size_t>(r)];
    positions.resize(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), 0);
    std::shuffle(positions.begin(), positions.end(), rng.gen());
    int32_t* row = s->dense.data() + t * K;
    for (int64_t i = 0; i < K; ++i) {
      if (i < n) {
        row[i] = static_cast<int32_t>(slot_of(r, positions[static_cast<size_t>(i)]));
      } else {
        row[i] = c.style == Style::kDecode ? -1 : random_bad();
      }
    }
    if (c.inject_invalid) {
      for (int64_t i = 0; i < K; ++i)
        if (rng.uniform(0, 1) < 0.08) row[i] = random_bad();
    }
  }
  if (sp.only_invalid) {
    for (auto& v : s->dense) v = random_bad();
  }
  if (c.all_invalid) {
    std::vector<char> lonely(static_cast<size_t>(T), 0);
    for (auto& l : lonely) l = rng.normal() < -1.5;
    lonely[static_cast<size_t>(rng.randint(0, T - 1))] = 1;
    for (int64_t t = 0; t < T; ++t) {
      if (!lonely[static_cast<size_t>(t)]) continue;
      const int32_t v = random_bad();
      std::fill(s->dense.begin() + t * K, s->dense.begin() + (t + 1) * K, v);
    }
  }

  // Lengths (FlashMLA: decode randint(0, topk+1) per batch row; prefill randint(0, max(topk+1,64))
  // clamped to topk). cap_of[t] = the length that applies to token t (-1: none).
  std::vector<int64_t> cap_of(static_cast<size_t>(T), -1);
  auto draw_len = [&] {
    const int64_t hi = c.style == Style::kDecode ? K : std::max<int64_t>(K, 63);
    return std::min<int64_t>(rng.randint(0, hi), K);
  };
  if (sp.lengths == Lengths::kPerToken) {
    s->lengths.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      s->lengths[static_cast<size_t>(t)] = static_cast<int32_t>(draw_len());
      cap_of[static_cast<size_t>(t)] = s->lengths[static_cast<size_t>(t)];
    }
  } else if (sp.lengths == Lengths::kPerBatchRow) {
    s->lengths.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b)
      s->lengths[static_cast<size_t>(b)] = static_cast<int32_t>(draw_len());
    for (int64_t t = 0; t < T; ++t)
      cap_of[static_cast<size_t>(t)] = s->lengths[static_cast<size_t>(t / S)];
  }

  s->lists.assign(static_cast<size_t>(T), RefList{});
  if (c.csr) {
    // CSR rows: a random prefix of each dense row (its count may exceed the optional length cap).
    s->indptr.assign(1, 0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = rng.randint(0, K);
      RefList& l = s->lists[static_cast<size_t>(t)];
      l.idx.assign(s->dense.begin() + t * K, s->dense.begin() + t * K + n);
      l.length = cap_of[static_cast<size_t>(t)];
      s->flat.insert(s->flat.end(), l.idx.begin(), l.idx.end());
      s->indptr.push_back(static_cast<int32_t>(s->flat.size()));
    }
  } else {
    for (int64_t t = 0; t < T; ++t) {
      RefList& l = s->lists[static_cast<size_t>(t)];
      l.idx.assign(s->dense.begin() + t * K, s->dense.begin() + (t + 1) * K);
      l.length = cap_of[static_cast<size_t>(t)];
    }
  }
}

// Slots that some token references inside its length: the only rows written; every other byte
// of the cache (other entries, their scales, whole unused blocks, block padding) stays 0xFF (NaN).
std::vector<int32_t> referenced_slots(const Scope& s) {
  std::vector<char> seen(static_cast<size_t>(s.capacity()), 0);
  std::vector<int32_t> out;
  for (const RefList& l : s.lists) {
    int64_t n = static_cast<int64_t>(l.idx.size());
    if (l.length >= 0) n = std::min(n, l.length);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t idx = l.idx[static_cast<size_t>(i)];
      if (idx < 0 || idx >= s.capacity() || seen[static_cast<size_t>(idx)]) continue;
      seen[static_cast<size_t>(idx)] = 1;
      out.push_back(static_cast<int32_t>(idx));
    }
  }
  return out;
}

dsv4_kv_cache_desc cache_desc(const CaseSpec& c, const Scope& s) {
  dsv4_kv_cache_desc d{};
  d.layout = c.layout;
  d.block_size = s.spec.block_size;
  d.block_stride_bytes = s.stride_bytes;
  d.kv_scale = s.kv_scale;
  d.flags = c.fnuz ? DSV4_KV_CACHE_FLAG_FP8_FNUZ : 0u;
  return d;
}

// Rewrites a 584 B cache written with OCP e4m3fn bytes (dsv4_kv_write) into the same values in
// FNUZ bytes: an FNUZ byte is half the OCP value of its bits, so each written entry's UE8M0 scales
// grow by one and its -0 bytes (0x80, NaN in FNUZ) become +0. Every byte of an unwritten entry or
// of block padding becomes 0x80 (FNUZ NaN) so a read of one shows.
void convert_to_fnuz(const Scope& s, const std::vector<int32_t>& written, std::vector<uint8_t>* b) {
  const int64_t B = s.spec.block_size;
  std::vector<char> kind(b->size(), 0);  // 0 unwritten, 1 FP8 data, 2 scale byte, 3 keep
  for (int32_t slot : written) {
    const int64_t base = (slot / B) * s.stride_bytes, e = slot % B;
    std::fill(kind.begin() + base + e * 576, kind.begin() + base + e * 576 + 448, 1);
    std::fill(kind.begin() + base + e * 576 + 448, kind.begin() + base + e * 576 + 576, 3);
    std::fill(kind.begin() + base + B * 576 + e * 8, kind.begin() + base + B * 576 + e * 8 + 7, 2);
    kind[static_cast<size_t>(base + B * 576 + e * 8 + 7)] = 3;
  }
  for (size_t i = 0; i < b->size(); ++i) {
    uint8_t& x = (*b)[i];
    if (kind[i] == 0) x = 0x80;
    if (kind[i] == 1 && x == 0x80) x = 0x00;
    if (kind[i] == 2) x = static_cast<uint8_t>(x + 1);  // scales stay far below 254 here
  }
}

// Creates the cache on the device, fills it with 0xFF and writes random rows into the referenced
// slots with dsv4_kv_write, in random order.
::testing::AssertionResult build_cache(TestDevice* dev, dsv4_ctx* ctx, const CaseSpec& c, Rng& rng,
                                       Scope* s) {
  const size_t bytes = static_cast<size_t>(s->num_blocks * s->stride_bytes);
  s->cache = DeviceBuffer(dev, bytes);
  s->cache.fill(0xFF);
  std::vector<int32_t> slots = referenced_slots(*s);
  std::shuffle(slots.begin(), slots.end(), rng.gen());
  const int64_t d = c.d_qk();
  std::vector<float> values(slots.size() * static_cast<size_t>(d));
  for (auto& v : values) {
    // decode: randn/10 clamped to +-1; prefill: randn/10 + U(-0.05, 0.05) offset, clamped to +-10.
    double x = rng.normal() / 10.0;
    if (c.style == Style::kPrefill) x += rng.uniform(-0.05, 0.05);
    v = static_cast<float>(std::clamp(x, -1.0, 1.0));
  }
  if (!slots.empty()) {
    DeviceBuffer vbuf = to_device(dev, values);
    DeviceBuffer sbuf = to_device(dev, slots);
    TensorView vt(vbuf.get(), dev->device(), kF32, {static_cast<int64_t>(slots.size()), d});
    TensorView st(sbuf.get(), dev->device(), kI32, {static_cast<int64_t>(slots.size())});
    TensorView ct(s->cache.get(), dev->device(), kU8, {s->num_blocks, s->stride_bytes});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = cache_desc(c, *s);
    w.values = vt.get();
    w.slots = st.get();
    w.cache = ct.get();
    w.stream = dev->stream();
    w.cache_desc.flags = 0;  // written as OCP bytes, then converted below
    const dsv4_status status = dsv4_kv_write(ctx, &w);
    if (status != DSV4_STATUS_OK)
      return ::testing::AssertionFailure() << "dsv4_kv_write: " << status_text(status);
  }
  s->host_cache = s->cache.download<uint8_t>();
  if (c.fnuz) {
    convert_to_fnuz(*s, slots, &s->host_cache);
    s->cache.upload(s->host_cache);
  }
  return ::testing::AssertionSuccess();
}

RefCache ref_cache(const CaseSpec& c, const Scope& s) {
  RefCache r;
  r.base = s.host_cache.data();
  r.layout = c.layout;
  r.block_size = s.spec.block_size;
  r.block_stride_bytes = s.stride_bytes;
  r.num_blocks = s.num_blocks;
  r.kv_scale = static_cast<double>(s.kv_scale);
  r.flags = c.fnuz ? DSV4_KV_CACHE_FLAG_FP8_FNUZ : 0u;
  return r;
}

// ----------------------------------------------------------------------------------------------
// One run through the public API
// ----------------------------------------------------------------------------------------------
struct Outputs {
  std::vector<uint16_t> out_raw;  // whole out allocation (bf16 bits)
  std::vector<float> lse_raw;     // whole lse allocation
  std::vector<float> max_raw;     // whole max_logits allocation
  std::string kernel;
  std::string backend;
  std::string unsupported;  // the backend refused the plan as UNSUPPORTED (its message)
};

struct Problem {
  CaseSpec spec;
  Scope main;
  Scope extra;
  std::vector<uint16_t> q_bf16;  // [T][H][d] compact
  std::vector<uint8_t> q_fp8;    // [T][H][d] compact (q_fp8 cases)
  float q_scale = 1.0f;
  double scale = 0.0;
  std::vector<float> sink;  // [H] or empty
  RefProblem ref;
};

// Generates every input of a case (caches written through `ctx`) and the reference problem.
::testing::AssertionResult make_problem(TestDevice* dev, dsv4_ctx* ctx, const CaseSpec& c,
                                        Problem* p) {
  Rng rng(case_seed(c.name));
  p->spec = c;
  const int64_t T = c.tokens(), H = c.heads, d = c.d_qk();
  p->main.spec = c.main;
  p->extra.spec = c.extra_scope;
  if (c.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
    p->main.kv_scale = static_cast<float>(rng.uniform(0.003, 0.006));
    p->extra.kv_scale = static_cast<float>(rng.uniform(0.003, 0.006));
    if (c.kv_scale[0] > 0.0f) p->main.kv_scale = c.kv_scale[0];
    if (c.kv_scale[1] > 0.0f) p->extra.kv_scale = c.kv_scale[1];
  }
  generate_lists(c, rng, &p->main);
  auto r = build_cache(dev, ctx, c, rng, &p->main);
  if (!r) return r;
  if (c.extra) {
    generate_lists(c, rng, &p->extra);
    r = build_cache(dev, ctx, c, rng, &p->extra);
    if (!r) return r;
  }

  // q: decode randn clamped to +-1; prefill randn/10 + offset. bf16 (or e4m3 with q_scale).
  p->ref.q.resize(static_cast<size_t>(T * H * d));
  if (c.q_fp8) {
    p->q_scale = static_cast<float>(rng.uniform(0.002, 0.004));
    p->q_fp8.resize(p->ref.q.size());
    for (size_t i = 0; i < p->q_fp8.size(); ++i) {
      uint8_t b;
      do {
        b = static_cast<uint8_t>(rng.randint(0, 255));
      } while ((b & 0x7f) == 0x7f);  // NaN codes
      p->q_fp8[i] = b;
      p->ref.q[i] = ref_e4m3fn_to_double(b) * static_cast<double>(p->q_scale);
    }
  } else {
    p->q_bf16.resize(p->ref.q.size());
    for (size_t i = 0; i < p->q_bf16.size(); ++i) {
      double x = c.style == Style::kDecode
                     ? std::clamp(rng.normal(), -1.0, 1.0)
                     : std::clamp(rng.normal() / 10.0 + rng.uniform(-0.05, 0.05), -10.0, 10.0);
      p->q_bf16[i] = ref_double_to_bf16(x);
      p->ref.q[i] = ref_bf16_to_double(p->q_bf16[i]);
    }
  }
  // FlashMLA: decode sm_scale = d_qk^-0.55, prefill 0.5.
  p->scale = c.style == Style::kDecode ? std::pow(static_cast<double>(d), -0.55) : 0.5;
  p->scale = static_cast<double>(static_cast<float>(p->scale));  // the API takes a float

  if (c.sink != Sink::kNone) {
    // Finite sinks around typical lse values (~2..6) so a kernel that mishandles them fails.
    p->sink.resize(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h) {
      double v = 2.0 + 2.0 * rng.normal();
      if (c.sink == Sink::kMixed) {
        const double m = rng.normal();
        if (m < -0.5) v = -kInf;
        if (m > 0.5) v = kInf;
      }
      p->sink[static_cast<size_t>(h)] = static_cast<float>(v);
    }
    if (c.sink == Sink::kMixed && H >= 3) {
      p->sink[0] = static_cast<float>(2.0 + rng.normal());
      p->sink[1] = -std::numeric_limits<float>::infinity();
      p->sink[2] = std::numeric_limits<float>::infinity();
    }
  }

  p->ref.num_tokens = T;
  p->ref.num_heads = H;
  p->ref.head_dim_qk = d;
  p->ref.scale = p->scale;
  for (float v : p->sink) p->ref.sink.push_back(static_cast<double>(v));
  p->ref.main = ref_cache(c, p->main);
  p->ref.main_lists = p->main.lists;
  if (c.extra) {
    p->ref.extra = ref_cache(c, p->extra);
    p->ref.extra_lists = p->extra.lists;
  }
  return ::testing::AssertionSuccess();
}

// Geometry of the output views inside their (poisoned) allocations.
struct OutGeometry {
  int64_t out_elems = 0, out_stride_t = 0, out_stride_h = 0;
  int64_t lse_elems = 0, lse_stride_b = 0, lse_stride_s = 0, lse_stride_h = 0;
};

OutGeometry out_geometry(const CaseSpec& c) {
  OutGeometry g;
  const int64_t T = c.tokens(), H = c.heads, S = c.seq_q, B = c.batch;
  g.out_stride_h = c.out_strided ? 640 : kDv;
  g.out_stride_t = H * g.out_stride_h;
  g.out_elems = T * g.out_stride_t;
  g.lse_elems = T * H;
  if (c.lse_bhs) {  // [B,H,S] memory viewed as [B,S,H]
    g.lse_stride_b = H * S;
    g.lse_stride_s = 1;
    g.lse_stride_h = S;
  } else {
    g.lse_stride_b = S * H;
    g.lse_stride_s = H;
    g.lse_stride_h = 1;
  }
  (void)B;
  return g;
}

// Runs the case once on a fresh context with `threads` CPU threads (0 = default).
::testing::AssertionResult run_once(TestDevice* dev, Problem* p, dsv4_ctx* ctx, Outputs* o) {
  const CaseSpec& c = p->spec;
  const int64_t T = c.tokens(), H = c.heads, d = c.d_qk(), B = c.batch, S = c.seq_q;
  const dsv4_device device = dev->device();

  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.mode = DSV4_MODE_EXPLICIT;
  po.num_heads = static_cast<int32_t>(H);
  po.head_dim_qk = static_cast<int32_t>(d);
  po.head_dim_v = 512;
  po.softmax_scale = static_cast<float>(p->scale);
  po.q_dtype = c.q_fp8 ? kE4m3 : kBf16;
  po.q_scale = p->q_scale;
  po.max_tokens = static_cast<int32_t>(T);
  po.swa_cache = cache_desc(c, p->main);
  po.index_format = c.csr ? DSV4_INDEX_CSR : DSV4_INDEX_DENSE;
  po.topk = c.main.topk;
  if (c.extra) {
    po.extra_cache = cache_desc(c, p->extra);
    po.extra_topk = c.extra_scope.topk;
  } else {
    po.extra_cache = dsv4_kv_cache_desc{};
    po.extra_cache.layout = DSV4_KV_LAYOUT_NONE;
    po.extra_topk = 0;
  }
  dsv4_plan* raw_plan = nullptr;
  dsv4_status st = dsv4_plan_create(ctx, &po, &raw_plan);
  if (st == DSV4_STATUS_UNSUPPORTED) {
    o->unsupported = dsv4_last_error_message();
    return ::testing::AssertionSuccess();
  }
  if (st != DSV4_STATUS_OK)
    return ::testing::AssertionFailure() << "dsv4_plan_create: " << status_text(st);
  PlanPtr plan(raw_plan);
  dsv4_plan_info info{};
  info.struct_size = sizeof info;
  if (dsv4_plan_get_info(plan.get(), &info) == DSV4_STATUS_OK) {
    o->kernel = info.kernel;
    o->backend = info.backend;
  }
  size_t ws_bytes = 0;
  st = dsv4_plan_get_workspace_size(plan.get(), &ws_bytes);
  if (st != DSV4_STATUS_OK)
    return ::testing::AssertionFailure() << "workspace size: " << status_text(st);
  DeviceBuffer ws(dev, ws_bytes);

  // q: compact [T,H,d] / [B,S,H,d], or strided inside a [.., H, 2d] allocation at offset d.
  const size_t q_elem = c.q_fp8 ? 1 : 2;
  const int64_t q_row = c.q_strided ? 2 * d : d;
  std::vector<uint8_t> q_host(static_cast<size_t>(T * H * q_row) * q_elem, 0xFF);
  const int64_t q_off = c.q_strided ? d : 0;
  for (int64_t th = 0; th < T * H; ++th) {
    const void* src = c.q_fp8 ? static_cast<const void*>(p->q_fp8.data() + th * d)
                              : static_cast<const void*>(p->q_bf16.data() + th * d);
    std::memcpy(q_host.data() + static_cast<size_t>((th * q_row + q_off)) * q_elem, src,
                static_cast<size_t>(d) * q_elem);
  }
  DeviceBuffer qbuf = to_device(dev, q_host);
  std::vector<int64_t> q_shape =
      c.q4d ? std::vector<int64_t>{B, S, H, d} : std::vector<int64_t>{T, H, d};
  std::vector<int64_t> q_strides;
  if (c.q4d) {
    q_strides = {S * H * q_row, H * q_row, q_row, 1};
  } else {
    q_strides = {H * q_row, q_row, 1};
  }
  TensorView qt(qbuf.get(), device, c.q_fp8 ? kE4m3 : kBf16, q_shape,
                c.q_strided ? q_strides : std::vector<int64_t>{},
                static_cast<uint64_t>(q_off) * q_elem);

  const OutGeometry g = out_geometry(c);
  DeviceBuffer obuf(dev, static_cast<size_t>(g.out_elems) * 2);
  obuf.fill(0xFF);  // poison: bf16 NaN everywhere
  std::vector<int64_t> o_shape =
      c.q4d ? std::vector<int64_t>{B, S, H, kDv} : std::vector<int64_t>{T, H, kDv};
  std::vector<int64_t> o_strides =
      c.q4d ? std::vector<int64_t>{S * g.out_stride_t, g.out_stride_t, g.out_stride_h, 1}
            : std::vector<int64_t>{g.out_stride_t, g.out_stride_h, 1};
  TensorView ot(obuf.get(), device, kBf16, o_shape,
                c.out_strided ? o_strides : std::vector<int64_t>{});

  DeviceBuffer lbuf, mbuf;
  std::vector<int64_t> l_shape = c.q4d ? std::vector<int64_t>{B, S, H} : std::vector<int64_t>{T, H};
  std::vector<int64_t> l_strides =
      c.q4d ? std::vector<int64_t>{g.lse_stride_b, g.lse_stride_s, g.lse_stride_h}
            : std::vector<int64_t>{H, 1};
  TensorView lt, mt;
  if (c.want_lse) {
    lbuf = DeviceBuffer(dev, static_cast<size_t>(g.lse_elems) * 4);
    lbuf.fill(0xFF);
    lt = TensorView(lbuf.get(), device, kF32, l_shape, l_strides);
  }
  if (c.want_max_logits) {
    mbuf = DeviceBuffer(dev, static_cast<size_t>(g.lse_elems) * 4);
    mbuf.fill(0xFF);
    mt = TensorView(mbuf.get(), device, kF32, l_shape, l_strides);
  }

  DeviceBuffer sink_buf = to_device(dev, p->sink);
  TensorView sink_t(sink_buf.get(), device, kF32, {H});

  // Index tensors of one scope.
  struct Lists {
    DeviceBuffer idx, ptr, len;
    TensorView idx_t, ptr_t, len_t;
  };
  auto make_lists = [&](const Scope& s, int topk, Lists* l) {
    if (c.csr) {
      l->idx = to_device(dev, s.flat);
      l->ptr = to_device(dev, s.indptr);
      l->idx_t = TensorView(l->idx.get(), device, kI32, {static_cast<int64_t>(s.flat.size())});
      l->ptr_t = TensorView(l->ptr.get(), device, kI32, {T + 1});
    } else {
      l->idx = to_device(dev, s.dense);
      l->idx_t =
          TensorView(l->idx.get(), device, kI32,
                     c.q4d ? std::vector<int64_t>{B, S, topk} : std::vector<int64_t>{T, topk});
    }
    if (!s.lengths.empty()) {
      l->len = to_device(dev, s.lengths);
      std::vector<int64_t> shape;
      if (s.spec.lengths == Lengths::kPerBatchRow) {
        shape = {B};
      } else {
        shape = c.q4d ? std::vector<int64_t>{B, S} : std::vector<int64_t>{T};
      }
      l->len_t = TensorView(l->len.get(), device, kI32, shape);
    }
  };
  Lists ml, el;
  make_lists(p->main, c.main.topk, &ml);
  if (c.extra) make_lists(p->extra, c.extra_scope.topk, &el);

  TensorView main_cache(p->main.cache.get(), device, kU8,
                        {p->main.num_blocks, p->main.stride_bytes});
  TensorView extra_cache;
  if (c.extra)
    extra_cache =
        TensorView(p->extra.cache.get(), device, kU8, {p->extra.num_blocks, p->extra.stride_bytes});

  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = qt.get();
  a.swa_cache = main_cache.get();
  a.extra_cache = c.extra ? extra_cache.get() : nullptr;
  a.attn_sink = p->sink.empty() ? nullptr : sink_t.get();
  a.out = ot.get();
  a.lse = c.want_lse ? lt.get() : nullptr;
  a.max_logits = c.want_max_logits ? mt.get() : nullptr;
  a.indices = ml.idx_t.get();
  a.indptr = c.csr ? ml.ptr_t.get() : nullptr;
  a.lengths = p->main.lengths.empty() ? nullptr : ml.len_t.get();
  if (c.extra) {
    a.extra_indices = el.idx_t.get();
    a.extra_indptr = c.csr ? el.ptr_t.get() : nullptr;
    a.extra_lengths = p->extra.lengths.empty() ? nullptr : el.len_t.get();
  }
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.stream = dev->stream();
  st = dsv4_run(plan.get(), &a);
  if (st != DSV4_STATUS_OK) return ::testing::AssertionFailure() << "dsv4_run: " << status_text(st);
  dev->synchronize();
  o->out_raw = obuf.download<uint16_t>();
  if (c.want_lse) o->lse_raw = lbuf.download<float>();
  if (c.want_max_logits) o->max_raw = mbuf.download<float>();
  return ::testing::AssertionSuccess();
}

// The reference's cost is T*H*K*~1000 double operations. Cases above the budget (the full
// FlashMLA matrix) compare a random subset of tokens; every token is still checked for poison.
constexpr int64_t kReferenceBudget = 4000000;  // T*H*K per case

std::vector<int64_t> pick_tokens(const CaseSpec& c) {
  const int64_t T = c.tokens();
  std::vector<int64_t> all(static_cast<size_t>(T));
  std::iota(all.begin(), all.end(), 0);
  const int64_t per_token = std::max<int64_t>(1, c.cost() / std::max<int64_t>(T, 1));
  const int64_t n = std::max<int64_t>(1, kReferenceBudget / per_token);
  if (n >= T) return all;
  Rng rng(case_seed(c.name + "/tokens"));
  std::shuffle(all.begin(), all.end(), rng.gen());
  all.resize(static_cast<size_t>(n));
  std::sort(all.begin(), all.end());
  return all;
}

// The reference problem restricted to `tokens`.
RefProblem restrict_tokens(const RefProblem& full, const std::vector<int64_t>& tokens) {
  RefProblem r = full;
  const size_t row = static_cast<size_t>(full.num_heads * full.head_dim_qk);
  r.num_tokens = static_cast<int64_t>(tokens.size());
  r.q.clear();
  r.main_lists.clear();
  r.extra_lists.clear();
  for (int64_t t : tokens) {
    r.q.insert(r.q.end(), full.q.begin() + static_cast<int64_t>(row) * t,
               full.q.begin() + static_cast<int64_t>(row) * (t + 1));
    r.main_lists.push_back(full.main_lists[static_cast<size_t>(t)]);
    if (!full.extra_lists.empty())
      r.extra_lists.push_back(full.extra_lists[static_cast<size_t>(t)]);
  }
  return r;
}

// Checks one run's outputs: the reference tokens `tokens` (want[i] is token tokens[i]) within
// tolerance, exact zeros where the spec demands them, no poison left in any token's output, and
// the poison outside the strided view untouched.
void check_outputs(const Problem& p, const std::vector<int64_t>& tokens, const RefResult& want,
                   const Outputs& o) {
  const CaseSpec& c = p.spec;
  const int64_t T = c.tokens(), H = c.heads, S = c.seq_q;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const OutGeometry g = out_geometry(c);
  const bool decode = c.style == Style::kDecode;
  const Tolerance out_tol = decode ? kDecodeOutTol : kPrefillOutTol;
  const Tolerance lse_tol = decode ? kDecodeLseTol : kPrefillLseTol;

  std::vector<char> in_view(o.out_raw.size(), 0);
  int64_t not_finite = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t dd = 0; dd < kDv; ++dd) {
        const size_t at = static_cast<size_t>(t * g.out_stride_t + h * g.out_stride_h + dd);
        in_view[at] = 1;
        if (!std::isfinite(ref_bf16_to_double(o.out_raw[at]))) ++not_finite;
      }
    }
  }
  EXPECT_EQ(not_finite, 0)
      << "out holds NaN/inf (poison not overwritten, or a masked NaN row leaked)";
  int64_t touched = 0;
  for (size_t i = 0; i < in_view.size(); ++i)
    if (!in_view[i] && o.out_raw[i] != 0xFFFF) ++touched;
  EXPECT_EQ(touched, 0) << "out: elements outside the strided view were written";

  std::vector<double> got(static_cast<size_t>(n * H * kDv));
  int64_t nonzero_where_zero = 0;
  std::string first_nonzero;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = tokens[static_cast<size_t>(i)];
    for (int64_t h = 0; h < H; ++h) {
      const bool must_be_zero = want.valid_count[static_cast<size_t>(i)] == 0 ||
                                (!p.sink.empty() && p.sink[static_cast<size_t>(h)] ==
                                                        std::numeric_limits<float>::infinity());
      for (int64_t dd = 0; dd < kDv; ++dd) {
        const double v = ref_bf16_to_double(
            o.out_raw[static_cast<size_t>(t * g.out_stride_t + h * g.out_stride_h + dd)]);
        got[static_cast<size_t>((i * H + h) * kDv + dd)] = v;
        if (must_be_zero && v != 0.0 && nonzero_where_zero++ == 0) {
          std::ostringstream s;
          s << "t=" << t << " h=" << h << " d=" << dd << " value " << v;
          first_nonzero = s.str();
        }
      }
    }
  }
  EXPECT_EQ(nonzero_where_zero, 0) << "output must be exactly 0 for tokens without a valid key and "
                                      "heads with a +inf sink; first: "
                                   << first_nonzero;
  const std::string which = n == T ? "all tokens" : std::to_string(n) + " sampled tokens";
  EXPECT_TRUE(
      compare_close(got, want.out, out_tol, "out [" + which + ",H,512] (flat = (i*H+h)*512+d)"));

  auto gather = [&](const std::vector<float>& raw) {
    std::vector<double> v(static_cast<size_t>(n * H));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tokens[static_cast<size_t>(i)];
      for (int64_t h = 0; h < H; ++h)
        v[static_cast<size_t>(i * H + h)] = static_cast<double>(raw[static_cast<size_t>(
            (t / S) * g.lse_stride_b + (t % S) * g.lse_stride_s + h * g.lse_stride_h)]);
    }
    return v;
  };
  if (c.want_lse) {
    EXPECT_TRUE(compare_close(gather(o.lse_raw), want.lse, lse_tol,
                              "lse [" + which + ",H] (flat = i*H+h)"));
  }
  if (c.want_max_logits) {
    EXPECT_TRUE(compare_close(gather(o.max_raw), want.max_logits, kPrefillLseTol,
                              "max_logits [" + which + ",H] (flat = i*H+h)"));
  }
}

// Reference for the tokens pick_tokens chooses, then the checks.
void check_against_reference(const Problem& p, const Outputs& o) {
  const std::vector<int64_t> tokens = pick_tokens(p.spec);
  const RefResult want = tokens.size() == static_cast<size_t>(p.spec.tokens())
                             ? reference_attention(p.ref)
                             : reference_attention(restrict_tokens(p.ref, tokens));
  check_outputs(p, tokens, want, o);
}

// ----------------------------------------------------------------------------------------------
// The test environment: one device for the whole run
// ----------------------------------------------------------------------------------------------
std::string describe(const CaseSpec& c, const Problem* p) {
  std::ostringstream s;
  s << "case " << c.name << ", " << seed_note() << ", T=" << c.tokens() << " H=" << c.heads
    << " layout=" << c.layout << " bs=" << c.main.block_size << " topk=" << c.main.topk;
  if (c.extra)
    s << " extra(bs=" << c.extra_scope.block_size << " topk=" << c.extra_scope.topk << ")";
  (void)p;
  return s.str();
}

// Full pipeline for one case; returns false (with failures recorded) if it could not run.
void run_and_check(const CaseSpec& c) {
  SCOPED_TRACE(describe(c, nullptr));
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  std::string err;
  CtxPtr ctx = make_test_ctx(g_device, 0, &err);
  ASSERT_TRUE(ctx) << err;
  Problem p;
  ASSERT_TRUE(make_problem(g_device, ctx.get(), c, &p));
  Outputs o;
  ASSERT_TRUE(run_once(g_device, &p, ctx.get(), &o));
  // A backend may refuse what it does not serve (a layout, a cache flavour), saying why; the CPU
  // backend serves everything, so the suite on CPU skips nothing.
  if (!o.unsupported.empty()) GTEST_SKIP() << "backend refuses the plan: " << o.unsupported;
  SCOPED_TRACE("backend " + o.backend + ", kernel " + o.kernel);
  check_against_reference(p, o);
}

// ----------------------------------------------------------------------------------------------
// The case matrices
// ----------------------------------------------------------------------------------------------
const char* layout_tag(uint32_t layout) {
  switch (layout) {
    case DSV4_KV_LAYOUT_BF16:
      return "bf16";
    case DSV4_KV_LAYOUT_FP8_V4_584B:
      return "fp8v4";
    case DSV4_KV_LAYOUT_FP8_V32_656B:
      return "fp8v32";
    case DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR:
      return "fp8pt";
    case DSV4_KV_LAYOUT_FP16:
      return "fp16";
    default:
      return "unknown";
  }
}

ScopeSpec scope(int s_k, int topk, int bs, Lengths l = Lengths::kPerToken) {
  ScopeSpec s;
  s.s_k = s_k;
  s.topk = topk;
  s.block_size = bs;
  s.lengths = l;
  return s;
}

// A decode case's name and shape; the caller sets the rest.
CaseSpec decode_case(const std::string& name, uint32_t layout, int heads, int batch, int seq_q) {
  CaseSpec c;
  c.name = name;
  c.layout = layout;
  c.heads = heads;
  c.batch = batch;
  c.seq_q = seq_q;
  return c;
}

// Decode cases (FlashMLA test_flash_mla_sparse_decoding), trimmed to a fast default.
std::vector<CaseSpec> decode_cases() {
  std::vector<CaseSpec> v;
  const bool full = full_matrix();
  const uint32_t layouts[] = {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16,
                              DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP8_V32_656B,
                              DSV4_KV_LAYOUT_FP16};
  for (uint32_t layout : layouts) {
    const std::string tag = layout_tag(layout);
    {  // 4-D q, FlashMLA [B,H,S] lse, per-batch-row lengths, extra cache with its own lengths
      CaseSpec c = decode_case("decode_" + tag + "_bs2_extra_4d", layout, full ? 128 : 64, 4, 3);
      c.q4d = true;
      c.lse_bhs = true;
      c.main = scope(512, 64, 2, Lengths::kPerBatchRow);
      c.extra = true;
      c.extra_scope = scope(128, 64, 2, Lengths::kPerToken);  // [B,S] lengths
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
    {  // odd block size, strided q and out, padded block stride, finite sinks, per-token lengths
      CaseSpec c = decode_case("decode_" + tag + "_bs69_strided", layout, 16, 4, 1);
      c.q_strided = true;
      c.out_strided = true;
      c.block_pad_bytes = 1152;
      c.main = scope(512, 64, 69);
      c.extra = true;
      c.extra_scope = scope(256, 128, 53, Lengths::kNone);
      c.sink = Sink::kFinite;
      v.push_back(c);
    }
    {  // topk 576, block 61, one head
      CaseSpec c = decode_case("decode_" + tag + "_bs61_topk576", layout, full ? 64 : 1, 4, 1);
      c.main = scope(1024, 576, 61);
      c.sink = Sink::kFinite;
      v.push_back(c);
    }
    {  // batch 74, odd head count, block 64, extra block 256
      CaseSpec c = decode_case("decode_" + tag + "_b74_h3", layout, 3, 74, 1);
      c.main = scope(512, 64, 64);
      c.extra = true;
      c.extra_scope = scope(512, 64, 256);
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
    {  // batch 74 with MTP-style s_q 2 and 64 heads, both lists with per-batch-row lengths
      CaseSpec c = decode_case("decode_" + tag + "_b74_sq2_h64", layout, 64, 74, 2);
      c.q4d = true;
      c.lse_bhs = true;
      c.main = scope(256, 64, 64, Lengths::kPerBatchRow);
      c.extra = true;
      c.extra_scope = scope(128, 64, 2, Lengths::kPerBatchRow);
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
    {  // no lengths, no extra, no sink, 128 heads; non-varlen
      CaseSpec c = decode_case("decode_" + tag + "_nolen_h128", layout, 128, 4, 1);
      c.varlen = false;
      c.main = scope(512, 64, 64, Lengths::kNone);
      c.sink = Sink::kNone;
      c.want_max_logits = false;
      v.push_back(c);
    }
    {  // topk 2048 over block 256 (and 2 in the full matrix)
      CaseSpec c = decode_case("decode_" + tag + "_topk2048", layout, full ? 128 : 2, 2, 1);
      c.main = scope(2046, 2048, 256);
      c.sink = Sink::kFinite;
      v.push_back(c);
    }
    {  // corner: all-invalid rows, zero-length sequences, s_q 3, block 53
      CaseSpec c = decode_case("decode_" + tag + "_corner_bs53", layout, full ? 128 : 64, 4, 3);
      c.q4d = true;
      c.all_invalid = true;
      c.zero_seqlen = true;
      c.main = scope(650, 576 / (full ? 1 : 4), 53, Lengths::kPerBatchRow);
      c.extra = true;
      c.extra_scope = scope(128, 64, 61, Lengths::kPerBatchRow);
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
    {  // corner: everything invalid in the main list, extra list off
      CaseSpec c = decode_case("decode_" + tag + "_corner_bs61", layout, 64, 4, 3);
      c.all_invalid = true;
      c.zero_seqlen = true;
      c.main = scope(512, 64, 61);
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
    {  // FlashMLA's MODEL1 CONFIG1 shape: SWA topk 128 over 256-token blocks + extra 512 over 64
      CaseSpec c = decode_case("decode_" + tag + "_model1_config1", layout, 64, full ? 74 : 4, 2);
      c.q4d = true;
      c.lse_bhs = true;
      c.main = scope(full ? 16384 : 1024, 128, 256, Lengths::kPerBatchRow);
      c.extra = true;
      c.extra_scope = scope(full ? 4096 : 1024, 512, 64, Lengths::kPerBatchRow);
      c.sink = Sink::kFinite;
      v.push_back(c);
    }
    if (layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) {
      // One key per token in each list, the main cache at a kv_scale whose bf16 rounding is the
      // worst (2^-8 (1 + 2^-8) rounds 0.39 % down), the extra cache at twice it: spec 3.4's value
      // scale folded into a bf16 P instead of the output (or, for the extra list, its ratio to the
      // main's) shifts every row by that much, a cosine difference of ~7.6e-6 (tolerance 5e-6).
      CaseSpec c = decode_case("decode_" + tag + "_one_key", layout, 64, 4, 2);
      c.main = scope(256, 1, 64, Lengths::kNone);
      c.extra = true;
      c.extra_scope = scope(128, 1, 61, Lengths::kNone);
      c.varlen = false;
      c.inject_invalid = false;
      c.sink = Sink::kFinite;
      c.kv_scale[0] = 0x1.01p-8f;
      c.kv_scale[1] = 0x1.01p-7f;
      v.push_back(c);
      // One key per token, in the extra list only, whose value multiplier is the main one's
      // times (1 + 2^-8 + 2^-16): a ratio whose bf16 rounding is the worst (0.39 % up). Weighting
      // a bf16 P by it, instead of converting O between the lists' units in fp32, shifts every
      // row by that much (cosine difference ~7.6e-6).
      c.name = "decode_" + tag + "_extra_units";
      c.main.only_invalid = true;
      c.kv_scale[0] = 0x1p-8f;
      c.kv_scale[1] = 0x1.0101p-8f;
      v.push_back(c);
    }
    {  // CSR lists for both scopes
      CaseSpec c = decode_case("decode_" + tag + "_csr", layout, 16, 8, 1);
      c.csr = true;
      c.main = scope(256, 128, 64);
      c.extra = true;
      c.extra_scope = scope(128, 64, 2, Lengths::kNone);
      c.sink = Sink::kMixed;
      v.push_back(c);
    }
  }
  {  // ROCm gfx942's FNUZ flavour of the 584 B layout (spec 3.2), with an extra FNUZ cache
    CaseSpec c = decode_case("decode_fp8v4_fnuz_extra", DSV4_KV_LAYOUT_FP8_V4_584B, 16, 4, 2);
    c.fnuz = true;
    c.q4d = true;
    c.main = scope(512, 128, 64, Lengths::kPerBatchRow);
    c.extra = true;
    c.extra_scope = scope(256, 64, 2, Lengths::kPerToken);
    c.sink = Sink::kMixed;
    v.push_back(c);
  }
  {
    CaseSpec c = decode_case("decode_fp8v4_fnuz_bs69_h64", DSV4_KV_LAYOUT_FP8_V4_584B, 64, 8, 1);
    c.fnuz = true;
    c.all_invalid = true;
    c.main = scope(400, 256, 69);
    c.sink = Sink::kFinite;
    v.push_back(c);
  }
  if (full) {  // FlashMLA's shapes with b in {4, 74}, s_q in {1, 3}, h in {64, 128}
    struct Shape {
      int s_k, topk, bs;
    };
    const Shape shapes[] = {{512, 64, 2},    {512, 64, 64},   {512, 64, 69},    {1024, 576, 2},
                            {1024, 576, 61}, {2046, 2048, 2}, {2046, 2048, 64}, {2046, 2048, 576}};
    int n = 0;
    for (uint32_t layout : {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_FP8_V32_656B}) {
      for (const Shape& sh : shapes) {
        for (int b : {4, 74}) {
          for (int sq : {1, 3}) {
            CaseSpec c;
            c.name = "full_decode_" + std::string(layout_tag(layout)) + "_" + std::to_string(n++);
            c.layout = layout;
            c.heads = (n % 2) ? 64 : 128;
            c.batch = b;
            c.seq_q = sq;
            c.q4d = true;
            c.lse_bhs = true;
            c.main =
                scope(sh.s_k, sh.topk, sh.bs, (n % 3) ? Lengths::kPerBatchRow : Lengths::kNone);
            c.extra = layout == DSV4_KV_LAYOUT_FP8_V4_584B && (n % 2 == 0);
            c.extra_scope = scope(2 * sh.topk, sh.topk, sh.bs,
                                  (n % 4) ? Lengths::kPerBatchRow : Lengths::kNone);
            v.push_back(c);
          }
        }
      }
    }
  }
  return v;
}

// Prefill cases (FlashMLA test_flash_mla_sparse_prefill): one flat key set shared by all tokens,
// invalid values beyond s_kv, random per-token lengths.
std::vector<CaseSpec> prefill_cases() {
  std::vector<CaseSpec> v;
  const bool full = full_matrix();
  struct Shape {
    int s_kv, topk, s_q, heads, bs;
  };
  const Shape shapes[] = {
      {128, 128, 62, 64, 64}, {95, 128, 13, 64, 53},   {153, 256, 21, 16, 61},
      {114, 384, 9, 16, 2},   {592, 128, 31, 16, 256}, {1521, 512, 4, 8, 69},
  };
  const uint32_t layouts[] = {DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_BF16,
                              DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP8_V32_656B,
                              DSV4_KV_LAYOUT_FP16};
  int n = 0;
  for (uint32_t layout : layouts) {
    for (const Shape& sh : shapes) {
      CaseSpec c;
      c.name = "prefill_" + std::string(layout_tag(layout)) + "_skv" + std::to_string(sh.s_kv) +
               "_topk" + std::to_string(sh.topk);
      c.style = Style::kPrefill;
      c.layout = layout;
      c.heads = full ? ((n % 2) ? 64 : 128) : sh.heads;
      c.batch = full ? 62 : sh.s_q;  // 3-D q: T = batch * 1
      c.seq_q = 1;
      c.varlen = false;
      c.main = scope(sh.s_kv, sh.topk, sh.bs, (n % 3 == 2) ? Lengths::kNone : Lengths::kPerToken);
      c.sink = (n % 2) ? Sink::kMixed : Sink::kFinite;
      c.csr = (n % 5 == 4);
      c.q_strided = (n % 4 == 1);
      c.inject_invalid = (n % 2 == 0);
      ++n;
      v.push_back(c);
    }
  }
  {  // corner: every index invalid
    CaseSpec c;
    c.name = "prefill_fp8v4_all_invalid";
    c.style = Style::kPrefill;
    c.heads = 64;
    c.batch = 1;
    c.all_invalid = true;
    c.main = scope(128, 128, 64);
    v.push_back(c);
  }
  {  // corner: sparse-valid, topk far beyond s_kv
    CaseSpec c;
    c.name = "prefill_fp8v4_sparse_valid";
    c.style = Style::kPrefill;
    c.heads = 16;
    c.batch = 2;
    c.main = scope(32, 2048, 64);
    c.sink = Sink::kMixed;
    v.push_back(c);
  }
  {  // with an extra cache and e4m3 q on the per-tensor layout
    CaseSpec c;
    c.name = "prefill_fp8pt_q_e4m3_extra";
    c.style = Style::kPrefill;
    c.layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
    c.q_fp8 = true;
    c.heads = 8;
    c.batch = 16;
    c.main = scope(200, 128, 61);
    c.extra = true;
    c.extra_scope = scope(300, 256, 2);
    c.sink = Sink::kFinite;
    v.push_back(c);
  }
  return v;
}

class Decode : public ::testing::TestWithParam<CaseSpec> {};
class Prefill : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(Decode, MatchesReference) { run_and_check(GetParam()); }
TEST_P(Prefill, MatchesReference) { run_and_check(GetParam()); }

std::string case_name(const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Conformance, Decode, ::testing::ValuesIn(decode_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Prefill, ::testing::ValuesIn(prefill_cases()), case_name);

// ----------------------------------------------------------------------------------------------
// The reference itself, on problems small enough to solve by hand
// ----------------------------------------------------------------------------------------------
TEST(Reference, HandSolvedSoftmaxSinkAndValidity) {
  // bf16 cache, block size 2, 2 blocks: slot 0 = all 1.0 (0x3F80), slot 1 = all -0.5 (0xBF00),
  // slots 2, 3 = NaN bytes (never valid candidates here).
  std::vector<uint8_t> cache(2 * 2 * 1024, 0xFF);
  for (int d = 0; d < 512; ++d) {
    cache[static_cast<size_t>(2 * d)] = 0x80;
    cache[static_cast<size_t>(2 * d + 1)] = 0x3F;
    cache[static_cast<size_t>(1024 + 2 * d)] = 0x00;
    cache[static_cast<size_t>(1024 + 2 * d + 1)] = 0xBF;
  }
  RefProblem p;
  p.num_tokens = 3;
  p.num_heads = 2;
  p.q.assign(3 * 2 * 512, 1.0 / 512);  // q.k = 1 for slot 0, -0.5 for slot 1
  p.scale = 2.0;                       // logits 2 and -1
  p.sink = {-kInf, std::log(3.0)};
  p.main.base = cache.data();
  p.main.layout = DSV4_KV_LAYOUT_BF16;
  p.main.block_size = 2;
  p.main.block_stride_bytes = 2048;
  p.main.num_blocks = 2;
  p.main_lists = {RefList{{0, 1, 3}, 2},       // the NaN slot 3 is beyond the length
                  RefList{{-1, 4, 1, 0}, -1},  // -1 and 4 (= capacity) are invalid
                  RefList{{0, 1}, 0}};         // zero length: lonely
  const RefResult r = reference_attention(p);
  // Tokens 0 and 1: softmax over logits {2, -1}: lse = log(e^2 + e^-1), out = p0*1 + p1*(-0.5).
  const double lse = std::log(std::exp(2.0) + std::exp(-1.0));
  const double p0 = std::exp(2.0 - lse), p1 = std::exp(-1.0 - lse);
  const double o = p0 - 0.5 * p1;
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(r.valid_count[static_cast<size_t>(t)], 2);
    for (int h = 0; h < 2; ++h) {
      EXPECT_NEAR(r.lse[static_cast<size_t>(t * 2 + h)], lse, 1e-12);
      EXPECT_DOUBLE_EQ(r.max_logits[static_cast<size_t>(t * 2 + h)], 2.0);
      // head 0: sink -inf = no effect; head 1: factor 1 / (1 + 3 e^-lse).
      const double f = h == 0 ? 1.0 : 1.0 / (1.0 + 3.0 * std::exp(-lse));
      EXPECT_NEAR(r.out[static_cast<size_t>((t * 2 + h) * 512 + 7)], o * f, 1e-12);
    }
  }
  EXPECT_EQ(r.valid_count[2], 0);
  EXPECT_EQ(r.lse[4], kInf);
  EXPECT_EQ(r.max_logits[5], -kInf);
  EXPECT_EQ(r.out[4 * 512], 0.0);
  // A +inf sink zeroes the output but leaves lse alone.
  p.sink = {kInf, kInf};
  const RefResult z = reference_attention(p);
  EXPECT_EQ(z.out[0], 0.0);
  EXPECT_NEAR(z.lse[0], lse, 1e-12);
}

TEST(Reference, DecodesHandWrittenFp8Entries) {
  // 584 B, block size 1: e4m3 0x38 (1.0) with UE8M0 0x7E (2^-1) -> 0.5; 0xC2 (-2.5) with 0x81
  // (2^2) -> -10; subnormal 0x01 (2^-9) with 0x7F -> 2^-9; RoPE bf16 0x4040 -> 3.
  std::vector<uint8_t> v4(
      static_cast<size_t>(ref_layout_min_block_bytes(DSV4_KV_LAYOUT_FP8_V4_584B, 1)), 0);
  v4[0] = 0x38;
  v4[64] = 0xC2;
  v4[128] = 0x01;
  v4[448] = 0x40;
  v4[449] = 0x40;
  v4[576 + 0] = 0x7E;
  v4[576 + 1] = 0x81;
  v4[576 + 2] = 0x7F;
  RefCache c;
  c.base = v4.data();
  c.layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  c.block_size = 1;
  c.block_stride_bytes = static_cast<int64_t>(v4.size());
  c.num_blocks = 1;
  std::vector<double> e = reference_decode_entry(c, 0);
  EXPECT_EQ(e[0], 0.5);
  EXPECT_EQ(e[64], -10.0);
  EXPECT_EQ(e[128], std::ldexp(1.0, -9));
  EXPECT_EQ(e[448], 3.0);
  EXPECT_EQ(e[1], 0.0);
  // Per-tensor: 0x7E (448) * kv_scale 0.25 = 112; 0xFE -> -112.
  std::vector<uint8_t> pt(512, 0);
  pt[3] = 0x7E;
  pt[4] = 0xFE;
  c.base = pt.data();
  c.layout = DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR;
  c.block_stride_bytes = 512;
  c.kv_scale = 0.25;
  e = reference_decode_entry(c, 0);
  EXPECT_EQ(e[3], 112.0);
  EXPECT_EQ(e[4], -112.0);
  // bf16 rounding of the reference: ties to even.
  EXPECT_EQ(ref_double_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);      // tie, even stays
  EXPECT_EQ(ref_double_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);  // tie, rounds up to even
}

// ----------------------------------------------------------------------------------------------
// Determinism of the kernel: identical bits across runs and across CPU thread counts
// ----------------------------------------------------------------------------------------------
CaseSpec determinism_case() {
  CaseSpec c;
  c.name = "determinism";
  c.heads = 16;
  c.batch = 6;
  c.seq_q = 2;
  c.q4d = true;
  c.main = scope(700, 512, 61);
  c.extra = true;
  c.extra_scope = scope(300, 256, 2);
  c.sink = Sink::kMixed;
  return c;
}

// Every output bit of two runs equal; `between` says what differed between them.
void expect_same_bits(const Outputs& a, const Outputs& b, const char* between) {
  EXPECT_TRUE(a.out_raw == b.out_raw) << "out differs " << between;
  EXPECT_TRUE(std::memcmp(a.lse_raw.data(), b.lse_raw.data(), a.lse_raw.size() * 4) == 0)
      << "lse differs";
  EXPECT_TRUE(std::memcmp(a.max_raw.data(), b.max_raw.data(), a.max_raw.size() * 4) == 0)
      << "max_logits differs";
}

TEST(Determinism, RepeatedRunsAreBitIdentical) {
  const CaseSpec c = determinism_case();
  SCOPED_TRACE(describe(c, nullptr));
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  std::string err;
  CtxPtr ctx = make_test_ctx(g_device, 0, &err);
  ASSERT_TRUE(ctx) << err;
  Problem p;
  ASSERT_TRUE(make_problem(g_device, ctx.get(), c, &p));
  Outputs a, b;
  ASSERT_TRUE(run_once(g_device, &p, ctx.get(), &a));
  ASSERT_TRUE(run_once(g_device, &p, ctx.get(), &b));
  expect_same_bits(a, b, "between two identical runs");
  check_against_reference(p, a);
}

TEST(Determinism, CpuThreadCountDoesNotChangeBits) {
  const CaseSpec c = determinism_case();
  SCOPED_TRACE(describe(c, nullptr));
  if (g_device == nullptr) GTEST_SKIP() << "test device unavailable: " << g_device_why;
  if (g_device->device().device_type != DSV4_DEVICE_CPU) GTEST_SKIP() << "CPU backend only";
  std::string err;
  CtxPtr one = make_test_ctx(g_device, 1, &err);
  ASSERT_TRUE(one) << err;
  CtxPtr two = make_test_ctx(g_device, 2, &err);
  ASSERT_TRUE(two) << err;
  dsv4_ctx_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(dsv4_ctx_get_info(two.get(), &info), DSV4_STATUS_OK);
  if (std::string(info.backend).rfind("cpu", 0) != 0)
    GTEST_SKIP() << "backend " << info.backend << " is not the CPU backend";
  EXPECT_EQ(info.num_threads, 2);
  Problem p;
  ASSERT_TRUE(make_problem(g_device, one.get(), c, &p));
  Outputs a, b;
  ASSERT_TRUE(run_once(g_device, &p, one.get(), &a));
  ASSERT_TRUE(run_once(g_device, &p, two.get(), &b));
  expect_same_bits(a, b, "between 1 and 2 threads");
}

}  // namespace
}  // namespace dsv4test

// Mutation tests expect the suite to FAIL; they set DSV4_CONFORMANCE_EXPECT_MODULE_DIR so that a
// mutant that was not even loaded makes the run "pass" (exit 0) and the ctest WILL_FAIL test fail.
static bool expected_module_loaded() {
  const char* dir = std::getenv("DSV4_CONFORMANCE_EXPECT_MODULE_DIR");
  if (dir == nullptr || *dir == '\0') return true;
  std::string why;
  std::unique_ptr<dsv4test::TestDevice> dev = dsv4test::make_test_device(&why);
  if (!dev) return false;
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = dev->device();
  if (std::getenv("DSV4_BACKEND") == nullptr) o.backend = dev->backend();
  dsv4_ctx* ctx = nullptr;
  if (dsv4_ctx_create(&o, &ctx) != DSV4_STATUS_OK) return false;
  dsv4_ctx_info info{};
  info.struct_size = sizeof info;
  const bool ok =
      dsv4_ctx_get_info(ctx, &info) == DSV4_STATUS_OK && std::string(info.path).rfind(dir, 0) == 0;
  std::printf("dsv4 conformance: module %s (expected under %s)\n", info.path, dir);
  dsv4_ctx_destroy(ctx);
  return ok;
}

// DSV4_CONFORMANCE_EXPECT_KERNEL=<prefix>: the suite runs only if a plan's kernel name starts with
// it (a kernel picked by DSV4_CPU_ISA that did not run would otherwise pass unnoticed).
static bool expected_kernel_runs() {
  const char* want = std::getenv("DSV4_CONFORMANCE_EXPECT_KERNEL");
  if (want == nullptr || *want == '\0') return true;
  std::string why;
  std::unique_ptr<dsv4test::TestDevice> dev = dsv4test::make_test_device(&why);
  if (!dev) return false;
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.device = dev->device();
  if (std::getenv("DSV4_BACKEND") == nullptr) o.backend = dev->backend();
  dsv4_ctx* ctx = nullptr;
  if (dsv4_ctx_create(&o, &ctx) != DSV4_STATUS_OK) return false;
  dsv4_plan_options po;
  dsv4_plan_options_init(&po);
  po.num_heads = 8;
  po.max_tokens = 1;
  po.topk = 64;
  po.swa_cache.layout = DSV4_KV_LAYOUT_FP8_V4_584B;
  po.swa_cache.block_size = 64;
  dsv4_plan* plan = nullptr;
  bool ok = false;
  if (dsv4_plan_create(ctx, &po, &plan) == DSV4_STATUS_OK) {
    dsv4_plan_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ok = dsv4_plan_get_info(plan, &info) == DSV4_STATUS_OK &&
         std::string(info.kernel).rfind(want, 0) == 0;
    std::printf("dsv4 conformance: kernel %s (expected %s)\n", info.kernel, want);
    dsv4_plan_destroy(plan);
  }
  dsv4_ctx_destroy(ctx);
  return ok;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!expected_kernel_runs()) {
    std::printf("dsv4 conformance: the expected kernel does not run\n");
    return 1;
  }
  if (!expected_module_loaded()) {
    std::printf("dsv4 conformance: the expected module was not loaded; not running the suite\n");
    return 0;
  }
  ::testing::AddGlobalTestEnvironment(new dsv4test::DeviceEnvironment);
  std::printf("dsv4 conformance: %s%s\n", dsv4test::seed_note().c_str(),
              dsv4test::full_matrix() ? ", full FlashMLA matrix" : "");
  return RUN_ALL_TESTS();
}
