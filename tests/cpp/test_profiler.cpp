// Profile counters (cpp/gpu/profiler.h): off records nothing; on, one row per kernel name,
// a total row whose GPU-busy time fits inside the host's wait, and an event log in which
// every host read of Metal memory follows the wait it needed.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "metal_fixture.h"

using namespace metalrt;
using metalrt::testing::Affine;
using metalrt::testing::Fill;
using metalrt::testing::MetalFixture;

namespace {
const ProfileRow& Row(const std::vector<ProfileRow>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return r;
  FAIL("no profile row " << name);
  return rows.front();
}
}  // namespace

TEST_CASE("profiler off: no rows, no counters") {
  MetalFixture m;
  REQUIRE_FALSE(m->profiler().enabled());   // METALRT_PROFILE is unset in the gates
  Tensor x = m.Floats({8});
  for (int k = 0; k < 3; ++k) Affine(*m, x, x, 1, 1);
  m->Synchronize();
  CHECK(m->profiler().Rows().empty());
  CHECK(m->profiler().commits() == 0);
  CHECK(m->profiler().waits() == 0);
}

TEST_CASE("profiler on: a row per kernel name and a total row") {
  MetalFixture m;
  m->profiler().Enable(true);
  m->stream().set_max_dispatches(2);
  Tensor x = m.Floats({1000});
  for (int k = 0; k < 2; ++k) Fill(*m, x, 3.0f);
  for (int k = 0; k < 3; ++k) Affine(*m, x, x, 1, 1);
  m->Synchronize();
  CHECK(x.data_as<float>()[999] == 6.0f);
  auto rows = m->profiler().Rows();
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].name == "affine_f32");   // kernel rows by name, total last
  CHECK(rows[1].name == "fill_f32");
  CHECK(rows[2].name == "total");
  CHECK(Row(rows, "affine_f32").dispatches == 3);
  CHECK(Row(rows, "fill_f32").dispatches == 2);
  const ProfileRow& total = Row(rows, "total");
  CHECK(total.dispatches == 5);
  CHECK(total.commits == 3);   // cap 2: 2 + 2 + 1
  CHECK(total.waits == 1);     // one Synchronize
  CHECK(m->profiler().commits() == 3);
  CHECK(m->profiler().waits() == 1);
  CHECK(total.encode_seconds > 0);
  CHECK(total.encode_seconds == doctest::Approx(rows[0].encode_seconds + rows[1].encode_seconds));
  CHECK(total.wait_seconds > 0);
}

TEST_CASE("profiler on: GPU-busy time fits inside the wait when work is committed at a sync") {
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor x = m.Floats({100000});
  for (int k = 0; k < 8; ++k) Fill(*m, x, static_cast<float>(k));
  m->Synchronize();
  const ProfileRow total = m->profiler().Rows().back();
  CHECK(total.commits == 1);
  CHECK(total.gpu_seconds > 0);
  CHECK(total.gpu_seconds <= total.wait_seconds);
}

TEST_CASE("profiler: reset forgets rows and keeps the enabled state; METALRT_PROFILE=1 enables") {
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor x = m.Floats({8});
  Affine(*m, x, x, 1, 1);
  m->Synchronize();
  CHECK_FALSE(m->profiler().Rows().empty());
  m->profiler().Reset();
  CHECK(m->profiler().Rows().empty());
  CHECK(m->profiler().commits() == 0);
  CHECK(m->profiler().enabled());
  // A launch that began before profiling was switched on is not timed from the epoch.
  m->profiler().Enable(false);
  gpu::KernelLaunch launch(*m, "affine_f32");
  m->profiler().Enable(true);
  launch.input(0, x).output(1, x).bytes(2, metalrt::testing::AffineArgs{8, 1, 1}).threads({8, 1, 1}, {8, 1, 1});
  m->Synchronize();
  const auto late_rows = m->profiler().Rows();
  const ProfileRow& late = Row(late_rows, "affine_f32");
  CHECK(late.dispatches == 1);
  CHECK(late.encode_seconds == 0.0);

  setenv("METALRT_PROFILE", "1", 1);
  gpu::Profiler from_env;
  unsetenv("METALRT_PROFILE");
  CHECK(from_env.enabled());
  CHECK_FALSE(gpu::Profiler().enabled());
}

TEST_CASE("profiler events: each host read of Metal memory is logged after its wait, waited for or not") {
  using Kind = ProfileEvent::Kind;
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor a = m.Floats({64});
  Tensor b = m.Floats({64});
  m.Write(a, std::vector<float>(64, 1.0f));
  m->profiler().Reset();
  const auto address = [](const Tensor& t, size_t offset) { return reinterpret_cast<uintptr_t>(t.data()) + offset; };
  Affine(*m, a, a, 2.0f, 0.0f);
  m->Flush();
  m->PrepareHostRead(a.data(), a.nbytes());   // waits for the command buffer writing a
  // Nothing pending writes a: no wait, but still a read, at its first byte.
  m->PrepareHostRead(static_cast<char*>(a.data()) + 16, 16);
  Affine(*m, a, b, 1.0f, 1.0f);
  CHECK(m.Read(b)[5] == 3.0f);                // Copy to the host: a synchronize, then the read
  std::vector<std::pair<Kind, uintptr_t>> got;
  for (const ProfileEvent& e : m->profiler().Events()) got.emplace_back(e.kind, e.address);
  const std::vector<std::pair<Kind, uintptr_t>> expected = {
      {Kind::kCommit, 0}, {Kind::kWait, 0}, {Kind::kRead, address(a, 0)}, {Kind::kRead, address(a, 16)},
      {Kind::kCommit, 0}, {Kind::kWait, 0}, {Kind::kRead, address(b, 0)}};
  CHECK(got == expected);
  // Off: no read is logged.
  m->profiler().Enable(false);
  m->profiler().Reset();
  m->PrepareHostRead(a.data(), a.nbytes());
  m.Read(b);
  CHECK(m->profiler().Events().empty());
}
