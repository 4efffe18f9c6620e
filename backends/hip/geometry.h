// The attention kernels' geometry, shared by the planner (plain C++) and the kernels: chunk size,
// kernel families, head groups, threads and the shared-memory maps.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/hd.h"
#include "common/layout.h"

namespace dsv4 {
namespace hip {

// Keys dequantised into shared memory per step (one list's positions [16c, 16c + 16)).
constexpr int kChunkKeys = 16;

// The attention kernels' families: the portable SIMT kernel (fp32 FMAs, every device) and the
// matrix-core kernel of CDNA (MFMA, wave64; its body is compiled into gfx90a / gfx94x code only).
enum class kernel_family : int32_t { simt = 0, mfma = 1 };

// Heads per block each family is built for.
constexpr int kSimtHeadGroups[] = {1, 2, 4, 8, 16, 32};
constexpr int kMfmaHeadGroups[] = {16, 32, 64};

constexpr int kMfmaThreads = 256;  // the MFMA kernel's block: four wave64 wavefronts
constexpr int kRowPad = 4;         // fp32 row stride DQK + 4: consecutive rows 16 bytes apart

DSV4_HD constexpr size_t align16(size_t x) { return (x + 15) / 16 * 16; }

// Threads of one attention block: SIMT 64 per tile of up to 8 heads (each thread owns 8 dims of
// those heads' O), MFMA four wavefronts.
DSV4_HD constexpr int attention_threads(kernel_family f, int heads_per_cta) {
  return f == kernel_family::mfma ? kMfmaThreads
                                  : (heads_per_cta < 8 ? 64 : heads_per_cta / 8 * 64);
}

// The addresses of one chunk row: its entry's data and (584 B layout) its scale bytes; src is NULL
// for a position that holds no valid candidate.
struct chunk_rows {
  const uint8_t* src;
  const uint8_t* scales;
};

// Byte offsets of one block's shared memory.
struct smem_map {
  size_t q, k, kt, s, p, m, l, alpha, rows, counts, total;
};

// SIMT: Q and the chunk's rows as fp32 [rows][DQK + kRowPad], S [HG][KC], P [KC][HG].
// MFMA (Q lives in registers): the rows as bf16 [KC][DQK + 8] and their V part transposed
// [512][KC + 8], the wavefronts' partial S [4 x 16][KC] fp32, P [HG][KC + 8] bf16.
DSV4_HD constexpr smem_map make_smem_map(int hg, int dqk, kernel_family f) {
  const size_t heads = static_cast<size_t>(hg);
  const size_t kc = kChunkKeys;
  smem_map m{};
  if (f == kernel_family::simt) {
    const size_t row = static_cast<size_t>(dqk + kRowPad) * sizeof(float);
    m.q = 0;
    m.k = m.q + align16(heads * row);
    m.kt = m.k + align16(kc * row);
    m.s = m.kt;
    m.p = m.s + align16(heads * kc * sizeof(float));
    m.m = m.p + align16(kc * heads * sizeof(float));
  } else {
    const size_t row = static_cast<size_t>(dqk + 8) * 2;
    m.q = 0;
    m.k = 0;
    m.kt = m.k + align16(kc * row);
    m.s = m.kt + align16(static_cast<size_t>(kHeadDim) * (kc + 8) * 2);
    m.p = m.s + align16(static_cast<size_t>(kMfmaThreads / 64 * 16) * kc * sizeof(float));
    m.m = m.p + align16(heads * (kc + 8) * 2);
  }
  m.l = m.m + align16(heads * sizeof(float));
  m.alpha = m.l + align16(heads * sizeof(float));
  m.rows = m.alpha + align16(heads * sizeof(float));
  m.counts = m.rows + align16(kc * sizeof(chunk_rows));
  m.total = m.counts + 16;
  return m;
}

}  // namespace hip
}  // namespace dsv4
