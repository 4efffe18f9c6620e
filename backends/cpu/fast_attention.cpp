#include "fast_attention.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "common/index.h"
#include "common/layout.h"
#include "host.h"
#include "probe.h"

namespace dsv4 {
namespace cpu {
namespace {

constexpr size_t kScratchAlign = 64;

bool isa_runs_here(fast_isa isa) {
#if DSV4_CPU_EMULATE_ISA
  (void)isa;
  return true;  // test-only module: the 512-bit and tile operations are emulated
#else
  const cpu_features f = detect_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case fast_isa::avx2:
      return avx2;
    case fast_isa::avx512_bf16:
      return avx2 && f.avx512bw && f.avx512vl && f.avx512_bf16;
    case fast_isa::amx_bf16:
      // Every AMX CPU has AVX-512, which the kernel's softmax uses.
      return avx2 && f.avx512f && f.avx512bw && f.amx_bf16 && fast_amx_request_permission();
    default:
      return false;
  }
#endif
}

fast_item_fn item_fn_of(fast_isa isa) {
  switch (isa) {
    case fast_isa::avx2:
      return fast_item_avx2;
    case fast_isa::avx512_bf16:
      return fast_item_avx512_bf16;
    case fast_isa::amx_bf16:
      return fast_item_amx_bf16;
    default:
      return nullptr;
  }
}

// Whether tokens a and b have the same candidate lists (so they can share one decode).
bool same_lists(const dsv4_mod_run& run, int64_t a, int64_t b) {
  for (const dsv4_mod_index_list* l : {&run.main_list, &run.extra_list}) {
    const int64_t n = list_row_count(*l, a, run.seq_q);
    if (n != list_row_count(*l, b, run.seq_q)) return false;
    if (n == 0) continue;
    const list_row ra = list_row_of(*l, a, run.seq_q);
    const list_row rb = list_row_of(*l, b, run.seq_q);
    if (ra.base == rb.base && ra.step == rb.step) continue;
    for (int64_t i = 0; i < n; ++i)
      if (ra.base[i * ra.step] != rb.base[i * rb.step]) return false;
  }
  return true;
}

}  // namespace

fast_isa choose_fast_isa(const dsv4_mod_plan& plan, const char* knob) {
  if ((plan.flags & DSV4_PLAN_FLAG_REFERENCE_KERNEL) != 0) return fast_isa::none;
  fast_isa cap = fast_isa::amx_bf16;
  if (knob != nullptr && *knob != '\0') {
    if (std::strcmp(knob, "reference") == 0) return fast_isa::none;
    if (std::strcmp(knob, "avx2") == 0) {
      cap = fast_isa::avx2;
    } else if (std::strcmp(knob, "avx512_bf16") == 0) {
      cap = fast_isa::avx512_bf16;
    } else if (std::strcmp(knob, "amx") != 0) {
      log(DSV4_LOG_WARN, "DSV4_CPU_ISA=%s is not one of reference, avx2, avx512_bf16, amx: ignored",
          knob);
    }
  }
  // fp16 rows are not bf16-exact: only the fp32 tiles of the AVX2 kernel hold them exactly.
  if (plan.cache[0].layout == DSV4_KV_LAYOUT_FP16 || plan.cache[1].layout == DSV4_KV_LAYOUT_FP16)
    cap = fast_isa::avx2;
  for (int i = static_cast<int>(cap); i >= static_cast<int>(fast_isa::avx2); --i) {
    if (isa_runs_here(static_cast<fast_isa>(i))) return static_cast<fast_isa>(i);
  }
  return fast_isa::none;
}

fast_attention::fast_attention(const dsv4_mod_plan& plan, candidate_limits limits, int num_workers,
                               fast_isa isa)
    : plan_(plan),
      limits_(limits),
      isa_(isa),
      item_(item_fn_of(isa)),
      num_workers_(std::max(1, num_workers)) {
  const int64_t max_candidates = std::max<int64_t>(1, limits.main + limits.extra);
  scratch_stride_ =
      (fast_worker_scratch_bytes(plan.head_dim_qk, max_candidates) + kScratchAlign - 1) /
      kScratchAlign * kScratchAlign;
  scratch_bytes_ = scratch_stride_ * static_cast<size_t>(num_workers_) + kScratchAlign;
  scratch_.reset(new uint8_t[scratch_bytes_]);
  // Key splits are used only while (group, head group) pairs are fewer than the workers; their
  // states fit 2 * workers items of kMaxRowsPerItem rows (run() takes no more splits than fit).
  max_pairs_ = num_workers_;
  partial_floats_ =
      static_cast<size_t>(2 * num_workers_) * kMaxRowsPerItem * static_cast<size_t>(kHeadDim + 2);
  partials_.reset(new float[partial_floats_]);
  pending_.reset(new std::atomic<int32_t>[static_cast<size_t>(max_pairs_)]);
  // Token groups: room for up to 1024 tokens now, more in run() when a step needs it, so that a
  // large max_tokens costs nothing until it is used.
  group_first_.resize(static_cast<size_t>(std::min(std::max(1, plan.max_tokens), 1024)) + 1);
}

dsv4_status fast_attention::run(thread_pool& pool, const dsv4_mod_run& run) const {
  dsv4_status st = check_explicit_run(plan_, limits_, run);
  if (st != DSV4_STATUS_OK || run.num_tokens == 0) return st;
  if (pool.size() > num_workers_)
    return fail(DSV4_STATUS_INTERNAL, "pool of %d workers, scratch for %d", pool.size(),
                num_workers_);
  const int64_t T = run.num_tokens;
  std::lock_guard<std::mutex> lock(mutex_);
  if (T > std::max(1, plan_.max_tokens))
    return fail(DSV4_STATUS_PLAN_MISMATCH, "%lld tokens, the plan has room for %d",
                static_cast<long long>(T), std::max(1, plan_.max_tokens));
  if (static_cast<size_t>(T) + 1 > group_first_.size())
    group_first_.resize(static_cast<size_t>(T) + 1);  // bad_alloc: OUT_OF_MEMORY, nothing written

  // Token groups: consecutive tokens with identical lists (MTP tokens of one request). Paged
  // tokens each have their own window.
  const bool paged = plan_.mode == DSV4_MODE_PAGED;
  int64_t groups = 0;
  int max_group = 1;
  for (int64_t t = 0; t < T;) {
    int64_t end = t + 1;
    while (!paged && end < T && end - t < kMaxGroupTokens && same_lists(run, t, end)) ++end;
    group_first_[static_cast<size_t>(groups++)] = static_cast<int32_t>(t);
    max_group = std::max(max_group, static_cast<int>(end - t));
    t = end;
  }
  group_first_[static_cast<size_t>(groups)] = static_cast<int32_t>(T);

  const int H = plan_.num_heads;
  const int workers = pool.size();
  int heads_per_group = std::min(H, kMaxRowsPerItem / max_group);
  const bool invariant = (plan_.flags & DSV4_PLAN_FLAG_BATCH_INVARIANT) != 0;
  // Batch-invariant runs never split a row's keys; they cut the heads finer instead (a row's
  // arithmetic does not depend on the rows it shares an item with).
  if (invariant) {
    while (groups * ((H + heads_per_group - 1) / heads_per_group) < workers && heads_per_group > 4)
      heads_per_group = (heads_per_group + 1) / 2;
  }
  const int head_groups = (H + heads_per_group - 1) / heads_per_group;
  const int64_t pairs = groups * head_groups;
  const int rows_cap = max_group * heads_per_group;
  int splits = 1;
  if (!invariant && pairs < workers && pairs <= max_pairs_) {
    const int chunk = fast_chunk_keys(isa_);
    const int64_t max_chunks = (limits_.main + limits_.extra + chunk - 1) / chunk;
    const int64_t fit =
        static_cast<int64_t>(partial_floats_ / (static_cast<size_t>(pairs) * rows_cap *
                                                static_cast<size_t>(kHeadDim + 2)));
    splits = static_cast<int>(
        std::min({(2 * static_cast<int64_t>(workers) + pairs - 1) / pairs, max_chunks, fit}));
    if (splits < 2) splits = 1;
  }

  fast_job job{};
  job.plan = &plan_;
  job.run = &run;
  job.scales = value_scales_of(plan_, run);
  job.d_qk = plan_.head_dim_qk;
  job.q_is_fp8 = plan_.q_dtype.code == DSV4_DTYPE_CODE_FLOAT8_E4M3FN;
  job.out_f32 = plan_.out_dtype.code == DSV4_DTYPE_CODE_FLOAT;
  job.paged = paged;
  job.max_candidates = std::max<int64_t>(1, limits_.main + limits_.extra);
  job.group_first = group_first_.data();
  job.num_groups = groups;
  job.head_groups = head_groups;
  job.heads_per_group = heads_per_group;
  job.splits = splits;
  job.rows_cap = rows_cap;
  job.partials = partials_.get();
  job.pending = pending_.get();
  const uintptr_t raw = reinterpret_cast<uintptr_t>(scratch_.get());
  job.scratch = scratch_.get() + ((kScratchAlign - raw % kScratchAlign) % kScratchAlign);
  job.scratch_stride = scratch_stride_;
  if (splits > 1) {
    for (int64_t p = 0; p < pairs; ++p) pending_[p].store(splits, std::memory_order_relaxed);
  }
  const fast_item_fn item = item_;
  pool.parallel_for(fast_job_items(job),
                    [&job, item](int64_t i, int worker) { item(job, i, worker); });
  return DSV4_STATUS_OK;
}

}  // namespace cpu
}  // namespace dsv4
