// dsv4_merge on the CPU: the partial results of disjoint key sets combined per (token, head) by the
// shared rule (backends/common/softmax.h), parts in index order.
#pragma once

#include "dsv4_backend.h"
#include "thread_pool.h"

namespace dsv4 {
namespace cpu {

dsv4_status merge(thread_pool& pool, const dsv4_mod_merge& m);

}  // namespace cpu
}  // namespace dsv4
