// MetalBackend::AdoptExternal: zero-copy use of host memory the runtime did not
// allocate (a memory-mapped model file, a numpy array). Metal wraps only page-aligned
// ranges (newBufferWithBytesNoCopy), so the page-aligned hull of the memory becomes
// one no-copy buffer in the allocation registry, and tensors inside it bind as
// interior pointers. The buffer's deallocator holds the memory's owners, so in-flight
// command buffers that retain the buffer keep the memory alive too.
//
// Unrelated small arrays share pages (numpy allocates them side by side), so a new
// range can overlap a live wrapping without fitting inside it. The overlapping
// wrappings are then merged: one buffer over the union of the hulls replaces their
// registrations, and each replaced wrapping keeps the new one alive (its
// `successor`), so every tensor of either keeps resolving to live memory.
//
// A merge never makes a buffer above the device's maxBufferLength: a wrapping it
// would grow past that stays as it is and the new hull is registered beside it,
// sharing at most the page where one ends and the other begins. That is how a model
// file larger than the limit is wrapped, one window of whole tensors at a time
// (metalrt/tensor.py): a tensor in the shared page lies inside the later window too,
// which is the one the registry resolves it to (the last base at or before it).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {
namespace {

struct Wrapping {
  std::function<void()> unregister;   // runs first, under no lock of ours
  std::shared_ptr<void> successor;    // the wider wrapping that replaced this one
  ~Wrapping() { unregister(); }
};

}  // namespace

std::shared_ptr<void> MetalBackend::AdoptExternal(void* data, size_t bytes, std::shared_ptr<void> keep_alive) {
  if (!device_->has_unified_memory())
    throw std::invalid_argument("[external memory] " + name() +
                                " has no unified memory; copy the data to the device instead");
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + (bytes ? bytes : 1) + page - 1) / page * page;
  std::vector<std::shared_ptr<void>> replaced;   // released after the lock (their deleters lock)
  std::shared_ptr<void> result;
  {
    std::lock_guard<std::mutex> lock(external_mutex_);
    try {
      const ResolvedPointer hit = allocations_.Resolve(data, bytes, "[external memory]");
      auto it = external_.find(hit.buffer->contents());
      if (it == external_.end()) return keep_alive;   // a Metal allocation: its owner keeps it registered
      // Inside a live wrapping (another tensor of the same memory): share it.
      if (std::shared_ptr<void> wrapping = it->second.lock())
        return std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(wrapping, keep_alive);
    } catch (const std::invalid_argument&) {
      // Not inside one registered allocation: wrap it below.
    }
    // Every wrapping overlapping [begin, end): live ones are merged into the new one,
    // expired ones (their last tensor going away on another thread) unregistered now
    // (their deleters then find nothing to do). Registered wrappings overlap at most by
    // a boundary page, so of those below `begin` only the last can reach into the
    // range: the walk starts there (a lookup, not a scan of every wrapping).
    std::vector<std::shared_ptr<void>> overlapping;
    std::vector<std::shared_ptr<GpuBuffer>> merged;   // their buffers hold their memory's owners
    const size_t limit = device_->max_buffer_length();
    auto it = external_.upper_bound(reinterpret_cast<const void*>(begin));
    if (it != external_.begin()) --it;
    while (it != external_.end() && it->first < reinterpret_cast<void*>(end)) {
      const auto base = reinterpret_cast<uintptr_t>(it->first);
      const ResolvedPointer own = allocations_.Resolve(it->first, 0, "[external memory]");
      const uintptr_t stop = base + own.buffer->length();
      if (base >= end || stop <= begin) { ++it; continue; }
      std::shared_ptr<void> live = it->second.lock();
      if (live && std::max(end, stop) - std::min(begin, base) > limit) {
        if (base == begin)   // the registry holds one buffer per base
          throw std::runtime_error("[external memory] " + std::to_string(end - begin) +
                                   " bytes at a wrapped buffer's base cannot be merged with it within "
                                   "the device's maximum buffer length (" + std::to_string(limit) + " bytes)");
        ++it;   // kept beside the new wrapping (see the top of this file)
        continue;
      }
      if (live) {
        begin = std::min(begin, base);
        end = std::max(end, stop);
        overlapping.push_back(std::move(live));
        merged.push_back(allocations_.Remove(it->first));
      } else {
        allocations_.Remove(it->first);
      }
      it = external_.erase(it);
    }
    void* base = reinterpret_cast<void*>(begin);
    std::shared_ptr<GpuBuffer> buffer = device_->new_buffer_no_copy(base, end - begin,
                                                                      [keep_alive, merged] {});
    allocations_.Add(std::move(buffer));
    auto wrapping = std::make_shared<Wrapping>();
    wrapping->unregister = [this, base] {
      std::lock_guard<std::mutex> guard(external_mutex_);
      auto it = external_.find(base);
      if (it == external_.end() || !it->second.expired()) return;   // already replaced
      external_.erase(it);
      allocations_.Remove(base);
    };
    for (auto& live : overlapping) {
      // Its tensors resolve into the new buffer now: the new registration lives as
      // long as they do.
      static_cast<Wrapping*>(live.get())->successor = wrapping;
      replaced.push_back(std::move(live));
    }
    external_[base] = std::shared_ptr<void>(wrapping, wrapping.get());
    result = std::shared_ptr<void>(wrapping, wrapping.get());
  }
  return result;
}

}  // namespace metalrt::gpu
