// The worker threads of a simulated device: a dispatch's threadgroups are spread
// over them (and the calling thread), each worker running whole threadgroups with
// its own ThreadgroupRunner. METALRT_SIM_THREADS sets the count (default: the
// machine's hardware threads).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim/dispatch.h"
#include "sim/fiber_order.h"
#include "sim/threadgroup.h"

namespace metalrt::sim {

class WorkerPool {
 public:
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs every threadgroup of `dispatch`; returns the error of the lowest-numbered
  // failing threadgroup ("" when all succeed), and in `counts` what was measured
  // over its threadgroups. Called by one thread at a time.
  std::string Run(const Dispatch& dispatch, gpu::DispatchCounts* counts);

 private:
  struct Job;
  void WorkerLoop(unsigned index);   // index: 1 .. threads - 1 (the caller is 0)
  void Drain(Job& job, ThreadgroupRunner& runner);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Job* job_ = nullptr;
  uint64_t job_serial_ = 0;
  unsigned busy_ = 0;
  bool stopping_ = false;
  std::unique_ptr<ThreadgroupRunner> caller_runner_;
};

unsigned DefaultWorkerCount();

}  // namespace metalrt::sim
