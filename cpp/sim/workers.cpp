#include "sim/workers.h"

#include "core/env.h"

#include <limits>
#include <new>
#include <string>

namespace metalrt::sim {

struct WorkerPool::Job {
  const Dispatch* dispatch;
  FiberOrder order;
  uint64_t total;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> max_simd_collectives{0};
  std::mutex error_mutex;
  uint64_t error_group = std::numeric_limits<uint64_t>::max();
  std::string error;
};

unsigned DefaultWorkerCount() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<unsigned>(PositiveIntFromEnv("METALRT_SIM_THREADS", hw ? hw : 2, 1024));
}

namespace {
// Each runner keeps one mapped fiber stack (and its guard page: two kernel maps) per
// thread of the largest threadgroup it has run. Helper i (the caller is 0) runs
// threadgroups of g threads only while (i + 1) * g <= this budget, so runner i holds at
// most budget / (i + 1) stacks and a pool of n runners at most budget * H(n) (about
// 19,400 at 64 runners: 39,000 maps, under Linux's default vm.max_map_count of 65,530).
// Which runner runs a threadgroup never changes its result.
constexpr uint64_t kFiberStackBudget = 4096;
}  // namespace

WorkerPool::WorkerPool(unsigned threads) : caller_runner_(std::make_unique<ThreadgroupRunner>()) {
  // The calling thread works too, so `threads` - 1 helpers.
  for (unsigned i = 1; i < threads; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Drain(Job& job, ThreadgroupRunner& runner) {
  const Dispatch& d = *job.dispatch;
  for (;;) {
    if (job.stop.load(std::memory_order_relaxed)) return;
    const uint64_t g = job.next.fetch_add(1, std::memory_order_relaxed);
    if (g >= job.total) return;
    const uint32_t group[3] = {static_cast<uint32_t>(g % d.threadgroups.x),
                               static_cast<uint32_t>(g / d.threadgroups.x % d.threadgroups.y),
                               static_cast<uint32_t>(g / (uint64_t{d.threadgroups.x} * d.threadgroups.y))};
    std::string error;
    try {
      error = runner.Run(d, job.order, group);
      const uint32_t collectives = runner.max_simd_collectives();
      uint32_t seen = job.max_simd_collectives.load(std::memory_order_relaxed);
      while (collectives > seen &&
             !job.max_simd_collectives.compare_exchange_weak(seen, collectives, std::memory_order_relaxed)) {
      }
    } catch (const std::bad_alloc&) {
      // Each worker maps one fiber stack per thread of a threadgroup; many workers
      // times large threadgroups can exhaust the address space or the kernel's map
      // count. An exception must not escape a worker thread (it would terminate).
      error = "the simulated device could not map fiber stacks for a threadgroup of " +
              std::to_string(uint64_t{d.group_size.x} * d.group_size.y *
                             d.group_size.z) +
              " threads (each of the METALRT_SIM_THREADS workers keeps one stack per thread; "
              "set METALRT_SIM_THREADS lower)";
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (g < job.error_group) {
        job.error_group = g;
        job.error = std::move(error);
      }
      job.stop = true;
    }
  }
}

void WorkerPool::WorkerLoop(unsigned index) {
  ThreadgroupRunner runner;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (job_ && job_serial_ != seen); });
    if (stopping_) return;
    seen = job_serial_;
    Job* job = job_;
    ++busy_;
    lock.unlock();
    const gpu::Size3& g = job->dispatch->group_size;
    if ((index + 1) * (uint64_t{g.x} * g.y * g.z) <= kFiberStackBudget) Drain(*job, runner);
    lock.lock();
    if (--busy_ == 0) done_.notify_all();
  }
}

std::string WorkerPool::Run(const Dispatch& dispatch, gpu::DispatchCounts* counts) {
  Job job;
  job.dispatch = &dispatch;
  job.order = CurrentFiberOrder();
  job.total = uint64_t{dispatch.threadgroups.x} * dispatch.threadgroups.y * dispatch.threadgroups.z;
  // One threadgroup (the common tiny dispatch) runs here without waking anyone.
  const bool spread = job.total > 1 && !threads_.empty();
  if (spread) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    ++job_serial_;
    wake_.notify_all();
  }
  Drain(job, *caller_runner_);
  if (spread) {
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = nullptr;   // late wakers see no job
    done_.wait(lock, [&] { return busy_ == 0; });
  }
  counts->max_simd_collectives = job.max_simd_collectives.load(std::memory_order_relaxed);
  return job.error;
}

}  // namespace metalrt::sim
