// Concurrency contract (dsv4.h "Threading") on the CPU backend, written to run under
// ThreadSanitizer (make test-tsan) as well as in the plain suite: threads sharing one plan, KV
// writes from several threads and with duplicate slots, contexts created and destroyed on other
// threads while others run, log callbacks, and the thread-local error message. Results must equal
// what one thread computes alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/dsv4.h"
#include "test_util.h"

namespace dsv4test {
namespace {

constexpr dsv4_device kCpu{DSV4_DEVICE_CPU, 0};
constexpr int kThreads = 4;

CtxPtr cpu_ctx(int32_t threads, dsv4_log_fn log_fn = nullptr, void* user_data = nullptr,
               int32_t level = -1) {
  dsv4_ctx_options o;
  dsv4_ctx_options_init(&o);
  o.backend = "cpu";
  o.num_threads = threads;
  o.log_fn = log_fn;
  o.log_user_data = user_data;
  o.log_level = level;
  dsv4_ctx* ctx = nullptr;
  const dsv4_status st = dsv4_ctx_create(&o, &ctx);
  EXPECT_EQ(st, DSV4_STATUS_OK) << status_text(st);
  return CtxPtr(st == DSV4_STATUS_OK ? ctx : nullptr);
}

std::vector<uint16_t> random_bf16(Rng& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const float f = static_cast<float>(rng.normal());
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

// One layer: an FP8 584 B cache of `slots` random rows written through dsv4_kv_write, an explicit
// plan over it and random q / index lists for `tokens` tokens.
struct Layer {
  static constexpr int64_t kHeads = 8, kTopk = 48, kBlock = 61, kBlocks = 5;
  int64_t tokens = 6;
  dsv4_plan_options options{};
  std::vector<uint8_t> cache;
  std::vector<uint16_t> q;
  std::vector<int32_t> indices;
  std::vector<float> sink;
  PlanPtr plan;
  size_t workspace_bytes = 0;

  Layer(dsv4_ctx* ctx, Rng& rng) {
    dsv4_plan_options_init(&options);
    options.num_heads = kHeads;
    options.topk = kTopk;
    options.max_tokens = static_cast<int32_t>(tokens);
    options.swa_cache.block_size = kBlock;
    dsv4_kv_layout_info info;
    dsv4_kv_layout_info_init(&info);
    EXPECT_EQ(dsv4_kv_layout_get_info(DSV4_KV_LAYOUT_FP8_V4_584B, kBlock, &info), DSV4_STATUS_OK);
    cache.assign(static_cast<size_t>(kBlocks * info.min_block_stride_bytes), 0xff);
    std::vector<float> rows(static_cast<size_t>(kBlocks * kBlock * 512));
    for (auto& x : rows) x = static_cast<float>(rng.normal());
    std::vector<int32_t> slots(static_cast<size_t>(kBlocks * kBlock));
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
    write(ctx, rows, slots);
    dsv4_plan* p = nullptr;
    EXPECT_EQ(dsv4_plan_create(ctx, &options, &p), DSV4_STATUS_OK) << dsv4_last_error_message();
    plan.reset(p);
    if (plan) dsv4_plan_get_workspace_size(plan.get(), &workspace_bytes);
    q = random_bf16(rng, static_cast<size_t>(tokens * kHeads * 512));
    indices.resize(static_cast<size_t>(tokens * kTopk));
    for (auto& i : indices) i = static_cast<int32_t>(rng.randint(-1, kBlocks * kBlock - 1));
    sink.resize(kHeads);
    for (auto& s : sink) s = static_cast<float>(rng.normal());
  }

  dsv4_status write(dsv4_ctx* ctx, const std::vector<float>& rows,
                    const std::vector<int32_t>& slots) {
    const int64_t n = static_cast<int64_t>(slots.size());
    TensorView vt(const_cast<float*>(rows.data()), kCpu, kF32, {n, 512});
    TensorView st(const_cast<int32_t*>(slots.data()), kCpu, kI32, {n});
    TensorView ct(cache.data(), kCpu, kU8, {kBlocks, static_cast<int64_t>(cache.size()) / kBlocks});
    dsv4_kv_write_args w;
    dsv4_kv_write_args_init(&w);
    w.cache_desc = options.swa_cache;
    w.values = vt.get();
    w.slots = st.get();
    w.cache = ct.get();
    return dsv4_kv_write(ctx, &w);
  }

  // One run into `out` ([tokens, heads, 512] bf16) and `lse`, with its own workspace.
  dsv4_status run(std::vector<uint16_t>* out, std::vector<float>* lse) {
    out->assign(static_cast<size_t>(tokens * kHeads * 512), 0);
    lse->assign(static_cast<size_t>(tokens * kHeads), 0.0f);
    std::vector<uint8_t> workspace(workspace_bytes + 1);
    TensorView tq(q.data(), kCpu, kBf16, {tokens, kHeads, 512});
    TensorView tc(cache.data(), kCpu, kU8, {kBlocks, static_cast<int64_t>(cache.size()) / kBlocks});
    TensorView ti(indices.data(), kCpu, kI32, {tokens, kTopk});
    TensorView ts(sink.data(), kCpu, kF32, {kHeads});
    TensorView to(out->data(), kCpu, kBf16, {tokens, kHeads, 512});
    TensorView tl(lse->data(), kCpu, kF32, {tokens, kHeads});
    dsv4_run_args a;
    dsv4_run_args_init(&a);
    a.q = tq.get();
    a.swa_cache = tc.get();
    a.indices = ti.get();
    a.attn_sink = ts.get();
    a.out = to.get();
    a.lse = tl.get();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace_bytes;
    return dsv4_run(plan.get(), &a);
  }
};

// Threads that start together, so their calls overlap.
template <class Fn>
void run_threads(int n, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      fn(i);
    });
  for (auto& t : threads) t.join();
}

TEST(Concurrency, ThreadsShareOnePlan) {
  SCOPED_TRACE(seed_note());
  Rng rng(case_seed("shared_plan"));
  CtxPtr ctx = cpu_ctx(3);
  ASSERT_TRUE(ctx);
  Layer layer(ctx.get(), rng);
  ASSERT_TRUE(layer.plan);
  std::vector<uint16_t> want_out;
  std::vector<float> want_lse;
  ASSERT_EQ(layer.run(&want_out, &want_lse), DSV4_STATUS_OK) << dsv4_last_error_message();
  std::atomic<int> wrong{0};
  run_threads(kThreads, [&](int) {
    for (int k = 0; k < 5; ++k) {
      std::vector<uint16_t> out;
      std::vector<float> lse;
      if (layer.run(&out, &lse) != DSV4_STATUS_OK || out != want_out || lse != want_lse) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "runs sharing a plan differ from one run alone";
}

TEST(Concurrency, PlansOfOneContextOnManyThreads) {
  // Each thread creates its own plans on a shared context, runs them and destroys them, while
  // the others do the same.
  SCOPED_TRACE(seed_note());
  CtxPtr ctx = cpu_ctx(2);
  ASSERT_TRUE(ctx);
  std::atomic<int> failures{0};
  run_threads(kThreads, [&](int i) {
    Rng rng(case_seed("plans_" + std::to_string(i)));
    for (int k = 0; k < 3; ++k) {
      Layer layer(ctx.get(), rng);
      std::vector<uint16_t> out;
      std::vector<float> lse;
      if (!layer.plan || layer.run(&out, &lse) != DSV4_STATUS_OK) ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(Concurrency, KvWritesFromSeveralThreads) {
  // One context, one cache, each thread writing its own slots (in random order, several rows per
  // slot): the cache equals one thread writing the last row of every slot.
  SCOPED_TRACE(seed_note());
  Rng rng(case_seed("kv_threads"));
  CtxPtr ctx = cpu_ctx(3);
  ASSERT_TRUE(ctx);
  Layer shared(ctx.get(), rng), alone(ctx.get(), rng);
  const int64_t slots = Layer::kBlocks * Layer::kBlock;
  std::vector<std::vector<float>> rows(kThreads);
  std::vector<std::vector<int32_t>> mine(kThreads);
  std::vector<int32_t> last_slots;
  std::vector<float> last_rows;
  for (int i = 0; i < kThreads; ++i) {
    for (int64_t s = i; s < slots; s += kThreads)
      for (int copy = 0; copy < 3; ++copy) mine[i].push_back(static_cast<int32_t>(s));
    std::shuffle(mine[i].begin(), mine[i].end(), rng.gen());
    for (size_t r = 0; r < mine[i].size() * 512; ++r)
      rows[i].push_back(static_cast<float>(rng.normal()));
    for (size_t r = 0; r < mine[i].size(); ++r) {
      bool last = true;
      for (size_t later = r + 1; later < mine[i].size(); ++later)
        last = last && mine[i][later] != mine[i][r];
      if (!last) continue;
      last_slots.push_back(mine[i][r]);
      last_rows.insert(last_rows.end(), rows[i].begin() + r * 512, rows[i].begin() + (r + 1) * 512);
    }
  }
  std::atomic<int> failures{0};
  run_threads(kThreads, [&](int i) {
    if (shared.write(ctx.get(), rows[i], mine[i]) != DSV4_STATUS_OK) ++failures;
  });
  ASSERT_EQ(failures.load(), 0);
  ASSERT_EQ(alone.write(ctx.get(), last_rows, last_slots), DSV4_STATUS_OK);
  EXPECT_TRUE(shared.cache == alone.cache);
}

TEST(Concurrency, DuplicateSlotsInOneWriteOnManyWorkers) {
  // Spec 12.4 under the race detector: one call, rows of one slot spread over the pool's items.
  SCOPED_TRACE(seed_note());
  Rng rng(case_seed("kv_duplicates"));
  CtxPtr many = cpu_ctx(6), one = cpu_ctx(1);
  ASSERT_TRUE(many && one);
  Layer a(many.get(), rng), b(one.get(), rng);
  b.cache = a.cache;
  std::vector<int32_t> slots(900);
  for (auto& s : slots) s = static_cast<int32_t>(rng.randint(-1, 40));
  std::vector<float> rows(slots.size() * 512);
  for (auto& x : rows) x = static_cast<float>(rng.normal());
  ASSERT_EQ(a.write(many.get(), rows, slots), DSV4_STATUS_OK);
  ASSERT_EQ(b.write(one.get(), rows, slots), DSV4_STATUS_OK);
  EXPECT_TRUE(a.cache == b.cache) << "6 workers and 1 worker leave different caches";
}

// Log lines delivered to the callback of the context (or call) that produced them.
struct Sink {
  std::mutex mutex;
  std::vector<std::string> lines;
  static void fn(int32_t, const char* message, void* user_data) {
    auto* self = static_cast<Sink*>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.emplace_back(message);
  }
};

TEST(Concurrency, ContextsCreatedAndDestroyedOnOtherThreads) {
  // Contexts come and go on several threads (the loader's module table, the environment, the
  // log scopes) while a long-lived context runs on another; every context logs to its own sink.
  SCOPED_TRACE(seed_note());
  Rng rng(case_seed("ctx_threads"));
  CtxPtr keeper = cpu_ctx(2);
  ASSERT_TRUE(keeper);
  Layer layer(keeper.get(), rng);
  std::vector<uint16_t> want_out;
  std::vector<float> want_lse;
  ASSERT_EQ(layer.run(&want_out, &want_lse), DSV4_STATUS_OK);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::thread runner([&] {
    while (!stop.load()) {
      std::vector<uint16_t> out;
      std::vector<float> lse;
      if (layer.run(&out, &lse) != DSV4_STATUS_OK || out != want_out) ++wrong;
    }
  });
  std::vector<Sink> sinks(kThreads);
  run_threads(kThreads, [&](int i) {
    for (int k = 0; k < 6; ++k) {
      CtxPtr ctx =
          cpu_ctx(1 + (i + k) % 3, &Sink::fn, &sinks[static_cast<size_t>(i)], DSV4_LOG_DEBUG);
      int32_t count = 0;
      if (!ctx || dsv4_enumerate_backends(nullptr, nullptr, 0, &count) != DSV4_STATUS_OK) ++wrong;
      dsv4_device_info info;
      std::memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      if (dsv4_get_device_info(nullptr, "cpu", 0, &info) != DSV4_STATUS_OK) ++wrong;
    }
  });
  stop.store(true);
  runner.join();
  EXPECT_EQ(wrong.load(), 0);
  // Each sink got its own contexts' lines: the selection line and the module's own debug line
  // ("context with N threads"), which reaches the sink of the call on the module's thread.
  for (int i = 0; i < kThreads; ++i) {
    Sink& s = sinks[static_cast<size_t>(i)];
    int selected = 0, module_lines = 0;
    for (const auto& line : s.lines) {
      selected += line.find("selected (options.backend)") != std::string::npos;
      module_lines += line.find("cpu: context with") != std::string::npos;
    }
    EXPECT_EQ(selected, 6) << "sink " << i;
    EXPECT_EQ(module_lines, 6) << "sink " << i;
  }
}

TEST(Concurrency, ErrorMessagesStayOnTheirThread) {
  CtxPtr ctx = cpu_ctx(1);
  ASSERT_TRUE(ctx);
  std::atomic<int> wrong{0};
  run_threads(kThreads, [&](int i) {
    for (int k = 0; k < 50; ++k) {
      dsv4_plan_options o;
      dsv4_plan_options_init(&o);
      o.num_heads = 1000 + i;  // each thread's own invalid value
      dsv4_plan* plan = nullptr;
      if (dsv4_plan_create(ctx.get(), &o, &plan) != DSV4_STATUS_INVALID_ARGUMENT) ++wrong;
      const std::string message = dsv4_last_error_message();
      if (message.find("num_heads = " + std::to_string(1000 + i)) == std::string::npos) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace dsv4test
