#include "merge.h"

#include <cmath>
#include <cstring>

#include "common/codec.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "host.h"

namespace dsv4 {
namespace cpu {

dsv4_status merge(thread_pool& pool, const dsv4_mod_merge& m) {
  if (m.num_parts < 1 || m.num_tokens < 0 || m.num_heads < 0)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "merge: %d parts, %d tokens, %d heads", m.num_parts,
                m.num_tokens, m.num_heads);
  const int64_t rows = static_cast<int64_t>(m.num_tokens) * m.num_heads;
  if (rows == 0) return DSV4_STATUS_OK;
  if (m.out_parts == nullptr || m.lse_parts == nullptr || m.out == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "merge: out_parts, lse_parts or out is NULL");
  pool.parallel_for(rows, [&](int64_t row, int) {
    const int64_t t = row / m.num_heads;
    const int64_t h = row % m.num_heads;
    const float* lse_p = m.lse_parts + t * m.lse_part_stride_t + h * m.lse_part_stride_h;
    const float lse = merged_lse(lse_p, m.lse_part_stride_p, m.num_parts);
    uint16_t* out = static_cast<uint16_t*>(m.out) + t * m.out_stride_t + h * m.out_stride_h;
    if (m.lse != nullptr) m.lse[t * m.lse_stride_t + h * m.lse_stride_h] = lse;
    if (lse == INFINITY) {  // no part holds a key: the lonely-row rule (spec 2.3)
      std::memset(out, 0, sizeof(uint16_t) * kHeadDim);
      return;
    }
    const float f = m.attn_sink != nullptr ? sink_factor(m.attn_sink[h], lse) : 1.0f;
    float acc[kHeadDim] = {};
    for (int32_t p = 0; p < m.num_parts; ++p) {
      const float w = merge_weight(lse_p[p * m.lse_part_stride_p], lse);
      if (w == 0.0f) continue;
      const int64_t off = p * m.part_stride_p + t * m.part_stride_t + h * m.part_stride_h;
      if (m.out_parts_f32 != 0) {
        const float* o = static_cast<const float*>(m.out_parts) + off;
        for (int d = 0; d < kHeadDim; ++d) acc[d] += w * o[d];
      } else {
        const uint16_t* o = static_cast<const uint16_t*>(m.out_parts) + off;
        for (int d = 0; d < kHeadDim; ++d) acc[d] += w * bf16_to_f32(o[d]);
      }
    }
    for (int d = 0; d < kHeadDim; ++d) out[d] = f32_to_bf16(acc[d] * f);
  });
  return DSV4_STATUS_OK;
}

}  // namespace cpu
}  // namespace dsv4
