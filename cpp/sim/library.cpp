#include "sim/library.h"

#include <dlfcn.h>

#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "metalrt/kernel_sources.h"
#include "sim/threadgroup.h"

namespace metalrt::sim {

namespace {
std::mutex& BuiltinMutex() {
  static std::mutex m;
  return m;
}
std::vector<const ModuleInfo*>& BuiltinList() {
  static std::vector<const ModuleInfo*> list;
  return list;
}

size_t ConstantTypeSize(gpu::FunctionConstant::Type type) {
  switch (type) {
    case gpu::FunctionConstant::Type::kBool: return 1;
    case gpu::FunctionConstant::Type::kInt16:
    case gpu::FunctionConstant::Type::kUInt16:
    case gpu::FunctionConstant::Type::kHalf: return 2;
    default: return 4;
  }
}

std::string ConstantsKey(const std::string& name, const gpu::FunctionConstants& constants) {
  std::string key = name;
  for (const auto& c : constants) {
    key += '|' + std::to_string(c.index) + ':' + std::to_string(static_cast<int>(c.type)) + ':';
    key.append(reinterpret_cast<const char*>(c.bytes.data()), c.bytes.size());
  }
  return key;
}
}  // namespace

void RegisterBuiltinModule(const ModuleInfo* module) {
  std::lock_guard<std::mutex> lock(BuiltinMutex());
  BuiltinList().push_back(module);
}

std::vector<const ModuleInfo*> BuiltinModules() {
  std::lock_guard<std::mutex> lock(BuiltinMutex());
  return BuiltinList();
}

}  // namespace metalrt::sim

namespace metalrt {

std::map<std::string, std::string> EmbeddedKernelFiles() {
  std::set<std::string> embedded;   // a test binary also builds tests/msl/*.metal in
  for (const EmbeddedKernelSource& source : EmbeddedKernelSources()) embedded.insert(source.file);
  std::map<std::string, std::string> files;
  for (const sim::ModuleInfo* module : sim::BuiltinModules()) {
    const std::string path = module->source;
    const std::string file = path.substr(path.find_last_of('/') + 1);
    if (!embedded.count(file)) continue;
    for (uint32_t i = 0; i < module->num_kernels; ++i) files[module->kernels[i].name] = file;
  }
  return files;
}

}  // namespace metalrt

namespace metalrt::sim {

const ModuleInfo* LoadSharedModule(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("[compile_library] cannot load ") + dlerror());
  // Never dlclose'd: pipelines and in-flight command buffers point into it.
  using Entry = const ModuleInfo* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "metalrt_sim_module"));
  if (!entry) throw std::runtime_error("[compile_library] " + path + " has no metalrt_sim_module");
  const ModuleInfo* info = entry();
  if (info->abi_version != kModuleAbiVersion)
    throw std::runtime_error("[compile_library] " + path + " was built for module ABI " +
                             std::to_string(info->abi_version));
  return info;
}

SimPipeline::SimPipeline(const KernelInfo& kernel, const ModuleInfo& module,
                         std::vector<ConstantValue> constants)
    : kernel_(kernel), module_(module), name_(kernel.name), constants_(std::move(constants)) {}

uint32_t SimPipeline::max_total_threads_per_threadgroup() const {
  const uint32_t declared = kernel_.max_total_threads_per_threadgroup;
  return declared ? declared : kMaxThreadsPerThreadgroup;
}
uint32_t SimPipeline::thread_execution_width() const { return kSimdWidth; }

SimLibrary::SimLibrary(std::vector<const ModuleInfo*> modules, std::string reflection)
    : reflection_(std::move(reflection)) {
  for (const ModuleInfo* m : modules) {
    for (uint32_t i = 0; i < m->num_kernels; ++i) {
      const KernelInfo& k = m->kernels[i];
      auto [it, inserted] = kernels_.emplace(k.name, Kernel{&k, m});
      if (!inserted)
        throw std::runtime_error(std::string("[sim] kernel '") + k.name + "' is defined at " +
                                 it->second.info->location + " and at " + k.location);
    }
  }
}

std::vector<std::string> SimLibrary::function_names() const {
  std::vector<std::string> names;
  for (const auto& [name, _] : kernels_) names.push_back(name);
  return names;
}

gpu::GpuPipeline& SimLibrary::pipeline(const std::string& name,
                                       const gpu::FunctionConstants& constants) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string key = ConstantsKey(name, constants);
  auto cached = pipelines_.find(key);
  if (cached != pipelines_.end()) return *cached->second;
  auto it = kernels_.find(name);
  if (it == kernels_.end())
    throw std::invalid_argument("[pipeline] no kernel named '" + name + "' in the library");
  const ModuleInfo& module = *it->second.module;
  // Every constant the module declares gets a value or is marked undefined.
  std::vector<ConstantValue> values;
  for (uint32_t i = 0; i < module.num_constants; ++i)
    values.push_back(ConstantValue{&module.constants[i], {}, false});
  for (const auto& c : constants) {
    ConstantValue* target = nullptr;
    for (auto& v : values)
      if (v.slot->index == c.index) target = &v;
    if (!target)
      throw std::invalid_argument("[pipeline] kernel '" + name + "' has no function constant " +
                                  std::to_string(c.index));
    if (ConstantTypeSize(c.type) != target->slot->size)
      throw std::invalid_argument("[pipeline] function constant " + std::to_string(c.index) + " ('" +
                                  target->slot->name + "') is " +
                                  std::to_string(target->slot->size) + " bytes, got a value of " +
                                  std::to_string(ConstantTypeSize(c.type)));
    target->bytes = c.bytes;
    target->defined = true;
  }
  const KernelInfo& kernel = *it->second.info;
  for (uint32_t r = 0; r < kernel.num_required_constants; ++r)
    for (const ConstantValue& v : values)
      if (v.slot->index == kernel.required_constants[r] && !v.defined)
        throw std::invalid_argument(
            "[pipeline] kernel '" + name + "' (" + kernel.location + ") uses function constant " +
            std::to_string(v.slot->index) + " ('" + v.slot->name +
            "') but no value was given; Metal requires one for every function constant a "
            "kernel uses unless it tests it with is_function_constant_defined");
  auto& slot = pipelines_[key];
  slot = std::make_unique<SimPipeline>(kernel, module, std::move(values));
  return *slot;
}

std::unique_lock<std::mutex> ApplyFunctionConstants(const std::vector<ConstantValue>& constants) {
  static std::mutex mutex;
  if (constants.empty()) return {};
  std::unique_lock<std::mutex> lock(mutex);
  for (const ConstantValue& c : constants) {
    std::memcpy(c.slot->value, c.bytes.data(), c.slot->size);
    *c.slot->defined = c.defined;
  }
  return lock;
}

}  // namespace metalrt::sim
