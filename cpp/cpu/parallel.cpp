#include "cpu/parallel.h"

#include "core/env.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace metalrt::cpu {

// METALRT_CPU_THREADS (a positive integer) if set, else hardware_concurrency: the
// benchmarks give metalrt and its peers the same number of threads.
unsigned ParallelThreadCount() {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(PositiveIntFromEnv("METALRT_CPU_THREADS", hardware, 1024));
}

namespace {

// How long a thread polls for its next event before it sleeps. A decode step runs a
// few hundred loops a few microseconds apart: a sleeping worker costs a futex wake
// and a context switch (~5-20 us) per loop, a polling one ~0.1 us. Past the budget a
// thread blocks, so an idle process (a server between requests) burns no core.
constexpr auto kSpinBudget = std::chrono::microseconds(200);
// Polls between clock reads and yields (a yield lets a thread that shares the core,
// on a machine with more runnable threads than cores, run instead of the poll).
constexpr int kPollsPerCheck = 64;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls ready() for up to kSpinBudget; true as soon as it holds.
template <class Ready>
bool SpinUntil(const Ready& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
  for (;;) {
    for (int i = 0; i < kPollsPerCheck; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
    std::this_thread::yield();
  }
}

// A persistent pool of ParallelThreadCount() - 1 workers; the caller runs chunk 0.
// One parallel loop at a time; a loop started from inside a chunk runs inline.
//
// Handoff: the caller publishes a loop by bumping generation_, workers poll it, run
// their chunk and count pending_ down, which the caller polls. Each side polls for
// kSpinBudget, then sleeps on a condition variable after announcing itself
// (sleepers_, caller_sleeping_), and the other side takes the mutex and notifies
// only when someone announced, so the common case makes no system call. No wake-up
// is lost: the sleeper's announcement and the waker's event are seq_cst, so either
// the waker sees the announcement or the sleeper's check under the mutex sees the event.
class Pool {
 public:
  Pool() {
    const unsigned threads = ParallelThreadCount();
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(static_cast<int>(i)); });
  }
  ~Pool() {
    stop_.store(true);
    generation_.fetch_add(uint64_t{1} << kCountBits);
    {
      std::lock_guard<std::mutex> lock(mutex_);
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // A forked child (e.g. Python multiprocessing) has none of the workers, and its
  // mutexes may be in any state: it must run every loop inline.
  bool forked() const { return getpid() != owner_; }

  // Runs chunk i of the loop for i in [0, count) with count <= threads().
  void Run(int count, int64_t n, int64_t chunk, ChunkFn fn, const void* context) {
    std::lock_guard<std::mutex> serial(run_mutex_);
    fn_ = fn;
    context_ = context;
    n_ = n;
    chunk_ = chunk;
    error_ = nullptr;
    pending_.store(count - 1, std::memory_order_relaxed);
    // seq_cst: publishes the loop (release) and orders the read of sleepers_ below.
    generation_.store(((generation_.load(std::memory_order_relaxed) >> kCountBits) + 1) << kCountBits |
                      static_cast<uint64_t>(count));
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      start_.notify_all();
    }
    RunOne(0);
    if (!SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_sleeping_.store(true);
      done_.wait(lock, [this] { return pending_.load() == 0; });
      caller_sleeping_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
  }

  // True on a thread while it runs a chunk (the caller's chunk 0 included).
  static thread_local bool in_loop;

 private:
  void RunOne(int i) {
    const int64_t begin = i * chunk_;
    const int64_t end = std::min(n_, begin + chunk_);
    if (begin >= end) return;
    in_loop = true;
    try {
      fn_(context_, begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    in_loop = false;
  }
  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        start_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      // A worker outside the loop reads nothing else of it: the caller may already
      // be writing the next one.
      if (index >= static_cast<int>(seen & ((uint64_t{1} << kCountBits) - 1))) continue;
      RunOne(index);
      if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {   // seq_cst, see the class comment
        { std::lock_guard<std::mutex> lock(mutex_); }
        done_.notify_one();
      }
    }
  }

  const pid_t owner_ = getpid();
  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable start_, done_;
  // The loop being run: written by the caller before generation_ is bumped.
  ChunkFn fn_ = nullptr;
  const void* context_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  std::exception_ptr error_;   // under mutex_
  // The loop's sequence number above kCountBits, its chunk count below: one word, so
  // a worker learns whether it takes part from the same load that shows the loop.
  static constexpr int kCountBits = 16;   // > 1024 threads, PositiveIntFromEnv's cap
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0}, sleepers_{0};
  std::atomic<bool> caller_sleeping_{false}, stop_{false};
};
thread_local bool Pool::in_loop = false;

std::atomic<int> thread_limit{1 << 30};

Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

void ParallelForChunks(int64_t n, int64_t min_chunk, ChunkFn fn, const void* context) {
  if (n <= 0) return;
  Pool& pool = ThePool();
  const int64_t floor = std::max<int64_t>(1, min_chunk);
  const int64_t by_size = (n + floor - 1) / floor;
  const int threads = std::min(pool.threads(), thread_limit.load(std::memory_order_relaxed));
  const int count = static_cast<int>(std::min<int64_t>(threads, by_size));
  if (count <= 1 || Pool::in_loop || pool.forked()) return fn(context, 0, n);
  pool.Run(count, n, (n + count - 1) / count, fn, context);
}

ScopedParallelThreadLimit::ScopedParallelThreadLimit(int threads)
    : previous_(thread_limit.exchange(std::max(1, threads))) {}
ScopedParallelThreadLimit::~ScopedParallelThreadLimit() { thread_limit.store(previous_); }

}  // namespace metalrt::cpu
