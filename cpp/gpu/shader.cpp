#include "metalrt/shader.h"

#include "gpu/kernel_launch.h"
#include "gpu/metal_backend.h"

namespace metalrt {
namespace {
gpu::Size3 ToSize3(const std::array<uint32_t, 3>& v) { return {v[0], v[1], v[2]}; }
}  // namespace

ShaderLibrary::ShaderLibrary(std::shared_ptr<gpu::GpuLibrary> library) : library_(std::move(library)) {}

ShaderLibrary ShaderLibrary::Compile(const std::string& source) {
  return ShaderLibrary(gpu::ActiveMetalBackend().device().compile_library(source));
}

std::vector<std::string> ShaderLibrary::function_names() const { return library_->function_names(); }

std::string ShaderLibrary::reflection() const { return library_->reflection(); }

void ShaderLibrary::Dispatch(const ShaderDispatch& d) const {
  gpu::FunctionConstants fcs;
  for (const ShaderConstant& c : d.constants) {
    gpu::FunctionConstant fc;
    fc.index = c.index;
    fc.type = static_cast<gpu::FunctionConstant::Type>(c.type);
    fc.bytes = c.bytes;
    fcs.push_back(fc);
  }
  gpu::KernelLaunch launch(gpu::ActiveMetalBackend(), d.kernel, fcs);
  launch.library(*library_);
  for (uint32_t i = 0; i < d.arguments.size(); ++i) {
    if (const auto* tensor = std::get_if<Tensor>(&d.arguments[i])) {
      launch.argument(i, *tensor);
    } else {
      const std::string& bytes = std::get<std::string>(d.arguments[i]);
      launch.bytes(i, bytes.data(), bytes.size());
    }
  }
  for (const auto& [index, length] : d.threadgroup_memory) launch.threadgroup_memory(index, length);
  if (d.grid_is_threads) launch.threads(ToSize3(d.grid), ToSize3(d.group));
  else launch.threadgroups(ToSize3(d.grid), ToSize3(d.group));
}

}  // namespace metalrt
