// Runs one threadgroup: each GPU thread a fiber, scheduled in the configured
// order; SIMD-group collectives resolved per SIMD-group, barriers per
// threadgroup (a returned thread no longer blocks either). Threadgroup memory is
// NaN-poisoned (0xFF bytes) when the threadgroup starts. Implements the hook table
// of metal/shim/sim_hooks.h for the fibers it runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shim/sim_hooks.h"
#include "sim/dispatch.h"
#include "sim/fiber.h"
#include "sim/fiber_order.h"

namespace metalrt::sim {

constexpr uint32_t kSimdWidth = 32;
constexpr uint32_t kMaxThreadsPerThreadgroup = 1024;
constexpr size_t kMaxThreadgroupMemory = 32 * 1024;

// Bytes of each GPU thread's fiber stack: METALRT_SIM_STACK_KIB KiB (1 to 1048576,
// default 128). std::invalid_argument naming the variable for any other value.
size_t FiberStackBytes();

// The hook table every loaded module gets.
const Hooks& RuntimeHooks();

class ThreadgroupRunner {
 public:
  ThreadgroupRunner();
  ~ThreadgroupRunner();
  ThreadgroupRunner(const ThreadgroupRunner&) = delete;
  ThreadgroupRunner& operator=(const ThreadgroupRunner&) = delete;

  // Runs threadgroup `group` (x, y, z) of `dispatch` to completion; returns an
  // error message ("" on success). Must be called on the thread that owns the
  // runner.
  std::string Run(const Dispatch& dispatch, const FiberOrder& order, const uint32_t group[3]);
  // Collectives completed by the busiest SIMD-group of the last threadgroup Run ran.
  uint32_t max_simd_collectives() const;

  // For the hooks: the runner of the calling worker thread.
  static ThreadgroupRunner& Current();

  uint32_t Lane() const;
  // Returns the lanes that took part.
  uint32_t SimdExchange(const void* mine, size_t bytes, void* all, const char* what);
  void ThreadgroupBarrier(const char* file, int line);
  void* ThreadgroupAlloc(uint32_t slot, size_t bytes, size_t alignment, const char* what);

 private:
  enum class State : uint8_t { kRunnable, kAtBarrier, kAtSimd, kReturned };
  struct GpuThread;
  struct SimdGroup;
  struct Slot {
    uint64_t generation = 0;
    size_t offset = 0;
    size_t bytes = 0;
  };
  // kGuardBytes of 0xFF after every allocation of threadgroup memory: a write past
  // its end through a pointer (which the generator's subscript checks do not see)
  // changes them; they are checked when a barrier completes and when the
  // threadgroup ends. Reads past the end see NaN, like the poison.
  struct Guard {
    size_t offset;        // of the guard bytes in the arena
    size_t bytes;         // of the allocation before them
    const char* what;     // "'x' (file:line)", or nullptr for a [[threadgroup(n)]] buffer
    uint32_t binding;     // n of a [[threadgroup(n)]] buffer
  };

  static void FiberMain(void* thread);
  void SetUp(const Dispatch& dispatch, const uint32_t group[3]);
  void Yield();
  // Stops the threadgroup with `message`, naming the calling thread when `at_thread`.
  [[noreturn]] void Fail(std::string message, bool at_thread = true);
  void* Reserve(size_t bytes, size_t alignment, const char* what, uint32_t binding);
  std::string OverwrittenGuard() const;
  void Returned(GpuThread& t);
  void ReleaseBarrierIfComplete();
  void CompleteSimdIfReady(SimdGroup& g);
  SimdGroup& GroupOf(const GpuThread& t);
  std::string DescribeDeadlock() const;

  const Dispatch* dispatch_ = nullptr;
  std::unique_ptr<GpuThread[]> threads_;   // kMaxThreadsPerThreadgroup, fibers stay put
  uint32_t count_ = 0;
  std::vector<FiberStack> stacks_;
  std::unique_ptr<SimdGroup[]> simd_groups_;
  uint32_t simd_count_ = 0;
  std::vector<uint32_t> order_;
  // Each SIMD-group's threads in run order: the lanes a completed collective wakes
  // run next, while their stacks are still in cache.
  std::vector<uint32_t> simd_order_;   // [simd group][lane] flattened, 32 a group
  int32_t woken_group_ = -1;
  bool RunThread(GpuThread& t);
  bool RunWokenGroups();
  Fiber scheduler_;
  GpuThread* current_ = nullptr;
  uint32_t live_ = 0;
  uint32_t at_barrier_ = 0;
  const char* barrier_file_ = nullptr;
  int barrier_line_ = 0;
  std::unique_ptr<unsigned char[]> memory_;   // the threadgroup memory arena
  unsigned char* arena_ = nullptr;            // 64-byte aligned start
  size_t arena_used_ = 0;
  size_t declared_bytes_ = 0;   // threadgroup memory in use, without guard bytes
  std::vector<Slot> slots_;
  std::vector<Guard> guards_;
  uint64_t generation_ = 0;
  char start_sync_ = 0;   // ThreadSanitizer: host -> threads ordering
  std::array<void*, kMaxThreadgroupBindings> threadgroup_buffers_{};
  bool failed_ = false;
  std::string error_;
};

}  // namespace metalrt::sim
