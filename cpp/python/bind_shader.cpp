// metalrt._metalrt: user MSL kernels compiled at run time (compile_shader) and
// dispatched on the Metal backend's command stream (metalrt/shader.h). The
// Python-facing API and its docs are python/metalrt/shader/library.py, which converts
// and checks the arguments.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "bind.h"
#include "metalrt/errors.h"
#include "metalrt/shader.h"
#include "metalrt/tensor.h"

namespace metalrt::python {
namespace {

std::array<uint32_t, 3> ToArray3(const std::vector<uint32_t>& v) { return {v.at(0), v.at(1), v.at(2)}; }

// args: Tensor (bound at its buffer and byte offset) or bytes (copied, set_bytes),
// one per [[buffer(i)]]. constants: (index, FunctionConstant::Type, 4 value bytes).
// threadgroup_memory: (index, length) of [[threadgroup(index)]] parameters.
void Dispatch(const ShaderLibrary& lib, const std::string& kernel, const nb::list& args,
              const std::vector<uint32_t>& grid, const std::vector<uint32_t>& group,
              bool grid_is_threads, const std::vector<std::tuple<uint32_t, int, nb::bytes>>& constants,
              const std::vector<std::pair<uint32_t, uint64_t>>& threadgroup_memory) {
  ShaderDispatch d;
  d.kernel = kernel;
  for (const auto& [index, type, bytes] : constants) {
    ShaderConstant c;
    c.index = index;
    c.type = type;
    std::memcpy(c.bytes.data(), bytes.c_str(), std::min<size_t>(bytes.size(), c.bytes.size()));
    d.constants.push_back(c);
  }
  for (uint32_t i = 0; i < args.size(); ++i) {
    nb::handle a = args[i];
    if (nb::isinstance<Tensor>(a)) {
      d.arguments.emplace_back(nb::cast<const Tensor&>(a));
    } else if (nb::isinstance<nb::bytes>(a)) {
      nb::bytes b = nb::borrow<nb::bytes>(a);
      d.arguments.emplace_back(std::string(b.c_str(), b.size()));
    } else {
      throw TypeError("[" + kernel + "] argument " + std::to_string(i) +
                      " must be a metalrt.Tensor or bytes");
    }
  }
  d.grid = ToArray3(grid);
  d.group = ToArray3(group);
  d.grid_is_threads = grid_is_threads;
  d.threadgroup_memory = threadgroup_memory;
  lib.Dispatch(d);
}

}  // namespace

void BindShader(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<ShaderLibrary>(m, "_ShaderLibrary")
      .def("function_names", &ShaderLibrary::function_names)
      .def("reflection", &ShaderLibrary::reflection)
      .def("dispatch", &Dispatch, "kernel"_a, "args"_a, "grid"_a, "group"_a, "grid_is_threads"_a,
           "constants"_a, "threadgroup_memory"_a);
  m.def("_compile_shader", &ShaderLibrary::Compile, "source"_a);
  m.def("_set_sim_toolchain", &SetShaderToolchain, "python"_a, "generator"_a, "shim_dir"_a);
}

}  // namespace metalrt::python
