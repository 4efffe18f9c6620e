// The merge of partial results over disjoint key sets (spec 12.2) with the shared rule of
// backends/common/softmax.h: dsv4_merge, and the combine of an attention run split over its keys.
// One block of 128 threads per (token, head); each thread owns 4 dims and adds the parts in index
// order, so a row's result does not depend on anything else in the run.
// clang-format off
#include "platform.h"  // first: HIP declares device memcpy before the shared headers use it
// clang-format on
#include <math.h>

#include "common/codec.h"
#include "common/index.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "kernels.h"

namespace dsv4 {
namespace hip {
namespace {

constexpr int kMergeThreads = 128;
constexpr int kDimsPerThread = kHeadDim / kMergeThreads;

__global__ void DSV4_KERNEL_BOUNDS(kMergeThreads) merge_kernel(const merge_params m) {
  const int64_t row = blockIdx.x;
  const int64_t t = row / m.num_heads;
  const int h = static_cast<int>(row % m.num_heads);
  const float* lse_p = m.lse_parts + t * m.lse_stride_t + h * m.lse_stride_h;
  const float lse = merged_lse(lse_p, m.lse_stride_p, m.num_parts);
  float acc[kDimsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int d0 = threadIdx.x * kDimsPerThread;
  if (lse != INFINITY) {
    for (int32_t p = 0; p < m.num_parts; ++p) {
      const float w = merge_weight(lse_p[p * m.lse_stride_p], lse);
      if (w == 0.0f) continue;  // a part without keys: its output may hold anything
      const int64_t off = p * m.part_stride_p + t * m.part_stride_t + h * m.part_stride_h + d0;
      for (int i = 0; i < kDimsPerThread; ++i) {
        const float o = m.out_parts_f32 != 0
                            ? static_cast<const float*>(m.out_parts)[off + i]
                            : bf16_to_f32(static_cast<const uint16_t*>(m.out_parts)[off + i]);
        acc[i] += w * o;
      }
    }
    const float f = m.attn_sink != nullptr ? sink_factor(m.attn_sink[h], lse) : 1.0f;
    for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= f;
  }
  const int64_t off = token_offset(m.out, t, m.seq_q, h) + d0;
  for (int i = 0; i < kDimsPerThread; ++i) {
    if (m.out_f32) {
      static_cast<float*>(m.out.data)[off + i] = acc[i];
    } else {
      static_cast<uint16_t*>(m.out.data)[off + i] = f32_to_bf16(acc[i]);
    }
  }
  if (threadIdx.x != 0) return;
  if (m.lse.data != nullptr)
    static_cast<float*>(m.lse.data)[token_offset(m.lse, t, m.seq_q, h)] = lse;
  if (m.max_logits.data != nullptr) {
    float mx = -INFINITY;
    if (m.max_parts != nullptr) {
      const float* max_p = m.max_parts + t * m.lse_stride_t + h * m.lse_stride_h;
      for (int32_t p = 0; p < m.num_parts; ++p) mx = fmaxf(mx, max_p[p * m.lse_stride_p]);
    }
    static_cast<float*>(m.max_logits.data)[token_offset(m.max_logits, t, m.seq_q, h)] = mx;
  }
}

}  // namespace

merge_params merge_params_of(const dsv4_mod_merge& m) {
  merge_params p{};
  p.num_parts = m.num_parts;
  p.num_tokens = m.num_tokens;
  p.seq_q = 1;
  p.num_heads = m.num_heads;
  p.out_parts = m.out_parts;
  p.out_parts_f32 = m.out_parts_f32;
  p.part_stride_p = m.part_stride_p;
  p.part_stride_t = m.part_stride_t;
  p.part_stride_h = m.part_stride_h;
  p.lse_parts = m.lse_parts;
  p.lse_stride_p = m.lse_part_stride_p;
  p.lse_stride_t = m.lse_part_stride_t;
  p.lse_stride_h = m.lse_part_stride_h;
  p.attn_sink = m.attn_sink;
  p.out = dsv4_mod_token_view{m.out, m.out_stride_t, 0, m.out_stride_h};
  p.lse = dsv4_mod_token_view{m.lse, m.lse_stride_t, 0, m.lse_stride_h};
  p.max_logits = dsv4_mod_token_view{nullptr, 0, 0, 0};
  return p;
}

hipError_t merge_launch(const merge_params& m, hipStream_t stream) {
  const int64_t rows = static_cast<int64_t>(m.num_tokens) * m.num_heads;
  if (rows == 0) return hipSuccess;
  return dsv4_hip_launch(merge_kernel, dim3(static_cast<unsigned>(rows)), dim3(kMergeThreads), 0,
                         stream, m);
}

}  // namespace hip
}  // namespace dsv4
