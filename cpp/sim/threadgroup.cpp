#include "sim/threadgroup.h"

#include "core/env.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>

#ifdef METALRT_SIM_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
// Each GPU thread is a TSan fiber switched to without synchronisation; what orders
// them is what orders them on a GPU: every arrival at a barrier or collective
// releases the threadgroup's sync object and every departure acquires it. The
// runtime's own bookkeeping (shared by the fibers by construction) is ignored.
#define METALRT_SIM_TSAN_RELEASE(addr) __tsan_release(addr)
#define METALRT_SIM_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
struct TsanIgnore {
  TsanIgnore() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~TsanIgnore() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
};
#define METALRT_SIM_TSAN_IGNORE TsanIgnore tsan_ignore_
#else
#define METALRT_SIM_TSAN_RELEASE(addr) (void)(addr)
#define METALRT_SIM_TSAN_ACQUIRE(addr) (void)(addr)
#define METALRT_SIM_TSAN_IGNORE
#endif

namespace metalrt::sim {

size_t FiberStackBytes() {
  // A throwing initialiser is retried on the next call, so a bad value keeps failing.
  static const size_t bytes =
      static_cast<size_t>(PositiveIntFromEnv("METALRT_SIM_STACK_KIB", 128, 1024 * 1024)) * 1024;
  return bytes;
}

namespace {
thread_local ThreadgroupRunner* t_runner = nullptr;

constexpr size_t kArenaBytes = 2 * kMaxThreadgroupMemory;   // room for alignment and guards
constexpr size_t kGuardBytes = 64;
constexpr size_t kMaxExchangeBytes = 64;
constexpr uint32_t kNoThread = ~0u;
}  // namespace

struct ThreadgroupRunner::GpuThread {
  Fiber fiber;
  ThreadContext context{};
  State state = State::kRunnable;
  void* exchange_out = nullptr;   // where a pending SIMD exchange delivers
  uint32_t exchange_mask = 0;     // the lanes that took part in its last exchange
};

struct ThreadgroupRunner::SimdGroup {
  uint32_t first = 0;        // thread index of lane 0
  uint32_t live = 0;         // lanes that exist and have not returned
  uint32_t arrived = 0;      // lanes waiting in the current collective
  size_t bytes = 0;
  const char* what = nullptr;
  uint32_t collectives = 0;  // completed since the threadgroup started
  alignas(16) unsigned char values[kSimdWidth * kMaxExchangeBytes];
};

ThreadgroupRunner::ThreadgroupRunner()
    : threads_(new GpuThread[kMaxThreadsPerThreadgroup]),
      simd_groups_(new SimdGroup[kMaxThreadsPerThreadgroup / kSimdWidth]),
      memory_(new unsigned char[kArenaBytes + 64]) {
  arena_ = memory_.get() + (64 - reinterpret_cast<uintptr_t>(memory_.get()) % 64) % 64;
}

ThreadgroupRunner::~ThreadgroupRunner() = default;

ThreadgroupRunner& ThreadgroupRunner::Current() { return *t_runner; }

void ThreadgroupRunner::SetUp(const Dispatch& d, const uint32_t group[3]) {
  dispatch_ = &d;
  failed_ = false;
  error_.clear();
  // Partial edge groups (dispatch_threads) get their real size.
  uint32_t size[3];
  const uint32_t full[3] = {d.group_size.x, d.group_size.y, d.group_size.z};
  const uint32_t grid[3] = {d.grid_threads.x, d.grid_threads.y, d.grid_threads.z};
  const uint32_t groups[3] = {d.threadgroups.x, d.threadgroups.y, d.threadgroups.z};
  for (int a = 0; a < 3; ++a) size[a] = std::min(full[a], grid[a] - group[a] * full[a]);
  const uint32_t n = size[0] * size[1] * size[2];

  // Threadgroup memory: the [[threadgroup(n)]] buffers first, then the kernel's
  // own declarations as they are reached; everything poisoned.
  ++generation_;
  arena_used_ = 0;
  declared_bytes_ = 0;
  guards_.clear();
  for (uint32_t i = 0; i < kMaxThreadgroupBindings; ++i) {
    threadgroup_buffers_[i] = nullptr;
    if (!(d.kernel->threadgroup_buffers >> i & 1u)) continue;
    // At most 32 KiB in all (checked at encode): they and their guards fit the arena.
    declared_bytes_ = (declared_bytes_ + 15) / 16 * 16 + d.threadgroup_lengths[i];
    threadgroup_buffers_[i] = Reserve(d.threadgroup_lengths[i], 16, nullptr, i);
  }

  while (stacks_.size() < n)
    stacks_.emplace_back(FiberStackBytes(), static_cast<unsigned>(stacks_.size() * 7));
  count_ = n;
  simd_count_ = (n + kSimdWidth - 1) / kSimdWidth;
  for (uint32_t s = 0; s < simd_count_; ++s) {
    SimdGroup& g = simd_groups_[s];
    const uint32_t lanes = std::min(kSimdWidth, n - s * kSimdWidth);
    g.first = s * kSimdWidth;
    g.live = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1;
    g.arrived = 0;
    g.collectives = 0;
  }
  for (uint32_t i = 0; i < n; ++i) {
    GpuThread& t = threads_[i];
    ThreadContext& c = t.context;
    c.buffers = d.buffers.data();
    c.threadgroup_buffers = threadgroup_buffers_.data();
    const uint32_t local[3] = {i % size[0], i / size[0] % size[1], i / (size[0] * size[1])};
    for (int a = 0; a < 3; ++a) {
      c.thread_position_in_threadgroup[a] = local[a];
      c.threadgroup_position_in_grid[a] = group[a];
      c.thread_position_in_grid[a] = group[a] * full[a] + local[a];
      c.threads_per_threadgroup[a] = size[a];
      c.threadgroups_per_grid[a] = groups[a];
      c.threads_per_grid[a] = grid[a];
    }
    c.thread_index_in_threadgroup = i;
    c.thread_index_in_simdgroup = i % kSimdWidth;
    c.simdgroup_index_in_threadgroup = i / kSimdWidth;
    c.simdgroups_per_threadgroup = simd_count_;
    c.threads_per_simdgroup = kSimdWidth;
    t.state = State::kRunnable;
    t.fiber.Start(stacks_[i], &ThreadgroupRunner::FiberMain, &t);
  }
  live_ = n;
  at_barrier_ = 0;
  barrier_file_ = nullptr;
}

std::string ThreadgroupRunner::Run(const Dispatch& d, const FiberOrder& order,
                                   const uint32_t group[3]) {
  METALRT_SIM_TSAN_IGNORE;
  t_runner = this;
  SetUp(d, group);
  const uint64_t linear =
      (uint64_t{group[2]} * d.threadgroups.y + group[1]) * d.threadgroups.x + group[0];
  FillRunOrder(order, linear, live_, order_);
  simd_order_.assign(simd_count_ * kSimdWidth, kNoThread);
  std::vector<uint32_t> filled(simd_count_, 0);
  for (uint32_t i : order_) {
    const uint32_t g = i / kSimdWidth;
    simd_order_[g * kSimdWidth + filled[g]++] = i;
  }
  woken_group_ = -1;
  METALRT_SIM_TSAN_RELEASE(&start_sync_);   // the host's writes happen before the threads
  while (live_ > 0) {
    bool ran = false;
    for (uint32_t i : order_) {
      if (threads_[i].state != State::kRunnable) continue;
      ran = true;
      if (!RunThread(threads_[i]) || !RunWokenGroups()) return error_;
    }
    if (!ran && live_ > 0) return DescribeDeadlock();
  }
  METALRT_SIM_TSAN_ACQUIRE(this);
  if (std::string overrun = OverwrittenGuard(); !overrun.empty())
    return overrun + ", found when the threadgroup finished";
  return "";
}

uint32_t ThreadgroupRunner::max_simd_collectives() const {
  uint32_t most = 0;
  for (uint32_t s = 0; s < simd_count_; ++s) most = std::max(most, simd_groups_[s].collectives);
  return most;
}

bool ThreadgroupRunner::RunThread(GpuThread& t) {
  current_ = &t;
  Fiber::Switch(scheduler_, t.fiber);
  current_ = nullptr;
  return !failed_;
}

bool ThreadgroupRunner::RunWokenGroups() {
  while (woken_group_ >= 0) {
    const uint32_t* lanes = &simd_order_[static_cast<uint32_t>(woken_group_) * kSimdWidth];
    woken_group_ = -1;
    for (uint32_t l = 0; l < kSimdWidth && lanes[l] != kNoThread; ++l)
      if (threads_[lanes[l]].state == State::kRunnable && !RunThread(threads_[lanes[l]])) return false;
  }
  return true;
}

void ThreadgroupRunner::FiberMain(void* arg) {
  auto& t = *static_cast<GpuThread*>(arg);
  ThreadgroupRunner& r = Current();
  METALRT_SIM_TSAN_ACQUIRE(&r.start_sync_);
  try {
    r.dispatch_->kernel->entry(t.context);
  } catch (const std::exception& e) {
    r.Fail(e.what());
  } catch (...) {
    r.Fail("unknown exception");
  }
  METALRT_SIM_TSAN_RELEASE(&r);   // a returned thread's writes precede the group's end
  r.Returned(t);
}

void ThreadgroupRunner::Yield() {
  GpuThread& me = *current_;
  Fiber::Switch(me.fiber, scheduler_);
  METALRT_SIM_TSAN_ACQUIRE(this);
}

void ThreadgroupRunner::Fail(std::string message, bool at_thread) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(message);
    const ThreadContext& c = current_->context;
    if (at_thread)
      error_ += " (thread " + std::to_string(c.thread_index_in_threadgroup) + " of threadgroup (" +
                std::to_string(c.threadgroup_position_in_grid[0]) + ", " +
                std::to_string(c.threadgroup_position_in_grid[1]) + ", " +
                std::to_string(c.threadgroup_position_in_grid[2]) + "))";
  }
  for (;;) Fiber::Switch(current_->fiber, scheduler_);   // never resumed
}

void ThreadgroupRunner::Returned(GpuThread& t) {
  {
    METALRT_SIM_TSAN_IGNORE;   // ended before the fiber's last switch
    t.state = State::kReturned;
    --live_;
    SimdGroup& g = GroupOf(t);
    g.live &= ~(1u << t.context.thread_index_in_simdgroup);
    CompleteSimdIfReady(g);
    ReleaseBarrierIfComplete();
  }
  Fiber::Switch(t.fiber, scheduler_);
  std::abort();   // a returned fiber is never resumed
}

uint32_t ThreadgroupRunner::Lane() const { return current_->context.thread_index_in_simdgroup; }

ThreadgroupRunner::SimdGroup& ThreadgroupRunner::GroupOf(const GpuThread& t) {
  return simd_groups_[t.context.simdgroup_index_in_threadgroup];
}

uint32_t ThreadgroupRunner::SimdExchange(const void* mine, size_t bytes, void* all,
                                         const char* what) {
  GpuThread& me = *current_;
  SimdGroup& g = GroupOf(me);
  if (bytes > kMaxExchangeBytes)
    Fail("SIMD-group exchange of " + std::to_string(bytes) + " bytes (at most 64)");
  if (g.arrived == 0) {
    g.bytes = bytes;
    g.what = what;
  } else if (g.bytes != bytes || g.what != what) {
    Fail(std::string("divergent SIMD-group: lanes are in different collectives (") + g.what +
         " and " + what + ")");
  }
  const uint32_t lane = me.context.thread_index_in_simdgroup;
  if (bytes) std::memcpy(g.values + lane * bytes, mine, bytes);
  me.exchange_out = all;
  me.state = State::kAtSimd;
  g.arrived |= 1u << lane;
  METALRT_SIM_TSAN_RELEASE(this);
  CompleteSimdIfReady(g);
  Yield();
  return me.exchange_mask;
}

void ThreadgroupRunner::CompleteSimdIfReady(SimdGroup& g) {
  if (g.arrived == 0 || g.arrived != g.live) return;
  for (uint32_t lane = 0; lane < kSimdWidth; ++lane) {
    if (!(g.arrived >> lane & 1u)) continue;
    GpuThread& t = threads_[g.first + lane];
    if (g.bytes && t.exchange_out) std::memcpy(t.exchange_out, g.values, kSimdWidth * g.bytes);
    t.exchange_mask = g.arrived;
    t.state = State::kRunnable;
  }
  g.arrived = 0;
  ++g.collectives;
  woken_group_ = static_cast<int32_t>(g.first / kSimdWidth);
}

void ThreadgroupRunner::ThreadgroupBarrier(const char* file, int line) {
  if (at_barrier_ == 0) {
    barrier_file_ = file;
    barrier_line_ = line;
  } else if (line != barrier_line_ ||
             (file != barrier_file_ && std::strcmp(file, barrier_file_) != 0)) {
    Fail(std::string("divergent threadgroup_barrier: reached at ") + file + ":" +
         std::to_string(line) + " while other threads wait at " + barrier_file_ + ":" +
         std::to_string(barrier_line_));
  }
  current_->state = State::kAtBarrier;
  ++at_barrier_;
  METALRT_SIM_TSAN_RELEASE(this);
  ReleaseBarrierIfComplete();
  Yield();
}

void ThreadgroupRunner::ReleaseBarrierIfComplete() {
  if (at_barrier_ == 0 || at_barrier_ != live_) return;
  // Any thread may have made the overrun: the error names the barrier, not a thread.
  if (std::string overrun = OverwrittenGuard(); !overrun.empty())
    Fail(overrun + ", found at the threadgroup_barrier at " + barrier_file_ + ":" +
             std::to_string(barrier_line_),
         false);
  for (uint32_t i = 0; i < count_; ++i)
    if (threads_[i].state == State::kAtBarrier) threads_[i].state = State::kRunnable;
  at_barrier_ = 0;
}

void* ThreadgroupRunner::Reserve(size_t bytes, size_t alignment, const char* what, uint32_t binding) {
  const size_t offset = (arena_used_ + alignment - 1) / alignment * alignment;
  std::memset(arena_ + offset, 0xFF, bytes + kGuardBytes);
  guards_.push_back(Guard{offset + bytes, bytes, what, binding});
  arena_used_ = offset + bytes + kGuardBytes;
  return arena_ + offset;
}

void* ThreadgroupRunner::ThreadgroupAlloc(uint32_t slot, size_t bytes, size_t alignment,
                                          const char* what) {
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  Slot& s = slots_[slot];
  if (s.generation == generation_) return arena_ + s.offset;
  const size_t align = alignment < 16 ? 16 : alignment;
  const size_t declared = (declared_bytes_ + align - 1) / align * align + bytes;
  if (declared > kMaxThreadgroupMemory)
    Fail("threadgroup memory of " + std::to_string(declared) +
         " bytes exceeds the 32 KiB (32768 bytes) of a threadgroup");
  if ((arena_used_ + align - 1) / align * align + bytes + kGuardBytes > kArenaBytes)
    Fail("more threadgroup variables than the simulated device's arena holds with their guards");
  declared_bytes_ = declared;
  auto* p = static_cast<unsigned char*>(Reserve(bytes, align, what, 0));
  s = Slot{generation_, static_cast<size_t>(p - arena_), bytes};
  return p;
}

std::string ThreadgroupRunner::OverwrittenGuard() const {
  static const std::array<unsigned char, kGuardBytes> untouched = [] {
    std::array<unsigned char, kGuardBytes> a;
    a.fill(0xFF);
    return a;
  }();
  for (const Guard& g : guards_) {
    const unsigned char* p = arena_ + g.offset;
    if (std::memcmp(p, untouched.data(), kGuardBytes) == 0) continue;
    size_t past = 0;
    while (p[past] == 0xFF) ++past;
    return (g.what ? "threadgroup variable " + std::string(g.what)
                   : "[[threadgroup(" + std::to_string(g.binding) + ")]] buffer") +
           " was written past its end through a pointer (at byte " + std::to_string(g.bytes + past) +
           "; it has " + std::to_string(g.bytes) + ")";
  }
  return "";
}

std::string ThreadgroupRunner::DescribeDeadlock() const {
  uint32_t barrier = 0, simd = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    barrier += threads_[i].state == State::kAtBarrier;
    simd += threads_[i].state == State::kAtSimd;
  }
  return "deadlock: " + std::to_string(barrier) + " threads wait at a threadgroup_barrier and " +
         std::to_string(simd) +
         " at a SIMD-group collective that some lanes of their SIMD-group never reach "
         "(a collective or barrier in divergent control flow)";
}

namespace {
uint32_t HookLane() {
  METALRT_SIM_TSAN_IGNORE;
  return ThreadgroupRunner::Current().Lane();
}
uint32_t HookSimdExchange(const void* mine, size_t bytes, void* all) {
  METALRT_SIM_TSAN_IGNORE;
  return ThreadgroupRunner::Current().SimdExchange(mine, bytes, all, "simd_exchange");
}
void HookThreadgroupBarrier(const char* file, int line) {
  METALRT_SIM_TSAN_IGNORE;
  ThreadgroupRunner::Current().ThreadgroupBarrier(file, line);
}
void HookSimdgroupBarrier(const char*, int) {
  METALRT_SIM_TSAN_IGNORE;
  ThreadgroupRunner::Current().SimdExchange(nullptr, 0, nullptr, "simdgroup_barrier");
}
void* HookThreadgroupAlloc(uint32_t slot, size_t bytes, size_t alignment, const char* what) {
  METALRT_SIM_TSAN_IGNORE;
  return ThreadgroupRunner::Current().ThreadgroupAlloc(slot, bytes, alignment, what);
}
const Hooks kHooks = {&HookLane, &HookSimdExchange, &HookThreadgroupBarrier,
                      &HookSimdgroupBarrier, &HookThreadgroupAlloc};
}  // namespace

const Hooks& RuntimeHooks() { return kHooks; }

}  // namespace metalrt::sim
