#include "kv_write.h"

#include <algorithm>

#include "common/kv_write.h"
#include "common/layout.h"
#include "host.h"

namespace dsv4 {
namespace cpu {

dsv4_status kv_write(thread_pool& pool, const dsv4_mod_kv_write& w) {
  const dsv4_mod_cache& c = w.cache;
  if (!layout_is_known(c.layout))
    return fail(DSV4_STATUS_UNSUPPORTED, "kv_write: layout %u", c.layout);
  const int dim = layout_head_dim_qk(c.layout);
  if (w.dim != dim)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: rows of %d values, layout %u holds %d",
                w.dim, c.layout, dim);
  if (w.num_rows < 0)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: %lld rows",
                static_cast<long long>(w.num_rows));
  if (w.num_rows == 0) return DSV4_STATUS_OK;
  if (w.values == nullptr || w.slots == nullptr)
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: values or slots is NULL");
  if (c.block_size < 1 || c.num_blocks < 0 ||
      c.block_stride_bytes < layout_min_block_bytes(c.layout, c.block_size))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: block_size %d, %lld blocks, stride %lld",
                c.block_size, static_cast<long long>(c.num_blocks),
                static_cast<long long>(c.block_stride_bytes));
  if (c.layout == DSV4_KV_LAYOUT_FP8_E4M3_PER_TENSOR && !(c.kv_scale > 0.0f && c.kv_scale < 1e30f))
    return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: kv_scale %g",
                static_cast<double>(c.kv_scale));
  const int64_t capacity = c.num_blocks * static_cast<int64_t>(c.block_size);
  bool any_slot = false;
  for (int64_t r = 0; r < w.num_rows; ++r) {
    const int64_t slot = w.slots[r];
    if (slot >= capacity)
      return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: slots[%lld] = %lld beyond capacity %lld",
                  static_cast<long long>(r), static_cast<long long>(slot),
                  static_cast<long long>(capacity));
    any_slot = any_slot || slot >= 0;
  }
  if (!any_slot) return DSV4_STATUS_OK;
  if (c.base == nullptr) return fail(DSV4_STATUS_INVALID_ARGUMENT, "kv_write: cache is NULL");

  // Each work item writes the rows of one part of the slots in row order (common/kv_write.h), so
  // a duplicated slot ends with its last row and no two workers touch one entry. A few parts per
  // worker balance the load; every part scans the slots once, which is cheap next to quantising.
  const uint32_t parts =
      static_cast<uint32_t>(std::min<int64_t>(w.num_rows, 4 * static_cast<int64_t>(pool.size())));
  pool.parallel_for(parts, [&](int64_t part, int) {
    for (int64_t r = 0; r < w.num_rows; ++r) {
      const int64_t slot = w.slots[r];
      if (slot >= 0 && kv_write_part(slot, parts) == part) kv_write_row(w, r, slot);
    }
  });
  return DSV4_STATUS_OK;
}

}  // namespace cpu
}  // namespace dsv4
