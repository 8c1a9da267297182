// MetalBackend::AdoptExternal: zero-copy use of host memory the runtime did not
// allocate (a memory-mapped model file). Metal wraps only page-aligned ranges
// (newBufferWithBytesNoCopy), so the page-aligned hull of the memory becomes one
// no-copy buffer in the allocation registry, and tensors inside it bind as interior
// pointers. The buffer's deallocator holds the memory's owner, so in-flight command
// buffers that retain the buffer keep the mapping alive too.
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {

std::shared_ptr<void> MetalBackend::AdoptExternal(void* data, size_t bytes, std::shared_ptr<void> keep_alive) {
  if (!device_->has_unified_memory())
    throw std::invalid_argument("[external memory] " + name() +
                                " has no unified memory; copy the data to the device instead");
  std::lock_guard<std::mutex> lock(external_mutex_);
  try {
    const ResolvedPointer hit = allocations_.Resolve(data, bytes, "[external memory]");
    auto it = external_.find(hit.buffer->contents());
    if (it == external_.end()) return keep_alive;   // a Metal allocation: its owner keeps it registered
    // Inside a live wrapping (another tensor of the same mapping): share it.
    if (std::shared_ptr<void> wrapping = it->second.lock())
      return std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(wrapping, keep_alive);
    // A wrapping whose last tensor is going away on another thread: unregister it now
    // (its handle's deleter then finds nothing to do) and wrap afresh below.
    allocations_.Remove(it->first);
    external_.erase(it);
  } catch (const std::invalid_argument&) {
    // Not registered yet: wrap it below.
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + (bytes ? bytes : 1) + page - 1) / page * page;
  void* base = reinterpret_cast<void*>(begin);
  if (external_.count(base))
    throw std::invalid_argument("[external memory] the memory at " + std::to_string(begin) +
                                " overlaps a shorter range wrapped earlier; wrap the whole mapping once");
  std::shared_ptr<GpuBuffer> buffer = device_->new_buffer_no_copy(base, end - begin, [keep_alive] {});
  allocations_.Add(std::move(buffer));
  std::shared_ptr<void> wrapping(base, [this](void* p) {
    std::lock_guard<std::mutex> guard(external_mutex_);
    auto it = external_.find(p);
    if (it == external_.end() || !it->second.expired()) return;   // already replaced (see above)
    external_.erase(it);
    allocations_.Remove(p);
  });
  external_[base] = wrapping;
  return wrapping;
}

}  // namespace metalrt::gpu
