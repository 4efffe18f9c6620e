// Allocation failure in context and plan creation (and enumeration): this executable replaces the
// global operator new (every form; the library and the CPU module allocate only through it) and
// pthread_create, makes the n-th one from a point on fail, and sweeps n until the call no longer
// reaches an injected failure. Each failing call must return DSV4_STATUS_OUT_OF_MEMORY (a thread
// that cannot start: BACKEND_ERROR or OUT_OF_MEMORY), leave its out-parameter untouched, and leak
// nothing: under make test-asan, LeakSanitizer checks the whole sweep at exit.
// Triage: DSV4_ALLOC_TRAP=n traps at the injection of sweep step n (run under gdb for its stack).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "dsv4/dsv4.h"
#include "dsv4/dsv4_paged.h"

namespace {

// -1: no injection. n >= 0: the n-th allocation (thread start) from now fails, then injection ends.
std::atomic<long> g_alloc_countdown{-1};
std::atomic<long> g_thread_countdown{-1};
std::atomic<bool> g_injected{false};
bool g_trap = false;

bool inject(std::atomic<long>& countdown) {
  long c = countdown.load();
  while (c >= 0) {
    if (countdown.compare_exchange_weak(c, c - 1)) {
      if (c != 0) return false;
      g_injected.store(true);
      if (g_trap) __builtin_trap();  // triage: where it fails
      return true;
    }
  }
  return false;
}

// Only the throwing forms fail: nothrow callers (std::stable_sort's scratch buffer) fall back to
// another way by design, so their failures are not errors to report.
void* allocate(size_t n, size_t align, bool nothrow) {
  if (!nothrow && inject(g_alloc_countdown)) throw std::bad_alloc();
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n != 0 ? n : 1)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr && !nothrow) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t n) { return allocate(n, 0, false); }
void* operator new[](size_t n) { return allocate(n, 0, false); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0, true); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0, true); }
void* operator new(size_t n, std::align_val_t a) {
  return allocate(n, static_cast<size_t>(a), false);
}
void* operator new[](size_t n, std::align_val_t a) {
  return allocate(n, static_cast<size_t>(a), false);
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<size_t>(a), true);
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<size_t>(a), true);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                              void* arg) {
  using create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const create_fn real = reinterpret_cast<create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  if (inject(g_thread_countdown)) return EAGAIN;
  return real(thread, attr, fn, arg);
}

namespace {

// Arms the n-th allocation (or thread start) to fail; returns whether the call reached it.
class Injection {
 public:
  Injection(std::atomic<long>& countdown, long n) : countdown_(countdown) {
    g_injected.store(false);
    countdown_.store(n);
  }
  ~Injection() { countdown_.store(-1); }
  bool reached() const { return g_injected.load(); }

 private:
  std::atomic<long>& countdown_;
};

dsv4_ctx_options cpu_options(int32_t threads) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.backend = "cpu";
  o.num_threads = threads;
  o.log_level = DSV4_LOG_ERROR;
  return o;
}

constexpr long kMaxSweep = 100000;  // far beyond any call's allocation count

// Sweeps `call` (which returns a status and reports whether it wrote its out-parameter) over
// every allocation it makes; returns how many allocations the successful call needed.
template <class Call>
long sweep(std::atomic<long>& countdown, std::initializer_list<dsv4_status> allowed, Call call) {
  for (long n = 0; n < kMaxSweep; ++n) {
    const char* trap = std::getenv("DSV4_ALLOC_TRAP");
    g_trap = trap != nullptr && n == std::atol(trap);
    bool wrote = false;
    dsv4_status st;
    bool reached;
    {
      Injection inj(countdown, n);
      st = call(&wrote);
      reached = inj.reached();
    }
    if (!reached) {
      EXPECT_EQ(st, DSV4_STATUS_OK) << "without an injected failure: " << dsv4_last_error_message();
      // For scripts/reliability_report.py: how many failures this sweep injected.
      std::printf("alloc sweep: %ld failures injected\n", n);
      return n;
    }
    bool expected = false;
    for (dsv4_status a : allowed) expected = expected || st == a;
    EXPECT_TRUE(expected) << "failure injected at " << n << ": " << dsv4_status_string(st) << ": "
                          << dsv4_last_error_message();
    EXPECT_FALSE(wrote && st != DSV4_STATUS_OK)
        << "a failing call wrote its out-parameter (" << n << ")";
    if (::testing::Test::HasFailure()) return n;
  }
  ADD_FAILURE() << "the call never finished without reaching the injected failure";
  return kMaxSweep;
}

dsv4_ctx* const kSentinelCtx = reinterpret_cast<dsv4_ctx*>(uintptr_t{0x40});
dsv4_plan* const kSentinelPlan = reinterpret_cast<dsv4_plan*>(uintptr_t{0x80});

TEST(AllocationFailure, ContextCreation) {
  // The first sweep also covers loading the module (its table entry, its probe); later ones the
  // loaded module's path. A failure while loading must not leave the module unusable.
  for (int32_t threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    const dsv4_ctx_options o = cpu_options(threads);
    const long allocations =
        sweep(g_alloc_countdown, {DSV4_STATUS_OUT_OF_MEMORY}, [&](bool* wrote) {
          dsv4_ctx* ctx = kSentinelCtx;
          const dsv4_status st = dsv4_ctx_create(&o, &ctx);
          *wrote = ctx != kSentinelCtx;
          if (st == DSV4_STATUS_OK) dsv4_ctx_destroy(ctx);
          return st;
        });
    EXPECT_GT(allocations, 10) << "the hook saw too few allocations: is operator new replaced?";
  }
}

TEST(AllocationFailure, ThreadsThatCannotStart) {
  const dsv4_ctx_options o = cpu_options(4);
  const long started = sweep(
      g_thread_countdown, {DSV4_STATUS_BACKEND_ERROR, DSV4_STATUS_OUT_OF_MEMORY}, [&](bool* wrote) {
        dsv4_ctx* ctx = kSentinelCtx;
        const dsv4_status st = dsv4_ctx_create(&o, &ctx);
        *wrote = ctx != kSentinelCtx;
        if (st == DSV4_STATUS_OK) dsv4_ctx_destroy(ctx);
        return st;
      });
  EXPECT_EQ(started, 3) << "4 workers: the calling thread and 3 started ones";
}

TEST(AllocationFailure, PlanCreation) {
  dsv4_ctx* ctx = nullptr;
  const dsv4_ctx_options o = cpu_options(2);
  ASSERT_EQ(dsv4_ctx_create(&o, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    dsv4_plan_options po;
    dsv4_plan_options_init(&po);
    po.num_heads = 16;
    po.max_tokens = 8;
    if (variant == 1) {
      po.extra_cache = dsv4_kv_cache_desc{DSV4_KV_LAYOUT_FP8_V4_584B, 2, 0, 1.0f, 0};
      po.extra_topk = 64;
      po.index_format = DSV4_INDEX_CSR;
    } else if (variant >= 2) {
      po.mode = DSV4_MODE_PAGED;
      po.compress_ratio = variant == 2 ? 4 : 128;
      po.extra_cache =
          dsv4_kv_cache_desc{DSV4_KV_LAYOUT_FP8_V4_584B, variant == 2 ? 64 : 2, 0, 1.0f, 0};
    }
    const long allocations =
        sweep(g_alloc_countdown, {DSV4_STATUS_OUT_OF_MEMORY}, [&](bool* wrote) {
          dsv4_plan* plan = kSentinelPlan;
          const dsv4_status st = dsv4_plan_create(ctx, &po, &plan);
          *wrote = plan != kSentinelPlan;
          if (st == DSV4_STATUS_OK) dsv4_plan_destroy(plan);
          return st;
        });
    EXPECT_GT(allocations, 2);
  }
  dsv4_ctx_destroy(ctx);
}

TEST(AllocationFailure, EnumerationAndDeviceInfo) {
  const dsv4_ctx_options o = cpu_options(1);
  sweep(g_alloc_countdown, {DSV4_STATUS_OUT_OF_MEMORY}, [&](bool* wrote) {
    int32_t count = -5;
    dsv4_backend_info info[4];
    std::memset(info, 0, sizeof info);
    info[0].struct_size = sizeof info[0];
    const dsv4_status st = dsv4_enumerate_backends(&o, info, 4, &count);
    *wrote = count != -5 || info[0].name[0] != '\0';
    return st;
  });
  sweep(g_alloc_countdown, {DSV4_STATUS_OUT_OF_MEMORY}, [&](bool* wrote) {
    dsv4_device_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    const dsv4_status st = dsv4_get_device_info(&o, "cpu", 0, &info);
    *wrote = info.name[0] != '\0';
    return st;
  });
}

}  // namespace
