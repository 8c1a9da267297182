// User MSL kernels (compile_shader): a library compiled at run time on the process's
// Metal device, its kernels dispatched on the Metal command stream like any op.
// Metal's own compiler builds the source on an Apple GPU; the simulated device turns
// it into C++ with the MSL generator (python/metalrt/_sim/msl_to_cpp.py) and builds
// that with the system C++ compiler, once per source (sim/kernel_compiler.h). The
// Python API, which converts and checks the arguments, is python/metalrt/shader/.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "metalrt/tensor.h"

namespace metalrt {
namespace gpu {
class GpuLibrary;
}

// A [[function_constant(index)]] value: `type` is a gpu::FunctionConstant::Type code
// (bool, int16, uint16, int32, uint32, float, half: 0..6), `bytes` its value.
struct ShaderConstant {
  uint32_t index = 0;
  int type = 0;
  std::array<uint8_t, 4> bytes{};
};

struct ShaderDispatch {
  std::string kernel;
  // [[buffer(i)]] is arguments[i]: a tensor in a Metal allocation, bound at its byte
  // offset, or bytes copied into the command buffer (setBytes).
  std::vector<std::variant<Tensor, std::string>> arguments;
  std::array<uint32_t, 3> grid{};    // threads, or whole threadgroups
  std::array<uint32_t, 3> group{};   // threads per threadgroup
  bool grid_is_threads = true;       // dispatchThreads (edge threadgroups partial)
  std::vector<ShaderConstant> constants;
  // (index, bytes) of [[threadgroup(index)]] parameters.
  std::vector<std::pair<uint32_t, uint64_t>> threadgroup_memory;
};

class ShaderLibrary {
 public:
  // Compiles MSL `source` on the process's Metal device. Throws std::runtime_error
  // with the compiler's message (shader.metal:line) on failure.
  static ShaderLibrary Compile(const std::string& source);

  std::vector<std::string> function_names() const;
  // The MSL generator's reflection of the source as JSON (declared parameter and
  // function-constant types, struct sizes), from the build that compiled it on the
  // simulated device; empty on Apple's Metal, which compiles the source itself.
  std::string reflection() const;
  // Encodes one dispatch; std::invalid_argument "[<kernel>] ..." for a bad one.
  void Dispatch(const ShaderDispatch& dispatch) const;

 private:
  explicit ShaderLibrary(std::shared_ptr<gpu::GpuLibrary> library);
  std::shared_ptr<gpu::GpuLibrary> library_;
};

// Where the simulated device finds the MSL generator, the shim headers it compiles
// against and the Python that runs the generator (defaults: the source tree metalrt
// was built from, $METALRT_SIM_PYTHON or python3).
void SetShaderToolchain(const std::string& python, const std::string& generator,
                        const std::string& shim_dir);

}  // namespace metalrt
