#include "sim/sim_buffer.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace metalrt::sim {

SimBuffer::SimBuffer(size_t length) : length_(length), owned_(true) {
  // Whole pages, as Metal's own allocations are: host memory wrapped without a copy
  // registers its page-aligned hull (gpu/external_memory.cpp), so a device buffer
  // must never share a page with the host heap (it did with 256-byte alignment: a
  // buffer at the base of a wrapped numpy array's page collided with its hull).
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (length + page - 1) / page * page;
  data_ = std::aligned_alloc(page, bytes ? bytes : page);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, bytes);
}

SimBuffer::SimBuffer(void* pointer, size_t length, std::function<void()> deallocator)
    : data_(pointer), length_(length), owned_(false), deallocator_(std::move(deallocator)) {}

SimBuffer::~SimBuffer() {
  if (owned_) std::free(data_);
  else if (deallocator_) deallocator_();
}

}  // namespace metalrt::sim
