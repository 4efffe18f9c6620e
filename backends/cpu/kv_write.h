// KV writer of the CPU backend: quantises rows into a cache of any layout (spec 3.2-3.5).
#pragma once

#include "dsv4_backend.h"
#include "thread_pool.h"

namespace dsv4 {
namespace cpu {

// Checks every slot against the capacity before writing anything, then quantises the rows in
// parallel with the shared vLLM quantiser. Rows that share a slot: the last one wins (spec 12.4).
dsv4_status kv_write(thread_pool& pool, const dsv4_mod_kv_write& write);

}  // namespace cpu
}  // namespace dsv4
