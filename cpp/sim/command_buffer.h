// Command buffers and the compute encoder of the simulated device. Encoding
// freezes each dispatch (pipeline, bindings, grid) and validates it; commit()
// hands the buffer to the device's queue, which runs it asynchronously on the
// workers, so a host read without wait_until_completed() sees stale data, as on
// a GPU.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_device.h"
#include "sim/dispatch.h"

namespace metalrt::sim {

class CommandQueue;
class SimCommandBuffer;

class SimComputeEncoder : public gpu::GpuComputeEncoder {
 public:
  explicit SimComputeEncoder(SimCommandBuffer& owner) : owner_(owner) {}
  void set_pipeline(gpu::GpuPipeline& pipeline) override;
  void set_buffer(const gpu::GpuBuffer& buffer, size_t offset, uint32_t index) override;
  void set_bytes(const void* data, size_t length, uint32_t index) override;
  void set_threadgroup_memory_length(size_t length, uint32_t index) override;
  void dispatch_threadgroups(gpu::Size3 threadgroups, gpu::Size3 threads_per_threadgroup) override;
  void dispatch_threads(gpu::Size3 threads, gpu::Size3 threads_per_threadgroup) override;
  void end_encoding() override;

 private:
  void Encode(gpu::Size3 groups, gpu::Size3 group_size, gpu::Size3 grid_threads);
  void CheckOpen(const char* call) const;

  SimCommandBuffer& owner_;
  const class SimPipeline* pipeline_ = nullptr;
  Dispatch bindings_;
  bool ended_ = false;
};

class SimCommandBuffer : public gpu::GpuCommandBuffer {
 public:
  explicit SimCommandBuffer(CommandQueue& queue);
  ~SimCommandBuffer() override;   // waits if committed and still running
  gpu::GpuComputeEncoder& compute_encoder() override;
  void commit() override;
  void wait_until_completed() override;
  Status status() const override;
  std::string error() const override;
  double gpu_start_time() const override;
  double gpu_end_time() const override;

  // Called by the queue's thread.
  void Execute(class WorkerPool& pool);

 private:
  friend class SimComputeEncoder;
  CommandQueue& queue_;
  SimComputeEncoder encoder_{*this};
  EncodedCommands commands_;   // the queue's recycled lists
  mutable std::mutex mutex_;
  std::condition_variable completed_;
  Status status_ = Status::kNotCommitted;
  std::string error_;
  double start_ = 0, end_ = 0;
};

}  // namespace metalrt::sim
