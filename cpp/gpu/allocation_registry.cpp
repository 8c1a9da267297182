#include "gpu/allocation_registry.h"

#include <sstream>
#include <stdexcept>

namespace metalrt::gpu {
namespace {

std::string Describe(const void* ptr, size_t bytes) {
  std::ostringstream os;
  os << bytes << " bytes at " << ptr;
  return os.str();
}

}  // namespace

void AllocationRegistry::Add(std::shared_ptr<GpuBuffer> buffer) {
  const char* base = static_cast<const char*>(buffer->contents());
  std::lock_guard<std::mutex> lock(mutex_);
  if (!by_base_.emplace(base, std::move(buffer)).second)
    throw std::logic_error("[metal alloc] the device returned a buffer at an address already in use");
}

std::shared_ptr<GpuBuffer> AllocationRegistry::Remove(const void* base) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_base_.find(static_cast<const char*>(base));
  if (it == by_base_.end()) {
    std::ostringstream os;
    os << "[metal free] " << base << " is not the base of a live allocation of the Metal backend";
    throw std::invalid_argument(os.str());
  }
  std::shared_ptr<GpuBuffer> buffer = std::move(it->second);
  by_base_.erase(it);
  return buffer;
}

ResolvedPointer AllocationRegistry::Resolve(const void* ptr, size_t bytes, const char* what) const {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  // The last allocation starting at or before p is the only candidate.
  auto it = by_base_.upper_bound(p);
  if (p != nullptr && it != by_base_.begin()) {
    --it;
    const size_t offset = static_cast<size_t>(p - it->first);
    const size_t length = it->second->length();
    // An empty view binds at offset 0: it reads nothing, and offset == length (an
    // empty slice at the end) is an out-of-range binding to Metal's validation layer.
    if (offset <= length && bytes <= length - offset && (offset < length || bytes == 0))
      return {it->second, bytes == 0 ? 0 : offset};
  }
  throw std::invalid_argument(std::string(what) + ": " + Describe(ptr, bytes) +
                              " is not allocated by the Metal backend");
}

size_t AllocationRegistry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_base_.size();
}

}  // namespace metalrt::gpu
