// Fixed worker pool of the CPU backend: created once per context, one blocking parallel_for at a
// time (callers on other threads queue on a mutex), no allocation per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {
namespace cpu {

class thread_pool {
 public:
  // num_threads workers in total, the calling thread included (so num_threads - 1 are spawned).
  // Throws std::system_error / std::bad_alloc when threads cannot be created.
  explicit thread_pool(int num_threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Calls fn(item, worker) for every item in [0, n) and returns when all are done. `worker` is in
  // [0, size()) and no two concurrent calls share one, so it can index per-worker scratch. fn must
  // not throw. Whole parallel_for calls are serialised, so scratch owned per worker stays private
  // to one call.
  template <class Fn>
  void parallel_for(int64_t n, const Fn& fn) {
    run(n, &invoke<Fn>, &fn);
  }

 private:
  using task_fn = void (*)(const void* fn, int64_t item, int worker);
  template <class Fn>
  static void invoke(const void* fn, int64_t item, int worker) {
    (*static_cast<const Fn*>(fn))(item, worker);
  }

  void run(int64_t n, task_fn task, const void* fn);
  void drain(int worker);
  void worker_loop(int worker);

  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;       // guards the job fields below
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int busy_workers_ = 0;
  bool stopping_ = false;
  task_fn task_ = nullptr;
  const void* fn_ = nullptr;
  int64_t num_items_ = 0;
  std::atomic<int64_t> next_item_{0};
  std::vector<std::thread> threads_;
};

}  // namespace cpu
}  // namespace dsv4
