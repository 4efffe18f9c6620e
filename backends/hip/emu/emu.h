// A CPU emulator of the GPU execution model the HIP module's kernels use, so that their logic runs
// here (CI has no GPU) against the float64 reference: a test artefact (DSV4_HIP_EMULATOR builds a
// module on it), never shipped. One OS thread runs a launch's blocks one after the other, last
// block first (a GPU promises no order); a block's
// threads are coroutines that switch only at barriers (block and warp) and shuffles, so every
// barrier-separated phase sees exactly what a GPU would guarantee. Warps of 32 or 64 lanes
// (DSV4_HIP_EMU_WAVE) check the kernels' wave-size independence. Deadlocked barriers (a lane
// missing from a warp collective, threads at different block barriers) fail the launch.
// Shared memory is the dynamic arena only (DSV4_DYNAMIC_SMEM): kernels declare no static
// __shared__ variables, whose caching across barriers a host compiler could not be told about.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace dsv4 {
namespace emu {

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
int warp_size();
uint8_t* dynamic_smem();

// All threads of the block (every live one) reach the barrier before any passes it.
void sync_block();
// All live lanes of the calling thread's warp reach it before any passes it.
void sync_warp();
// The calling lane's slot in its warp's exchange area (bytes, for collectives).
uint8_t* warp_slot(int lane, size_t bytes);

// Lane shuffles and the wave64 matrix instruction, as warp collectives.
uint32_t shfl_xor32(uint32_t v, int lane_mask);
// v_mfma_f32_16x16x16bf16_1k (CDNA): D = A B + C for 16x16 tiles, A row i / B column j with their
// k = 4*(lane/16) .. +3 in lane (i or j) + 16*(k/4), D column j rows 4*(lane/16) .. +3.
void mfma_16x16x16_bf16(const uint16_t a[4], const uint16_t b[4], const float c[4], float d[4]);

// Emulated device properties (env: DSV4_HIP_EMU_CUS, DSV4_HIP_EMU_LDS, DSV4_HIP_EMU_WAVE,
// DSV4_HIP_EMU_MFMA=1 for a CDNA-like device with matrix cores).
struct device_props {
  int compute_units;
  int max_shared_per_block;
  int warp_size;
  bool mfma;
};
const device_props& props();

// Runs grid x block threads of body(ctx) with `smem` bytes of dynamic shared memory per block.
// Returns 0, or -1 with a message (emu::last_error()) when the kernel deadlocked a barrier.
int launch(dim3 grid, dim3 block, size_t smem, void (*body)(void*), void* ctx);
const char* last_error();

template <class F>
int launch(dim3 grid, dim3 block, size_t smem, F&& f) {
  return launch(
      grid, block, smem, [](void* c) { (*static_cast<F*>(c))(); }, &f);
}

}  // namespace emu
}  // namespace dsv4
