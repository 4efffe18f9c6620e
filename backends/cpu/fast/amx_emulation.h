// Test-only stand-in for the AMX tile intrinsics (DSV4_CPU_EMULATE_ISA builds): eight thread-local
// tile registers and TDPBF16PS's arithmetic (C[m][n] += sum over k of A[m][2k] * B[k][2n] +
// A[m][2k+1] * B[k][2n+1], fp32), so the AMX kernel's tiling and layouts run on any CPU.
#pragma once

#include <cstdint>
#include <cstring>

namespace dsv4 {
namespace cpu {
namespace amx_emulation {

struct tile_config {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

struct state {
  tile_config cfg;
  uint8_t tiles[8][16][64];
};
inline thread_local state g_state;

inline void loadconfig(const void* cfg) { std::memcpy(&g_state.cfg, cfg, sizeof(tile_config)); }
inline void release() { std::memset(&g_state, 0, sizeof g_state); }
inline void zero(int t) { std::memset(g_state.tiles[t], 0, sizeof g_state.tiles[t]); }
inline void load(int t, const void* base, long stride) {
  zero(t);
  for (int r = 0; r < g_state.cfg.rows[t]; ++r)
    std::memcpy(g_state.tiles[t][r], static_cast<const uint8_t*>(base) + r * stride,
                g_state.cfg.colsb[t]);
}
inline void store(int t, void* base, long stride) {
  for (int r = 0; r < g_state.cfg.rows[t]; ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, g_state.tiles[t][r],
                g_state.cfg.colsb[t]);
}
inline float bf16_at(const uint8_t* row, int i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline void dpbf16ps(int c, int a, int b) {
  const int m_rows = g_state.cfg.rows[c], n_cols = g_state.cfg.colsb[c] / 4;
  const int k_pairs = g_state.cfg.colsb[a] / 4;
  for (int m = 0; m < m_rows; ++m) {
    for (int n = 0; n < n_cols; ++n) {
      float acc;
      std::memcpy(&acc, &g_state.tiles[c][m][4 * n], 4);
      for (int k = 0; k < k_pairs; ++k) {
        acc += bf16_at(g_state.tiles[a][m], 2 * k) * bf16_at(g_state.tiles[b][k], 2 * n) +
               bf16_at(g_state.tiles[a][m], 2 * k + 1) * bf16_at(g_state.tiles[b][k], 2 * n + 1);
      }
      std::memcpy(&g_state.tiles[c][m][4 * n], &acc, 4);
    }
  }
}

}  // namespace amx_emulation
}  // namespace cpu
}  // namespace dsv4

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) ::dsv4::cpu::amx_emulation::loadconfig(cfg)
#define _tile_release() ::dsv4::cpu::amx_emulation::release()
#define _tile_zero(t) ::dsv4::cpu::amx_emulation::zero(t)
#define _tile_loadd(t, base, stride) ::dsv4::cpu::amx_emulation::load(t, base, stride)
#define _tile_stored(t, base, stride) ::dsv4::cpu::amx_emulation::store(t, base, stride)
#define _tile_dpbf16ps(c, a, b) ::dsv4::cpu::amx_emulation::dpbf16ps(c, a, b)
