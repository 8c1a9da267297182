// The kMETAL backend: one device-neutral implementation over GpuDevice, the same on
// the Apple GPU and on the simulated device (docs/architecture.md).
//
// Memory is unified: Alloc returns the CPU-visible contents of a shared-storage
// buffer, registered in the allocation registry so kernels can bind any pointer into
// it. Freed buffers go to the buffer cache and serve later allocations of the same
// length; the profiler counts only the buffers the device newly creates. Work is batched by the command stream; every host access to device memory
// (Copy, Memset) first synchronises, so the host never races pending GPU work.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/allocation_registry.h"
#include "gpu/buffer_cache.h"
#include "gpu/command_stream.h"
#include "gpu/gpu_device.h"
#include "gpu/profiler.h"
#include "gpu/simdgroup_layout_probe.h"
#include "metalrt/device.h"

namespace metalrt::gpu {

class MetalBackend final : public Backend {
 public:
  static constexpr size_t kAlignment = 64;
  // `selection`: why this device serves (SelectGpuDevice's account).
  explicit MetalBackend(std::unique_ptr<GpuDevice> device, std::string selection = "");

  DeviceType type() const override { return DeviceType::kMETAL; }
  std::string name() const override { return device_->name(); }
  void* Alloc(size_t bytes) override;
  // Throws std::invalid_argument for a pointer that is not a live allocation's base.
  void Free(void* ptr) override;
  // The device side of the copy must lie inside one live allocation
  // (std::invalid_argument otherwise).
  void Copy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  void Memset(void* dst, int value, size_t bytes) override;
  void Synchronize() override;
  // Waits only for the pending work that writes the allocation holding the range,
  // committing the open command buffer only when it is among it (std::invalid_argument
  // when no live allocation holds the range). Copy from device memory and this log a
  // profiler read event at the first byte read, waited for or not.
  void PrepareHostRead(const void* data, size_t bytes) override;
  // The same for the pending work that reads or writes the allocation.
  void PrepareHostWrite(const void* data, size_t bytes) override;
  // Wraps the page-aligned range holding the memory as a no-copy buffer registered in
  // the allocation registry (external_memory.cpp); memory inside a range wrapped
  // earlier and still alive shares that wrapping.
  std::shared_ptr<void> AdoptExternal(void* data, size_t bytes, std::shared_ptr<void> keep_alive) override;
  bool UnifiedMemory() const override { return device_->has_unified_memory(); }
  size_t MaxBufferLength() const override { return device_->max_buffer_length(); }
  std::string Capability() const override { return device_->gpu_family(); }
  bool Simulated() const override { return device_->is_simulated(); }
  std::vector<DType> SupportedDTypes() const override {
    return {DType::kBF16, DType::kF16, DType::kF32};
  }

  // Commits the open command buffer without waiting.
  void Flush() override;
  // A plan's capture of one op call's dispatches (op_capture.h). Every host access to
  // device memory above, and Flush, spoils a capture in progress on the calling thread.
  void BeginOpCapture() override;
  std::unique_ptr<EncodedOp> EndOpCapture() override;
  GpuDevice& device() { return *device_; }
  const std::string& selection() const { return selection_; }
  AllocationRegistry& allocations() { return allocations_; }
  CommandStream& stream() { return stream_; }
  Profiler& profiler() { return profiler_; }
  BufferCache& buffer_cache() { return buffer_cache_; }
  // The device's thread_elements() layout, probed at first use of the prefill kernel.
  SimdgroupLayoutCheck& simdgroup_layout() { return simdgroup_layout_; }

 private:
  // Declaration order is destruction order reversed: the stream drains in-flight
  // work before the buffers it retains and the device go away.
  std::unique_ptr<GpuDevice> device_;
  std::string selection_;
  Profiler profiler_;
  BufferCache buffer_cache_;
  AllocationRegistry allocations_;
  CommandStream stream_;
  // Live external wrappings by buffer base: the handle whose destruction unregisters it.
  std::mutex external_mutex_;
  std::map<const void*, std::weak_ptr<void>> external_;
  SimdgroupLayoutCheck simdgroup_layout_{*device_};
};

// Registers the kMETAL backend factory (idempotent); called by
// RegisterGpuDeviceFactory (device_selection.h).
void RegisterMetalBackend();
// The process's kMETAL backend, GetBackend(DeviceType::kMETAL).
MetalBackend& ActiveMetalBackend();

}  // namespace metalrt::gpu
