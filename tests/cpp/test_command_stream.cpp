// Encoder batching gates (cpp/gpu/command_stream.h): commits only at flush points, in order,
// command-buffer errors raised with the device's message. MetalFixture runs on the
// device kMETAL selects (the simulated device in CI); FakeMetal where a gate needs
// to see device calls or inject an error.
#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

#include "metal_fixture.h"

using namespace metalrt;
using metalrt::testing::Affine;
using metalrt::testing::FakeMetal;
using metalrt::testing::MetalFixture;

namespace {

// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) {
    const char* old = std::getenv(name);
    had = old != nullptr;
    if (had) previous = old;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had) setenv(name, previous.c_str(), 1); else unsetenv(name);
  }
  const char* name;
  bool had;
  std::string previous;
};

}  // namespace

TEST_CASE("batching: 8 dispatches without a sync commit nothing; Synchronize commits exactly once") {
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor x = m.Floats({33});
  std::vector<float> init(33);
  for (int i = 0; i < 33; ++i) init[i] = 0.5f * i - 3.0f;
  m.Write(x, init);
  for (int k = 0; k < 8; ++k) Affine(*m, x, x, 2.0f, 1.0f);
  CHECK(m->profiler().commits() == 0);
  CHECK(m->stream().open_dispatches() == 8);
  m->Synchronize();
  CHECK(m->profiler().commits() == 1);
  CHECK(m->profiler().waits() == 1);
  // x -> 2x + 1 eight times: 256 x + 255, exact in f32 for these values.
  for (int i = 0; i < 33; ++i) CHECK(x.data_as<float>()[i] == 256.0f * init[i] + 255.0f);
  m->Synchronize();   // nothing pending: no empty command buffer, no wait
  CHECK(m->profiler().commits() == 1);
  CHECK(m->profiler().waits() == 1);
}

TEST_CASE("batching: a host read with no explicit sync returns the computed values") {
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor x = m.Floats({1000});
  Tensor y = m.Floats({1000});
  std::vector<float> init(1000);
  for (int i = 0; i < 1000; ++i) init[i] = static_cast<float>(i) - 15.0f;
  m.Write(x, init);
  Affine(*m, x, y, -3.0f, 0.25f);
  std::vector<float> got = m.Read(y);
  for (int i = 0; i < 1000; ++i) CHECK(got[i] == -3.0f * init[i] + 0.25f);
  CHECK(m->profiler().commits() == 1);
}

TEST_CASE("batching: a 3-op read-modify-write chain composes exactly, across command buffers too") {
  for (int cap : {48, 2, 1}) {
    CAPTURE(cap);
    MetalFixture m;
    m->profiler().Enable(true);
    m->stream().set_max_dispatches(cap);
    Tensor x = m.Floats({32});
    std::vector<float> init(32);
    for (int i = 0; i < 32; ++i) init[i] = static_cast<float>(i);
    m.Write(x, init);
    Affine(*m, x, x, 2.0f, 0.0f);    // 2x
    Affine(*m, x, x, 1.0f, -5.0f);   // 2x - 5
    Affine(*m, x, x, 3.0f, 1.0f);    // 6x - 14; any other order gives another value
    std::vector<float> got = m.Read(x);
    for (int i = 0; i < 32; ++i) CHECK(got[i] == 6.0f * init[i] - 14.0f);
    CHECK(m->profiler().commits() == static_cast<uint64_t>((3 + cap - 1) / cap));
  }
}

TEST_CASE("batching: the dispatch cap commits exactly when reached") {
  MetalFixture m;
  m->profiler().Enable(true);
  m->stream().set_max_dispatches(4);
  Tensor x = m.Floats({8});
  m.Write(x, std::vector<float>(8, 1.0f));
  for (int k = 1; k <= 3; ++k) Affine(*m, x, x, 1.0f, 1.0f);
  CHECK(m->profiler().commits() == 0);
  Affine(*m, x, x, 1.0f, 1.0f);   // the 4th
  CHECK(m->profiler().commits() == 1);
  CHECK(m->stream().open_dispatches() == 0);
  Affine(*m, x, x, 1.0f, 1.0f);   // the 5th opens a new command buffer
  CHECK(m->profiler().commits() == 1);
  CHECK(m->stream().open_dispatches() == 1);
  CHECK(m.Read(x)[7] == 6.0f);
  CHECK(m->profiler().commits() == 2);
  CHECK_THROWS_AS(m->stream().set_max_dispatches(0), std::invalid_argument);
}

TEST_CASE("batching: the profiler counts every commit under its cause: cap, flush, synchronize") {
  MetalFixture m;
  m->profiler().Enable(true);
  m->stream().set_max_dispatches(3);
  Tensor x = m.Floats({8});
  m.Write(x, std::vector<float>(8, 1.0f));
  // {commits, at the cap, at a flush, at a synchronize, host waits} of the total row.
  auto counts = [&] {
    const ProfileRow row = m->profiler().Rows().back();
    REQUIRE(row.name == "total");
    return std::vector<uint64_t>{row.commits, row.commits_at_cap, row.commits_at_flush,
                                 row.commits_at_synchronize, row.waits};
  };
  using Counts = std::vector<uint64_t>;
  // N + 1 dispatches, then Synchronize: the cap commits N, the sync commits the last one.
  for (int k = 0; k < 4; ++k) Affine(*m, x, x, 1.0f, 1.0f);
  m->Synchronize();
  CHECK(x.data_as<float>()[7] == 5.0f);
  CHECK(counts() == Counts{2, 1, 0, 1, 1});
  // Nothing open: neither Synchronize nor Flush commits (nor waits).
  m->Synchronize();
  m->Flush();
  CHECK(counts() == Counts{2, 1, 0, 1, 1});
  // Flush with an open command buffer: one flush commit; the Synchronize after it
  // waits for that work without committing.
  Affine(*m, x, x, 2.0f, 0.0f);
  m->Flush();
  CHECK(counts() == Counts{3, 1, 1, 1, 1});
  m->Synchronize();
  CHECK(x.data_as<float>()[0] == 10.0f);
  CHECK(counts() == Counts{3, 1, 1, 1, 2});
  // Exactly N dispatches: the cap commits them all, so the sync waits without a commit.
  for (int k = 0; k < 3; ++k) Affine(*m, x, x, 1.0f, -1.0f);
  m->Synchronize();
  CHECK(x.data_as<float>()[0] == 7.0f);
  CHECK(counts() == Counts{4, 2, 1, 1, 3});
  // Reset forgets the causes too.
  m->profiler().Reset();
  Affine(*m, x, x, 1.0f, 1.0f);
  m->Synchronize();
  CHECK(counts() == Counts{1, 0, 0, 1, 1});
}

TEST_CASE("batching: METALRT_MAX_DISPATCHES sets the cap; default 48; bad values rejected") {
  {
    ScopedEnv env("METALRT_MAX_DISPATCHES", nullptr);
    FakeMetal m;
    CHECK(m->stream().max_dispatches() == 48);
  }
  {
    ScopedEnv env("METALRT_MAX_DISPATCHES", "5");
    FakeMetal m;
    CHECK(m->stream().max_dispatches() == 5);
  }
  for (const char* bad : {"0", "-3", "12x", "many"}) {
    ScopedEnv env("METALRT_MAX_DISPATCHES", bad);
    CHECK_THROWS_WITH_AS(FakeMetal(), doctest::Contains("METALRT_MAX_DISPATCHES"), std::invalid_argument);
  }
}

TEST_CASE("batching: device calls — one command buffer, committed once, Flush does not wait") {
  FakeMetal m;
  Tensor x = m.Floats({4});
  m.Write(x, {1, 2, 3, 4});
  for (int k = 0; k < 8; ++k) Affine(*m, x, x, 1.0f, 0.0f);
  Affine(*m, x, x, 10.0f, 0.0f);
  CHECK(m.device->counters.command_buffers == 1);
  CHECK(m.device->counters.commits == 0);
  m->Flush();
  CHECK(m.device->counters.commits == 1);
  CHECK(m.device->counters.executed_dispatches == 0);   // committed, not yet run by the fake GPU
  CHECK(x.data_as<float>()[3] == 4.0f);
  m->Synchronize();
  CHECK(m.device->counters.commits == 1);
  CHECK(m.device->counters.executed_dispatches == 9);
  CHECK(x.data_as<float>()[3] == 40.0f);
  m->Flush();   // nothing open: no empty command buffer
  CHECK(m.device->counters.command_buffers == 1);
}

TEST_CASE("command-buffer errors raise with the device's message; the stream stays usable") {
  FakeMetal m;
  Tensor x = m.Floats({4});
  m.Write(x, {1, 2, 3, 4});
  gpu::KernelLaunch(*m, "fail").threadgroups({1, 1, 1}, {1, 1, 1});
  CHECK_THROWS_WITH_AS(m->Synchronize(), "[metal] command buffer failed: Caused GPU Timeout Error (fake)",
                       std::runtime_error);
  // Errors also surface at a host read, which is a flush point.
  gpu::KernelLaunch(*m, "fail").threadgroups({1, 1, 1}, {1, 1, 1});
  std::vector<float> host(4);
  CHECK_THROWS_AS(m->Copy(host.data(), x.data(), 16, CopyKind::kDeviceToHost), std::runtime_error);
  Affine(*m, x, x, 1.0f, 1.0f);
  CHECK(m.Read(x) == std::vector<float>{2, 3, 4, 5});
}

TEST_CASE("a buffer freed while work is in flight stays alive until that work completes") {
  MetalFixture m;
  Tensor keep = m.Floats({16});
  void* p = m->Alloc(64);
  Tensor y = Tensor::FromBlob(p, {16}, DType::kF32, DeviceType::kMETAL);
  m.Write(keep, std::vector<float>(16, 1.0f));
  std::weak_ptr<gpu::GpuBuffer> buffer = m->allocations().Resolve(p, 64, "test").buffer;
  Affine(*m, keep, y, 1.0f, 1.0f);
  m->Free(p);
  CHECK_THROWS_AS(m->allocations().Resolve(p, 4, "test"), std::invalid_argument);
  CHECK_FALSE(buffer.expired());   // the open command buffer holds it
  m->buffer_cache().Clear();       // the cache keeps freed buffers for reuse: not it
  CHECK_FALSE(buffer.expired());
  m->Synchronize();
  CHECK(buffer.expired());         // the completed work let go of it
}
