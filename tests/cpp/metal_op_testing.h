// Helpers of the Metal op gates (tests/cpp/test_metal_<op>.cpp): Metal tensors on the
// process's kMETAL device, NaN-poisoned outputs, reads back to the host, and the
// profiler / provider-stats evidence of which kernel and provider ran.
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gpu/kernel_launch.h"

#include "gpu/metal_backend.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_testing.h"

namespace metalrt::testing {

inline Tensor ToMetal(const Tensor& t) { return CopyToDevice(t, DeviceType::kMETAL); }

// A new Metal tensor poisoned with NaN (unified memory: the host writes it directly;
// a fresh allocation has no GPU work pending).
inline Tensor PoisonedMetal(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kMETAL);
  Poison(t);
  return t;
}

// The values of a Metal tensor (the copy synchronises first).
inline std::vector<double> ReadMetal(const Tensor& t) {
  return ReadFloat(CopyToDevice(t, DeviceType::kCPU));
}

// Dispatch counts per kernel name recorded while `body` runs (profiler on, then off).
template <typename F>
std::vector<ProfileRow> ProfiledRows(F&& body) {
  gpu::Profiler& profiler = gpu::ActiveMetalBackend().profiler();
  profiler.Reset();
  profiler.Enable(true);
  body();
  gpu::ActiveMetalBackend().Synchronize();
  profiler.Enable(false);
  std::vector<ProfileRow> rows = profiler.Rows();
  profiler.Reset();
  return rows;
}

inline uint64_t Dispatches(const std::vector<ProfileRow>& rows, const std::string& kernel) {
  for (const ProfileRow& row : rows)
    if (row.name == kernel) return row.dispatches;
  return 0;
}

// CHECKs that the op's last runs on Metal were served by `provider`, natively, with no
// declines and no reference-tier hits since the stats were reset.
inline void CheckNativeProvider(const std::string& op, const std::string& provider, uint64_t calls) {
  const ProviderStats stats = GetProviderStats(op, DeviceType::kMETAL);
  CHECK(stats.last_selected == provider);
  CHECK(stats.calls == calls);
  CHECK(stats.declines == 0);
  CHECK(stats.reference_hits == 0);
}

// Bar of a float op whose kernel and oracle both compute in f32 in different orders:
// `f32_rel` of accumulation roundoff, and for f16/bf16 outputs a rounding to the
// neighbouring value (one ulp, two unit roundoffs).
inline Bar OracleBar(DType dtype, double f32_rel, double abs = 1e-6) {
  return {f32_rel + (dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype)), abs};
}

}  // namespace metalrt::testing
