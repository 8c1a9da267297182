#include <doctest/doctest.h>

#include <vector>

#include "fake_gpu_device.h"
#include "gpu/allocation_registry.h"

using metalrt::gpu::AllocationRegistry;
using metalrt::testing::FakeBuffer;

namespace {
std::shared_ptr<FakeBuffer> Buffer(size_t length) { return std::make_shared<FakeBuffer>(length); }
char* Base(const std::shared_ptr<FakeBuffer>& b) { return static_cast<char*>(b->contents()); }
}  // namespace

TEST_CASE("allocation registry: interior pointers resolve to (buffer, offset)") {
  AllocationRegistry registry;
  std::vector<std::shared_ptr<FakeBuffer>> buffers;
  for (size_t length : {1, 31, 32, 33, 4096, 100000}) {
    buffers.push_back(Buffer(length));
    registry.Add(buffers.back());
  }
  CHECK(registry.size() == buffers.size());
  for (const auto& b : buffers) {
    const size_t n = b->length();
    for (size_t offset : {size_t{0}, n / 2, n - 1}) {
      auto r = registry.Resolve(Base(b) + offset, 1, "test");
      CHECK(r.buffer.get() == b.get());
      CHECK(r.offset == offset);
    }
    // The whole allocation, and an empty view one past its end (an empty slice), which
    // binds at offset 0 (offset == length is out of range to Metal's validation).
    CHECK(registry.Resolve(Base(b), n, "test").offset == 0);
    auto end = registry.Resolve(Base(b) + n, 0, "test");
    CHECK(end.buffer.get() == b.get());
    CHECK(end.offset == 0);
    CHECK(registry.Resolve(Base(b) + n / 2, 0, "test").offset == 0);
  }
}

TEST_CASE("allocation registry: memory outside every live allocation throws") {
  AllocationRegistry registry;
  auto b = Buffer(64);
  registry.Add(b);
  std::vector<float> host(16);
  CHECK_THROWS_WITH_AS(registry.Resolve(host.data(), 4, "[k] input at buffer 0"),
                       doctest::Contains("[k] input at buffer 0: 4 bytes at"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(registry.Resolve(host.data(), 4, "x"),
                       doctest::Contains("not allocated by the Metal backend"), std::invalid_argument);
  CHECK_THROWS_AS(registry.Resolve(nullptr, 0, "x"), std::invalid_argument);
  // A range running past the end of its allocation is not inside it.
  CHECK_THROWS_AS(registry.Resolve(Base(b) + 32, 33, "x"), std::invalid_argument);
  CHECK_THROWS_AS(registry.Resolve(Base(b) + 64, 1, "x"), std::invalid_argument);
  CHECK_THROWS_AS(registry.Resolve(Base(b) - 1, 1, "x"), std::invalid_argument);
  // A freed block no longer resolves, and cannot be removed twice.
  CHECK(registry.Remove(Base(b)).get() == b.get());
  CHECK(registry.size() == 0);
  CHECK_THROWS_AS(registry.Resolve(Base(b), 1, "x"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(registry.Remove(Base(b)), doctest::Contains("not the base of a live allocation"),
                       std::invalid_argument);
}

TEST_CASE("allocation registry: only a base can be removed; a reused base is a device bug") {
  AllocationRegistry registry;
  auto b = Buffer(128);
  registry.Add(b);
  CHECK_THROWS_AS(registry.Remove(Base(b) + 8), std::invalid_argument);
  CHECK(registry.size() == 1);
  CHECK_THROWS_AS(registry.Add(b), std::logic_error);
}

TEST_CASE("allocation registry: adjacent allocations resolve to the one that holds the pointer") {
  // Two allocations carved out of one block so that the first ends where the
  // second starts.
  struct View final : metalrt::gpu::GpuBuffer {
    View(char* p, size_t n) : p(p), n(n) {}
    void* contents() const override { return p; }
    size_t length() const override { return n; }
    char* p;
    size_t n;
  };
  std::vector<char> block(256);
  auto first = std::make_shared<View>(block.data(), 128);
  auto second = std::make_shared<View>(block.data() + 128, 128);
  AllocationRegistry registry;
  registry.Add(first);
  registry.Add(second);
  CHECK(registry.Resolve(block.data() + 127, 1, "x").buffer.get() == first.get());
  auto r = registry.Resolve(block.data() + 128, 0, "x");
  CHECK(r.buffer.get() == second.get());
  CHECK(r.offset == 0);
  CHECK_THROWS_AS(registry.Resolve(block.data() + 120, 16, "x"), std::invalid_argument);
}
