// Fibers: a GPU thread of the simulated device is a fiber with its own stack,
// switched to and from the threadgroup's scheduler. The switch is hand-written
// assembly on x86-64 and arm64 (callee-saved registers only, ~6x faster than
// swapcontext); elsewhere, and in the ThreadSanitizer build, ucontext.
#pragma once
#include <cstddef>

#if defined(METALRT_SIM_TSAN) || !(defined(__x86_64__) || defined(__aarch64__))
#define METALRT_SIM_UCONTEXT 1
#include <ucontext.h>
#endif

namespace metalrt::sim {

// An mmap'd stack with a guard page below it, so an overflow faults instead of
// silently corrupting a neighbour. `color` staggers the top by that many cache
// lines: stacks a power of two apart would otherwise put every fiber's hot frame
// in the same cache sets.
class FiberStack {
 public:
  explicit FiberStack(size_t bytes, unsigned color = 0);
  ~FiberStack();
  FiberStack(FiberStack&& other) noexcept;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack& operator=(FiberStack&&) = delete;
  void* top() const { return base_ + size_ - color_bytes_; }
  void* bottom() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t color_bytes_ = 0;
};

// Test hook: while `fail` is set, every FiberStack mapping fails with std::bad_alloc,
// as an exhausted address space or vm.max_map_count would make mmap fail, so the
// simulated device's handling of that can be gated without exhausting anything.
void FailFiberStackMapsForTesting(bool fail);

class Fiber {
 public:
  Fiber();
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  // Arranges for the next switch to this fiber to call entry(arg) on `stack`.
  // `entry` must never return: a finished fiber switches away for good.
  void Start(const FiberStack& stack, void (*entry)(void*), void* arg);
  // Saves the running context into `from` and resumes `to`.
  static void Switch(Fiber& from, Fiber& to);

 private:
#ifdef METALRT_SIM_UCONTEXT
  ucontext_t context_{};
#else
  void* stack_pointer_ = nullptr;
#endif
#ifdef METALRT_SIM_TSAN
  void* tsan_fiber_ = nullptr;
  bool owns_tsan_fiber_ = false;
#endif
};

}  // namespace metalrt::sim
