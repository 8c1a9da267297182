#include "gpu/metal_backend.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "gpu/device_selection.h"
#include "gpu/op_capture.h"

namespace metalrt::gpu {

MetalBackend::MetalBackend(std::unique_ptr<GpuDevice> device, std::string selection)
    : device_(std::move(device)), selection_(std::move(selection)), stream_(*device_, profiler_) {
  // The stream drains in-flight work before profiler_ goes, so no call outlives it.
  device_->set_dispatch_observer([this](const std::string& kernel, const DispatchCounts& counts) {
    if (profiler_.enabled()) profiler_.RecordExecution(kernel, counts);
  });
}

void* MetalBackend::Alloc(size_t bytes) {
  // Metal refuses zero-length buffers; one byte still gives Alloc(0) a distinct block.
  const size_t length = bytes == 0 ? 1 : bytes;
  std::shared_ptr<GpuBuffer> buffer = buffer_cache_.Take(length);
  if (!buffer) {
    buffer = device_->new_buffer(length);
    if (buffer && profiler_.enabled()) profiler_.RecordAllocation(length);
  }
  void* ptr = buffer ? buffer->contents() : nullptr;
  if (ptr == nullptr)
    throw std::runtime_error("[metal alloc] the device could not allocate " + std::to_string(bytes) +
                             " bytes");
  if (reinterpret_cast<uintptr_t>(ptr) % kAlignment != 0)
    throw std::logic_error("[metal alloc] the device returned a buffer that is not " +
                           std::to_string(kAlignment) + "-byte aligned");
  allocations_.Add(std::move(buffer));
  return ptr;
}

void MetalBackend::Free(void* ptr) {
  // Work in flight that uses the buffer keeps its own reference (CommandStream).
  if (ptr != nullptr) buffer_cache_.Put(allocations_.Remove(ptr));
}

void MetalBackend::Synchronize() {
  SpoilCapture();
  stream_.Synchronize();
}

void MetalBackend::Flush() {
  SpoilCapture();
  stream_.Flush();
}

void MetalBackend::BeginOpCapture() { StartCapture(*this); }

std::unique_ptr<EncodedOp> MetalBackend::EndOpCapture() { return FinishCapture(); }

void MetalBackend::Copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  SpoilCapture();
  if (bytes == 0) return;
  if (kind != CopyKind::kHostToDevice) allocations_.Resolve(src, bytes, "[metal copy] source");
  if (kind != CopyKind::kDeviceToHost) allocations_.Resolve(dst, bytes, "[metal copy] destination");
  // Unified memory: the host reads and writes device memory directly, once no
  // pending GPU work can read or write it.
  stream_.Synchronize();
  if (kind != CopyKind::kHostToDevice && profiler_.enabled()) profiler_.RecordRead(src);
  std::memmove(dst, src, bytes);
}

void MetalBackend::PrepareHostRead(const void* data, size_t bytes) {
  SpoilCapture();
  const ResolvedPointer r = allocations_.Resolve(data, bytes, "[metal host read]");
  stream_.WaitForUses(*r.buffer, /*writes_only=*/true);
  if (profiler_.enabled()) profiler_.RecordRead(data);
}

void MetalBackend::PrepareHostWrite(const void* data, size_t bytes) {
  SpoilCapture();
  const ResolvedPointer r = allocations_.Resolve(data, bytes, "[metal host write]");
  stream_.WaitForUses(*r.buffer, /*writes_only=*/false);
}

void MetalBackend::Memset(void* dst, int value, size_t bytes) {
  SpoilCapture();
  if (bytes == 0) return;
  allocations_.Resolve(dst, bytes, "[metal memset] destination");
  stream_.Synchronize();
  std::memset(dst, value, bytes);
}

namespace {
std::unique_ptr<Backend> MakeMetalBackend() {
  std::string selection;
  std::unique_ptr<GpuDevice> device = SelectGpuDevice(&selection);
  return std::make_unique<MetalBackend>(std::move(device), std::move(selection));
}
}  // namespace

void RegisterMetalBackend() { RegisterBackend(DeviceType::kMETAL, &MakeMetalBackend); }

MetalBackend& ActiveMetalBackend() {
  // Only RegisterMetalBackend registers kMETAL, so the backend is a MetalBackend.
  return static_cast<MetalBackend&>(GetBackend(DeviceType::kMETAL));
}

}  // namespace metalrt::gpu
