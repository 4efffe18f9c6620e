// dsv4_merge on the GPU (spec 12.2): one warp per (token, head) merges the P partials in index
// order with the shared rule (backends/common/softmax.h), so the result is the CPU module's up to
// the order of fp32 additions inside a row (each lane owns 16 dims and adds the parts in order).
#include <cuda_runtime.h>

#include "common/codec.h"
#include "common/layout.h"
#include "common/softmax.h"
#include "kernels.h"

namespace dsv4 {
namespace cuda {
namespace {

constexpr int kMergeWarps = 4;
constexpr int kDimsPerLane = kHeadDim / 32;

__global__ void __launch_bounds__(32 * kMergeWarps) merge_kernel(const dsv4_mod_merge m) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(m.num_tokens) * m.num_heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = row / m.num_heads;
  const int64_t h = row % m.num_heads;
  const float* lse_p = m.lse_parts + t * m.lse_part_stride_t + h * m.lse_part_stride_h;
  const float lse = merged_lse(lse_p, m.lse_part_stride_p, m.num_parts);
  uint16_t* out = static_cast<uint16_t*>(m.out) + t * m.out_stride_t + h * m.out_stride_h;
  if (lane == 0 && m.lse != nullptr) m.lse[t * m.lse_stride_t + h * m.lse_stride_h] = lse;
  float acc[kDimsPerLane] = {};
  if (lse != INFINITY) {
    for (int32_t p = 0; p < m.num_parts; ++p) {
      const float w = merge_weight(lse_p[p * m.lse_part_stride_p], lse);
      if (w == 0.0f) continue;
      const int64_t off = p * m.part_stride_p + t * m.part_stride_t + h * m.part_stride_h;
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = i * 32 + lane;  // coalesced across the warp
        const float o = m.out_parts_f32 != 0
                            ? static_cast<const float*>(m.out_parts)[off + d]
                            : bf16_to_f32(static_cast<const uint16_t*>(m.out_parts)[off + d]);
        acc[i] += w * o;
      }
    }
    const float f = m.attn_sink != nullptr ? sink_factor(m.attn_sink[h], lse) : 1.0f;
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= f;
  }
  for (int i = 0; i < kDimsPerLane; ++i) out[i * 32 + lane] = f32_to_bf16(acc[i]);
}

}  // namespace

cudaError_t merge_launch(const dsv4_mod_merge& m, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(m.num_tokens) * m.num_heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kMergeWarps - 1) / kMergeWarps;
  merge_kernel<<<static_cast<unsigned>(blocks), 32 * kMergeWarps, 0, stream>>>(m);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace dsv4
