// The buffer cache behind MetalBackend::Alloc (the goal: a warmed-up decode step
// allocates 0 bytes): freed buffers serve later allocations of the same length, the
// profiler counts only buffers the device creates, freed memory stays unreachable,
// and reuse with work in flight keeps the GPU's order.
#include <doctest/doctest.h>

#include <vector>

#include "fake_gpu_device.h"
#include "gpu/buffer_cache.h"
#include "metal_fixture.h"

using namespace metalrt;
using metalrt::testing::Affine;
using metalrt::testing::FakeBuffer;
using metalrt::testing::FakeMetal;

TEST_CASE("buffer cache: exact-length reuse, oldest evicted past the limit, oversized released") {
  gpu::BufferCache cache(3000);
  CHECK(cache.Take(1000).get() == nullptr);
  std::vector<std::shared_ptr<gpu::GpuBuffer>> buffers;
  for (size_t length : {1000, 999, 1000}) buffers.push_back(std::make_shared<FakeBuffer>(length));
  for (const auto& b : buffers) cache.Put(b);
  CHECK(cache.bytes() == 2999);
  CHECK(cache.Take(1001).get() == nullptr);
  CHECK(cache.Take(1000).get() == buffers[0].get());   // oldest of that length first
  cache.Put(buffers[0]);                                // now the newest
  cache.Put(std::make_shared<FakeBuffer>(2));           // 3001 > 3000: evicts buffers[1]
  CHECK(cache.bytes() == 2002);
  CHECK(cache.Take(999).get() == nullptr);
  cache.Put(std::make_shared<FakeBuffer>(3001));        // longer than the limit: not kept
  CHECK(cache.bytes() == 2002);
  CHECK(cache.Take(1000).get() == buffers[2].get());
  CHECK(cache.Take(1000).get() == buffers[0].get());
  CHECK(cache.Take(1000).get() == nullptr);
  cache.Clear();
  CHECK(cache.bytes() == 0);
  CHECK(cache.Take(2).get() == nullptr);
}

TEST_CASE("metal backend: freed buffers serve later allocations; only new buffers are counted") {
  FakeMetal m;
  m->profiler().Enable(true);
  void* a = m->Alloc(4096);
  void* b = m->Alloc(0);
  CHECK(m.device->counters.buffers == 2);
  CHECK(m->profiler().allocations() == 2);
  CHECK(m->profiler().allocated_bytes() == 4097);   // Alloc(0) is a 1-byte buffer
  m->Free(a);
  m->Free(b);
  // A freed pointer is no longer device memory, though its buffer is cached.
  CHECK_THROWS_AS(m->allocations().Resolve(a, 4, "test"), std::invalid_argument);
  CHECK_THROWS_AS(m->Free(a), std::invalid_argument);
  CHECK(m->buffer_cache().bytes() == 4097);
  void* again = m->Alloc(4096);
  void* zero = m->Alloc(0);
  CHECK(again == a);
  CHECK(zero == b);
  CHECK(m.device->counters.buffers == 2);
  CHECK(m->profiler().allocations() == 2);
  CHECK(m->allocations().Resolve(again, 4096, "test").offset == 0);
  void* other = m->Alloc(4095);   // another length: a new buffer
  CHECK(other != a);
  CHECK(m.device->counters.buffers == 3);
  CHECK(m->profiler().allocated_bytes() == 4097 + 4095);
  const auto total = m->profiler().Rows().back();
  CHECK(total.name == "total");
  CHECK(total.allocations == 3);
  CHECK(total.allocated_bytes == 4097 + 4095);
  m->profiler().Enable(false);
  m->Free(other);
  void* uncounted = m->Alloc(77);
  CHECK(m->profiler().allocations() == 3);   // profiler off: nothing recorded
  for (void* p : {again, zero, uncounted}) m->Free(p);
}

TEST_CASE("metal backend: a buffer freed with work in flight is reused in the GPU's order") {
  FakeMetal m;
  const size_t n = 64;
  std::vector<float> ones(n, 1.0f), sevens(n, 7.0f), host(n);
  // Views of this backend's own allocations (the fixture's backend is not kMETAL's).
  void* px = m->Alloc(n * 4);
  void* py = m->Alloc(n * 4);
  Tensor tx = Tensor::FromBlob(px, {static_cast<int64_t>(n)}, DType::kF32, DeviceType::kMETAL);
  Tensor ty = Tensor::FromBlob(py, {static_cast<int64_t>(n)}, DType::kF32, DeviceType::kMETAL);
  m->Copy(px, ones.data(), n * 4, CopyKind::kHostToDevice);
  Affine(*m, tx, ty, 2.0f, 0.5f);   // encoded, not yet run: the fake GPU runs at a wait
  m->Free(px);
  void* reused = m->Alloc(n * 4);
  REQUIRE(reused == px);
  // The host write to the new owner synchronises first, so the dispatch still reads 1s.
  m->Copy(reused, sevens.data(), n * 4, CopyKind::kHostToDevice);
  m->Copy(host.data(), py, n * 4, CopyKind::kDeviceToHost);
  for (float v : host) CHECK(v == 2.5f);
  m->Free(reused);
  m->Free(py);
}
