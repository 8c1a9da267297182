// Buffers of the simulated device: host memory (Metal's unified memory), either
// owned (zero-initialised, whole pages) or wrapped without a copy.
#pragma once
#include <functional>
#include <memory>

#include "gpu/gpu_device.h"

namespace metalrt::sim {

class SimBuffer : public gpu::GpuBuffer, public std::enable_shared_from_this<SimBuffer> {
 public:
  // Owned storage of `length` bytes (length 0 gets a distinct valid address).
  explicit SimBuffer(size_t length);
  // Wraps `pointer`; `deallocator` runs when the buffer dies.
  SimBuffer(void* pointer, size_t length, std::function<void()> deallocator);
  ~SimBuffer() override;
  SimBuffer(const SimBuffer&) = delete;
  SimBuffer& operator=(const SimBuffer&) = delete;
  void* contents() const override { return data_; }
  size_t length() const override { return length_; }

 private:
  void* data_;
  size_t length_;
  bool owned_;
  std::function<void()> deallocator_;
};

}  // namespace metalrt::sim
