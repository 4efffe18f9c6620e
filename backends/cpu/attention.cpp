#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/index.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "host.h"

#ifndef DSV4_CPU_MUTATION
#define DSV4_CPU_MUTATION 0  // 1: sink ignored; 2: first valid candidate read one slot too far
#endif

// The hot loops are compiled once per ISA and picked at load time. Contraction is off
// (-ffp-contract=off), so every clone performs the same fp32 operations in the same order and the
// clones agree bit for bit. (ifunc resolvers run before sanitizer runtimes start: no clones there.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define DSV4_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DSV4_CPU_CLONES
#endif

namespace dsv4 {
namespace cpu {
namespace {

constexpr int kHeadTile = 8;  // heads sharing one pass over the dequantised rows
constexpr int kLanes = 16;    // independent partial sums of a dot product (vector lanes)
constexpr int kAlignFloats = 16;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Sixteen fp32 lanes (one zmm, two ymm or four xmm, per clone): the accumulator tiles below stay
// in registers.
typedef float vec16 __attribute__((vector_size(64)));
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec4 __attribute__((vector_size(16)));
static_assert(kLanes == 16, "vec16 holds the dot-product lanes");

// Unaligned load (vec16 never crosses a call by value: that would change the psABI per clone).
inline __attribute__((always_inline)) void load16(vec16* v, const float* p) {
  std::memcpy(v, p, sizeof *v);
}

// Sum of the lanes in a fixed order (halves folded: 8, 4, 2, 1).
inline __attribute__((always_inline)) float reduce16(const vec16& v) {
  vec8 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  const vec8 s8 = lo + hi;
  vec4 a, b;
  std::memcpy(&a, &s8, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&s8) + sizeof a, sizeof b);
  const vec4 s4 = a + b;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// logits[h][j] = dot(q[h], keys[j]) for the kHeadTile query rows (rows past the tile are zero).
// Lane l sums the dims d = l (mod 16) in order; reduce16 then adds the lanes.
DSV4_CPU_CLONES void tile_logits(const float* q, const float* keys, int64_t n, int d_qk,
                                 float* logits, int64_t ld) {
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + j * d_qk;
    vec16 acc[kHeadTile] = {};
    for (int d = 0; d < d_qk; d += kLanes) {
      vec16 kv;
      load16(&kv, k + d);
      for (int h = 0; h < kHeadTile; ++h) {
        vec16 qv;
        load16(&qv, q + h * d_qk + d);
        acc[h] += qv * kv;
      }
    }
    for (int h = 0; h < kHeadTile; ++h) logits[h * ld + j] = reduce16(acc[h]);
  }
}

// acc[h][0:512] = sum_j p[h][j] * keys[j][0:512] (V = first 512 dims), summed over j in order, for
// all kHeadTile rows of p (rows past the tile are zero).
DSV4_CPU_CLONES void tile_values(const float* p, int64_t ld, const float* keys, int64_t n, int d_qk,
                                 float* acc) {
  for (int d = 0; d < kHeadDim; d += kLanes) {
    vec16 a[kHeadTile] = {};
    for (int64_t j = 0; j < n; ++j) {
      vec16 kv;
      load16(&kv, keys + j * d_qk + d);
      for (int h = 0; h < kHeadTile; ++h) a[h] += p[h * ld + j] * kv;
    }
    for (int h = 0; h < kHeadTile; ++h) std::memcpy(acc + h * kHeadDim + d, &a[h], sizeof a[h]);
  }
}

bool dtype_is_fp8(const dsv4_dtype& t) { return t.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN; }

}  // namespace

attention_kernel::attention_kernel(const dsv4_mod_plan& plan, candidate_limits limits,
                                   int num_workers)
    : plan_(plan),
      limits_(limits),
      d_qk_(plan.head_dim_qk),
      max_candidates_(std::max<int64_t>(1, limits.main + limits.extra)),
      q_is_fp8_(dtype_is_fp8(plan.q_dtype)),
      num_workers_(std::max(1, num_workers)) {
  const size_t m = static_cast<size_t>(max_candidates_);
  const size_t d = static_cast<size_t>(d_qk_);
  worker_stride_ = round_up(m * d, kAlignFloats) + round_up(kHeadTile * m, kAlignFloats) +
                   2 * round_up(m, kAlignFloats) + round_up(kHeadTile * d, kAlignFloats) +
                   round_up(kHeadTile * kHeadDim, kAlignFloats);
  // Left uninitialised: every value is written before it is read, and untouched pages of idle
  // workers are never committed.
  scratch_size_ = worker_stride_ * static_cast<size_t>(num_workers_);
  scratch_.reset(new float[scratch_size_]);
}

attention_kernel::worker_scratch attention_kernel::scratch_for(int worker) const {
  const size_t m = static_cast<size_t>(max_candidates_);
  const size_t d = static_cast<size_t>(d_qk_);
  float* p = scratch_.get() + static_cast<size_t>(worker) * worker_stride_;
  worker_scratch s;
  s.keys = p;
  p += round_up(m * d, kAlignFloats);
  s.logits = p;
  p += round_up(kHeadTile * m, kAlignFloats);
  s.logit_mult = p;
  p += round_up(m, kAlignFloats);
  s.weight = p;
  p += round_up(m, kAlignFloats);
  s.q = p;
  p += round_up(kHeadTile * d, kAlignFloats);
  s.acc = p;
  return s;
}

namespace {

dsv4_status check_list(const dsv4_mod_run& run, const dsv4_mod_index_list& list,
                       const dsv4_mod_cache& cache, uint32_t plan_layout, int64_t limit,
                       const char* name) {
  if (list.indices == nullptr) return DSV4_STATUS_OK;
  if (cache.layout != plan_layout)
    return fail(DSV4_STATUS_PLAN_MISMATCH, "%s: cache layout %u, plan has %u", name, cache.layout,
                plan_layout);
  if (cache.block_size < 1 || cache.num_blocks < 0 ||
      (cache.base == nullptr && cache.num_blocks > 0))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: cache has block_size %d, %lld blocks at %p",
                name, cache.block_size, static_cast<long long>(cache.num_blocks),
                static_cast<const void*>(cache.base));
  const int64_t T = run.num_tokens;
  if (list.format == DSV4_INDEX_CSR) {
    if (list.indptr == nullptr)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: CSR without indptr", name);
    if (list.indptr[0] < 0)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: indptr[0] = %d is negative", name,
                  list.indptr[0]);
    for (int64_t t = 0; t < T; ++t) {
      if (list.indptr[t + 1] < list.indptr[t])
        return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: indptr decreases at token %lld (%d -> %d)",
                    name, static_cast<long long>(t), list.indptr[t], list.indptr[t + 1]);
    }
    if (list.indptr[T] > list.num_entries)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: indptr[%lld] = %d exceeds the %lld indices",
                  name, static_cast<long long>(T), list.indptr[T],
                  static_cast<long long>(list.num_entries));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t count = list_row_count(list, t, run.seq_q);
      if (count > limit)
        return fail(DSV4_STATUS_INVALID_ARGUMENT,
                    "%s: token %lld has %lld entries, more than the plan's maximum %lld", name,
                    static_cast<long long>(t), static_cast<long long>(count),
                    static_cast<long long>(limit));
    }
  } else if (list.format == DSV4_INDEX_DENSE) {
    if (list.width > limit)
      return fail(DSV4_STATUS_PLAN_MISMATCH, "%s: width %d exceeds the plan's %lld", name,
                  list.width, static_cast<long long>(limit));
  } else {
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "%s: unknown index format %u", name, list.format);
  }
  return DSV4_STATUS_OK;
}

}  // namespace

dsv4_status check_explicit_run(const dsv4_mod_plan& plan, candidate_limits limits,
                               const dsv4_mod_run& run) {
  const int64_t T = run.num_tokens;
  if (T < 0 || (T > 0 && run.seq_q < 1))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "num_tokens %d with seq_q %d", run.num_tokens,
                run.seq_q);
  if (T == 0) return DSV4_STATUS_OK;
  if (run.q.data == nullptr || run.out.data == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "q or out is NULL");
  const dsv4_status st =
      check_list(run, run.main_list, run.swa_cache, plan.cache[0].layout, limits.main, "main list");
  if (st != DSV4_STATUS_OK) return st;
  return check_list(run, run.extra_list, run.extra_cache, plan.cache[1].layout, limits.extra,
                    "extra list");
}

value_scales value_scales_of(const dsv4_mod_plan& plan, const dsv4_mod_run& run) {
  // The plan's extra cache, not the run's extra list: paged runs on the fast kernels build their
  // lists in the kernel and pass none.
  const bool has_extra = plan.cache[1].layout != DSV4_KV_LAYOUT_NONE;
  value_scales v;
  static_cast<list_value_scales&>(v) = list_value_scales_of(
      run.swa_cache.layout, run.swa_cache.kv_scale,
      has_extra ? run.extra_cache.layout : DSV4_KV_LAYOUT_NONE, run.extra_cache.kv_scale);
  v.logit[0] = plan.logit_scale[0];
  v.logit[1] = has_extra ? plan.logit_scale[1] : plan.logit_scale[0];
  return v;
}

// Dequantises token t's valid candidates (main list, then extra list) into the worker's scratch,
// once for all heads. Invalid positions are skipped, so their rows are never read.
int64_t attention_kernel::gather(const dsv4_mod_run& run, const value_scales& v, int64_t t,
                                 const worker_scratch& s) const {
  const dsv4_mod_index_list* lists[2] = {&run.main_list, &run.extra_list};
  const dsv4_mod_cache* caches[2] = {&run.swa_cache, &run.extra_cache};
  int64_t n = 0;
  [[maybe_unused]] bool first = true;
  for (int l = 0; l < 2; ++l) {
    const dsv4_mod_index_list& list = *lists[l];
    const dsv4_mod_cache& cache = *caches[l];
    const int64_t count = list_row_count(list, t, run.seq_q);
    if (count == 0) continue;  // also an absent list (no indices to take a row of)
    const list_row row = list_row_of(list, t, run.seq_q);
    for (int64_t i = 0; i < count && n < max_candidates_; ++i) {
      int64_t idx = row.base[i * row.step];
      if (!slot_is_valid(idx, cache)) continue;
#if DSV4_CPU_MUTATION == 2
      if (first && slot_is_valid(idx + 1, cache)) idx += 1;
      first = false;
#endif
      int64_t entry;
      const uint8_t* block = slot_block_base(cache, idx, &entry);
      dequant_entry(cache.layout, cache.flags, block, cache.block_size, entry, s.keys + n * d_qk_);
      s.logit_mult[n] = v.logit[l];
      s.weight[n] = v.multiplier[l];  // P weighted in fp32 (layout.h)
      ++n;
    }
  }
  return n;
}

void attention_kernel::attend(const dsv4_mod_run& run, const value_scales& v, int64_t t,
                              int h_begin, int h_end, int worker) const {
  const worker_scratch s = scratch_for(worker);
  const int64_t seq_q = run.seq_q;
  const int64_t n = gather(run, v, t, s);
  float* lse_out = static_cast<float*>(run.lse.data);
  float* max_out = static_cast<float*>(run.max_logits.data);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // out row of head h: kHeadDim values of the plan's out_dtype (bf16, or fp32 partials).
  const bool out_f32 = plan_.out_dtype.code == DSV4_DTYPE_CODE_FLOAT;
  const size_t out_elem = out_f32 ? sizeof(float) : sizeof(uint16_t);
  const auto out_row = [&](int64_t h) {
    return static_cast<uint8_t*>(run.out.data) +
           token_offset(run.out, t, seq_q, h) * static_cast<int64_t>(out_elem);
  };

  if (n == 0) {  // lonely query: out 0, lse +inf, max_logits -inf (spec 2.3)
    for (int h = h_begin; h < h_end; ++h) {
      std::memset(out_row(h), 0, out_elem * kHeadDim);
      if (lse_out != nullptr) lse_out[token_offset(run.lse, t, seq_q, h)] = kInf;
      if (max_out != nullptr) max_out[token_offset(run.max_logits, t, seq_q, h)] = -kInf;
    }
    return;
  }

  const int64_t ld = max_candidates_;
  for (int h0 = h_begin; h0 < h_end; h0 += kHeadTile) {
    const int heads = std::min(kHeadTile, h_end - h0);
    // q rows to fp32 (bf16 widening, or the raw e4m3 value); rows past the tile stay zero.
    std::memset(s.q, 0, sizeof(float) * kHeadTile * static_cast<size_t>(d_qk_));
    for (int h = 0; h < heads; ++h) {
      const int64_t off = token_offset(run.q, t, seq_q, h0 + h);
      float* qf = s.q + h * d_qk_;
      if (q_is_fp8_) {
        const uint8_t* q8 = static_cast<const uint8_t*>(run.q.data) + off;
        for (int d = 0; d < d_qk_; ++d) qf[d] = fp8_e4m3_to_f32(q8[d]);
      } else {
        const uint16_t* q16 = static_cast<const uint16_t*>(run.q.data) + off;
        for (int d = 0; d < d_qk_; ++d) qf[d] = bf16_to_f32(q16[d]);
      }
    }
    tile_logits(s.q, s.keys, n, d_qk_, s.logits, ld);

    float lse[kHeadTile];
    float row_max[kHeadTile];
    float inv_sum[kHeadTile];
    for (int h = 0; h < heads; ++h) {
      float* row = s.logits + h * ld;
      float m = -kInf;
      for (int64_t j = 0; j < n; ++j) {
        row[j] *= s.logit_mult[j];
        m = std::max(m, row[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float p = std::exp(row[j] - m);
        sum += p;
        row[j] = p * s.weight[j];
      }
      row_max[h] = m;
      lse[h] = m + std::log(sum);
      inv_sum[h] = 1.0f / sum;
    }
    for (int h = heads; h < kHeadTile; ++h) std::memset(s.logits + h * ld, 0, sizeof(float) * n);
    tile_values(s.logits, ld, s.keys, n, d_qk_, s.acc);

    for (int h = 0; h < heads; ++h) {
      const int head = h0 + h;
      // Sink factor 1 / (1 + exp(sink - lse)); the sink has no value vector. A +inf sink gives 0
      // for any finite or empty row, and NaN when a valid row made the logits NaN (as the
      // reference).
      float f = 1.0f;
#if DSV4_CPU_MUTATION != 1
      if (run.attn_sink != nullptr) f = sink_factor(run.attn_sink[head], lse[h]);
#endif
      uint8_t* o = out_row(head);
      if (f == 0.0f) {
        std::memset(o, 0, out_elem * kHeadDim);
      } else {
        const float c = inv_sum[h] * f;
        const float* a = s.acc + h * kHeadDim;
        if (out_f32) {
          float* of = reinterpret_cast<float*>(o);
          for (int d = 0; d < kHeadDim; ++d) of[d] = a[d] * c;
        } else {
          uint16_t* ob = reinterpret_cast<uint16_t*>(o);
          for (int d = 0; d < kHeadDim; ++d) ob[d] = f32_to_bf16(a[d] * c);
        }
      }
      if (lse_out != nullptr) lse_out[token_offset(run.lse, t, seq_q, head)] = lse[h];
      if (max_out != nullptr) max_out[token_offset(run.max_logits, t, seq_q, head)] = row_max[h];
    }
  }
}

dsv4_status attention_kernel::run(thread_pool& pool, const dsv4_mod_run& run) const {
  const int64_t T = run.num_tokens;
  const int H = plan_.num_heads;
  const dsv4_status st = check_explicit_run(plan_, limits_, run);
  if (st != DSV4_STATUS_OK || T == 0) return st;
  if (pool.size() > num_workers_)
    return fail(DSV4_STATUS_INTERNAL, "pool of %d workers, scratch for %d", pool.size(),
                num_workers_);

  // Work items are (token, head group). Few tokens (decode) split the heads so every worker has
  // work; each group dequantises the token's rows once for all of its heads.
  const int64_t wanted_items = 4 * static_cast<int64_t>(pool.size());
  const int64_t head_tiles = (H + kHeadTile - 1) / kHeadTile;
  int64_t groups = 1;
  if (T < wanted_items) groups = std::min<int64_t>((wanted_items + T - 1) / T, head_tiles);
  const int heads_per_group = static_cast<int>((head_tiles + groups - 1) / groups) * kHeadTile;
  groups = (H + heads_per_group - 1) / heads_per_group;

  const value_scales v = value_scales_of(plan_, run);
  pool.parallel_for(T * groups, [&](int64_t item, int worker) {
    const int64_t t = item / groups;
    const int h_begin = static_cast<int>(item % groups) * heads_per_group;
    attend(run, v, t, h_begin, std::min(H, h_begin + heads_per_group), worker);
  });
  return DSV4_STATUS_OK;
}

}  // namespace cpu
}  // namespace dsv4
