// Explicit-mode sparse MLA attention on the CPU (spec sections 2.2-2.4 and 9): the exact fp32
// reference every other backend is compared against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/layout.h"
#include "dsv4_backend.h"
#include "thread_pool.h"

namespace dsv4 {
namespace cpu {

// Largest number of list positions per token a plan's runs may present, per list. Sizes the
// per-worker scratch; runs whose rows are longer are rejected before anything is written.
struct candidate_limits {
  int64_t main = 0;
  int64_t extra = 0;
};

// Per-list factors of the per-tensor FP8 layout (kv_scale on raw e4m3 rows), 1 elsewhere: the
// value multipliers (list_value_scales) and the logit factors.
struct value_scales : list_value_scales {
  float logit[2];  // the plan's logit_scale of each list; [0] main, [1] extra
};
value_scales value_scales_of(const dsv4_mod_plan& plan, const dsv4_mod_run& run);

// What every explicit-mode kernel checks before writing anything: token counts, q/out, and both
// candidate lists against their caches and the plan's limits.
dsv4_status check_explicit_run(const dsv4_mod_plan& plan, candidate_limits limits,
                               const dsv4_mod_run& run);

class attention_kernel {
 public:
  // `plan` is the host's derived plan (validated once by the host). Allocates the per-worker
  // scratch once; throws std::bad_alloc.
  attention_kernel(const dsv4_mod_plan& plan, candidate_limits limits, int num_workers);

  // Runs explicit-mode attention over `run` on `pool` (the pool this kernel was sized for).
  // Validates the candidate lists first; on failure nothing is written. Never allocates.
  dsv4_status run(thread_pool& pool, const dsv4_mod_run& run) const;

  candidate_limits limits() const { return limits_; }
  size_t scratch_bytes() const { return scratch_size_ * sizeof(float); }

 private:
  struct worker_scratch {
    float* keys;        // [max_candidates][d_qk] dequantised rows
    float* logits;      // [head tile][max_candidates] logits, then softmax weights
    float* logit_mult;  // [max_candidates] scale folded with the per-tensor FP8 factors
    float* weight;      // [max_candidates] value multiplier of each row (its list's)
    float* q;           // [head tile][d_qk]
    float* acc;         // [head tile][512]
  };
  worker_scratch scratch_for(int worker) const;
  int64_t gather(const dsv4_mod_run& run, const value_scales& v, int64_t t,
                 const worker_scratch& s) const;
  void attend(const dsv4_mod_run& run, const value_scales& v, int64_t t, int h_begin, int h_end,
              int worker) const;

  dsv4_mod_plan plan_;
  candidate_limits limits_;
  int d_qk_;
  int64_t max_candidates_;
  size_t worker_stride_;  // floats per worker
  bool q_is_fp8_;
  int num_workers_;
  size_t scratch_size_;  // floats
  // Per worker; parallel_for calls are serialised per pool, so one run owns it at a time.
  std::unique_ptr<float[]> scratch_;
};

}  // namespace cpu
}  // namespace dsv4
