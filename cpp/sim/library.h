// Kernel libraries of the simulated device: the modules compiled into metalrt
// (registered at load by the generated code) and modules built at run time by
// compile_library (shared objects loaded with dlopen). A pipeline is a kernel
// plus the function-constant values it was specialised with.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_device.h"
#include "shim/sim_module.h"
#include "sim/dispatch.h"

namespace metalrt::sim {

class SimPipeline : public gpu::GpuPipeline {
 public:
  SimPipeline(const KernelInfo& kernel, const ModuleInfo& module,
              std::vector<ConstantValue> constants);
  const std::string& name() const override { return name_; }
  uint32_t max_total_threads_per_threadgroup() const override;
  uint32_t thread_execution_width() const override;
  // Kernel-body threadgroup declarations are sized when first reached, so the
  // simulated device reports 0 here and checks the 32 KiB limit as they are made.
  size_t static_threadgroup_memory_length() const override { return 0; }

  const KernelInfo& kernel() const { return kernel_; }
  const ModuleInfo& module() const { return module_; }
  const std::vector<ConstantValue>& constants() const { return constants_; }

 private:
  const KernelInfo& kernel_;
  const ModuleInfo& module_;
  std::string name_;
  std::vector<ConstantValue> constants_;
};

class SimLibrary : public gpu::GpuLibrary {
 public:
  // Throws std::runtime_error if two modules define the same kernel name.
  // `reflection`: the generator's, for a module built by compile_library.
  explicit SimLibrary(std::vector<const ModuleInfo*> modules, std::string reflection = {});
  std::vector<std::string> function_names() const override;
  std::string reflection() const override { return reflection_; }
  gpu::GpuPipeline& pipeline(const std::string& name,
                             const gpu::FunctionConstants& constants = {}) override;

 private:
  struct Kernel {
    const KernelInfo* info;
    const ModuleInfo* module;
  };
  std::map<std::string, Kernel> kernels_;
  std::string reflection_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<SimPipeline>> pipelines_;   // by name + constants
};

// The modules compiled into this binary.
std::vector<const ModuleInfo*> BuiltinModules();
// dlopen()s a module built by the kernel compiler; throws std::runtime_error.
const ModuleInfo* LoadSharedModule(const std::string& path);

// Writes the pipeline's function-constant values into its module. Modules are
// shared by every pipeline of a kernel, so the caller holds the returned lock for
// the whole dispatch.
std::unique_lock<std::mutex> ApplyFunctionConstants(const std::vector<ConstantValue>& constants);

}  // namespace metalrt::sim
