// The GPU execution-model emulator (emu.h): coroutines with their own stacks, switched by a few
// lines of x86-64 assembly (callee-saved registers, MXCSR and the x87 control word).
#include "emu.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#error "the HIP kernel emulator switches coroutines with x86-64 assembly"
#endif

extern "C" void dsv4_emu_swap(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl dsv4_emu_swap
  .hidden dsv4_emu_swap
  .type dsv4_emu_swap, @function
dsv4_emu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dsv4_emu_swap, .-dsv4_emu_swap
)");

namespace dsv4 {
namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kSlotBytes = 64;  // per lane: the largest collective's payload

enum class state { runnable, at_block, at_warp, done };

struct ethread {
  dim3 tid;
  int lane = 0;
  int warp = 0;
  state st = state::runnable;
  void* sp = nullptr;
};

struct block_run {
  dim3 bid, bdim, gdim;
  std::vector<ethread> threads;
  std::vector<uint8_t> smem;
  std::vector<uint8_t> slots;  // [thread][kSlotBytes]
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  void* sched_sp = nullptr;
  int wave = 32;
};

thread_local block_run* g_block = nullptr;
thread_local ethread* g_thread = nullptr;
thread_local std::string g_error;

// Stacks (with a guard page below each) kept for the thread's later launches.
struct stack_pool {
  std::vector<uint8_t*> stacks;
  ~stack_pool() {
    for (uint8_t* s : stacks) munmap(s, kStackBytes + 4096);
  }
  uint8_t* top(size_t i) {
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "dsv4 HIP emulator: no memory for coroutine stacks\n");
        std::abort();
      }
      mprotect(p, 4096, PROT_NONE);
      stacks.push_back(static_cast<uint8_t*>(p));
    }
    return stacks[i] + 4096 + kStackBytes;
  }
};
thread_local stack_pool g_stacks;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void yield_to_scheduler() { dsv4_emu_swap(&g_thread->sp, g_block->sched_sp); }

[[noreturn]] void thread_entry() {
  g_block->body(g_block->ctx);
  g_thread->st = state::done;
  yield_to_scheduler();
  std::abort();  // a finished coroutine is never resumed
}

// A fresh coroutine stack whose first switch "returns" into thread_entry with the ABI's alignment.
void* initial_stack(uint8_t* top) {
  uint8_t* sp = top - 72;
  std::memset(sp, 0, 72);
  const uint32_t mxcsr = 0x1f80;
  const uint16_t fpucw = 0x037f;
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(sp + 4, &fpucw, 2);
  void (*entry)() = thread_entry;
  std::memcpy(sp + 56, &entry, sizeof entry);
  return sp;
}

// Runs one block to completion; false (with g_error) on a barrier deadlock.
bool run_block(block_run& b) {
  const size_t n = b.threads.size();
  for (size_t i = 0; i < n; ++i) b.threads[i].sp = initial_stack(g_stacks.top(i));
  const int warps = static_cast<int>((n + b.wave - 1) / b.wave);
  size_t live = n;
  while (live > 0) {
    bool ran = false;
    for (ethread& t : b.threads) {
      if (t.st != state::runnable) continue;
      g_thread = &t;
      dsv4_emu_swap(&b.sched_sp, t.sp);
      ran = true;
      if (t.st == state::done) --live;
    }
    if (ran) continue;
    bool released = false;
    for (int w = 0; w < warps; ++w) {
      const size_t lo = static_cast<size_t>(w) * b.wave;
      const size_t hi = std::min(n, lo + b.wave);
      bool all = true, any = false;
      for (size_t i = lo; i < hi; ++i) {
        const state s = b.threads[i].st;
        if (s == state::done) continue;
        any = true;
        all = all && s == state::at_warp;
      }
      if (!any || !all) continue;
      for (size_t i = lo; i < hi; ++i)
        if (b.threads[i].st == state::at_warp) b.threads[i].st = state::runnable;
      released = true;
    }
    if (released) continue;
    bool all_block = true;
    for (const ethread& t : b.threads)
      all_block = all_block && (t.st == state::done || t.st == state::at_block);
    if (all_block) {
      for (ethread& t : b.threads)
        if (t.st == state::at_block) t.st = state::runnable;
      continue;
    }
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "barrier deadlock in block (%u,%u,%u): threads wait at different barriers",
                  b.bid.x, b.bid.y, b.bid.z);
    g_error = msg;
    return false;  // the waiting coroutines are abandoned; their stacks are reused
  }
  return true;
}

}  // namespace

const dim3& thread_idx() { return g_thread->tid; }
const dim3& block_idx() { return g_block->bid; }
const dim3& block_dim() { return g_block->bdim; }
const dim3& grid_dim() { return g_block->gdim; }
int warp_size() { return props().warp_size; }
uint8_t* dynamic_smem() { return g_block->smem.data(); }

void sync_block() {
  g_thread->st = state::at_block;
  yield_to_scheduler();
}

void sync_warp() {
  g_thread->st = state::at_warp;
  yield_to_scheduler();
}

uint8_t* warp_slot(int lane, size_t bytes) {
  if (bytes > kSlotBytes) std::abort();
  const size_t index = static_cast<size_t>(g_thread->warp) * g_block->wave + lane;
  return g_block->slots.data() + index * kSlotBytes;
}

uint32_t shfl_xor32(uint32_t v, int lane_mask) {
  const int lane = g_thread->lane;
  std::memcpy(warp_slot(lane, 4), &v, 4);
  sync_warp();
  uint32_t r;
  const int src = lane ^ lane_mask;
  std::memcpy(&r, warp_slot(src < g_block->wave ? src : lane, 4), 4);
  sync_warp();
  return r;
}

void mfma_16x16x16_bf16(const uint16_t a[4], const uint16_t b[4], const float c[4], float d[4]) {
  const int lane = g_thread->lane;
  if (g_block->wave != 64) std::abort();  // a wave64 instruction
  uint8_t* mine = warp_slot(lane, 16);
  std::memcpy(mine, a, 8);
  std::memcpy(mine + 8, b, 8);
  sync_warp();
  auto bf = [](uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const int j = lane % 16;
  for (int r = 0; r < 4; ++r) {
    const int i = 4 * (lane / 16) + r;
    float acc = c[r];
    for (int k = 0; k < 16; ++k) {
      uint16_t av, bv;
      std::memcpy(&av, warp_slot(i + 16 * (k / 4), 16) + 2 * (k % 4), 2);
      std::memcpy(&bv, warp_slot(j + 16 * (k / 4), 16) + 8 + 2 * (k % 4), 2);
      acc += bf(av) * bf(bv);
    }
    d[r] = acc;
  }
  sync_warp();
}

const device_props& props() {
  static const device_props p = [] {
    device_props d;
    d.compute_units = env_int("DSV4_HIP_EMU_CUS", 8);
    d.max_shared_per_block = env_int("DSV4_HIP_EMU_LDS", 65536);
    d.warp_size = env_int("DSV4_HIP_EMU_WAVE", 32) == 64 ? 64 : 32;
    d.mfma = env_int("DSV4_HIP_EMU_MFMA", 0) != 0 && d.warp_size == 64;
    return d;
  }();
  return p;
}

const char* last_error() { return g_error.c_str(); }

int launch(dim3 grid, dim3 block, size_t smem, void (*body)(void*), void* ctx) {
  block_run b;
  b.gdim = grid;
  b.bdim = block;
  b.body = body;
  b.ctx = ctx;
  b.wave = props().warp_size;
  const size_t n = static_cast<size_t>(block.x) * block.y * block.z;
  b.threads.resize(n);
  b.slots.assign(((n + b.wave - 1) / b.wave) * b.wave * kSlotBytes, 0);
  b.smem.assign(smem == 0 ? 16 : smem, 0);
  block_run* outer_block = g_block;
  ethread* outer_thread = g_thread;
  g_block = &b;
  int rc = 0;
  // Blocks run last to first: a GPU promises no order, and a kernel that relies on one shows.
  for (unsigned zi = 0; zi < grid.z && rc == 0; ++zi)
    for (unsigned yi = 0; yi < grid.y && rc == 0; ++yi)
      for (unsigned xi = 0; xi < grid.x && rc == 0; ++xi) {
        b.bid = dim3(grid.x - 1 - xi, grid.y - 1 - yi, grid.z - 1 - zi);
        // Shared memory starts as garbage on a GPU: a kernel that reads before writing shows.
        std::memset(b.smem.data(), 0xA5, b.smem.size());
        for (size_t i = 0; i < n; ++i) {
          ethread& t = b.threads[i];
          t.tid = dim3(static_cast<unsigned>(i % block.x),
                       static_cast<unsigned>((i / block.x) % block.y),
                       static_cast<unsigned>(i / (static_cast<size_t>(block.x) * block.y)));
          t.lane = static_cast<int>(i % b.wave);
          t.warp = static_cast<int>(i / b.wave);
          t.st = state::runnable;
        }
        if (!run_block(b)) rc = -1;
      }
  g_block = outer_block;
  g_thread = outer_thread;
  return rc;
}

}  // namespace emu
}  // namespace dsv4
