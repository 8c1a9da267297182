// The op-case table: one gate (tests/cpp/test_op_cases.cpp) runs every registered case
// on the CPU oracle (every other CPU provider disabled) and on the case's device — the
// Metal device, or the CPU with its fast providers (c.device = kCPU) — and compares
// the two. Cases self-register
// from the op's own test file, so adding an op never edits a central list:
//
//   METALRT_OP_CASES(rms_norm_cases) {        // a function returning std::vector<OpCase>
//     OpCase c;
//     c.name = "rms_norm/f16/3x33";           // unique and reproducible
//     c.op = "rms_norm";                      // registry op name
//     c.provider = "metal_rms_norm";          // native provider that must serve every Metal call
//     c.kernels = {"rms_norm_row_f16"};       // each dispatches on Metal exactly as often as listed
//     c.inputs = {x, weight};                 // CPU tensors; the harness copies them per device
//     c.outputs = {{{3, 33}, DType::kF16}};   // allocated by the harness, poisoned, guarded
//     c.run = [](const Inputs& in, const Outputs& out) -> Returned {
//       ops::RmsNorm(in[0], in[1], 1e-6f, out[0]);
//       return {};                            // tensors the op returns (ops without `out`)
//     };
//     c.bar = {2e-3, 1e-6};                   // every element within rel * |ref| + abs
//     return {c};
//   }
//
// What one case proves, on each run:
// * Outputs are poisoned before the call with different patterns on the two sides (NaN
//   or 0xFF bytes on Metal, 0x5A bytes for the oracle), so an element either side
//   leaves unwritten fails the comparison.
// * Each output sits between guard regions of poisoned elements; a write outside the
//   output fails the case (and guards on Metal are checked after the GPU finished).
// * Compared in order: outputs, mutated inputs (whole tensors, untouched bytes
//   included), returned tensors. Match::kBitExact compares bytes; Match::kClose checks
//   NMSE <= nmse (when the reference is not all zero), every element within
//   bar.rel * |ref| + bar.abs + max_rel * max|ref|, and that the reference holds no NaN.
// * The profiler saw every kernel of `kernels` dispatch exactly as often as it is
//   listed (once, for a name listed once; a CPU case lists none), and the provider
//   stats show `provider` served every call of `op` on the case's device, each call
//   declined once by every provider tried ahead of it (ListProviders' order, gated by
//   "op registry: ... tiers" in test_op_registry.cpp) and by no other, with no
//   reference-tier run.
//
// Run one case: METALRT_OP_CASE=<substring of its name> ./build/tests/metalrt_tests -tc='op cases*'
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "gpu/kernel_launch.h"
#include "metalrt/ops.h"
#include "metalrt/tensor.h"
#include "op_testing.h"

namespace metalrt::testing {

struct TensorSpec {
  Shape shape;
  DType dtype;
};

enum class Match { kBitExact, kClose };

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;
using Returned = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::string op;
  std::string provider;
  DeviceType device = DeviceType::kMETAL;   // the device under test
  std::vector<std::string> kernels;
  std::vector<Tensor> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<int> mutated_inputs;
  std::function<Returned(const Inputs&, const Outputs&)> run;
  Match match = Match::kClose;
  double nmse = 5e-4;
  Bar bar{0.0, 0.0};
  double max_rel = 0.0;
};

// "<op>/<dtype>/<d0>x<d1>..." plus "/<variant>" when one is given: a reproducible case name.
inline std::string CaseName(const std::string& op, DType dtype, const Shape& shape,
                            const std::string& variant = "") {
  std::string name = op + "/" + gpu::KernelDTypeSuffix(dtype) + "/";
  for (size_t i = 0; i < shape.size(); ++i) name += (i ? "x" : "") + std::to_string(shape[i]);
  return variant.empty() ? name : name + "/" + variant;
}

// The common case: an op with one output of `out` spec, written by `run(inputs, output)`,
// served by provider "metal_<op>" through one kernel.
inline OpCase SingleOutputCase(const std::string& name, const std::string& op, const std::string& kernel,
                               std::vector<Tensor> inputs, TensorSpec out, Bar bar,
                               std::function<void(const Inputs&, const Tensor&)> run) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.provider = "metal_" + op;
  c.kernels = {kernel};
  c.inputs = std::move(inputs);
  c.outputs = {std::move(out)};
  c.run = [run = std::move(run)](const Inputs& in, const Outputs& o) {
    run(in, o[0]);
    return Returned{};
  };
  c.bar = bar;
  return c;
}

// The case compared byte for byte instead of within a bar.
inline OpCase BitExact(OpCase c) {
  c.match = Match::kBitExact;
  return c;
}

using OpCaseFactory = std::vector<OpCase> (*)();

inline std::vector<OpCaseFactory>& OpCaseFactories() {
  static std::vector<OpCaseFactory> factories;
  return factories;
}

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(OpCaseFactory factory) { OpCaseFactories().push_back(factory); }
};

}  // namespace metalrt::testing

// Defines a function returning this file's cases and registers it with the table.
#define METALRT_OP_CASES(NAME)                                                   \
  static std::vector<::metalrt::testing::OpCase> NAME();                         \
  static const ::metalrt::testing::OpCaseRegistrar NAME##_registrar(&NAME);      \
  static std::vector<::metalrt::testing::OpCase> NAME()
