// What this CPU offers: ISA features (OS-enabled state included), model name, cores, memory.
#pragma once

#include <cstddef>

#include "dsv4_backend.h"

namespace dsv4 {
namespace cpu {

struct cpu_features {
  bool sse42 = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;  // AVX-512 foundation, with ZMM/opmask state enabled by the OS
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool f16c = false;
  bool amx_bf16 = false;  // AMX-BF16 and AMX-TILE, with the tile state enabled by the OS
};

cpu_features detect_features();

// Asks Linux for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA): a tile
// instruction faults in a process that was not granted it. True when granted; false on CPUs or
// kernels without AMX (EOPNOTSUPP) and off Linux.
bool request_amx_permission();

// Module ABI slots.
dsv4_status probe(int32_t* out_score, int32_t* out_device_count, char* reason,
                  size_t reason_capacity);
dsv4_status get_device_info(int32_t index, dsv4_device_info* out_info);

}  // namespace cpu
}  // namespace dsv4
