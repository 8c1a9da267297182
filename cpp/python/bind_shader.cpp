// metalrt._metalrt: user MSL kernels compiled at run time (compile_shader) and
// dispatched on the Metal backend's command stream. The Python-facing API and its
// docs are python/metalrt/shader/library.py, which converts and checks the arguments.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <tuple>

#include "bind.h"
#include "gpu/kernel_launch.h"
#include "gpu/metal_backend.h"
#include "metalrt/errors.h"
#include "metalrt/tensor.h"
#include "sim/kernel_compiler.h"

namespace metalrt::python {
namespace {

struct ShaderLibrary {
  std::shared_ptr<gpu::GpuLibrary> library;
};

gpu::Size3 ToSize3(const std::vector<uint32_t>& v) { return {v.at(0), v.at(1), v.at(2)}; }

// args: Tensor (bound at its buffer and byte offset) or bytes (copied, set_bytes),
// one per [[buffer(i)]]. constants: (index, FunctionConstant::Type, 4 value bytes).
// threadgroup_memory: (index, length) of [[threadgroup(index)]] parameters.
void Dispatch(ShaderLibrary& lib, const std::string& kernel, const nb::list& args,
              const std::vector<uint32_t>& grid, const std::vector<uint32_t>& group,
              bool grid_is_threads, const std::vector<std::tuple<uint32_t, int, nb::bytes>>& constants,
              const std::vector<std::pair<uint32_t, uint64_t>>& threadgroup_memory) {
  gpu::FunctionConstants fcs;
  for (const auto& [index, type, bytes] : constants) {
    gpu::FunctionConstant c;
    c.index = index;
    c.type = static_cast<gpu::FunctionConstant::Type>(type);
    std::memcpy(c.bytes.data(), bytes.c_str(), std::min<size_t>(bytes.size(), 4));
    fcs.push_back(c);
  }
  gpu::KernelLaunch launch(gpu::ActiveMetalBackend(), kernel, fcs);
  launch.library(*lib.library);
  for (uint32_t i = 0; i < args.size(); ++i) {
    nb::handle a = args[i];
    if (nb::isinstance<Tensor>(a)) {
      launch.argument(i, nb::cast<const Tensor&>(a));
    } else if (nb::isinstance<nb::bytes>(a)) {
      nb::bytes b = nb::borrow<nb::bytes>(a);
      launch.bytes(i, b.c_str(), b.size());
    } else {
      throw TypeError("[" + kernel + "] argument " + std::to_string(i) +
                      " must be a metalrt.Tensor or bytes");
    }
  }
  for (const auto& [index, length] : threadgroup_memory) launch.threadgroup_memory(index, length);
  if (grid_is_threads) launch.threads(ToSize3(grid), ToSize3(group));
  else launch.threadgroups(ToSize3(grid), ToSize3(group));
}

}  // namespace

void BindShader(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<ShaderLibrary>(m, "_ShaderLibrary")
      .def("function_names", [](const ShaderLibrary& l) { return l.library->function_names(); })
      .def("reflection", [](const ShaderLibrary& l) { return l.library->reflection(); })
      .def("dispatch", &Dispatch, "kernel"_a, "args"_a, "grid"_a, "group"_a, "grid_is_threads"_a,
           "constants"_a, "threadgroup_memory"_a);
  m.def(
      "_compile_shader",
      [](const std::string& source) {
        return ShaderLibrary{gpu::ActiveMetalBackend().device().compile_library(source)};
      },
      "source"_a);
  m.def(
      "_set_sim_toolchain",
      [](const std::string& python, const std::string& generator, const std::string& shim_dir) {
        sim::SetKernelToolchain({python, generator, shim_dir});
      },
      "python"_a, "generator"_a, "shim_dir"_a);
}

}  // namespace metalrt::python
