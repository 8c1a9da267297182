#include "sim/sim_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace metalrt::sim {

namespace {
constexpr size_t kAlignment = 256;
}

SimBuffer::SimBuffer(size_t length) : length_(length), owned_(true) {
  const size_t bytes = (length + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, bytes ? bytes : kAlignment);
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
