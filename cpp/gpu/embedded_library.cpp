#include "gpu/embedded_library.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace metalrt::gpu {

EmbeddedLibrary::EmbeddedLibrary(std::vector<EmbeddedKernelSource> sources,
                                 std::map<std::string, std::string> kernel_files, Compile compile)
    : sources_(std::move(sources)), kernel_files_(std::move(kernel_files)), compile_(std::move(compile)) {
  for (const EmbeddedKernelSource& source : sources_) files_[source.file].source = &source;
  for (const auto& [kernel, file] : kernel_files_)
    if (!files_.count(file))
      throw std::logic_error("[embedded library] kernel '" + kernel + "' is mapped to " + file +
                             ", which is not an embedded source");
}

std::vector<std::string> EmbeddedLibrary::function_names() const {
  std::vector<std::string> names;
  for (const auto& [kernel, _] : kernel_files_) names.push_back(kernel);
  return names;
}

GpuLibrary& EmbeddedLibrary::Library(const std::string& file) {
  std::lock_guard<std::mutex> lock(mutex_);
  File& entry = files_.at(file);
  if (!entry.library && entry.error.empty()) {
    const auto start = std::chrono::steady_clock::now();
    try {
      entry.library = compile_(*entry.source);
    } catch (const std::exception& e) {
      entry.error = e.what();
    }
    compile_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (!entry.error.empty())
    throw std::runtime_error("[metal device] the embedded kernel source " + file +
                             " does not compile at run time (its kernels are unavailable; other files' "
                             "kernels still work): " + entry.error);
  return *entry.library;
}

GpuPipeline& EmbeddedLibrary::pipeline(const std::string& name, const FunctionConstants& constants) {
  auto it = kernel_files_.find(name);
  if (it == kernel_files_.end())
    throw std::invalid_argument("[metal pipeline] no kernel named '" + name + "' in the library");
  return Library(it->second).pipeline(name, constants);
}

std::string EmbeddedLibrary::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t compiled = 0;
  std::string failed;
  for (const auto& [file, entry] : files_) {
    if (entry.library) ++compiled;
    if (!entry.error.empty()) failed += (failed.empty() ? "" : ", ") + file;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", compile_seconds_);
  std::string text = std::to_string(compiled) + " of " + std::to_string(files_.size()) + " files compiled (" +
                     seconds + " s)";
  if (!failed.empty()) text += ", failed: " + failed;
  return text;
}

}  // namespace metalrt::gpu
