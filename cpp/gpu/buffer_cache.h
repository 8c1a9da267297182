// Freed Metal buffers kept for reuse, keyed by their exact length (MLX keeps a
// buffer cache for the same reason). A decode step allocates the same sizes every
// step, so after warm-up every allocation is served from here and the device
// creates no new buffers (the bench's "bytes allocated per decode step after
// warm-up" counter, goal 0). Reuse is safe without waiting for the GPU: work in flight
// keeps its own reference to a buffer it binds, dispatches on the one queue run in
// order, and every host access to device memory synchronises first.
#pragma once
#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>

#include "gpu/gpu_device.h"

namespace metalrt::gpu {

class BufferCache {
 public:
  // 256 MiB: far more than the activations of a step, far less than a model's weights.
  static constexpr size_t kDefaultLimit = size_t{256} << 20;
  explicit BufferCache(size_t limit_bytes = kDefaultLimit) : limit_(limit_bytes) {}

  // A cached buffer of exactly `length` bytes (taken out of the cache), or null.
  std::shared_ptr<GpuBuffer> Take(size_t length);
  // Keeps `buffer` for reuse, evicting the least recently freed buffers beyond the
  // limit; a buffer longer than the limit is released at once.
  void Put(std::shared_ptr<GpuBuffer> buffer);
  // Releases every cached buffer.
  void Clear();
  size_t bytes() const;   // total length of the cached buffers

 private:
  using FreeList = std::list<std::shared_ptr<GpuBuffer>>;   // oldest first
  mutable std::mutex mutex_;
  size_t limit_;
  size_t bytes_ = 0;
  FreeList order_;
  std::multimap<size_t, FreeList::iterator> by_length_;
};

}  // namespace metalrt::gpu
