// What the fast CPU kernels share between the ISA-neutral front (fast_attention.cpp) and the
// per-ISA translation units (isa_*.cpp): one run's work decomposition and the entry points.
//
// Work item = (token group, head group, key split). A token group is a run of consecutive tokens
// whose candidate lists are identical (the MTP tokens of one request when the engine passes one
// list per request): their rows are decoded once for all of their query rows. Every item walks
// its keys in fixed chunks of valid candidates (in list order; fast_chunk_keys; the extra list
// starts a chunk where the lists' value scales differ, chunk_walk) with an online softmax, so a
// row's arithmetic depends only on its own lists, never on the batch, the head grouping or the
// thread count. Key splits (several items per row, merged in split order) exist only without
// DSV4_PLAN_FLAG_BATCH_INVARIANT, when there are fewer rows than workers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "attention.h"
#include "dsv4_backend.h"

namespace dsv4 {
namespace cpu {

constexpr int kChunkKeys = 256;     // keys per tile at most (scratch sizes, row strides)
constexpr int kMaxGroupTokens = 4;  // tokens sharing one decode (MTP: s_q <= 4)
// Query rows per item (a multiple of every ISA's row pad): 128 heads of one token, or 32 heads of
// 4 MTP tokens, share one decode of their keys.
constexpr int kMaxRowsPerItem = 128;

// Instruction sets of the fast kernels, best last. The reference kernel is separate.
enum class fast_isa { none = 0, avx2 = 1, avx512_bf16 = 2, amx_bf16 = 3 };

// Keys per chunk of each kernel (a multiple of its key padding, at most kChunkKeys). The AVX2
// kernel's fp32 tile of 64 keys (147 KB) stays in a 512 KB L2 beside its item's other buffers;
// 64 keys ran 2-8 % faster than 128 there and 32 keys no faster (docs/cpu-backend.md).
constexpr int kChunkKeysAvx2 = 64;
constexpr int fast_chunk_keys(fast_isa isa) {
  return isa == fast_isa::avx2 ? kChunkKeysAvx2 : kChunkKeys;
}
inline const char* fast_isa_name(fast_isa isa) {
  switch (isa) {
    case fast_isa::avx2:
      return "avx2";
    case fast_isa::avx512_bf16:
      return "avx512_bf16";
    case fast_isa::amx_bf16:
      return "amx";
    default:
      return "reference";
  }
}

// Per-worker scratch (bytes), the same for every ISA: candidates, decoded tile, q rows, logits,
// running state.
size_t fast_worker_scratch_bytes(int d_qk, int64_t max_candidates);

struct fast_job {
  const dsv4_mod_plan* plan;
  const dsv4_mod_run* run;
  value_scales scales;
  int d_qk;
  bool q_is_fp8;
  bool out_f32;  // out in fp32 (plan out_dtype), else bf16
  bool paged;    // lists built per token from run->paged (spec 4) instead of read from the run
  int64_t max_candidates;  // main + extra list widths
  // Token groups: group g covers tokens [group_first[g], group_first[g + 1]).
  const int32_t* group_first;
  int64_t num_groups;
  int head_groups;      // heads are cut into this many groups of heads_per_group
  int heads_per_group;  // tokens_of_group * heads_per_group <= kMaxRowsPerItem
  int splits;           // key splits per (group, head group); 1 with the batch-invariant flag
  int rows_cap;         // query rows of one (group, head group) at most
  // splits > 1: per (group, head group): [split][rows_cap] states of (kHeadDim + 2) floats, and a
  // countdown of the splits still running.
  float* partials;
  std::atomic<int32_t>* pending;
  uint8_t* scratch;  // worker w owns scratch + w * scratch_stride
  size_t scratch_stride;
};

// Items of a job: num_groups * head_groups * splits.
inline int64_t fast_job_items(const fast_job& j) {
  return j.num_groups * j.head_groups * static_cast<int64_t>(j.splits);
}

// Runs item `item` of `job` on worker `worker` (one entry per ISA translation unit).
using fast_item_fn = void (*)(const fast_job& job, int64_t item, int worker);
void fast_item_avx2(const fast_job& job, int64_t item, int worker);
void fast_item_avx512_bf16(const fast_job& job, int64_t item, int worker);
void fast_item_amx_bf16(const fast_job& job, int64_t item, int worker);

// AMX needs the OS to grant the tile state to the process (Linux arch_prctl); true when it did.
bool fast_amx_request_permission();

}  // namespace cpu
}  // namespace dsv4
