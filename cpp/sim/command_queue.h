// The simulated device's queue: one thread that runs committed command buffers in
// commit order, each dispatch in encoding order, the threadgroups of a dispatch
// spread over the worker pool.
#pragma once
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/dispatch.h"
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
  // A completed command buffer's lists, cleared, for the next one (empty ones when
  // none is spare); ReturnCommands keeps a few.
  EncodedCommands TakeCommands();
  void ReturnCommands(EncodedCommands&& commands);

 private:
  void Loop();
  unsigned threads_;
  WorkerPool pool_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<SimCommandBuffer*> pending_;   // committed, in commit order
  bool stopping_ = false;
  static constexpr size_t kSpareCommands = 16;   // as CommandStream keeps (two steps' worth)
  std::mutex spare_mutex_;
  std::vector<EncodedCommands> spare_;
  gpu::DispatchObserver observer_;
  std::thread thread_;
};

// Seconds on the clock GPU start/end times are reported in.
double SimClockSeconds();

}  // namespace metalrt::sim
