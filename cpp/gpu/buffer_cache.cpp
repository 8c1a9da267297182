#include "gpu/buffer_cache.h"

namespace metalrt::gpu {

std::shared_ptr<GpuBuffer> BufferCache::Take(size_t length) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_length_.find(length);
  if (it == by_length_.end()) return nullptr;
  std::shared_ptr<GpuBuffer> buffer = std::move(*it->second);
  order_.erase(it->second);
  by_length_.erase(it);
  bytes_ -= length;
  return buffer;
}

void BufferCache::Put(std::shared_ptr<GpuBuffer> buffer) {
  const size_t length = buffer->length();
  if (length > limit_) return;   // released here, with the last reference
  std::lock_guard<std::mutex> lock(mutex_);
  while (bytes_ + length > limit_) {
    const size_t oldest = order_.front()->length();
    auto [first, last] = by_length_.equal_range(oldest);
    while (first != last && first->second != order_.begin()) ++first;
    by_length_.erase(first);
    order_.pop_front();
    bytes_ -= oldest;
  }
  order_.push_back(std::move(buffer));
  by_length_.emplace(length, std::prev(order_.end()));
  bytes_ += length;
}

void BufferCache::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  by_length_.clear();
  order_.clear();
  bytes_ = 0;
}

size_t BufferCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace metalrt::gpu
