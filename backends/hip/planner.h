// The HIP module's planner: which kernel family and head group a plan takes, how many key splits a
// run of T tokens takes, and the workspace that bounds. Plain C++ without runtime calls: module.cpp
// fills in what the device says, and tests/hip/hip_planner_test.cpp checks the choices without a
// GPU.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dsv4_backend.h"
#include "geometry.h"

namespace dsv4 {
namespace hip {

// What the planner needs to know about the device (from query_device and the traits kernel).
struct device_caps {
  int compute_units = 1;
  int max_shared_per_block = 65536;
  int wave_size = 32;
  bool mfma = false;  // the code object has the CDNA matrix-core kernel
};

// Overrides for tests and A/B runs (environment variables read at plan creation).
struct plan_knobs {
  int force_family = -1;  // DSV4_HIP_KERNEL: 0 simt, 1 mfma, -1 the planner's choice
  int heads_per_cta = 0;  // DSV4_HIP_HEADS_PER_CTA: a family's head group, 0 the planner's choice
  int max_splits = 0;     // DSV4_HIP_MAX_SPLITS: at most this many key splits, 0 no limit
};

// A plan's kernel and its geometry.
struct tiling {
  kernel_family family;
  int heads_per_cta = 0;  // 0: no kernel serves the plan on this device
  int head_groups = 0;
  int threads = 0;
  size_t smem_bytes = 0;
  int blocks_per_cu = 1;  // filled from the runtime's occupancy query
  int chunks[2] = {0, 0};
  const char* why = "";  // when heads_per_cta is 0
};

// The key splits of a run.
struct split_choice {
  int splits = 1;
  int chunks_per_split = 1;
};

// The matrix-core kernel serves a plan whose rows are bf16-exact (every layout but fp16).
bool mfma_serves(const dsv4_mod_plan& plan);
// Blocks of family f with hg heads per block that one compute unit holds (the runtime's occupancy
// query after the kernel is configured for its shared memory); 0 when it cannot be configured.
using occupancy_fn = int (*)(void* user, kernel_family f, int hg);
// Chooses the family and head group for `plan` on `caps`: the fewest head-group passes over the
// rows (each dequantises them once), weighed by how well the resident blocks hide latency.
tiling choose_tiling(const dsv4_mod_plan& plan, const device_caps& caps, const plan_knobs& knobs,
                     occupancy_fn occupancy, void* user);
// Key splits of a run of `tokens` tokens: enough blocks to fill the device, each split merged by
// merge.hip; one split for batch-invariant plans (a row's result then depends on its lists only).
split_choice choose_splits(const tiling& t, const device_caps& caps, int64_t tokens,
                           bool batch_invariant, int max_splits);
// The most (token, split) partial rows any run of 1..max_tokens tokens uses.
size_t max_partial_rows(const tiling& t, const device_caps& caps, int64_t max_tokens,
                        bool batch_invariant, int max_splits);

// Workspace of a plan: the paged lists (the host's map), then the split partials.
struct workspace_layout {
  size_t lists_bytes = 0;
  size_t partial_o = 0;  // offsets from the aligned workspace start
  size_t partial_lse = 0;
  size_t partial_max = 0;
  size_t total = 0;  // including the slack to align a caller's buffer to kWorkspaceAlign
};
constexpr size_t kWorkspaceAlign = 256;
workspace_layout plan_workspace(const dsv4_mod_plan& plan, size_t partial_rows);

}  // namespace hip
}  // namespace dsv4
