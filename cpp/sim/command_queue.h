// The simulated device's queue: one thread that runs committed command buffers in
// commit order, each dispatch in encoding order, the threadgroups of a dispatch
// spread over the worker pool.
#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "sim/workers.h"

namespace metalrt::sim {

class SimCommandBuffer;

class CommandQueue {
 public:
  explicit CommandQueue(unsigned threads);
  ~CommandQueue();   // finishes everything committed
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;
  void Submit(SimCommandBuffer* buffer);
  unsigned threads() const { return threads_; }
  // Set before the first Submit (GpuDevice::set_dispatch_observer).
  void set_observer(gpu::DispatchObserver observer) { observer_ = std::move(observer); }
  const gpu::DispatchObserver& observer() const { return observer_; }

 private:
  void Loop();
  unsigned threads_;
  WorkerPool pool_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<SimCommandBuffer*> pending_;
  bool stopping_ = false;
  gpu::DispatchObserver observer_;
  std::thread thread_;
};

// Seconds on the clock GPU start/end times are reported in.
double SimClockSeconds();

}  // namespace metalrt::sim
