// Profile counters (DESIGN §3): off records nothing; on, one row per kernel name and
// a total row whose GPU-busy time fits inside the host's wait.
#include <doctest/doctest.h>

#include <cstdlib>

#include "fake_metal.h"

using namespace metalrt;
using metalrt::testing::Affine;
using metalrt::testing::FakeMetal;

namespace {
const gpu::ProfileRow& Row(const std::vector<gpu::ProfileRow>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return r;
  FAIL("no profile row " << name);
  return rows.front();
}
}  // namespace

TEST_CASE("profiler off: no rows, no counters") {
  FakeMetal m;
  REQUIRE_FALSE(m.backend->profiler().enabled());   // METALRT_PROFILE is unset in the gates
  Tensor x = m.Floats({8});
  for (int k = 0; k < 3; ++k) Affine(*m.backend, x, x, 1, 1);
  m.backend->Synchronize();
  CHECK(m.backend->profiler().Rows().empty());
  CHECK(m.backend->profiler().commits() == 0);
  CHECK(m.backend->profiler().waits() == 0);
}

TEST_CASE("profiler on: a row per kernel name and a total row") {
  FakeMetal m;
  m.device->library.add("gemv_probe_f32", [](const metalrt::testing::FakeDispatch&) {});
  m.backend->profiler().Enable(true);
  m.backend->stream().set_max_dispatches(2);
  Tensor x = m.Floats({1000});
  for (int k = 0; k < 3; ++k) Affine(*m.backend, x, x, 1, 1);
  for (int k = 0; k < 2; ++k) gpu::KernelLaunch(*m.backend, "gemv_probe_f32").threads({1, 1, 1}, {1, 1, 1});
  m.backend->Synchronize();
  auto rows = m.backend->profiler().Rows();
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].name == "affine_f32");   // kernel rows by name, total last
  CHECK(rows[1].name == "gemv_probe_f32");
  CHECK(rows[2].name == "total");
  CHECK(Row(rows, "affine_f32").dispatches == 3);
  CHECK(Row(rows, "gemv_probe_f32").dispatches == 2);
  const gpu::ProfileRow& total = Row(rows, "total");
  CHECK(total.dispatches == 5);
  CHECK(total.commits == 3);   // cap 2: 2 + 2 + 1
  CHECK(total.waits == 1);     // one Synchronize
  CHECK(m.backend->profiler().commits() == 3);
  CHECK(m.backend->profiler().waits() == 1);
  CHECK(total.encode_seconds > 0);
  CHECK(total.encode_seconds == doctest::Approx(rows[0].encode_seconds + rows[1].encode_seconds));
  CHECK(total.gpu_seconds > 0);
  CHECK(total.gpu_seconds <= total.wait_seconds);
}

TEST_CASE("profiler: reset forgets rows and keeps the enabled state; METALRT_PROFILE=1 enables") {
  FakeMetal m;
  m.backend->profiler().Enable(true);
  Tensor x = m.Floats({8});
  Affine(*m.backend, x, x, 1, 1);
  m.backend->Synchronize();
  CHECK_FALSE(m.backend->profiler().Rows().empty());
  m.backend->profiler().Reset();
  CHECK(m.backend->profiler().Rows().empty());
  CHECK(m.backend->profiler().commits() == 0);
  CHECK(m.backend->profiler().enabled());
  // A launch that began before profiling was switched on is not timed from the epoch.
  m.backend->profiler().Enable(false);
  gpu::KernelLaunch launch(*m.backend, "affine_f32");
  m.backend->profiler().Enable(true);
  launch.input(0, x).output(1, x).bytes(2, metalrt::testing::AffineArgs{8, 1, 1}).threads({8, 1, 1}, {8, 1, 1});
  m.backend->Synchronize();
  const auto late_rows = m.backend->profiler().Rows();
  const gpu::ProfileRow& late = Row(late_rows, "affine_f32");
  CHECK(late.dispatches == 1);
  CHECK(late.encode_seconds == 0.0);

  setenv("METALRT_PROFILE", "1", 1);
  gpu::Profiler from_env;
  unsetenv("METALRT_PROFILE");
  CHECK(from_env.enabled());
  CHECK_FALSE(gpu::Profiler().enabled());
}
