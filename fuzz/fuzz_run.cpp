// dsv4_run in explicit mode on the CPU backend: a small fuzzed plan, then fuzzed run arguments
// (every tensor well-formed, malformed, missing or misplaced; index values valid, invalid or
// anything). Invariants: a call with a malformed tensor fails; a failing call writes no output; a
// successful one writes only the described output elements and never its inputs; the message of a
// failure names the function.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_support.h"
#include "reference.h"

using namespace dsv4fuzz;

namespace {

constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr dsv4_dtype kI32{DSV4_DTYPE_CODE_INT, 32, 1};
constexpr dsv4_dtype kU8{DSV4_DTYPE_CODE_UINT, 8, 1};
constexpr dsv4_dtype kE4m3{DSV4_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1};
constexpr dsv4_dtype kF16{DSV4_DTYPE_CODE_FLOAT, 16, 1};

bool same_dtype(const dsv4_dtype& a, const dsv4_dtype& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

struct PlanDeleter {
  void operator()(dsv4_plan* p) const { dsv4_plan_destroy(p); }
};

dsv4_kv_cache_desc fuzz_desc(FuzzedDataProvider& in, uint32_t layout) {
  dsv4_kv_cache_desc d{layout, in.ConsumeIntegralInRange<int32_t>(1, 70), 0, 1.0f, 0};
  const int64_t min = dsv4test::ref_layout_min_block_bytes(layout, d.block_size);
  d.block_stride_bytes = min + in.PickValueInArray<int64_t>({0, 0, 16, 576, 3});
  if (layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR) d.kv_scale = 0.0371f;
  return d;
}

// A cache tensor [blocks, block bytes] (uint8, or the row type of the bf16 and fp16 layouts).
TensorSpec cache_spec(FuzzedDataProvider& in, const dsv4_kv_cache_desc& d) {
  const bool rows = (d.layout == DSV4_KV_LAYOUT_BF16 || d.layout == DSV4_KV_LAYOUT_FP16) &&
                    d.block_stride_bytes % 2 == 0 && in.ConsumeBool();
  const dsv4_dtype row_type = d.layout == DSV4_KV_LAYOUT_BF16 ? kBf16 : kF16;
  TensorSpec s =
      compact(rows ? row_type : kU8, {in.ConsumeIntegralInRange<int64_t>(0, 4),
                                      rows ? d.block_stride_bytes / 2 : d.block_stride_bytes});
  mutate(in, s);
  return s;
}

// Candidate lists of one cache: dense [T, width] (or [B, S, width]) or CSR indices + indptr, and
// optional lengths.
struct ListSpecs {
  TensorSpec indices, indptr, lengths;
  bool has_indptr = false, has_lengths = false;
};

ListSpecs list_specs(FuzzedDataProvider& in, bool csr, int64_t B, int64_t S, bool q4,
                     int64_t width) {
  ListSpecs l;
  const int64_t T = B * S;
  if (csr) {
    l.indices = compact(kI32, {in.ConsumeIntegralInRange<int64_t>(0, T * width + 2)});
    l.indptr = compact(kI32, {T + 1});
    l.has_indptr = true;
  } else {
    l.indices = q4 && in.ConsumeBool() ? compact(kI32, {B, S, width}) : compact(kI32, {T, width});
  }
  l.has_lengths = in.ConsumeBool();
  l.lengths = q4 && in.ConsumeBool() ? compact(kI32, {B}) : compact(kI32, {T});
  mutate(in, l.indices);
  mutate(in, l.indptr);
  mutate(in, l.lengths);
  return l;
}

// Index values: valid slots, -1, just beyond the capacity, anything.
int32_t slot_value(FuzzedDataProvider& in, int64_t capacity) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return -1;
    case 1:
      return static_cast<int32_t>(capacity);
    case 2:
      return pick32(in, INT32_MIN, INT32_MAX);
    default:
      return capacity > 0
                 ? static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, capacity - 1))
                 : -1;
  }
}

struct Case {
  std::vector<std::unique_ptr<FuzzTensor>> all;
  FuzzTensor* add(const TensorSpec& spec, Filler& fill) {
    all.push_back(std::make_unique<FuzzTensor>(spec, fill));
    return all.back().get();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  Filler fill(in.ConsumeIntegral<uint64_t>());
  // The plan: small, valid.
  dsv4_plan_options o;
  dsv4_plan_options_init(&o);
  const uint32_t layout = in.PickValueInArray<uint32_t>(
      {DSV4_KV_LAYOUT_BF16, DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_FP8_V32_656B,
       DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR, DSV4_KV_LAYOUT_FP16});
  o.flags = in.PickValueInArray<uint32_t>({DSV4_PLAN_FLAG_NONE, DSV4_PLAN_FLAG_NONE,
                                           DSV4_PLAN_FLAG_BATCH_INVARIANT,
                                           DSV4_PLAN_FLAG_REFERENCE_KERNEL});
  // fp32 out: the partial results dsv4_merge takes; bf16 otherwise.
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) o.out_dtype = kF32;
  o.num_heads = in.ConsumeIntegralInRange<int32_t>(1, 8);
  o.head_dim_qk = static_cast<int32_t>(dsv4test::ref_layout_head_dim_qk(layout));
  o.swa_cache = fuzz_desc(in, layout);
  if (layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR && in.ConsumeBool()) o.q_dtype = kE4m3;
  const bool extra = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  if (extra) {
    o.extra_cache = fuzz_desc(
        in, layout == DSV4_KV_LAYOUT_FP8_V32_656B
                ? layout
                : in.PickValueInArray<uint32_t>({layout, DSV4_KV_LAYOUT_BF16,
                                                 DSV4_KV_LAYOUT_FP8_V4_584B, DSV4_KV_LAYOUT_FP16}));
    if (o.q_dtype.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN) o.extra_cache = fuzz_desc(in, layout);
    o.extra_topk = in.ConsumeIntegralInRange<int32_t>(1, 32);
  }
  const bool csr = in.ConsumeBool();
  o.index_format = csr ? DSV4_INDEX_CSR : DSV4_INDEX_DENSE;
  o.topk = in.ConsumeIntegralInRange<int32_t>(1, 48);
  o.max_tokens = in.ConsumeIntegralInRange<int32_t>(1, 6);
  dsv4_plan* raw = nullptr;
  if (dsv4_plan_create(cpu_ctx(), &o, &raw) != DSV4_STATUS_OK) return 0;
  const std::unique_ptr<dsv4_plan, PlanDeleter> plan(raw);

  // The run's tensors.
  const bool q4 = in.ConsumeBool();
  const int64_t B = in.ConsumeIntegralInRange<int64_t>(0, 4);
  const int64_t S = q4 ? in.ConsumeIntegralInRange<int64_t>(1, 3) : 1;
  const int64_t T = B * S;
  const int64_t H = o.num_heads, D = o.head_dim_qk;
  Case c;
  TensorSpec q = q4 ? compact(o.q_dtype, {B, S, H, D}) : compact(o.q_dtype, {T, H, D});
  // Mostly the plan's out dtype; sometimes the other one, which must be refused.
  const dsv4_dtype out_type = in.ConsumeIntegralInRange<int>(0, 7) != 0
                                  ? o.out_dtype
                                  : (o.out_dtype.code == kF32.code ? kBf16 : kF32);
  TensorSpec out = q4 ? compact(out_type, {B, S, H, 512}) : compact(out_type, {T, H, 512});
  const int stat_form = in.ConsumeIntegralInRange<int>(0, 2);  // [T,H], [B,S,H], [B,H,S]
  TensorSpec lse = stat_form == 0   ? compact(kF32, {T, H})
                   : stat_form == 1 ? compact(kF32, {B, S, H})
                                    : compact(kF32, {B, H, S});
  TensorSpec max_logits = lse;
  TensorSpec sink = compact(kF32, {H});
  for (TensorSpec* s : {&q, &out, &lse, &max_logits, &sink}) mutate(in, *s);
  FuzzTensor* tq = c.add(q, fill);
  FuzzTensor* tout = c.add(out, fill);
  FuzzTensor* tlse = in.ConsumeBool() ? c.add(lse, fill) : nullptr;
  FuzzTensor* tmax = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? c.add(max_logits, fill) : nullptr;
  FuzzTensor* tsink = in.ConsumeBool() ? c.add(sink, fill) : nullptr;
  FuzzTensor* tcache = c.add(cache_spec(in, o.swa_cache), fill);
  FuzzTensor* textra = extra || in.ConsumeIntegralInRange<int>(0, 15) == 0
                           ? c.add(cache_spec(in, extra ? o.extra_cache : o.swa_cache), fill)
                           : nullptr;
  // Slots the caches hold as described (perhaps mutated), for choosing index values.
  const auto slots_of = [](const FuzzTensor* t, int32_t block_size) -> int64_t {
    if (t == nullptr || t->spec().shape.empty()) return 0;
    const int64_t blocks = std::clamp<int64_t>(t->spec().shape[0], 0, 1 << 20);
    return blocks * block_size;
  };
  const int64_t capacity = slots_of(tcache, o.swa_cache.block_size);
  const int64_t extra_capacity = slots_of(textra, o.extra_cache.block_size);
  const ListSpecs main = list_specs(in, csr, B, S, q4, o.topk);
  FuzzTensor* tidx =
      in.ConsumeIntegralInRange<int>(0, 15) != 0 ? c.add(main.indices, fill) : nullptr;
  FuzzTensor* tptr = main.has_indptr || in.ConsumeIntegralInRange<int>(0, 15) == 0
                         ? c.add(csr ? main.indptr : compact(kI32, {T + 1}), fill)
                         : nullptr;
  FuzzTensor* tlen = main.has_lengths ? c.add(main.lengths, fill) : nullptr;
  FuzzTensor *xidx = nullptr, *xptr = nullptr, *xlen = nullptr;
  if (extra || in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    const ListSpecs x = list_specs(in, csr, B, S, q4, extra ? o.extra_topk : 4);
    xidx = c.add(x.indices, fill);
    xptr = x.has_indptr ? c.add(x.indptr, fill) : nullptr;
    xlen = x.has_lengths ? c.add(x.lengths, fill) : nullptr;
  }
  FuzzTensor* paged =
      in.ConsumeIntegralInRange<int>(0, 31) == 0 ? c.add(compact(kI32, {T}), fill) : nullptr;
  for (const auto& t : c.all)
    if (t->too_big()) return 0;

  // Values: index lists mostly valid; CSR offsets mostly monotone; lengths around the width.
  const auto fill_list = [&](FuzzTensor* idx, FuzzTensor* ptr, FuzzTensor* len, int64_t cap,
                             int64_t width) {
    if (idx != nullptr && idx->backed() && idx->elem_bytes() == 4)
      idx->fill_elements<int32_t>([&] { return slot_value(in, cap); });
    if (ptr != nullptr && ptr->backed() && ptr->elem_bytes() == 4) {
      const int64_t nnz = idx != nullptr && !idx->spec().shape.empty()
                              ? std::clamp<int64_t>(idx->spec().shape[0], 0, 1 << 20)
                              : 0;
      int32_t at = 0;
      const bool monotone = in.ConsumeIntegralInRange<int>(0, 7) != 0;
      ptr->fill_elements<int32_t>([&] {
        if (!monotone) return pick32(in, -2, static_cast<int32_t>(nnz) + 2);
        const int32_t v = at;
        at = static_cast<int32_t>(
            std::min<int64_t>(nnz, at + in.ConsumeIntegralInRange<int64_t>(0, width)));
        return v;
      });
    }
    if (len != nullptr && len->backed() && len->elem_bytes() == 4)
      len->fill_elements<int32_t>([&] { return pick32(in, -2, static_cast<int32_t>(width) + 2); });
  };
  fill_list(tidx, tptr, tlen, capacity, o.topk);
  fill_list(xidx, xptr, xlen, extra_capacity, o.extra_topk);
  if (tsink != nullptr && tsink->backed() && tsink->elem_bytes() == 4)
    tsink->fill_elements<float>([&] {
      return in.PickValueInArray<float>(
          {0.5f, -3.0f, 20.0f, __builtin_inff(), -__builtin_inff(), __builtin_nanf("")});
    });

  dsv4_run_args a;
  dsv4_run_args_init(&a);
  a.q = tq->get();
  a.out = tout->get();
  a.lse = tlse ? tlse->get() : nullptr;
  a.max_logits = tmax ? tmax->get() : nullptr;
  a.attn_sink = tsink ? tsink->get() : nullptr;
  a.swa_cache = tcache->get();
  a.extra_cache = textra ? textra->get() : nullptr;
  a.indices = tidx ? tidx->get() : nullptr;
  a.indptr = tptr ? tptr->get() : nullptr;
  a.lengths = tlen ? tlen->get() : nullptr;
  a.extra_indices = xidx ? xidx->get() : nullptr;
  a.extra_indptr = xptr ? xptr->get() : nullptr;
  a.extra_lengths = xlen ? xlen->get() : nullptr;
  a.slot_mapping = paged ? paged->get() : nullptr;
  size_t ws_bytes = 0;
  dsv4_plan_get_workspace_size(plan.get(), &ws_bytes);
  std::vector<uint8_t> workspace(ws_bytes + 64);
  a.workspace = ws_bytes > 0 || in.ConsumeBool() ? workspace.data() : nullptr;
  a.workspace_bytes = ws_bytes;
  if (ws_bytes > 0 && in.ConsumeIntegralInRange<int>(0, 15) == 0) a.workspace_bytes = ws_bytes - 1;
  if (in.ConsumeIntegralInRange<int>(0, 63) == 0) a.reserved = 1;

  std::vector<std::vector<uint8_t>> before;
  bool malformed = false;
  for (const auto& t : c.all) {
    before.push_back(t->storage());
    malformed = malformed || t->must_reject();
  }
  if (debug())
    for (const auto& t : c.all) std::fprintf(stderr, "%s\n", t->describe("tensor").c_str());
  const dsv4_status st = dsv4_run(plan.get(), &a);
  const std::string why = last_error(st);
  FUZZ_CHECK(!(malformed && st == DSV4_STATUS_OK), "a malformed tensor was accepted");
  FUZZ_CHECK(!(st == DSV4_STATUS_OK && !same_dtype(tout->spec().dtype, o.out_dtype)),
             "out of another dtype than the plan's out_dtype was accepted");
  if (st != DSV4_STATUS_OK)
    FUZZ_CHECK(std::string(dsv4_last_error_message()).rfind("dsv4_run: ", 0) == 0, why);
  for (size_t i = 0; i < c.all.size(); ++i) {
    const FuzzTensor* t = c.all[i].get();
    const bool output = t == tout || t == tlse || t == tmax;
    if (!output || st != DSV4_STATUS_OK)
      FUZZ_CHECK(t->storage() == before[i], std::string(output ? "a failing run wrote an output: "
                                                               : "a run wrote an input: ") +
                                                t->describe("tensor") + " (" + why + ")");
    else
      FUZZ_CHECK(t->unchanged_outside_elements(before[i]),
                 "a run wrote outside an output's elements: " + t->describe("tensor"));
  }
  return 0;
}
