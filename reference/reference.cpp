// Independent float64 reference of DeepSeek-V4 sparse attention, written from the spec alone
// (sections 2.2, 2.3, 3.2 - 3.5). Deliberately shares nothing with backends/: its own bf16, e4m3fn
// and UE8M0 decoding from bits and its own byte maps of the four layouts.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsv4test {
namespace {

// Public DSV4_KV_LAYOUT_* codes (dsv4_types.h), restated so this file depends on no header of the
// library: the reference must stand on its own.
constexpr uint32_t kLayoutBf16 = 1;
constexpr uint32_t kLayoutV4 = 2;         // 584 B, block-major
constexpr uint32_t kLayoutV32 = 3;        // 656 B, token-major
constexpr uint32_t kLayoutPerTensor = 4;  // 512 x e4m3 per entry
constexpr uint32_t kLayoutFp16 = 5;       // 512 x binary16 per entry
constexpr uint32_t kFlagFnuz = 1;         // FP8 bytes are e4m3 FNUZ

constexpr int64_t kDv = 512;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint16_t load_u16_le(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<unsigned>(p[1]) << 8));
}

float load_f32_le(const uint8_t* p) {
  const uint32_t u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                     (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

int64_t capacity(const RefCache& c) { return c.base == nullptr ? 0 : c.num_blocks * c.block_size; }

// Decodes entry `slot` of `c` into out[0 .. head_dim_qk).
void decode_entry_into(const RefCache& c, int64_t slot, double* out) {
  const int64_t block = slot / c.block_size;
  const int64_t e = slot % c.block_size;
  const uint8_t* block_base = c.base + block * c.block_stride_bytes;
  const auto fp8 = [&](uint8_t b) {
    return (c.flags & kFlagFnuz) != 0 ? ref_e4m3fnuz_to_double(b) : ref_e4m3fn_to_double(b);
  };
  switch (c.layout) {
    case kLayoutBf16: {  // spec 3.3: 512 x bf16 at e*1024
      const uint8_t* p = block_base + e * 1024;
      for (int64_t d = 0; d < kDv; ++d) out[d] = ref_bf16_to_double(load_u16_le(p + 2 * d));
      break;
    }
    case kLayoutFp16: {  // spec 12.1: 512 x IEEE binary16 at e*1024
      const uint8_t* p = block_base + e * 1024;
      for (int64_t d = 0; d < kDv; ++d) out[d] = ref_fp16_to_double(load_u16_le(p + 2 * d));
      break;
    }
    case kLayoutV4: {  // spec 3.2: data at e*576 (448 e4m3 + 64 bf16), scales at B*576 + e*8
      const uint8_t* data = block_base + e * 576;
      const uint8_t* scales = block_base + c.block_size * 576 + e * 8;
      for (int64_t d = 0; d < 448; ++d) {
        const double s = ref_ue8m0_to_double(scales[d / 64]);
        out[d] = ref_round_to_bf16(fp8(data[d]) * s);
      }
      for (int64_t j = 0; j < 64; ++j)
        out[448 + j] = ref_bf16_to_double(load_u16_le(data + 448 + 2 * j));
      break;
    }
    case kLayoutV32: {  // spec 3.5: 512 e4m3 (4 tiles of 128), 4 x fp32 scales, 64 x bf16 at e*656
      const uint8_t* p = block_base + e * 656;
      for (int64_t d = 0; d < 512; ++d) {
        const double s = static_cast<double>(load_f32_le(p + 512 + 4 * (d / 128)));
        out[d] = ref_round_to_bf16(fp8(p[d]) * s);
      }
      for (int64_t j = 0; j < 64; ++j)
        out[512 + j] = ref_bf16_to_double(load_u16_le(p + 528 + 2 * j));
      break;
    }
    case kLayoutPerTensor: {  // spec 3.4: 512 x e4m3 at e*512, value = fp8 * kv_scale
      const uint8_t* p = block_base + e * 512;
      for (int64_t d = 0; d < kDv; ++d) out[d] = fp8(p[d]) * c.kv_scale;
      break;
    }
    default:
      for (int64_t d = 0; d < ref_layout_head_dim_qk(c.layout); ++d) out[d] = kNaN;
      break;
  }
}

// Appends the valid candidates of one list (spec 2.3 portable rule) as decoded rows.
void gather_valid(const RefCache& c, const RefList& list, int64_t d_qk, std::vector<double>* rows,
                  int64_t* count) {
  if (c.base == nullptr) return;
  int64_t n = static_cast<int64_t>(list.idx.size());
  if (list.length != -1) n = std::min(n, std::max<int64_t>(list.length, 0));
  const int64_t cap = capacity(c);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = list.idx[static_cast<size_t>(i)];
    if (idx < 0 || idx >= cap) continue;
    const size_t at = rows->size();
    rows->resize(at + static_cast<size_t>(d_qk));
    decode_entry_into(c, idx, rows->data() + at);
    ++*count;
  }
}

}  // namespace

double ref_bf16_to_double(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return static_cast<double>(f);
}

double ref_round_to_bf16(double x) {
  if (!std::isfinite(x) || x == 0.0) return x;
  // bf16: 8 significant bits, fp32's exponent range (min normal 2^-126, subnormal quantum 2^-133).
  int exp2 = 0;
  std::frexp(x, &exp2);  // |x| = m * 2^exp2, m in [0.5, 1)
  const int quantum_exp = std::max(exp2 - 8, -133);
  const double scaled = std::ldexp(x, -quantum_exp);
  const double rounded = std::nearbyint(scaled);  // default rounding mode: nearest, ties to even
  const double r = std::ldexp(rounded, quantum_exp);
  const double kBf16Max = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127
  if (std::fabs(r) > kBf16Max) return std::copysign(kInf, x);
  return r;
}

uint16_t ref_double_to_bf16(double x) {
  if (std::isnan(x)) return static_cast<uint16_t>(std::signbit(x) ? 0xffc0 : 0x7fc0);
  const double r = ref_round_to_bf16(x);
  // r is exactly representable in bf16, hence in fp32; its top 16 bits are the bf16.
  const float f = static_cast<float>(r);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

double ref_e4m3fn_to_double(uint8_t bits) {
  // OCP e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 = NaN.
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return kNaN;
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -9);  // m/8 * 2^-6
  return sign * std::ldexp(8.0 + mantissa, exponent - 7 - 3);                      // 1.m * 2^(e-7)
}

double ref_e4m3fnuz_to_double(uint8_t bits) {
  // e4m3 FNUZ: sign, 4 exponent bits (bias 8), 3 mantissa bits; 0x80 is the only NaN (no -0, no
  // infinities).
  if (bits == 0x80) return kNaN;
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -10);  // m/8 * 2^-7
  return sign * std::ldexp(8.0 + mantissa, exponent - 8 - 3);                       // 1.m * 2^(e-8)
}

double ref_fp16_to_double(uint16_t bits) {
  // IEEE binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits.
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return mantissa != 0 ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -24);
  return sign * std::ldexp(1024.0 + mantissa, exponent - 15 - 10);
}

uint16_t ref_double_to_fp16(double x) {
  // Round to nearest even by searching the 2^16 codes would be slow; use the structure instead:
  // the binary16 values are m * 2^(e-25) with 1024 <= m < 2048 (normal) or m * 2^-24 (subnormal).
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to infinity
  int e = 0;
  std::frexp(a, &e);                              // a = f * 2^e, 0.5 <= f < 1
  const int quantum_exp = std::max(e - 11, -24);  // spacing of the binary16 grid near a
  const double q = std::ldexp(1.0, quantum_exp);
  double m = std::nearbyint(a / q);  // the default rounding mode is to nearest even
  double r = m * q;
  if (r >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);
  if (r < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  int re = 0;
  const double rf = std::frexp(r, &re);  // r = rf * 2^re
  const int mant = static_cast<int>(std::ldexp(rf, 11)) - 1024;
  return static_cast<uint16_t>(sign | ((re - 1 + 15) << 10) | mant);
}

double ref_ue8m0_to_double(uint8_t bits) {
  if (bits == 0xff) return kNaN;
  return std::ldexp(1.0, static_cast<int>(bits) - 127);
}

int64_t ref_layout_head_dim_qk(uint32_t layout) {
  switch (layout) {
    case kLayoutBf16:
    case kLayoutFp16:
    case kLayoutV4:
    case kLayoutPerTensor:
      return 512;
    case kLayoutV32:
      return 576;
    default:
      return 0;
  }
}

int64_t ref_layout_bytes_per_token(uint32_t layout) {
  switch (layout) {
    case kLayoutBf16:
    case kLayoutFp16:
      return 1024;
    case kLayoutV4:
      return 584;
    case kLayoutV32:
      return 656;
    case kLayoutPerTensor:
      return 512;
    default:
      return 0;
  }
}

int64_t ref_layout_min_block_bytes(uint32_t layout, int64_t block_size) {
  if (layout == kLayoutV4) return (block_size * 584 + 575) / 576 * 576;  // FlashMLA's 576 B units
  return block_size * ref_layout_bytes_per_token(layout);
}

std::vector<double> reference_decode_entry(const RefCache& c, int64_t slot) {
  std::vector<double> out(static_cast<size_t>(ref_layout_head_dim_qk(c.layout)), kNaN);
  if (slot >= 0 && slot < capacity(c) && !out.empty()) decode_entry_into(c, slot, out.data());
  return out;
}

RefResult reference_attention(const RefProblem& p) {
  const int64_t T = p.num_tokens;
  const int64_t H = p.num_heads;
  const int64_t d_qk = p.head_dim_qk;
  RefResult r;
  r.out.assign(static_cast<size_t>(T * H * kDv), 0.0);
  r.lse.assign(static_cast<size_t>(T * H), kInf);
  r.max_logits.assign(static_cast<size_t>(T * H), -kInf);
  r.valid_count.assign(static_cast<size_t>(T), 0);

  std::vector<double> rows;    // [n][d_qk] valid candidates of one token: main list, then extra
  std::vector<double> logits;  // [n]
  std::vector<double> acc(static_cast<size_t>(kDv));
  for (int64_t t = 0; t < T; ++t) {
    rows.clear();
    int64_t n = 0;
    if (static_cast<size_t>(t) < p.main_lists.size())
      gather_valid(p.main, p.main_lists[static_cast<size_t>(t)], d_qk, &rows, &n);
    if (static_cast<size_t>(t) < p.extra_lists.size())
      gather_valid(p.extra, p.extra_lists[static_cast<size_t>(t)], d_qk, &rows, &n);
    r.valid_count[static_cast<size_t>(t)] = n;
    if (n == 0) continue;  // lonely row: out 0, lse +inf, max_logits -inf (already set)
    logits.resize(static_cast<size_t>(n));
    for (int64_t h = 0; h < H; ++h) {
      const double* q = p.q.data() + (t * H + h) * d_qk;
      double m = -kInf;
      for (int64_t j = 0; j < n; ++j) {
        const double* k = rows.data() + j * d_qk;
        double dot = 0.0;
        for (int64_t d = 0; d < d_qk; ++d) dot += q[d] * k[d];
        const double s = p.scale * dot;
        logits[static_cast<size_t>(j)] = s;
        m = std::max(m, s);
      }
      // One softmax over both lists; V = the first 512 dims of each key row.
      double z = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < n; ++j) {
        const double w = std::exp(logits[static_cast<size_t>(j)] - m);
        z += w;
        const double* k = rows.data() + j * d_qk;
        for (int64_t d = 0; d < kDv; ++d) acc[static_cast<size_t>(d)] += w * k[d];
      }
      const double lse = m + std::log(z);
      // Spec 2.2: the sink joins the denominator only; -inf = no effect, +inf = output exactly 0.
      double sink_factor = 1.0;
      if (!p.sink.empty()) {
        const double sink = p.sink[static_cast<size_t>(h)];
        if (sink == kInf) {
          sink_factor = 0.0;
        } else if (sink != -kInf) {
          sink_factor = 1.0 / (1.0 + std::exp(sink - lse));
        }
      }
      double* o = r.out.data() + (t * H + h) * kDv;
      for (int64_t d = 0; d < kDv; ++d) o[d] = acc[static_cast<size_t>(d)] / z * sink_factor;
      r.lse[static_cast<size_t>(t * H + h)] = lse;
      r.max_logits[static_cast<size_t>(t * H + h)] = m;
    }
  }
  return r;
}

}  // namespace dsv4test
