#include "cpu/parallel.h"

#include "core/env.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

namespace metalrt::cpu {

// METALRT_CPU_THREADS (a positive integer) if set, else hardware_concurrency: the
// benchmarks give metalrt and its peers the same number of threads.
unsigned ParallelThreadCount() {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(PositiveIntFromEnv("METALRT_CPU_THREADS", hardware, 1024));
}

namespace {

// A persistent pool of ParallelThreadCount() - 1 workers; the caller runs chunk 0.
// One parallel loop at a time; a loop started from inside a chunk runs inline.
class Pool {
 public:
  Pool() {
    const unsigned threads = ParallelThreadCount();
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // A forked child (e.g. Python multiprocessing) has none of the workers, and its
  // mutexes may be in any state: it must run every loop inline.
  bool forked() const { return getpid() != owner_; }

  // Runs task(i) for i in [0, count) with count <= threads().
  void Run(int count, const std::function<void(int)>& task) {
    std::lock_guard<std::mutex> serial(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      count_ = count;
      pending_ = count - 1;
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    RunOne(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

  // True on a thread while it runs a chunk (the caller's chunk 0 included).
  static thread_local bool in_loop;

 private:
  void RunOne(int i) {
    in_loop = true;
    try {
      (*task_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    in_loop = false;
  }
  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= count_) continue;
      }
      RunOne(index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const pid_t owner_ = getpid();
  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int count_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};
thread_local bool Pool::in_loop = false;

std::atomic<int> thread_limit{1 << 30};

Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool& pool = ThePool();
  const int64_t by_size = (n + std::max<int64_t>(1, min_chunk) - 1) / std::max<int64_t>(1, min_chunk);
  const int threads = std::min(pool.threads(), thread_limit.load(std::memory_order_relaxed));
  const int count = static_cast<int>(std::min<int64_t>(threads, by_size));
  if (count <= 1 || Pool::in_loop || pool.forked()) return fn(0, n);
  const int64_t chunk = (n + count - 1) / count;
  pool.Run(count, [&](int i) {
    const int64_t begin = i * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  });
}

ScopedParallelThreadLimit::ScopedParallelThreadLimit(int threads)
    : previous_(thread_limit.exchange(std::max(1, threads))) {}
ScopedParallelThreadLimit::~ScopedParallelThreadLimit() { thread_limit.store(previous_); }

}  // namespace metalrt::cpu
