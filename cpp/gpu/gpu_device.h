// GpuDevice: the small Metal-shaped interface the device-neutral Metal backend is
// written against. Two implementations: cpp/metal (Objective-C++, Metal.framework)
// and cpp/sim (the simulated Metal device). Names mirror Metal's objects
// (MTLDevice, MTLBuffer, MTLLibrary, MTLComputePipelineState, MTLCommandBuffer,
// MTLComputeCommandEncoder) so a reader of either side recognises them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace metalrt::gpu {

struct Size3 {
  uint32_t x = 1, y = 1, z = 1;
};

class GpuBuffer {
 public:
  virtual ~GpuBuffer() = default;
  virtual void* contents() const = 0;   // CPU-visible base address (unified memory)
  virtual size_t length() const = 0;
};

// A function-constant value ([[function_constant(index)]]), like
// MTLFunctionConstantValues setConstantValue:type:atIndex:.
struct FunctionConstant {
  enum class Type : uint8_t { kBool, kInt16, kUInt16, kInt32, kUInt32, kFloat, kHalf };
  uint32_t index = 0;
  Type type = Type::kInt32;
  std::array<uint8_t, 4> bytes{};   // the value's bytes, little-endian
};
using FunctionConstants = std::vector<FunctionConstant>;

class GpuPipeline {
 public:
  virtual ~GpuPipeline() = default;
  virtual const std::string& name() const = 0;
  virtual uint32_t max_total_threads_per_threadgroup() const = 0;
  virtual uint32_t thread_execution_width() const = 0;   // SIMD width, 32
  virtual size_t static_threadgroup_memory_length() const = 0;
};

class GpuLibrary {
 public:
  virtual ~GpuLibrary() = default;
  virtual std::vector<std::string> function_names() const = 0;
  // Pipeline for kernel `name` specialised with `constants`; cached by the library,
  // valid for its lifetime. Throws std::invalid_argument for an unknown kernel.
  virtual GpuPipeline& pipeline(const std::string& name, const FunctionConstants& constants = {}) = 0;
  // The MSL generator's reflection of a library compiled at run time (JSON: declared
  // parameter and function-constant types, struct sizes; see
  // python/metalrt/_sim/msl_emit.py), written by the build that made it. Empty where
  // the device compiles the source itself (Apple's Metal) and for default libraries.
  virtual std::string reflection() const { return {}; }
};

// setBytes:length:atIndex: takes fewer bytes than this (Apple: "data smaller than
// 4 KB"; larger data goes in a buffer). The simulated device and KernelLaunch both refuse
// a length of kSetBytesLimit or more.
constexpr size_t kSetBytesLimit = 4096;
// Metal's buffer argument table has 31 entries: [[buffer(0)]] .. [[buffer(30)]].
constexpr uint32_t kMaxBufferIndex = 30;

class GpuComputeEncoder {
 public:
  virtual ~GpuComputeEncoder() = default;
  virtual void set_pipeline(GpuPipeline& pipeline) = 0;
  virtual void set_buffer(const GpuBuffer& buffer, size_t offset, uint32_t index) = 0;
  virtual void set_bytes(const void* data, size_t length, uint32_t index) = 0;
  virtual void set_threadgroup_memory_length(size_t length, uint32_t index) = 0;
  // Grid of whole threadgroups.
  virtual void dispatch_threadgroups(Size3 threadgroups, Size3 threads_per_threadgroup) = 0;
  // Grid of threads; edge threadgroups are partial.
  virtual void dispatch_threads(Size3 threads, Size3 threads_per_threadgroup) = 0;
  virtual void end_encoding() = 0;
};

class GpuCommandBuffer {
 public:
  enum class Status { kNotCommitted, kCommitted, kCompleted, kError };
  virtual ~GpuCommandBuffer() = default;
  // One compute encoder per command buffer (serial dispatch order); owned by the
  // command buffer.
  virtual GpuComputeEncoder& compute_encoder() = 0;
  // Submits for asynchronous execution.
  virtual void commit() = 0;
  virtual void wait_until_completed() = 0;
  virtual Status status() const = 0;
  virtual std::string error() const = 0;   // the device's error text when status is kError
  virtual double gpu_start_time() const = 0;   // seconds, same clock as gpu_end_time
  virtual double gpu_end_time() const = 0;
};

// What a device measured while running one dispatch. The simulated device counts it;
// Apple's Metal reports no such counts (its DispatchObserver is never called).
struct DispatchCounts {
  // SIMD-group collectives (simd_sum, simd_max, simd_shuffle, ...: one each) made by
  // the busiest SIMD-group of the dispatch: the length of its serial reduction chain.
  uint32_t max_simd_collectives = 0;
};
// Called after each dispatch ran, on the device's queue thread, with its kernel name.
using DispatchObserver = std::function<void(const std::string& kernel, const DispatchCounts& counts)>;

class GpuDevice {
 public:
  virtual ~GpuDevice() = default;
  // Installs the observer of dispatch counts (set once, before any command buffer);
  // a device that measures nothing ignores it.
  virtual void set_dispatch_observer(DispatchObserver observer) { (void)observer; }
  virtual std::string name() const = 0;           // "Apple M2 Pro" or a simulated name
  virtual bool is_simulated() const = 0;
  virtual bool has_unified_memory() const = 0;
  virtual std::string gpu_family() const = 0;     // e.g. "apple9"
  virtual size_t max_threadgroup_memory_length() const = 0;   // 32 KiB
  // The largest buffer the device makes or wraps, in bytes (MTLDevice
  // maxBufferLength: 16 GiB on an M1 Max, about 27 GB on a 48 GB M4 Pro). new_buffer
  // and new_buffer_no_copy throw std::runtime_error above it, naming both sizes.
  virtual size_t max_buffer_length() const = 0;
  // Shared-storage buffer, zero-initialised; length 0 is allowed.
  virtual std::shared_ptr<GpuBuffer> new_buffer(size_t length) = 0;
  // Wraps page-aligned host memory without a copy; `deallocator` runs when the
  // buffer dies. Throws on a device without unified memory or unaligned memory.
  virtual std::shared_ptr<GpuBuffer> new_buffer_no_copy(void* pointer, size_t length,
                                                        std::function<void()> deallocator) = 0;
  // The project's kernels (metalrt.metallib on Apple, the compiled-in kernels on the sim).
  virtual GpuLibrary& default_library() = 0;
  // Where default_library() comes from, loading it first: "metallib at <path>",
  // "compiled at run time from embedded sources in <s> s", or the sim's compiled-in
  // kernels. Throws what default_library() throws.
  virtual std::string default_library_origin() = 0;
  // Compiles MSL source at run time; throws std::runtime_error with the compiler's
  // message on failure.
  virtual std::shared_ptr<GpuLibrary> compile_library(const std::string& source) = 0;
  virtual std::unique_ptr<GpuCommandBuffer> new_command_buffer() = 0;
};

// Metal returns nil for a buffer above maxBufferLength; both devices throw this
// instead, so the caller learns the limit (`what` starts the message: "[metal alloc]").
inline void CheckBufferLength(const GpuDevice& device, size_t length, const char* what) {
  if (length > device.max_buffer_length())
    throw std::runtime_error(std::string(what) + " a buffer of " + std::to_string(length) +
                             " bytes exceeds the device's maximum buffer length (maxBufferLength, " +
                             std::to_string(device.max_buffer_length()) + " bytes on " + device.name() + ")");
}

}  // namespace metalrt::gpu
