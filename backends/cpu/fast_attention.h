// The fast explicit-mode kernels of the CPU backend (fast/): each candidate row decoded once per
// item into a tile shared by all of the item's query rows, head-tiled micro-kernels per ISA
// (AMX-BF16, AVX512_BF16, AVX2/FMA), online softmax over fixed chunks of keys, and key splits
// merged in a fixed order. The exact fp32 kernel (attention.h) stays the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention.h"
#include "dsv4_backend.h"
#include "fast/job.h"
#include "thread_pool.h"

namespace dsv4 {
namespace cpu {

// The fast ISA a plan runs on: the best one this CPU has (an fp16 cache keeps the AVX2 kernel,
// whose tiles hold fp32), capped by `knob` (DSV4_CPU_ISA: "avx2", "avx512_bf16", "amx"; "reference"
// or the plan flag DSV4_PLAN_FLAG_REFERENCE_KERNEL give none). none: use the reference kernel.
fast_isa choose_fast_isa(const dsv4_mod_plan& plan, const char* knob);

class fast_attention {
 public:
  // Allocates the per-worker scratch and the split partials once; throws std::bad_alloc.
  fast_attention(const dsv4_mod_plan& plan, candidate_limits limits, int num_workers, fast_isa isa);

  // Same contract as attention_kernel::run: validates first, writes nothing on failure, never
  // allocates. Runs of one plan are serialised (they share its scratch).
  dsv4_status run(thread_pool& pool, const dsv4_mod_run& run) const;

  fast_isa isa() const { return isa_; }
  size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  dsv4_mod_plan plan_;
  candidate_limits limits_;
  fast_isa isa_;
  fast_item_fn item_;
  int num_workers_;
  size_t scratch_stride_;
  size_t scratch_bytes_;
  std::unique_ptr<uint8_t[]> scratch_;
  size_t partial_floats_;  // capacity of partials_
  std::unique_ptr<float[]> partials_;
  std::unique_ptr<std::atomic<int32_t>[]> pending_;
  int max_pairs_;  // (group, head group) pairs that may split at once
  mutable std::vector<int32_t> group_first_;
  mutable std::mutex mutex_;
};

}  // namespace cpu
}  // namespace dsv4
