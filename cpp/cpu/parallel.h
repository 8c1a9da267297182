// A fixed-split parallel loop over a persistent thread pool, for the CPU kernels.
#pragma once
#include <cstdint>
#include <type_traits>

namespace metalrt::cpu {

// The type-erased loop body ParallelFor hands the pool: fn(context, begin, end).
using ChunkFn = void (*)(const void* context, int64_t begin, int64_t end);

// ParallelFor without the template: what it compiles to.
void ParallelForChunks(int64_t n, int64_t min_chunk, ChunkFn fn, const void* context);

// Calls fn(begin, end) on contiguous chunks covering [0, n), one chunk per pool
// thread (METALRT_CPU_THREADS, else std::thread::hardware_concurrency), none
// shorter than `min_chunk` unless n is. Kernels compute every output independently
// of the chunking, so results are bit-identical for any thread count. The first
// exception thrown by fn is rethrown. A loop started from inside a chunk runs inline.
// fn is called through a pointer to it (no std::function, no allocation per loop: a
// decode step runs a few hundred loops).
template <class Fn>
void ParallelFor(int64_t n, int64_t min_chunk, const Fn& fn) {
  static_assert(std::is_invocable_v<const Fn&, int64_t, int64_t>, "ParallelFor: fn(int64_t begin, int64_t end)");
  ParallelForChunks(
      n, min_chunk,
      [](const void* context, int64_t begin, int64_t end) { (*static_cast<const Fn*>(context))(begin, end); },
      &fn);
}

// The chunks ParallelFor(n, min_chunk, ...) runs: *count chunks of `size` rows (the
// last may be shorter), chunk c covering [c * size, min(n, (c + 1) * size)). Callers
// that plan ahead for a loop (PrefetchWhileIdle's spans) split rows the same way.
int64_t ParallelChunkSize(int64_t n, int64_t min_chunk, int* count);

// A byte range to read ahead: [begin, end).
struct PrefetchSpan {
  const void* begin;
  const void* end;
};

// Asks the pool's threads to prefetch `spans` (at most kMaxPrefetchSpans, ranges the
// next parallel loop will read) into their caches while they would otherwise poll:
// a worker between loops, or the caller waiting for a loop's last chunk. Pieces of
// kPrefetchPieceBytes are taken from the spans in turn (piece 0 of every span, then
// piece 1, ...), so each span's start arrives first. Replaces the spans of any earlier
// call; no-op with one thread or from inside a chunk. A prefetch never faults and
// changes no value: a span that is wrong costs bandwidth, never a result.
inline constexpr int kMaxPrefetchSpans = 8;
inline constexpr int64_t kPrefetchPieceBytes = 1024;
void PrefetchWhileIdle(const PrefetchSpan* spans, int count);

// Pieces (with bytes in them) the pool's threads have prefetched of the spans of the
// last PrefetchWhileIdle call: the gates' view of the idle prefetch.
int64_t IdlePrefetchedPieces();

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
