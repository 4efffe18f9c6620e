// Independent float64 reference of DeepSeek-V4 sparse attention (spec sections 2 and 3).
// Written from the spec alone: it shares NO code with backends/ (own FP8/bf16 decoding, own byte
// maps), so a bug in backends/common cannot hide in both.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4test {

// Layout codes are the public DSV4_KV_LAYOUT_* values.
struct RefCache {
  const uint8_t* base = nullptr;  // block 0, host memory; nullptr = absent
  uint32_t layout = 0;
  int64_t block_size = 0;
  int64_t block_stride_bytes = 0;
  int64_t num_blocks = 0;
  double kv_scale = 1.0;  // per-tensor FP8 only
  uint32_t flags = 0;     // DSV4_KV_CACHE_FLAG_* (FP8 FNUZ bytes)
};

// One candidate list of one token: raw index values as the caller wrote them, and the length cap
// (-1 = no cap). The reference applies the validity rule of spec 2.3 itself.
struct RefList {
  std::vector<int32_t> idx;
  int64_t length = -1;
};

struct RefProblem {
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t head_dim_qk = 512;
  std::vector<double> q;     // [T][H][d_qk] query values (already dequantised, e.g. bf16 -> double)
  double scale = 0.0;        // logit scale
  std::vector<double> sink;  // [H] or empty (no sink); +-inf allowed
  RefCache main;             // the indices / SWA cache
  RefCache extra;            // the extra / compressed cache (base nullptr if absent)
  std::vector<RefList> main_lists;   // [T]
  std::vector<RefList> extra_lists;  // [T] or empty
};

struct RefResult {
  std::vector<double> out;           // [T][H][512], NOT rounded to bf16
  std::vector<double> lse;           // [T][H], natural log, sink excluded, +inf when no valid key
  std::vector<double> max_logits;    // [T][H], -inf when no valid key
  std::vector<int64_t> valid_count;  // [T] number of valid candidates (for tests' own checks)
};

// Computes the reference in float64.
RefResult reference_attention(const RefProblem& p);

// Decodes one cache entry (all head_dim_qk dims) to double; exposed for KV-writer tests.
std::vector<double> reference_decode_entry(const RefCache& c, int64_t slot);

// Independent scalar codecs (spec section 3), for tests that build inputs or read outputs.
double ref_bf16_to_double(uint16_t bits);
uint16_t ref_double_to_bf16(double x);        // round to nearest even; NaN -> quiet NaN
double ref_round_to_bf16(double x);           // nearest bf16 value (RNE), as a double
double ref_e4m3fn_to_double(uint8_t bits);    // OCP float8_e4m3fn; 0x7f / 0xff are NaN
double ref_e4m3fnuz_to_double(uint8_t bits);  // e4m3 FNUZ (bias 8); 0x80 is the only NaN
double ref_fp16_to_double(uint16_t bits);     // IEEE binary16
uint16_t ref_double_to_fp16(double x);        // round to nearest even; beyond 65504 -> +-inf
double ref_ue8m0_to_double(uint8_t bits);     // 2^(bits-127); 0xff is NaN

// head_dim_qk of a layout (576 for the V3.2 656 B layout, else 512); 0 for an unknown layout.
int64_t ref_layout_head_dim_qk(uint32_t layout);
// Bytes of one entry (1024, 584, 656, 512, 1024) and the smallest block stride for `block_size`
// entries.
int64_t ref_layout_bytes_per_token(uint32_t layout);
int64_t ref_layout_min_block_bytes(uint32_t layout, int64_t block_size);

}  // namespace dsv4test
