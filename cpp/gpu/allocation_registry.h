// The allocation registry: every buffer the Metal backend allocates, keyed by its
// CPU-visible base address. Metal memory is unified, so a Tensor's data pointer is
// an address inside some buffer's contents(); kernels need (buffer, byte offset)
// instead. Resolve() turns any pointer inside a live allocation into that pair, so
// views and slices bind at their offset; memory the backend did not allocate (a
// host std::vector, a freed block) is rejected rather than read.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "gpu/gpu_device.h"

namespace metalrt::gpu {

struct ResolvedPointer {
  std::shared_ptr<GpuBuffer> buffer;   // shared so in-flight work can keep it alive
  size_t offset = 0;                   // bytes from buffer->contents()
};

class AllocationRegistry {
 public:
  // Registers `buffer` under its contents() address; a base already registered is a
  // device bug (std::logic_error).
  void Add(std::shared_ptr<GpuBuffer> buffer);
  // Unregisters the allocation whose base is `base` and returns its buffer; throws
  // std::invalid_argument when `base` is not the base of a live allocation.
  std::shared_ptr<GpuBuffer> Remove(const void* base);
  // The allocation holding [ptr, ptr + bytes), O(log n). A zero-byte range may sit
  // one past the end of its allocation (an empty slice); it resolves to offset 0,
  // the one offset valid for any buffer. Throws std::invalid_argument
  // ("<what>: ... not allocated by the Metal backend") when no live allocation holds it.
  ResolvedPointer Resolve(const void* ptr, size_t bytes, const char* what) const;
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<const char*, std::shared_ptr<GpuBuffer>> by_base_;
};

}  // namespace metalrt::gpu
