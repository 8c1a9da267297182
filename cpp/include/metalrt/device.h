// Devices and the backend interface every device implements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metalrt/dtype.h"

namespace metalrt {

enum class DeviceType : uint8_t { kCPU, kMETAL };
const char* DeviceTypeName(DeviceType type);   // "cpu", "metal"
DeviceType DeviceTypeFromName(const std::string& name);  // throws std::invalid_argument

// An ordered stream of work on a device. Ops run on the backend's default queue.
class Queue {
 public:
  virtual ~Queue() = default;
};

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class EncodedOp;   // op_registry.h

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  // Human-readable device name ("CPU", "Apple M2 Pro", "metalrt simulated Metal device").
  virtual std::string name() const = 0;

  // >= 64-byte aligned; Alloc(0) returns a valid, distinct, freeable pointer.
  virtual void* Alloc(size_t bytes) = 0;
  // Free(nullptr) is a no-op.
  virtual void Free(void* ptr) = 0;
  // Copies `bytes`; a device-to-host copy first completes all pending work.
  virtual void Copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  virtual void Memset(void* dst, int value, size_t bytes) = 0;
  // Completes all work submitted to the device.
  virtual void Synchronize() = 0;
  // On a unified-memory device: makes [data, data + bytes) safe for the host to read
  // by completing the submitted work that writes it (and nothing else when none
  // does, so reading an op's host-made index tensor costs no wait). Host memory: a
  // no-op.
  virtual void PrepareHostRead(const void* /*data*/, size_t /*bytes*/) {}
  // On a unified-memory device: makes [data, data + bytes) safe for the host to write
  // by completing the submitted work that reads or writes it, and nothing else (a
  // step's input slots are written while the previous step still runs). Host memory:
  // a no-op.
  virtual void PrepareHostWrite(const void* /*data*/, size_t /*bytes*/) {}
  // Submits the work encoded so far without waiting for it (the CPU runs each op at
  // once: a no-op).
  virtual void Flush() {}
  // Makes [data, data + bytes) -- host memory the runtime did not allocate (a
  // memory-mapped file), kept alive by `keep_alive` -- usable by this device without a
  // copy, and returns the owner a tensor over it holds. The CPU returns keep_alive; a
  // unified-memory GPU wraps the page-aligned range holding it as a buffer. Throws
  // std::invalid_argument where the device cannot address host memory.
  virtual std::shared_ptr<void> AdoptExternal(void* data, size_t bytes,
                                              std::shared_ptr<void> keep_alive);

  virtual std::unique_ptr<Queue> CreateQueue();
  virtual void DestroyQueue(std::unique_ptr<Queue> queue);

  // The largest single allocation or wrapping of host memory the device takes, in
  // bytes (Metal's maxBufferLength); SIZE_MAX where there is no such limit (CPU).
  virtual size_t MaxBufferLength() const { return SIZE_MAX; }
  // True when device memory is host-addressable (CPU, Apple unified memory).
  virtual bool UnifiedMemory() const = 0;
  // Device capability, e.g. "cpu" or an Apple GPU family ("apple9").
  virtual std::string Capability() const = 0;
  // True for the simulated Metal device (kernels run as C++ on the CPU, for testing).
  virtual bool Simulated() const { return false; }
  // Dtypes the device computes in, preferred first.
  virtual std::vector<DType> SupportedDTypes() const = 0;
  // Graph capture (record a sequence of ops, replay it). Default: unsupported;
  // BeginCapture throws std::runtime_error.
  virtual bool SupportsGraphCapture() const { return false; }
  virtual void BeginCapture();
  virtual void EndCapture();
  // Plans (plan.h): BeginOpCapture() starts keeping what the calling thread encodes for
  // one op call; EndOpCapture() returns it, to be encoded again by a replay, or nullptr
  // when the call did more than encode (a host wait or copy, the CPU reference tier) or
  // the device runs ops at once (the default): the replay then reruns its provider.
  virtual void BeginOpCapture() {}
  virtual std::unique_ptr<EncodedOp> EndOpCapture();
};

// Registry of backends. A backend is created on first use by its factory.
using BackendFactory = std::unique_ptr<Backend> (*)();
void RegisterBackend(DeviceType type, BackendFactory factory);
bool HasBackend(DeviceType type);
Backend& GetBackend(DeviceType type);   // throws std::runtime_error if none registered

}  // namespace metalrt
