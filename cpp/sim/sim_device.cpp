#include "sim/sim_device.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <stdexcept>

#include "core/env.h"
#include "sim/command_buffer.h"
#include "sim/command_queue.h"
#include "sim/kernel_compiler.h"
#include "sim/library.h"
#include "sim/sim_buffer.h"
#include "sim/threadgroup.h"

namespace metalrt::sim {

namespace {

// maxBufferLength of the smallest Apple-silicon report found (an M1 Max, 16 GiB:
// ggml-org/llama.cpp#1815); METALRT_SIM_MAX_BUFFER_LENGTH (bytes) lowers it so a
// test can load a small model over several buffers.
constexpr long kDefaultMaxBufferLength = 16L << 30;

class SimDevice : public gpu::GpuDevice {
 public:
  SimDevice()
      : max_buffer_length_(static_cast<size_t>(
            PositiveIntFromEnv("METALRT_SIM_MAX_BUFFER_LENGTH", kDefaultMaxBufferLength, 1L << 50))),
        queue_(DefaultWorkerCount()) {
    // METALRT_SIM_ORDER and METALRT_SIM_STACK_KIB are checked here, where a bad value
    // is an exception for the caller, and the process-wide order is initialised here
    // too, so the first dispatch on the queue thread has nothing left to parse.
    FiberOrderFromEnvironment();
    CurrentFiberOrder();
    FiberStackBytes();
  }

  std::string name() const override {
    return "metalrt simulated Metal device (" + std::to_string(queue_.threads()) + " CPU threads)";
  }
  bool is_simulated() const override { return true; }
  void set_dispatch_observer(gpu::DispatchObserver observer) override {
    queue_.set_observer(std::move(observer));
  }
  bool has_unified_memory() const override { return true; }
  std::string gpu_family() const override { return "apple9"; }
  size_t max_threadgroup_memory_length() const override { return kMaxThreadgroupMemory; }
  size_t max_buffer_length() const override { return max_buffer_length_; }

  std::shared_ptr<gpu::GpuBuffer> new_buffer(size_t length) override {
    gpu::CheckBufferLength(*this, length, "[metal alloc]");
    return std::make_shared<SimBuffer>(length);
  }

  std::shared_ptr<gpu::GpuBuffer> new_buffer_no_copy(void* pointer, size_t length,
                                                     std::function<void()> deallocator) override {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    if (!pointer || reinterpret_cast<uintptr_t>(pointer) % page != 0)
      throw std::invalid_argument("[new_buffer_no_copy] memory must be page-aligned (" +
                                  std::to_string(page) + " bytes)");
    gpu::CheckBufferLength(*this, length, "[new_buffer_no_copy]");
    return std::make_shared<SimBuffer>(pointer, length, std::move(deallocator));
  }

  gpu::GpuLibrary& default_library() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!default_library_) default_library_ = std::make_unique<SimLibrary>(BuiltinModules());
    return *default_library_;
  }

  std::string default_library_origin() override {
    return "the simulated device's kernels, compiled into the binary (" +
           std::to_string(default_library().function_names().size()) + " kernels)";
  }

  std::shared_ptr<gpu::GpuLibrary> compile_library(const std::string& source) override {
    const KernelModule built = BuildKernelModule(source);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& library = compiled_[built.path];
    if (!library)
      library = std::make_shared<SimLibrary>(std::vector<const ModuleInfo*>{LoadSharedModule(built.path)},
                                             built.reflection);
    return library;
  }

  std::unique_ptr<gpu::GpuCommandBuffer> new_command_buffer() override {
    return std::make_unique<SimCommandBuffer>(queue_);
  }

 private:
  const size_t max_buffer_length_;
  std::mutex mutex_;
  std::unique_ptr<SimLibrary> default_library_;
  // Kept for the device's lifetime: pipelines of a library outlive its users' handles.
  std::map<std::string, std::shared_ptr<SimLibrary>> compiled_;
  CommandQueue queue_;   // destroyed first: it finishes the work that uses the above
};

}  // namespace

std::unique_ptr<gpu::GpuDevice> CreateSimDevice() { return std::make_unique<SimDevice>(); }

}  // namespace metalrt::sim
