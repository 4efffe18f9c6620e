// The attention sink and the merge of partial softmax states (spec 2.2, 12.2), written once for
// every backend (host and device).
#pragma once

#include <math.h>
#include <stdint.h>

#include "hd.h"

namespace dsv4 {

// Share of the row's probability mass left to the values once the sink joins the denominator:
// 1 / (1 + exp(sink - lse)). A -inf sink has no effect (1); a +inf sink gives 0 for a finite or
// empty row, and NaN when the row's lse is NaN.
DSV4_HD float sink_factor(float sink, float lse) {
  if (sink == -INFINITY) return 1.0f;
  return 1.0f / (1.0f + expf(sink - lse));
}

// Merge of P partial results over disjoint key sets (spec 12.2): lse_p = +inf marks an empty part
// (it contributes nothing), any NaN propagates. The merged lse is +inf when no part holds a key.
// `lse` holds P values at a stride of `stride` elements.
DSV4_HD float merged_lse(const float* lse, int64_t stride, int32_t parts) {
  float m = -INFINITY;
  bool any = false;
  for (int32_t p = 0; p < parts; ++p) {
    const float l = lse[p * stride];
    if (l != l) return l;  // NaN
    if (l == INFINITY || l == -INFINITY) continue;
    m = l > m ? l : m;
    any = true;
  }
  if (!any) return INFINITY;
  float sum = 0.0f;
  for (int32_t p = 0; p < parts; ++p) {
    const float l = lse[p * stride];
    if (l != INFINITY && l != -INFINITY) sum += expf(l - m);
  }
  return m + logf(sum);
}

// Weight of part p's output in the merge: exp(lse_p - lse); 0 for a part without keys (its
// output, which may hold anything, is then skipped, not multiplied by 0).
DSV4_HD float merge_weight(float lse_part, float lse) {
  if (lse_part == INFINITY || lse_part == -INFINITY) return 0.0f;
  return expf(lse_part - lse);
}

}  // namespace dsv4
