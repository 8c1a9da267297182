// Gates of zero-copy external memory (Tensor::FromExternal, Backend::AdoptExternal,
// cpp/gpu/external_memory.cpp): host memory the runtime did not allocate -- here an
// anonymous mapping standing in for a mapped model file -- becomes one no-copy buffer
// in the allocation registry, tensors inside it bind as interior pointers and kernels
// read it in place, and the registration and the owner go away with the last tensor.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "gpu/metal_backend.h"
#include "metal_op_testing.h"
#include "metalrt/ops.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// Three mapped pages with float values i at element i; `released` flips when unmapped.
std::shared_ptr<void> MapPages(size_t bytes, bool* released) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* f = static_cast<float*>(p);
  for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] = static_cast<float>(i);
  return std::shared_ptr<void>(p, [bytes, released](void* q) {
    munmap(q, bytes);
    *released = true;
  });
}

// The setup of a case: three mapped pages (the caller's only owner is `mapping`) and
// the registry's size before any of them is wrapped.
struct MappedPages {
  gpu::MetalBackend& backend = gpu::ActiveMetalBackend();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bool released = false;
  std::shared_ptr<void> mapping = MapPages(3 * page, &released);
  float* base = static_cast<float*>(mapping.get());
  const size_t before = backend.allocations().size();
};

}  // namespace

TEST_CASE("external memory: one wrapping per mapping, interior tensors read in place, released with the last") {
  MappedPages m;
  auto& [backend, page, released, mapping, base, before] = m;
  {
    // Unaligned tensors inside the mapping: the first wraps the page hull of the whole
    // region, the second shares that wrapping.
    Tensor region = Tensor::FromExternal(base, {static_cast<int64_t>(3 * page / 4)}, DType::kF32,
                                         DeviceType::kMETAL, mapping);
    Tensor a = Tensor::FromExternal(base + 7, {2, 8}, DType::kF32, DeviceType::kMETAL, region.storage());
    Tensor b = Tensor::FromExternal(base + page / 4 + 3, {16}, DType::kF32, DeviceType::kMETAL, region.storage());
    CHECK(backend.allocations().size() == before + 1);
    CHECK(a.data() == base + 7);   // no copy
    mapping.reset();
    region = Tensor();
    {
      const std::vector<double> got = ReadMetal(ops::Add(a, a));   // a kernel reads the mapping in place
      for (int i = 0; i < 16; ++i) CHECK(got[i] == 2.0 * (7 + i));
    }
    CHECK(ReadMetal(b)[0] == static_cast<double>(page / 4 + 3));
    backend.Synchronize();
    CHECK_FALSE(released);
    a = Tensor();
    b = Tensor();
    CHECK(backend.allocations().size() == before);
  }
  CHECK(released);
}

TEST_CASE("external memory: ranges of separate owners sharing a page merge, each tensor stays readable") {
  // numpy puts small unrelated arrays side by side: the second range starts in the
  // first one's page but does not fit its wrapping (it was "overlaps a shorter range").
  MappedPages m;
  auto& [backend, page, released, mapping, base, before] = m;
  {
    Tensor first = Tensor::FromExternal(base + 4, {8}, DType::kF32, DeviceType::kMETAL, mapping);
    Tensor second = Tensor::FromExternal(base + 16, {static_cast<int64_t>(page / 2)}, DType::kF32,
                                         DeviceType::kMETAL, mapping);
    mapping.reset();
    CHECK(backend.allocations().size() == before + 1);   // one buffer over the union
    CHECK(ReadMetal(ops::Add(second, second))[page / 2 - 1] == 2.0 * (16 + page / 2 - 1));
    second = Tensor();   // the newer wrapping's tensors go first: the older still resolves
    backend.Synchronize();
    CHECK(ReadMetal(ops::Add(first, first))[7] == 2.0 * 11);
    CHECK(backend.allocations().size() == before + 1);
    CHECK_FALSE(released);
    first = Tensor();
    backend.Synchronize();
    CHECK(backend.allocations().size() == before);
  }
  CHECK(released);
}

TEST_CASE("external memory: the CPU uses the memory as it is") {
  std::vector<float> host(8, 1.5f);
  auto owner = std::make_shared<int>(0);
  Tensor t = Tensor::FromExternal(host.data(), {8}, DType::kF32, DeviceType::kCPU, owner);
  CHECK(t.data() == host.data());
  CHECK(owner.use_count() == 2);
  t = Tensor();
  CHECK(owner.use_count() == 1);
}
