// The one table-driven gate of the Metal kernels and the fast CPU providers: every
// case registered with METALRT_OP_CASES (see op_cases.h) runs on the CPU oracle and on
// its device — the Metal device (the simulated one in CI, the GPU on a Mac), or the
// CPU with its fast providers enabled — and the two are compared.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "cpu_oracle_testing.h"
#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// Poisoned elements on each side of every output: a kernel writing past either end
// of its output lands here.
constexpr int64_t kGuardElements = 64;
// The oracle's poison differs from the device's (NaN / 0xFF), so an element that both
// sides leave unwritten still fails the comparison.
constexpr int kOraclePoisonByte = 0x5A;

struct GuardedOutput {
  Tensor flat;   // guard, output, guard
  Tensor view;   // the output the op writes
};

void PoisonFor(const Tensor& t, bool oracle) {
  if (oracle) std::memset(t.data(), kOraclePoisonByte, t.nbytes());
  else Poison(t);
}

GuardedOutput AllocateGuarded(const TensorSpec& spec, DeviceType device, bool oracle) {
  const int64_t n = Numel(spec.shape);
  GuardedOutput g;
  g.flat = Tensor::Empty({n + 2 * kGuardElements}, spec.dtype, device);
  PoisonFor(g.flat, oracle);
  g.view = g.flat.Slice(0, kGuardElements, kGuardElements + n).Reshape(spec.shape);
  return g;
}

// Checks the guard elements of an output still hold the poison they were given.
void CheckGuards(const GuardedOutput& g, bool oracle, const std::string& what) {
  const Tensor host = CopyToDevice(g.flat, DeviceType::kCPU);
  const Tensor expected = Tensor::Empty(g.flat.shape(), g.flat.dtype(), DeviceType::kCPU);
  PoisonFor(expected, oracle);
  const size_t guard_bytes = static_cast<size_t>(kGuardElements) * DTypeSize(g.flat.dtype());
  const std::vector<uint8_t> got = Bytes(host), want = Bytes(expected);
  const size_t tail = got.size() - guard_bytes;
  CHECK_MESSAGE(std::equal(got.begin(), got.begin() + guard_bytes, want.begin()),
                what << ": a write before the output's first element");
  CHECK_MESSAGE(std::equal(got.begin() + tail, got.end(), want.begin() + tail),
                what << ": a write past the output's last element");
}

struct RunResult {
  std::vector<GuardedOutput> outputs;
  std::vector<Tensor> compared;   // on the CPU: outputs, mutated inputs, returned tensors
};

RunResult RunOn(const OpCase& c, DeviceType device, bool oracle) {
  RunResult r;
  Inputs inputs;
  for (const Tensor& t : c.inputs) inputs.push_back(CopyToDevice(t, device));
  Outputs views;
  for (const TensorSpec& spec : c.outputs) {
    r.outputs.push_back(AllocateGuarded(spec, device, oracle));
    views.push_back(r.outputs.back().view);
  }
  const Returned returned = c.run(inputs, views);
  for (const Tensor& v : views) r.compared.push_back(CopyToDevice(v, DeviceType::kCPU));
  for (int i : c.mutated_inputs) r.compared.push_back(CopyToDevice(inputs.at(i), DeviceType::kCPU));
  for (const Tensor& t : returned) r.compared.push_back(CopyToDevice(t, DeviceType::kCPU));
  return r;
}

void Compare(const OpCase& c, const Tensor& got, const Tensor& ref, const std::string& what) {
  REQUIRE(got.shape() == ref.shape());
  REQUIRE(got.dtype() == ref.dtype());
  if (c.match == Match::kBitExact || !IsFloating(ref.dtype())) {
    const std::vector<uint8_t> g = Bytes(got), r = Bytes(ref);
    size_t first = 0;
    while (first < g.size() && g[first] == r[first]) ++first;
    CHECK_MESSAGE(first == g.size(), what << ": bytes differ from the oracle, first at byte " << first
                                          << " (element " << first / DTypeSize(ref.dtype()) << ")");
    return;
  }
  const std::vector<double> g = ReadFloat(got), r = ReadFloat(ref);
  CHECK_MESSAGE(std::none_of(r.begin(), r.end(), [](double v) { return std::isnan(v); }),
                what << ": the oracle's result holds NaN (an unwritten element or a NaN input)");
  double scale = 0;
  for (double v : r) scale = std::max(scale, std::fabs(v));
  // NMSE is 0/0 for an all-zero reference; the elementwise bar still checks it.
  if (scale > 0) {
    const double nmse = Nmse(g, r);   // outside the message: doctest logs under a lock
    CHECK_MESSAGE(nmse <= c.nmse, what << ": NMSE " << nmse << " > " << c.nmse);
  }
  CheckClose(g, r, {c.bar.rel, c.bar.abs + c.max_rel * scale}, what);
}

// How many providers are tried ahead of the case's provider of its op on its device.
uint64_t ProvidersAhead(const OpCase& c) {
  const std::vector<std::string> order = ListProviders(c.op, c.device);
  const auto it = std::find(order.begin(), order.end(), c.provider);
  REQUIRE_MESSAGE(it != order.end(), c.name << ": " << c.provider << " is not a provider of " << c.op);
  return static_cast<uint64_t>(it - order.begin());
}

void RunCase(const OpCase& c) {
  CAPTURE(c.name);
  REQUIRE(c.run);
  RunResult ref;
  {
    const OracleOnly oracle;
    ref = RunOn(c, DeviceType::kCPU, true);
  }
  ResetProviderStats();
  RunResult got;
  const auto rows = ProfiledRows([&] { got = RunOn(c, c.device, false); });
  // Each listed kernel runs exactly as often as it is listed: a dispatch too many
  // (e.g. a second pass or a fallback launch) fails like a missing one.
  for (const std::string& kernel : c.kernels) {
    const auto expected = static_cast<uint64_t>(std::count(c.kernels.begin(), c.kernels.end(), kernel));
    CHECK_MESSAGE(Dispatches(rows, kernel) == expected,
                  c.name << ": kernel " << kernel << " ran " << Dispatches(rows, kernel) << " times, expected "
                         << expected);
  }
  const ProviderStats stats = GetProviderStats(c.op, c.device);
  CHECK_MESSAGE(stats.last_selected == c.provider, c.name << ": served by " << stats.last_selected);
  CHECK(stats.calls >= 1);
  CHECK(stats.declines == stats.calls * ProvidersAhead(c));
  CHECK(stats.reference_hits == 0);
  for (size_t i = 0; i < got.outputs.size(); ++i) {
    CheckGuards(ref.outputs[i], true, c.name + " (oracle) output " + std::to_string(i));
    CheckGuards(got.outputs[i], false, c.name + " output " + std::to_string(i));
  }
  REQUIRE(got.compared.size() == ref.compared.size());
  for (size_t i = 0; i < got.compared.size(); ++i)
    Compare(c, got.compared[i], ref.compared[i], c.name + " compared tensor " + std::to_string(i));
}

}  // namespace

TEST_CASE("op cases: every registered case on its device matches the CPU oracle") {
  const char* filter = std::getenv("METALRT_OP_CASE");
  std::set<std::string> names;
  size_t ran = 0;
  for (OpCaseFactory factory : OpCaseFactories())
    for (const OpCase& c : factory()) {
      CHECK_MESSAGE(names.insert(c.name).second, "duplicate op case name " << c.name);
      if (filter != nullptr && c.name.find(filter) == std::string::npos) continue;
      RunCase(c);
      ++ran;
    }
  // A filter that matches nothing is a typo, not a pass.
  CHECK_MESSAGE(ran > 0, "no op case matched METALRT_OP_CASE=" << std::string(filter ? filter : ""));
  MESSAGE("ran " << ran << " op cases");
}

// The harness's own negative gates: each case below is broken on purpose, and the test
// case passes only if the harness reports a failure.
namespace {

OpCase ReluCase(std::function<void(const Inputs&, const Tensor&)> run) {
  const Tensor x = MakeFloat({2, 33}, DType::kF32, RandomValues(66, 11));
  return SingleOutputCase("relu/f32/2x33/broken", "relu", "relu_f32", {x}, {{2, 33}, DType::kF32}, {},
                          std::move(run));
}

}  // namespace

TEST_CASE("op cases: an element left unwritten on both sides fails" * doctest::should_fail()) {
  RunCase(BitExact(ReluCase([](const Inputs& in, const Tensor& out) {
    ops::Relu(in[0].Slice(0, 0, 1), out.Slice(0, 0, 1));   // row 1 never written
  })));
}

TEST_CASE("op cases: a write past the output's end fails" * doctest::should_fail()) {
  RunCase(BitExact(ReluCase([](const Inputs& in, const Tensor& out) {
    ops::Relu(in[0], out);
    if (out.device() == DeviceType::kCPU) return;
    GetBackend(DeviceType::kMETAL).Synchronize();
    // Unified memory: the host stands in for a kernel that writes one element too many.
    static_cast<float*>(out.data())[out.numel()] = 0.0f;
  })));
}
