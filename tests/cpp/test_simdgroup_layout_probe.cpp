// The simdgroup_matrix lane layout probe (cpp/gpu/simdgroup_layout_probe.h) on the
// simulated device, which implements the layout the prefill attention kernel assumes,
// and its comparison with layouts that differ in either direction.
#include <doctest/doctest.h>

#include <string>

#include "gpu/simdgroup_layout_probe.h"
#include "sim_testing.h"

namespace metalrt::gpu {
namespace {

TEST_CASE("simdgroup layout probe: the sim lays the matrix out as the prefill kernel assumes") {
  for (const std::string& order : testing::SimOrders()) {
    testing::ScopedFiberOrder scoped(order);
    testing::SimRun run;
    const ProbedSimdgroupLayout probed = ProbeSimdgroupLayout(*run.device);
    CHECK(probed.loaded == AssumedSimdgroupLayout());
    CHECK(probed.stored == AssumedSimdgroupLayout());
    CHECK(SimdgroupLayoutMismatch(probed, AssumedSimdgroupLayout()) == "");
  }
  // The header's layout itself, spot-checked: lane 2 holds row 1, lane 8 column 4.
  CHECK(AssumedSimdgroupLayout()[4] == 8);
  CHECK(AssumedSimdgroupLayout()[17] == 5);
  CHECK(AssumedSimdgroupLayout()[63] == 63);
}

TEST_CASE("simdgroup layout probe: a difference in either direction is named") {
  const SimdgroupLayout assumed = AssumedSimdgroupLayout();
  ProbedSimdgroupLayout probed{assumed, assumed};
  std::swap(probed.stored[62], probed.stored[63]);
  CHECK(SimdgroupLayoutMismatch(probed, assumed) ==
        "the device's 8x8 simdgroup_matrix lane layout differs from the prefill kernel's: lane 31 "
        "element 0 holds (row 7, column 7) for simdgroup_store, the kernel assumes (row 7, column 6) "
        "(metal/simdgroup_layout.h)");
  probed = {assumed, assumed};
  probed.loaded[5] = kUnknownElement;
  CHECK(SimdgroupLayoutMismatch(probed, assumed).find(
            "lane 2 element 1 holds no element of the matrix after simdgroup_load, the kernel assumes "
            "(row 1, column 1)") != std::string::npos);
}

TEST_CASE("simdgroup layout probe: the check probes once and compares with the test hook's layout") {
  testing::SimRun run;
  SimdgroupLayoutCheck check(*run.device);
  CHECK(check.Mismatch() == "");
  SimdgroupLayout transposed{};
  for (size_t i = 0; i < transposed.size(); ++i) {
    const uint8_t element = AssumedSimdgroupLayout()[i];
    transposed[i] = static_cast<uint8_t>(element % 8 * 8 + element / 8);
  }
  SetAssumedSimdgroupLayoutForTesting(transposed);
  const std::string mismatch = check.Mismatch();
  SetAssumedSimdgroupLayoutForTesting(std::nullopt);
  CHECK(mismatch.find("lane 0 element 1 holds (row 0, column 1) after simdgroup_load, the kernel "
                      "assumes (row 1, column 0)") != std::string::npos);
  CHECK(check.Mismatch() == "");
}

}  // namespace
}  // namespace metalrt::gpu
