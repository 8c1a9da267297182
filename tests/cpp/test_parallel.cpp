// Gates of the CPU thread pool's ParallelFor: full coverage of the range, nesting,
// exceptions, a forked child that has no workers, back-to-back loops handed to
// polling workers, idle workers that sleep rather than poll, the chunks a caller can
// plan for (ParallelChunkSize), and the idle threads' prefetch of published spans.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <utility>
#include <thread>
#include <stdexcept>
#include <vector>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu/parallel.h"

using metalrt::cpu::ParallelFor;

namespace {

// Each index of [0, n) visited exactly once, by chunks inside the range.
bool CoversOnce(int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  bool in_range = true;
  ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) in_range = false;
    for (int64_t i = begin; i < end; ++i) ++seen[i];
  });
  for (auto& s : seen)
    if (s != 1) return false;
  return in_range;
}

}  // namespace

TEST_CASE("parallel: every index exactly once, any size and chunk floor") {
  for (int64_t n : {1, 2, 3, 31, 32, 33, 1000})
    for (int64_t min_chunk : {1, 7, 64, 5000}) {
      CAPTURE(n);
      CAPTURE(min_chunk);
      CHECK(CoversOnce(n, min_chunk));
    }
  bool called = false;
  ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  CHECK(!called);
}

TEST_CASE("parallel: a loop inside a chunk runs inline; exceptions reach the caller") {
  std::atomic<int64_t> total{0};
  ParallelFor(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      ParallelFor(10, 1, [&](int64_t b, int64_t e) { total += e - b; });
  });
  CHECK(total == 80);
  CHECK_THROWS_AS(ParallelFor(100, 1, [](int64_t, int64_t) { throw std::runtime_error("chunk failed"); }),
                  std::runtime_error);
  CHECK(CoversOnce(100, 1));   // the pool still works after a failed loop
}

TEST_CASE("parallel: a forked child (no workers) completes its loops") {
  CHECK(CoversOnce(1000, 1));   // the pool exists in the parent
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(CoversOnce(1000, 1) ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("parallel: ScopedParallelThreadLimit caps the chunks while it lives") {
  auto chunks = [] {
    std::atomic<int> count{0};
    ParallelFor(1000, 1, [&](int64_t, int64_t) { ++count; });
    return count.load();
  };
  const int all = chunks();
  // One chunk a thread, of ceil(1000 / threads) rows: fewer chunks when the rounding
  // leaves the last threads nothing (1000 rows on 64 threads are 63 chunks of 16).
  const int64_t threads = metalrt::cpu::ParallelThreadCount(), size = (1000 + threads - 1) / threads;
  CHECK(all == static_cast<int>((1000 + size - 1) / size));
  {
    const metalrt::cpu::ScopedParallelThreadLimit one(1);
    CHECK(chunks() == 1);
    {
      const metalrt::cpu::ScopedParallelThreadLimit two(2);
      CHECK(chunks() == std::min(all, 2));
    }
    CHECK(chunks() == 1);
  }
  CHECK(chunks() == all);
}

TEST_CASE("parallel: back-to-back loops of every chunk count, on polling and on sleeping workers") {
  // Thousands of loops in a row (the decode step's pattern: workers still polling
  // when the next loop comes), loops on fewer chunks than threads (a worker outside
  // one loop must not run a chunk of the next), and loops after a pause long enough
  // for every worker to have gone to sleep.
  const int threads = static_cast<int>(metalrt::cpu::ParallelThreadCount());
  std::vector<int64_t> sums(5000);
  for (size_t r = 0; r < sums.size(); ++r) {
    const int64_t n = 1 + static_cast<int64_t>(r % 7);   // 1..7 chunks of one
    std::atomic<int64_t> sum{0};
    ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i + 1;
    });
    sums[r] = sum.load() - n * (n + 1) / 2;   // 0 when each index ran exactly once
  }
  CHECK(std::all_of(sums.begin(), sums.end(), [](int64_t s) { return s == 0; }));
  for (int pause = 0; pause < 3; ++pause) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(CoversOnce(1000, 1));
    CHECK(CoversOnce(threads + 1, 1));
  }
}

TEST_CASE("parallel: idle workers block instead of polling") {
  CHECK(CoversOnce(1000, 1));   // workers exist and have just run
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  // Each worker polls for at most its spin budget (2 ms of wall time) before it sleeps:
  // let every worker pass it (on an oversubscribed or busy host a worker may need a few
  // time slices to notice), then measure. Workers polling through the pause would use
  // ~0.3 s each; sleeping ones use none, whatever their number.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = cpu_seconds() - before;
  CAPTURE(used);
  CHECK(used < 0.03);
}

TEST_CASE("parallel: a chunk runs exactly once whoever claims it, and its exception still reaches the caller") {
  // The caller claims the chunks no worker has taken once its own is done: loops whose
  // chunk 0 is empty (the caller races the workers for the rest) and loops whose other
  // chunks are empty (the workers race the caller), each index counted.
  const int threads = static_cast<int>(metalrt::cpu::ParallelThreadCount());
  const int64_t n = std::max(2, threads);
  bool once = true;
  for (int r = 0; r < 4000; ++r) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    const bool caller_fast = r % 2 == 0;
    ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      const bool slow = (begin == 0) != caller_fast;
      for (volatile int spin = 0; slow && spin < 200; spin = spin + 1) {}
      for (int64_t i = begin; i < end; ++i) ++seen[i];
    });
    for (auto& s : seen) once &= s == 1;
  }
  CHECK(once);
  for (int r = 0; r < 200; ++r)
    CHECK_THROWS_AS(ParallelFor(n, 1, [&](int64_t, int64_t end) {   // one chunk on one thread
                      if (end == n) throw std::runtime_error("last chunk");
                    }),
                    std::runtime_error);
}

TEST_CASE("parallel: ParallelChunkSize names the chunks ParallelFor runs") {
  for (int64_t n : {1, 2, 33, 960, 1536})
    for (int64_t min_chunk : {1, 32, 64, 5000}) {
      std::mutex mutex;
      std::vector<std::pair<int64_t, int64_t>> ran;
      ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(mutex);
        ran.emplace_back(begin, end);
      });
      std::sort(ran.begin(), ran.end());
      int count = -1;
      const int64_t size = metalrt::cpu::ParallelChunkSize(n, min_chunk, &count);
      CAPTURE(n);
      CAPTURE(min_chunk);
      REQUIRE(ran.size() == size_t(count));
      for (int c = 0; c < count; ++c) {
        CHECK(ran[c].first == c * size);
        CHECK(ran[c].second == std::min(n, (c + 1) * size));
      }
    }
  int count = -1;
  CHECK(metalrt::cpu::ParallelChunkSize(0, 1, &count) == 0);
  CHECK(count == 0);
}

TEST_CASE("parallel: idle threads prefetch every piece of the last published spans, and only those") {
  using metalrt::cpu::IdlePrefetchedPieces;
  using metalrt::cpu::kPrefetchPieceBytes;
  using metalrt::cpu::PrefetchSpan;
  std::vector<uint8_t> buffer(1 << 20);
  const uint8_t* b = buffer.data();
  // Replaced at once: none of its 1,024 pieces may be counted for the spans after it.
  const PrefetchSpan replaced[1] = {{b, b + buffer.size()}};
  metalrt::cpu::PrefetchWhileIdle(replaced, 1);
  // 40 pieces, and 9 (the last one byte): rounds of 40 over both spans, 49 with bytes.
  const PrefetchSpan spans[2] = {{b, b + 40 * kPrefetchPieceBytes},
                                 {b + 48 * kPrefetchPieceBytes, b + 56 * kPrefetchPieceBytes + 1}};
  metalrt::cpu::PrefetchWhileIdle(spans, 2);
  if (metalrt::cpu::ParallelThreadCount() < 2) {   // no idle thread: a documented no-op
    CHECK(IdlePrefetchedPieces() == 0);
    return;
  }
  // Loops keep the workers polling (and the caller waits on them), which is when they prefetch.
  for (int i = 0; i < 100000 && IdlePrefetchedPieces() < 49; ++i) ParallelFor(2, 1, [](int64_t, int64_t) {});
  for (int i = 0; i < 100; ++i) ParallelFor(2, 1, [](int64_t, int64_t) {});
  CHECK(IdlePrefetchedPieces() == 49);
  // From inside a chunk the call is ignored: the spans stay those above.
  ParallelFor(2, 1, [&](int64_t, int64_t) { metalrt::cpu::PrefetchWhileIdle(replaced, 1); });
  CHECK(IdlePrefetchedPieces() == 49);
}
