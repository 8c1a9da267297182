// A fixed-split parallel loop over a persistent thread pool, for the CPU kernels.
#pragma once
#include <cstdint>
#include <functional>

namespace metalrt::cpu {

// Calls fn(begin, end) on contiguous chunks covering [0, n), one chunk per pool
// thread (METALRT_CPU_THREADS, else std::thread::hardware_concurrency), none
// shorter than `min_chunk` unless n is. Kernels compute every output independently of the chunking, so results are
// bit-identical for any thread count. The first exception thrown by fn is rethrown.
// A loop started from inside a chunk runs inline.
void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

// The number of threads ParallelFor runs on (METALRT_CPU_THREADS, else
// hardware_concurrency); std::invalid_argument for a bad METALRT_CPU_THREADS.
unsigned ParallelThreadCount();

// Caps the chunks of every ParallelFor in the process at `threads` (>= 1) while it
// lives, restoring the previous cap after: tests compare thread counts in one process.
class ScopedParallelThreadLimit {
 public:
  explicit ScopedParallelThreadLimit(int threads);
  ~ScopedParallelThreadLimit();
  ScopedParallelThreadLimit(const ScopedParallelThreadLimit&) = delete;
  ScopedParallelThreadLimit& operator=(const ScopedParallelThreadLimit&) = delete;

 private:
  int previous_;
};

}  // namespace metalrt::cpu
