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
// and a context switch (~5-20 us, ~75 us measured on a 2-core VM) per loop, a polling
// one ~0.1 us. A worker polls for longer than the Python between two decode steps
// (~0.35 ms), so the first loop of a step finds it awake; the caller, waiting only for
// the chunks of its own loop, polls for less. Past the budget a thread blocks, so an
// idle process (a server between requests) burns at most 2 ms per worker.
constexpr auto kWorkerSpinBudget = std::chrono::microseconds(2000);
constexpr auto kCallerSpinBudget = std::chrono::microseconds(200);
// Polls between clock reads, and the time between yields while polling. A yield lets
// a thread that shares the core (on a machine with more runnable threads than cores)
// run instead of the poll, but costs ~1 us of system call, during which a published
// loop waits: yielding every 64 polls (~1 us) made a loop start late about half the time.
constexpr int kPollsPerCheck = 64;
constexpr auto kYieldInterval = std::chrono::microseconds(20);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls ready() for up to `budget`; true as soon as it holds.
template <class Ready>
bool SpinUntil(std::chrono::microseconds budget, const Ready& ready) {
  auto now = std::chrono::steady_clock::now();
  const auto deadline = now + budget;
  auto next_yield = now + kYieldInterval;
  for (;;) {
    for (int i = 0; i < kPollsPerCheck; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    now = std::chrono::steady_clock::now();
    if (now >= deadline) return ready();
    if (now >= next_yield) {
      std::this_thread::yield();
      next_yield = now + kYieldInterval;
    }
  }
}

// A persistent pool of ParallelThreadCount() - 1 workers; the caller runs chunk 0.
// One parallel loop at a time; a loop started from inside a chunk runs inline.
//
// Handoff: the caller publishes a loop by bumping generation_, workers poll it, claim
// the other chunks one at a time (claim_) and count pending_ down, which the caller
// polls. The caller claims too once its chunk 0 is done, so a worker that starts late
// (descheduled, or yielding) costs the loop its chunk's time, not the wait for the
// worker; a chunk covers the same range whoever runs it, so results do not change.
// Each side polls for its spin budget, then sleeps on a condition variable after
// announcing itself (sleepers_, caller_sleeping_), and the other side takes the mutex
// and notifies only when someone announced, so the common case makes no system call.
// No wake-up is lost: the sleeper's announcement and the waker's event are seq_cst, so
// either the waker sees the announcement or the sleeper's check under the mutex sees
// the event.
//
// While a thread polls (a worker for the next loop, the caller for its loop's last
// chunk) it prefetches pieces of the spans PrefetchWhileIdle published, one claimed
// piece (16 lines) per poll, so a loop that starts waits for at most one piece.
class Pool {
 public:
  Pool() {
    const unsigned threads = ParallelThreadCount();
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
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
    const uint64_t sequence = (generation_.load(std::memory_order_relaxed) >> kCountBits) + 1;
    claim_.store(sequence << kCountBits | 1, std::memory_order_relaxed);   // chunk 0 is the caller's
    // seq_cst: publishes the loop (release) and orders the read of sleepers_ below.
    generation_.store(sequence << kCountBits | static_cast<uint64_t>(count));
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      start_.notify_all();
    }
    RunOne(0);
    for (int i; (i = Claim(sequence, count)) >= 0;) {
      RunOne(i);
      pending_.fetch_sub(1);
    }
    const auto chunks_done = [this] {
      if (pending_.load(std::memory_order_acquire) == 0) return true;
      PrefetchPiece();
      return false;
    };
    if (!SpinUntil(kCallerSpinBudget, chunks_done)) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_sleeping_.store(true);
      done_.wait(lock, [this] { return pending_.load() == 0; });
      caller_sleeping_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
  }

  // True on a thread while it runs a chunk (the caller's chunk 0 included).
  static thread_local bool in_loop;

  // PrefetchWhileIdle: spans of epoch e go to span_sets_[e & 1], then prefetch_ =
  // e << 32 (piece 0). Only the publishing thread writes a set, and the set of epoch
  // e is rewritten only by epoch e + 2's publication, after e + 1's changed prefetch_:
  // a thread whose claim of (e, piece) succeeded read the set of e unchanged. (A racing
  // read could at worst name a wrong address, which a prefetch tolerates.)
  void Publish(const PrefetchSpan* spans, int count) {
    std::lock_guard<std::mutex> serial(run_mutex_);
    const uint64_t epoch = (prefetch_.load(std::memory_order_relaxed) >> 32) + 1;
    SpanSet& set = span_sets_[epoch & 1];
    count = std::clamp(count, 0, kMaxPrefetchSpans);
    int64_t rounds = 0;
    for (int i = 0; i < count; ++i) {
      const auto begin = reinterpret_cast<uintptr_t>(spans[i].begin), end = reinterpret_cast<uintptr_t>(spans[i].end);
      set.begin[i].store(begin, std::memory_order_relaxed);
      set.end[i].store(end, std::memory_order_relaxed);
      if (end > begin) rounds = std::max<int64_t>(rounds, int64_t((end - begin + kPrefetchPieceBytes - 1) / kPrefetchPieceBytes));
    }
    rounds = std::min<int64_t>(rounds, kMaxRounds);   // the piece index stays in its 32 bits
    set.count.store(count, std::memory_order_relaxed);
    set.pieces.store(rounds * count, std::memory_order_relaxed);
    set.prefetched.store(0, std::memory_order_relaxed);
    prefetch_.store(epoch << 32, std::memory_order_release);
  }
  int64_t prefetched() const {
    return span_sets_[(prefetch_.load(std::memory_order_acquire) >> 32) & 1].prefetched.load(std::memory_order_relaxed);
  }

 private:
  // Claims and prefetches the next piece of the published spans, if one is left.
  void PrefetchPiece() {
    uint64_t word = prefetch_.load(std::memory_order_acquire);
    SpanSet& set = span_sets_[(word >> 32) & 1];
    const int64_t piece = static_cast<uint32_t>(word);
    if (piece >= set.pieces.load(std::memory_order_relaxed)) return;
    const int count = set.count.load(std::memory_order_relaxed);
    if (count <= 0) return;   // a publication racing this read
    const int span = static_cast<int>(piece % count);
    const uintptr_t begin = set.begin[span].load(std::memory_order_relaxed) + uintptr_t(piece / count * kPrefetchPieceBytes);
    const uintptr_t end = std::min<uintptr_t>(set.end[span].load(std::memory_order_relaxed), begin + kPrefetchPieceBytes);
    if (!prefetch_.compare_exchange_strong(word, word + 1, std::memory_order_relaxed)) return;
    // Addresses as integers until the prefetch: no pointer is formed outside a span.
    for (uintptr_t a = begin; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 2);
    if (begin < end) set.prefetched.fetch_add(1, std::memory_order_relaxed);
  }

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
  // The next unclaimed chunk of loop `sequence` (of `count` chunks), or -1 when every
  // chunk is taken or that loop is over. A thread reads the loop's fields only after a
  // claim succeeds: until pending_ reaches 0 the caller cannot overwrite them, and a
  // claim on a finished loop fails on the sequence number.
  int Claim(uint64_t sequence, int count) {
    uint64_t word = claim_.load(std::memory_order_acquire);
    for (;;) {
      const int i = static_cast<int>(word & kCountMask);
      if ((word >> kCountBits) != sequence || i >= count) return -1;
      if (claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        return i;
    }
  }
  void Work() {
    uint64_t seen = 0;
    for (;;) {
      const auto next_loop = [&] {
        if (generation_.load(std::memory_order_acquire) != seen) return true;
        PrefetchPiece();
        return false;
      };
      if (!SpinUntil(kWorkerSpinBudget, next_loop)) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        start_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      for (int i; (i = Claim(seen >> kCountBits, static_cast<int>(seen & kCountMask))) >= 0;) {
        RunOne(i);
        if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {   // seq_cst, see the class comment
          { std::lock_guard<std::mutex> lock(mutex_); }
          done_.notify_one();
        }
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
  // a worker learns how many chunks there are from the same load that shows the loop.
  static constexpr int kCountBits = 16;   // > 1024 threads, PositiveIntFromEnv's cap
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
  std::atomic<uint64_t> generation_{0};
  // The loop's sequence number above kCountBits, its next unclaimed chunk below.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> pending_{0}, sleepers_{0};
  std::atomic<bool> caller_sleeping_{false}, stop_{false};
  struct SpanSet {
    std::atomic<uintptr_t> begin[kMaxPrefetchSpans] = {}, end[kMaxPrefetchSpans] = {};
    std::atomic<int> count{0};
    std::atomic<int64_t> pieces{0};       // rounds of the longest span times count
    std::atomic<int64_t> prefetched{0};   // pieces with bytes prefetched so far
  };
  SpanSet span_sets_[2];
  std::atomic<uint64_t> prefetch_{0};   // epoch << 32 | next piece to claim
  static constexpr int64_t kMaxRounds = int64_t{1} << 24;   // 16 GB a span
};
thread_local bool Pool::in_loop = false;

std::atomic<int> thread_limit{1 << 30};

Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

int64_t ParallelChunkSize(int64_t n, int64_t min_chunk, int* count) {
  if (n <= 0) {
    *count = 0;
    return 0;
  }
  const int64_t floor = std::max<int64_t>(1, min_chunk);
  const int64_t by_size = (n + floor - 1) / floor;
  const int threads = std::min(ThePool().threads(), thread_limit.load(std::memory_order_relaxed));
  const int64_t chunks = std::min<int64_t>(threads, by_size);
  const int64_t size = (n + chunks - 1) / chunks;
  // Rounding the size up can leave the last chunks empty (n = 33 on 16 threads is 11
  // chunks of 3): count only the chunks that hold rows, the ones ParallelFor runs.
  *count = static_cast<int>((n + size - 1) / size);
  return size;
}

void ParallelForChunks(int64_t n, int64_t min_chunk, ChunkFn fn, const void* context) {
  int count;
  const int64_t chunk = ParallelChunkSize(n, min_chunk, &count);
  if (count == 0) return;
  Pool& pool = ThePool();
  if (count <= 1 || Pool::in_loop || pool.forked()) return fn(context, 0, n);
  pool.Run(count, n, chunk, fn, context);
}

void PrefetchWhileIdle(const PrefetchSpan* spans, int count) {
  Pool& pool = ThePool();
  if (pool.threads() <= 1 || Pool::in_loop || pool.forked()) return;
  pool.Publish(spans, count);
}

int64_t IdlePrefetchedPieces() { return ThePool().prefetched(); }

ScopedParallelThreadLimit::ScopedParallelThreadLimit(int threads)
    : previous_(thread_limit.exchange(std::max(1, threads))) {}
ScopedParallelThreadLimit::~ScopedParallelThreadLimit() { thread_limit.store(previous_); }

}  // namespace metalrt::cpu
