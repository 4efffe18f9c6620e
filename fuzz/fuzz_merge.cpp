// dsv4_merge on the CPU backend (spec 12.2): P partial results with fuzzed P, T and H (mismatched
// between the tensors or not), dtypes (unknown codes included), strides (padded, permuted,
// broadcast, malformed), offsets, data pointers and values (NaN, +-inf, huge and denormal lse and
// outputs), the sink present or not, and the args struct's struct_size and reserved field varied.
// Invariants: the call is accepted exactly when every argument is well-formed and agrees with
// out_parts' [P, T, H, 512]; a failing call writes nothing and its message names the argument; a
// successful one never writes its inputs, writes only the described elements of out and lse, and
// writes there what spec 12.2 gives: a NaN lse part propagates, a row whose parts all lack keys
// (lse +-inf) gets out 0 and lse +inf, any other row a finite lse and an out within the rounding of
// a float64 merge, finite whenever the contributing parts are.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "fuzz_support.h"

using namespace dsv4fuzz;

namespace {

constexpr int64_t kDv = 512;
constexpr dsv4_dtype kBf16{DSV4_DTYPE_CODE_BFLOAT, 16, 1};
constexpr dsv4_dtype kF32{DSV4_DTYPE_CODE_FLOAT, 32, 1};
constexpr float kInf = __builtin_inff();

bool same_dtype(const dsv4_dtype& a, const dsv4_dtype& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// A legal layout, half the time other than compact row-major: padded rows, the dimensions in
// another order, or (inputs) one dimension broadcast with stride 0. The last dimension stays
// contiguous when `last_contiguous`. Wrapping arithmetic: shapes may hold edge values, and a
// stride that wraps is simply malformed.
void relayout(FuzzedDataProvider& in, TensorSpec& s, bool last_contiguous, bool input) {
  const size_t n = s.shape.size();
  const int kind = in.ConsumeIntegralInRange<int>(0, input ? 5 : 4);  // 0, 1: compact
  const size_t free_dims = last_contiguous ? n - 1 : n;               // dimensions that may move
  if (kind < 2 || n == 0 || free_dims == 0) return;
  const bool padded = kind == 2 || kind == 4, permuted = kind == 3, broadcast = kind == 5;
  std::vector<size_t> order(n);  // order[0] outermost
  std::iota(order.begin(), order.end(), size_t{0});
  if (permuted)
    for (size_t k = free_dims; k-- > 1;)
      std::swap(order[k], order[in.ConsumeIntegralInRange<size_t>(0, k)]);
  s.strides.assign(n, 0);
  int64_t stride = padded && !last_contiguous ? in.ConsumeIntegralInRange<int64_t>(1, 3) : 1;
  for (size_t k = n; k-- > 0;) {
    const size_t i = order[k];
    s.strides[i] = stride;
    stride = wrap_mul(stride, std::max<int64_t>(s.shape[i], 1));
    if (padded)
      stride = static_cast<int64_t>(static_cast<uint64_t>(stride) +
                                    in.ConsumeIntegralInRange<uint64_t>(1, 4));
  }
  if (broadcast) s.strides[in.ConsumeIntegralInRange<size_t>(0, free_dims - 1)] = 0;
}

// An lse part: mostly moderate (a spread wide enough that weights underflow), else +inf (no key),
// -inf, NaN, huge or denormal. An exhausted input gives moderate values.
float lse_value(FuzzedDataProvider& in, Filler& fill) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 1:
    case 2:
      return kInf;
    case 3:
      return -kInf;
    case 4:
      return __builtin_nanf("");
    case 5:
      return in.PickValueInArray<float>({1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e6f, -1e6f, 3e4f});
    case 6:
      return in.PickValueInArray<float>({1e-40f, -1e-40f, FLT_MIN, 0.0f, -0.0f});
    case 7:
      return static_cast<float>(fill.in_range(-20000, 20000)) / 100.0f;
    default:
      return static_cast<float>(fill.in_range(-3000, 3000)) / 100.0f;
  }
}

float sink_value(FuzzedDataProvider& in, Filler& fill) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 1:
      return kInf;
    case 2:
      return -kInf;
    case 3:
      return __builtin_nanf("");
    case 4:
      return in.PickValueInArray<float>({1e30f, -1e30f, 1e-40f, 0.0f});
    default:
      return static_cast<float>(fill.in_range(-2000, 2000)) / 100.0f;
  }
}

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

float f32_at(const FuzzTensor& t, size_t off) {
  float v;
  std::memcpy(&v, t.storage().data() + off, sizeof v);
  return v;
}

float bf16_at(const FuzzTensor& t, size_t off) {
  uint16_t h;
  std::memcpy(&h, t.storage().data() + off, sizeof h);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// Storage offset of the element at `idx` (a backed tensor, strides as the library reads them).
size_t offset_of(const FuzzTensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0;
  size_t i = 0;
  for (int64_t x : idx) off += x * t.stride(i++);
  return t.first() + static_cast<size_t>(off * t.elem_bytes());
}

// No two described elements share storage (an output written twice holds the last write).
bool distinct_elements(const FuzzTensor& t) {
  std::vector<size_t> at = t.element_offsets();
  std::sort(at.begin(), at.end());
  return std::adjacent_find(at.begin(), at.end()) == at.end();
}

struct Case {
  std::vector<std::unique_ptr<FuzzTensor>> all;
  FuzzTensor* add(const TensorSpec& spec, Filler& fill) {
    all.push_back(std::make_unique<FuzzTensor>(spec, fill));
    return all.back().get();
  }
};

// The library's view of a tensor argument: ndim, and shape / strides read through it.
int64_t dim(FuzzTensor* t, int i) { return t->get()->shape[i]; }
bool ndim_is(FuzzTensor* t, int n) { return t->get()->ndim == n; }
// Stride of dimension i as given (compact when NULL); only dimensions with extent > 1 matter.
bool stride_one(FuzzTensor* t, int i) {
  return t->get()->strides == nullptr || t->get()->strides[i] == 1 || dim(t, i) <= 1;
}

// Compact strides whose element count overflows int64: the library may refuse such a tensor
// even when it is empty (spec 12.3 speaks of data and byte_offset only), so neither verdict is
// required of it.
bool compact_overflows(FuzzTensor* t) {
  const dsv4_tensor* d = t->get();
  if (d->strides != nullptr || d->ndim < 1 || d->ndim > 8) return false;
  int64_t n = 1;
  for (int32_t i = 0; i < d->ndim; ++i)
    if (d->shape[i] >= 0 && __builtin_mul_overflow(n, std::max<int64_t>(d->shape[i], 1), &n))
      return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  Filler fill(in.ConsumeIntegral<uint64_t>());
  // The problem: P parts of T tokens x H heads (edge values now and then: P must fit int32 and be
  // at least 1; huge ones are only describable by an empty tensor).
  const int64_t P = pick(in, 0, 9);
  const int64_t T = pick(in, 0, 5);
  const int64_t H = pick(in, 0, 8);
  const bool parts_f32 = in.ConsumeBool();
  // Everything but the tensors and values is chosen first, while the input lasts; rare choices
  // are the ones an exhausted input (which gives 0 and false) does not take.
  const bool has_sink = in.ConsumeBool();
  const bool has_lse = in.ConsumeIntegralInRange<int>(0, 3) != 3;
  struct {
    dsv4_merge_args a;
    uint8_t tail[64];  // struct_size may claim more than the struct
  } buffer;
  std::memset(buffer.tail, 0xA5, sizeof buffer.tail);
  dsv4_merge_args& a = buffer.a;
  dsv4_merge_args_init(&a);
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31)
    a.struct_size = in.PickValueInArray<uint32_t>({0u, 4u, uint32_t{sizeof a} - 8,
                                                   uint32_t{sizeof a} - 1, uint32_t{sizeof a} + 8,
                                                   uint32_t{sizeof a} + 64, UINT32_MAX});
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31)
    a.reserved = in.ConsumeIntegralInRange<uint32_t>(1, 9);
  const int missing = in.ConsumeIntegralInRange<int>(0, 39);  // 1..5: one argument NULL
  // Parts' values: +-4 times a scale, with NaN, +-inf, huge and denormal elements at a chosen rate.
  const uint64_t special_every =
      in.ConsumeIntegralInRange<int>(0, 3) == 3 ? in.ConsumeIntegralInRange<uint64_t>(1, 4096) : 0;
  const float scale = in.PickValueInArray<float>({1.0f, 1.0f, 1.0f, 1e-3f, 1e30f, 1e-39f});

  TensorSpec parts = compact(parts_f32 ? kF32 : kBf16, {P, T, H, kDv});
  TensorSpec lse_parts = compact(kF32, {P, T, H});
  TensorSpec sink = compact(kF32, {H});
  TensorSpec out = compact(kBf16, {T, H, kDv});
  TensorSpec lse = compact(kF32, {T, H});
  relayout(in, parts, true, true);
  relayout(in, lse_parts, false, true);
  relayout(in, out, true, false);
  relayout(in, lse, false, false);
  for (TensorSpec* s : {&parts, &lse_parts, &sink, &out, &lse}) {
    mutate(in, *s);
    if (in.ConsumeIntegralInRange<int>(0, 31) == 31) {  // codes mutate() does not try
      static const dsv4_dtype kOdd[] = {{3, 32, 1},   {5, 64, 1},  {6, 8, 1},
                                        {255, 16, 1}, {4, 32, 1},  {2, 64, 1},
                                        {4, 16, 2},   {10, 32, 1}, {2, 16, 1}};
      s->dtype = in.PickValueInArray(kOdd);
    }
  }
  Case c;
  FuzzTensor* tparts = c.add(parts, fill);
  FuzzTensor* tlse_parts = c.add(lse_parts, fill);
  FuzzTensor* tsink = has_sink ? c.add(sink, fill) : nullptr;
  FuzzTensor* tout = c.add(out, fill);
  FuzzTensor* tlse = has_lse ? c.add(lse, fill) : nullptr;
  for (const auto& t : c.all)
    if (t->too_big()) return 0;

  const auto part_value = [&] {
    static const float kSpecial[] = {__builtin_nanf(""), kInf,   -kInf, 1e37f, -1e37f, FLT_MAX,
                                     -FLT_MAX,           1e-40f, -0.0f, 0.0f};
    const uint64_t r = fill.next();
    if (special_every != 0 && r % special_every == 0)
      return kSpecial[(r >> 32) % (sizeof kSpecial / sizeof kSpecial[0])];
    return scale * static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)) /
           static_cast<float>(1 << 21);
  };
  if (tparts->backed() && same_dtype(tparts->spec().dtype, kF32))
    tparts->fill_elements<float>(part_value);
  if (tparts->backed() && same_dtype(tparts->spec().dtype, kBf16))
    tparts->fill_elements<uint16_t>([&] {
      const float v = part_value();
      uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      return static_cast<uint16_t>(u >> 16);  // truncation keeps NaN a NaN
    });
  if (tlse_parts->backed() && tlse_parts->elem_bytes() == 4)
    tlse_parts->fill_elements<float>([&] { return lse_value(in, fill); });
  if (tsink != nullptr && tsink->backed() && tsink->elem_bytes() == 4)
    tsink->fill_elements<float>([&] { return sink_value(in, fill); });

  a.out_parts = missing == 1 ? nullptr : tparts->get();
  a.lse_parts = missing == 2 ? nullptr : tlse_parts->get();
  a.out = missing == 3 ? nullptr : tout->get();
  a.attn_sink = tsink ? tsink->get() : nullptr;
  a.lse = tlse ? tlse->get() : nullptr;
  dsv4_ctx* ctx = missing == 4 ? nullptr : cpu_ctx();
  const dsv4_merge_args* args = missing == 5 ? nullptr : &a;

  // Whether the call must succeed (every argument well-formed and of the shape out_parts sets),
  // must fail, or may do either (see compact_overflows).
  bool valid = ctx != nullptr && args != nullptr && a.struct_size == sizeof a && a.reserved == 0 &&
               a.out_parts != nullptr && a.lse_parts != nullptr && a.out != nullptr;
  bool either = false;
  for (const auto& t : c.all) {  // every tensor is passed (unless one is missing: then invalid)
    valid = valid && !t->must_reject();
    either = either || compact_overflows(t.get());
  }
  if (valid) {
    valid = ndim_is(tparts, 4) &&
            (same_dtype(tparts->spec().dtype, kF32) || same_dtype(tparts->spec().dtype, kBf16)) &&
            dim(tparts, 3) == kDv && stride_one(tparts, 3) && dim(tparts, 0) >= 1 &&
            dim(tparts, 0) <= INT32_MAX && dim(tparts, 1) <= INT32_MAX &&
            dim(tparts, 2) <= INT32_MAX;
  }
  if (valid) {
    valid = ndim_is(tlse_parts, 3) && same_dtype(tlse_parts->spec().dtype, kF32) &&
            dim(tlse_parts, 0) == dim(tparts, 0) && dim(tlse_parts, 1) == dim(tparts, 1) &&
            dim(tlse_parts, 2) == dim(tparts, 2);
    valid = valid && ndim_is(tout, 3) && same_dtype(tout->spec().dtype, kBf16) &&
            dim(tout, 0) == dim(tparts, 1) && dim(tout, 1) == dim(tparts, 2) &&
            dim(tout, 2) == kDv && stride_one(tout, 2);
    if (tsink != nullptr)
      valid = valid && ndim_is(tsink, 1) && same_dtype(tsink->spec().dtype, kF32) &&
              dim(tsink, 0) == dim(tparts, 2) && stride_one(tsink, 0);
    if (tlse != nullptr)
      valid = valid && ndim_is(tlse, 2) && same_dtype(tlse->spec().dtype, kF32) &&
              dim(tlse, 0) == dim(tparts, 1) && dim(tlse, 1) == dim(tparts, 2);
  }

  if (debug()) {
    std::fprintf(stderr, "P %lld T %lld H %lld struct_size %u reserved %u missing %d%s%s\n",
                 static_cast<long long>(P), static_cast<long long>(T), static_cast<long long>(H),
                 a.struct_size, a.reserved, missing, valid ? " valid" : "",
                 either ? " either" : "");
    for (const auto& t : c.all) std::fprintf(stderr, "%s\n", t->describe("tensor").c_str());
  }
  std::vector<std::vector<uint8_t>> before;
  for (const auto& t : c.all) before.push_back(t->storage());
  const dsv4_status st = dsv4_merge(ctx, args);
  const std::string why = last_error(st);
  const std::string message = dsv4_last_error_message();
  if (debug()) std::fprintf(stderr, "%s\n", why.c_str());

  FUZZ_CHECK(!(valid && !either && st != DSV4_STATUS_OK), "a valid merge was refused: " + why);
  FUZZ_CHECK(!(!valid && st == DSV4_STATUS_OK), "an invalid merge was accepted");
  if (st != DSV4_STATUS_OK) {
    FUZZ_CHECK(st == DSV4_STATUS_INVALID_ARGUMENT ||
                   (st == DSV4_STATUS_ABI_MISMATCH && a.struct_size > sizeof a),
               "unexpected status: " + why);
    FUZZ_CHECK(message.rfind("dsv4_merge: ", 0) == 0 &&
                   (message.find("args->") != std::string::npos ||
                    message.find("args is NULL") != std::string::npos ||
                    message.find("ctx is NULL") != std::string::npos),
               "the message names no argument: " + why);
  }
  for (size_t i = 0; i < c.all.size(); ++i) {
    const FuzzTensor* t = c.all[i].get();
    const bool output = t == tout || t == tlse;
    if (!output || st != DSV4_STATUS_OK)
      FUZZ_CHECK(t->storage() == before[i], std::string(output ? "a failing merge wrote an output: "
                                                               : "a merge wrote an input: ") +
                                                t->describe("tensor") + " (" + why + ")");
    else
      FUZZ_CHECK(t->unchanged_outside_elements(before[i]),
                 "a merge wrote outside an output's elements: " + t->describe("tensor"));
  }
  if (st != DSV4_STATUS_OK || !tout->backed()) return 0;  // failed, or nothing to merge

  // Success over T x H rows: each row against a float64 merge of what the parts hold.
  const int64_t np = dim(tparts, 0), nt = dim(tparts, 1), nh = dim(tparts, 2);
  const bool part_bf16 = same_dtype(tparts->spec().dtype, kBf16);
  const bool check_out = distinct_elements(*tout);
  const bool check_lse = tlse != nullptr && distinct_elements(*tlse);
  std::vector<float> l(static_cast<size_t>(np));
  int64_t nan_rows = 0, empty_rows = 0, merged_rows = 0, skipped = 0;  // for DSV4_FUZZ_DEBUG
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      // Messages are built only when a check fails.
      const auto row = [&] {
        return " (token " + std::to_string(t) + ", head " + std::to_string(h) + ")";
      };
      bool nan = false;
      double m = -HUGE_VAL;
      int64_t finite = 0;
      for (int64_t p = 0; p < np; ++p) {
        l[static_cast<size_t>(p)] = f32_at(*tlse_parts, offset_of(*tlse_parts, {p, t, h}));
        const float v = l[static_cast<size_t>(p)];
        nan = nan || std::isnan(v);
        if (std::isfinite(v)) {
          m = std::max(m, static_cast<double>(v));
          ++finite;
        }
      }
      const float got_lse = check_lse ? f32_at(*tlse, offset_of(*tlse, {t, h})) : 0.0f;
      const auto out_at = [&](int64_t d) { return bf16_at(*tout, offset_of(*tout, {t, h, d})); };
      if (nan) {  // spec 12.2: a NaN propagates
        ++nan_rows;
        FUZZ_CHECK(!check_lse || std::isnan(got_lse), "a NaN lse part did not propagate" + row());
        for (int64_t d = 0; check_out && d < kDv; ++d)
          FUZZ_CHECK(std::isnan(out_at(d)), "a NaN lse part did not reach out" + row());
        continue;
      }
      if (finite == 0) {  // no part holds a key: out 0, lse +inf, whatever the sink
        ++empty_rows;
        FUZZ_CHECK(!check_lse || got_lse == kInf, "a row without keys has lse != +inf" + row());
        for (int64_t d = 0; check_out && d < kDv; ++d)
          FUZZ_CHECK(out_at(d) == 0.0f, "a row without keys has out != 0" + row());
        continue;
      }
      ++merged_rows;
      double sum = 0.0, lmax = 0.0;
      for (float v : l)
        if (std::isfinite(v)) {
          sum += std::exp(static_cast<double>(v) - m);
          lmax = std::max(lmax, std::fabs(static_cast<double>(v)));
        }
      const double L = m + std::log(sum);
      lmax = std::max(lmax, std::fabs(L));
      if (check_lse) {
        FUZZ_CHECK(std::isfinite(got_lse), "a row with keys has a non-finite lse" + row());
        FUZZ_CHECK(std::fabs(static_cast<double>(got_lse) - L) <= 2e-6 + 2.4e-7 * std::fabs(L),
                   "merged lse " + num(got_lse) + " but " + num(L) + row());
      }
      if (!check_out) continue;
      const float s = tsink != nullptr ? f32_at(*tsink, offset_of(*tsink, {h})) : -kInf;
      if (std::isnan(s)) continue;  // the spec does not say what a NaN sink gives
      const double f = s == -kInf ? 1.0 : 1.0 / (1.0 + std::exp(static_cast<double>(s) - L));
      // Relative errors of the float weights and sink factor: the lse's rounding, subtraction and
      // exp; the accuracy check is kept to magnitudes where they are small.
      const bool moderate = lmax <= 1e4 && (std::fabs(s) <= 1e4 || std::isinf(s));
      const double e_w = 4e-6 + 5e-7 * lmax;
      const double e_f = std::isinf(s) ? 0.0 : 4e-6 + 2.4e-7 * (std::fabs(s) + std::fabs(L));
      // Each part's weight and where its row starts (the last dimension is contiguous).
      std::vector<double> w(static_cast<size_t>(np), 0.0);
      std::vector<size_t> part_row(static_cast<size_t>(np), 0);
      for (int64_t p = 0; p < np; ++p) {
        const float lp = l[static_cast<size_t>(p)];
        if (!std::isfinite(lp)) continue;  // an empty part contributes nothing, NaN or not
        w[static_cast<size_t>(p)] = std::exp(static_cast<double>(lp) - L);
        part_row[static_cast<size_t>(p)] = offset_of(*tparts, {p, t, h, 0});
      }
      const size_t part_elem = static_cast<size_t>(tparts->elem_bytes());
      for (int64_t d = 0; d < kDv; ++d) {
        double want = 0.0, mass = 0.0, most = 0.0, lost = 0.0;
        bool special = false, nan_at_max = false;
        for (int64_t p = 0; p < np; ++p) {
          const float lp = l[static_cast<size_t>(p)];
          if (!std::isfinite(lp)) continue;
          const size_t off = part_row[static_cast<size_t>(p)] + static_cast<size_t>(d) * part_elem;
          const double o = part_bf16 ? bf16_at(*tparts, off) : f32_at(*tparts, off);
          if (!std::isfinite(o)) {
            special = true;
            nan_at_max = nan_at_max || (std::isnan(o) && lp == m);
            continue;
          }
          want += w[static_cast<size_t>(p)] * o;
          mass += w[static_cast<size_t>(p)] * std::fabs(o);
          // A weight in float's subnormal range keeps little of itself, below it none.
          lost += (w[static_cast<size_t>(p)] < 0x1p-120 ? w[static_cast<size_t>(p)] : 0.0) *
                      std::fabs(o) +
                  0x1p-149 * std::fabs(o);
          most = std::max(most, std::fabs(o));
        }
        const float got = out_at(d);
        const double tol =
            f * mass * (std::ldexp(1.0, -8) + e_w + e_f + 1e-7 * static_cast<double>(finite)) +
            f * lost + (f < 0x1p-120 ? f * mass : 0.0) + 1e-30 * (1.0 + mass);
        const auto parts_at = [&](int64_t e) {
          std::string text;
          for (int64_t p = 0; p < np; ++p) {
            const size_t off = offset_of(*tparts, {p, t, h, e});
            text += " (" + num(l[static_cast<size_t>(p)]) + ", " +
                    num(part_bf16 ? bf16_at(*tparts, off) : f32_at(*tparts, off)) + ")";
          }
          return text;
        };
        const auto at = [&] {
          return row() + " d " + std::to_string(d) + ": got " + num(got) + ", float64 " +
                 num(want * f) + ", tolerance " + num(tol) + "; lse " + num(L) + ", sink " +
                 num(s) + ", sink factor " + num(f) + ", weighted |parts| " + num(mass) +
                 "; parts (lse, out)" + parts_at(d);
        };
        if (nan_at_max) {  // the heaviest part's NaN (weight >= 1/P) propagates
          FUZZ_CHECK(std::isnan(got), "a NaN in a contributing part did not propagate" + at());
          continue;
        }
        if (special) {  // an infinite element: inf, or NaN where infinities cancel
          ++skipped;
          continue;
        }
        if (most * static_cast<double>(finite) > 1e38) continue;  // may overflow bf16
        FUZZ_CHECK(std::isfinite(got), "finite parts merged to a non-finite out" + at());
        if (!moderate) continue;
        FUZZ_CHECK(std::fabs(static_cast<double>(got) - want * f) <= tol, "merged out off" + at());
      }
    }
  }
  if (debug())
    std::fprintf(stderr,
                 "rows: %lld with a NaN part, %lld without keys, %lld merged; %lld elements with "
                 "an infinite part%s%s\n",
                 static_cast<long long>(nan_rows), static_cast<long long>(empty_rows),
                 static_cast<long long>(merged_rows), static_cast<long long>(skipped),
                 check_out ? "" : "; out overlaps itself", check_lse ? "" : "; lse unchecked");
  return 0;
}
