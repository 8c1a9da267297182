// A GpuLibrary over the embedded kernel sources (metalrt/kernel_sources.h), compiled
// one file at a time on the first use of one of its kernels: what the native device
// serves when the build had no Metal compiler. Compiling all 25 files up front cost
// every process the whole compile on its first op, and one file that failed took every
// kernel down; here a failing file is named in the error of its own kernels only and
// the other files keep working.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_device.h"
#include "metalrt/kernel_sources.h"

namespace metalrt::gpu {

class EmbeddedLibrary : public GpuLibrary {
 public:
  // Compiles one source; throws std::runtime_error with the compiler's message.
  using Compile = std::function<std::shared_ptr<GpuLibrary>(const EmbeddedKernelSource&)>;
  // `kernel_files`: kernel name -> the file (EmbeddedKernelSource::file) defining it.
  EmbeddedLibrary(std::vector<EmbeddedKernelSource> sources, std::map<std::string, std::string> kernel_files,
                  Compile compile);

  std::vector<std::string> function_names() const override;
  // Compiles the kernel's file on first use (once per process, a failure included).
  // std::invalid_argument for an unknown kernel; std::runtime_error naming the file
  // when it does not compile.
  GpuPipeline& pipeline(const std::string& name, const FunctionConstants& constants = {}) override;
  // "<n> of <m> files compiled (<s> s), <k> failed: <files>" so far.
  std::string summary() const;

 private:
  struct File {
    const EmbeddedKernelSource* source = nullptr;
    std::shared_ptr<GpuLibrary> library;
    std::string error;   // non-empty once it failed
  };
  GpuLibrary& Library(const std::string& file);

  std::vector<EmbeddedKernelSource> sources_;
  std::map<std::string, std::string> kernel_files_;
  Compile compile_;
  mutable std::mutex mutex_;
  std::map<std::string, File> files_;
  double compile_seconds_ = 0;
};

}  // namespace metalrt::gpu
