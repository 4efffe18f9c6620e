#include "thread_pool.h"

namespace dsv4 {
namespace cpu {

thread_pool::thread_pool(int num_threads) {
  const int spawned = num_threads > 1 ? num_threads - 1 : 0;
  threads_.reserve(static_cast<size_t>(spawned));
  try {
    for (int i = 0; i < spawned; ++i) threads_.emplace_back([this, i] { worker_loop(i + 1); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void thread_pool::drain(int worker) {
  for (;;) {
    const int64_t item = next_item_.fetch_add(1, std::memory_order_relaxed);
    if (item >= num_items_) return;
    task_(fn_, item, worker);
  }
}

void thread_pool::run(int64_t n, task_fn task, const void* fn) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  if (threads_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) task(fn, i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = task;
    fn_ = fn;
    num_items_ = n;
    next_item_.store(0, std::memory_order_relaxed);
    busy_workers_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  wake_.notify_all();
  drain(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return busy_workers_ == 0; });
}

void thread_pool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    drain(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_workers_ == 0) done_.notify_one();
  }
}

}  // namespace cpu
}  // namespace dsv4
