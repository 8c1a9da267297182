// Helpers of the Metal op gates (tests/cpp/test_metal_<op>.cpp): Metal tensors on the
// process's kMETAL device, NaN-poisoned outputs, reads back to the host, and the
// profiler / provider-stats evidence of which kernel and provider ran.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
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
std::vector<gpu::ProfileRow> ProfiledRows(F&& body) {
  gpu::Profiler& profiler = gpu::ActiveMetalBackend().profiler();
  profiler.Reset();
  profiler.Enable(true);
  body();
  gpu::ActiveMetalBackend().Synchronize();
  profiler.Enable(false);
  std::vector<gpu::ProfileRow> rows = profiler.Rows();
  profiler.Reset();
  return rows;
}

inline uint64_t Dispatches(const std::vector<gpu::ProfileRow>& rows, const std::string& kernel) {
  for (const gpu::ProfileRow& row : rows)
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

// One parity case: `run(inputs, out)` runs the op (returning its output) on Metal with
// the inputs copied there and `out` NaN-poisoned, then on the CPU oracle with the same
// inputs. CHECKs that exactly one dispatch of `<kernel>_<dtype suffix>` ran, served
// natively by `provider`, and that the outputs agree: NMSE <= 5e-4 and every element
// within `bar`.
template <typename Run>
void CheckParity(const std::string& op, const std::string& provider, const std::string& kernel,
                 const std::vector<Tensor>& cpu_inputs, DType out_dtype, Bar bar, Run&& run) {
  std::vector<Tensor> metal_inputs;
  for (const Tensor& t : cpu_inputs) metal_inputs.push_back(ToMetal(t));
  const Tensor ref_tensor = run(cpu_inputs, std::nullopt);
  const Tensor out = PoisonedMetal(ref_tensor.shape(), out_dtype);
  ResetProviderStats();
  const auto profile = ProfiledRows([&] { run(metal_inputs, out); });
  CHECK(Dispatches(profile, kernel + "_" + gpu::KernelDTypeSuffix(out_dtype)) == 1);
  CheckNativeProvider(op, provider, 1);
  const std::vector<double> got = ReadMetal(out);
  const std::vector<double> ref = ReadFloat(ref_tensor);
  // NMSE is 0/0 for an all-zero reference (e.g. relu of negatives, layer_norm of width
  // 1 without bias); the elementwise bar still checks every element there.
  if (std::any_of(ref.begin(), ref.end(), [](double v) { return v != 0.0; }))
    CHECK(Nmse(got, ref) <= 5e-4);
  CheckClose(got, ref, bar, op);
}

// Bar of a float op whose kernel and oracle both compute in f32 in different orders:
// `f32_rel` of accumulation roundoff, and for f16/bf16 outputs a rounding to the
// neighbouring value (one ulp, two unit roundoffs).
inline Bar OracleBar(DType dtype, double f32_rel, double abs = 1e-6) {
  return {f32_rel + (dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype)), abs};
}

}  // namespace metalrt::testing
