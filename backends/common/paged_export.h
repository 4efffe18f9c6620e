// Paged-mode index export (dsv4_export_indices): what a GPU exporter kernel needs, gathered once
// from the derived plan, the batch and the request. Plain data, passed to device code by value.
#pragma once

#include <stdint.h>

#include "common/paged_index.h"
#include "dsv4_backend.h"
#include "dsv4_backend_export.h"

namespace dsv4 {

struct export_params {
  paged_geometry geometry;
  paged_capacity capacity;  // entries of each cache (0 where the batch has none)
  dsv4_mod_paged_batch batch;
  int64_t num_tokens;
  uint32_t format;  // DSV4_EXPORT_*
  dsv4_mod_export_list swa, cmp, combined;
};

inline export_params export_params_of(const dsv4_mod_plan& plan, const dsv4_mod_run& batch,
                                      const dsv4_mod_export& exp) {
  export_params e{};
  e.geometry = paged_geometry_of(plan);
  e.capacity.swa =
      batch.swa_cache.base != nullptr ? batch.swa_cache.num_blocks * batch.swa_cache.block_size : 0;
  e.capacity.cmp = batch.extra_cache.base != nullptr
                       ? batch.extra_cache.num_blocks * batch.extra_cache.block_size
                       : 0;
  e.batch = batch.paged;
  e.num_tokens = batch.num_tokens;
  e.format = exp.format;
  e.swa = exp.swa;
  e.cmp = exp.cmp;
  e.combined = exp.combined;
  return e;
}

}  // namespace dsv4
