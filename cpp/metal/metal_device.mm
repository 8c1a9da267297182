// GpuDevice on Metal.framework (Apple only; compiled with -fobjc-arc). A thin
// translation of gpu/gpu_device.h onto MTLDevice and friends: no op logic lives here,
// the device-neutral backend in cpp/gpu does the rest. On Linux CI this file is
// syntax/type-checked against tests/objc/include and its selectors are checked
// against metal-cpp's table (tests/objc/check_objc.py).
//
// Autorelease pools: Python's threads have none, so every method that receives an
// autoreleased object (a command buffer, an encoder, a string, an NSError) drains its
// own @autoreleasepool; objects kept beyond it are held by strong ivars. The checker
// flags a message returning an object outside a pool block.
#import <Metal/Metal.h>

#if !__has_feature(objc_arc)
#error "metal_device.mm requires ARC (-fobjc-arc): its ivars and blocks rely on it"
#endif

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/device_selection.h"
#include "gpu/embedded_library.h"
#include "gpu/gpu_device.h"
#include "metal/metal_compile_options.h"
#include "metalrt/kernel_sources.h"

// MTLMathMode, MTLMathFloatingPointFunctions and their setters are declared only by
// the macOS 15 SDK (Xcode 16); @available is a run-time check, so against the macOS 14
// SDK (Xcode 15, GitHub's macos-14 image) the code using them must not be compiled.
#if defined(__MAC_15_0) && __MAC_OS_X_VERSION_MAX_ALLOWED >= __MAC_15_0
#define METALRT_SDK_HAS_MATH_MODE 1
#else
#define METALRT_SDK_HAS_MATH_MODE 0
#endif

namespace metalrt::metal {
namespace {

std::string ToString(NSString* text) {
  @autoreleasepool {   // UTF8String's buffer is autoreleased
    return text ? std::string([text UTF8String]) : std::string();
  }
}

// Owned (+1), so no pool is needed around it.
NSString* ToNSString(const std::string& text) {
  return [[NSString alloc] initWithCString:text.c_str() encoding:NSUTF8StringEncoding];
}

std::string Describe(NSError* error) {
  @autoreleasepool {
    return error ? ToString([error localizedDescription]) : std::string("unknown Metal error");
  }
}

MTLSize ToMTLSize(gpu::Size3 size) { return MTLSizeMake(size.x, size.y, size.z); }

MTLDataType ToMTLDataType(gpu::FunctionConstant::Type type) {
  using T = gpu::FunctionConstant::Type;
  switch (type) {
    case T::kBool: return MTLDataTypeBool;
    case T::kInt16: return MTLDataTypeShort;
    case T::kUInt16: return MTLDataTypeUShort;
    case T::kInt32: return MTLDataTypeInt;
    case T::kUInt32: return MTLDataTypeUInt;
    case T::kFloat: return MTLDataTypeFloat;
    case T::kHalf: return MTLDataTypeHalf;
  }
  throw std::invalid_argument("[metal pipeline] unknown function-constant type");
}

// The pipeline cache key: kernel name plus every constant's index, type and bytes.
std::string PipelineKey(const std::string& name, const gpu::FunctionConstants& constants) {
  std::string key = name;
  for (const gpu::FunctionConstant& c : constants) {
    key += '|' + std::to_string(c.index) + ':' + std::to_string(static_cast<int>(c.type)) + ':';
    key.append(reinterpret_cast<const char*>(c.bytes.data()), c.bytes.size());
  }
  return key;
}

class MetalBuffer : public gpu::GpuBuffer {
 public:
  explicit MetalBuffer(id<MTLBuffer> buffer) : buffer_(buffer) {}
  void* contents() const override { return [buffer_ contents]; }
  size_t length() const override { return [buffer_ length]; }
  id<MTLBuffer> buffer() const { return buffer_; }

 private:
  id<MTLBuffer> buffer_;
};

// Metal refuses zero-length buffers; length 0 is allowed by the contract, so it is a
// buffer with no storage.
class EmptyBuffer : public gpu::GpuBuffer {
 public:
  void* contents() const override { return nullptr; }
  size_t length() const override { return 0; }
};

class MetalPipeline : public gpu::GpuPipeline {
 public:
  MetalPipeline(std::string name, id<MTLComputePipelineState> state)
      : name_(std::move(name)), state_(state) {}
  const std::string& name() const override { return name_; }
  uint32_t max_total_threads_per_threadgroup() const override {
    return static_cast<uint32_t>([state_ maxTotalThreadsPerThreadgroup]);
  }
  uint32_t thread_execution_width() const override {
    return static_cast<uint32_t>([state_ threadExecutionWidth]);
  }
  size_t static_threadgroup_memory_length() const override { return [state_ staticThreadgroupMemoryLength]; }
  id<MTLComputePipelineState> state() const { return state_; }

 private:
  std::string name_;
  id<MTLComputePipelineState> state_;
};

// One GpuLibrary over one or more MTLLibrary objects: the metallib, or one library
// per embedded kernel file when those are compiled at run time.
class MetalLibrary : public gpu::GpuLibrary {
 public:
  MetalLibrary(id<MTLDevice> device, std::vector<id<MTLLibrary>> libraries)
      : device_(device), libraries_(std::move(libraries)) {}

  std::vector<std::string> function_names() const override {
    @autoreleasepool {
      std::vector<std::string> out;
      for (id<MTLLibrary> library : libraries_) {
        NSArray<NSString*>* names = [library functionNames];
        for (NSUInteger i = 0; i < [names count]; ++i) out.push_back(ToString([names objectAtIndex:i]));
      }
      return out;
    }
  }

  gpu::GpuPipeline& pipeline(const std::string& name, const gpu::FunctionConstants& constants) override {
    @autoreleasepool {   // NSError out-parameters are autoreleased
      return Pipeline(name, constants);
    }
  }

 private:
  gpu::GpuPipeline& Pipeline(const std::string& name, const gpu::FunctionConstants& constants) {
    const std::string key = PipelineKey(name, constants);
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = pipelines_.find(key);
    if (found != pipelines_.end()) return *found->second;
    NSError* error = nil;
    NSString* ns_name = ToNSString(name);
    id<MTLLibrary> library = nil;
    id<MTLFunction> function = nil;
    for (id<MTLLibrary> candidate : libraries_)
      if ((function = [candidate newFunctionWithName:ns_name])) {
        library = candidate;
        break;
      }
    if (!function) throw std::invalid_argument("[metal pipeline] no kernel named '" + name + "' in the library");
    if (!constants.empty()) {
      MTLFunctionConstantValues* values = [[MTLFunctionConstantValues alloc] init];
      for (const gpu::FunctionConstant& c : constants)
        [values setConstantValue:c.bytes.data() type:ToMTLDataType(c.type) atIndex:c.index];
      function = [library newFunctionWithName:ns_name constantValues:values error:&error];
      if (!function)
        throw std::invalid_argument("[metal pipeline] kernel '" + name + "' with these function constants: " +
                                    Describe(error));
    }
    id<MTLComputePipelineState> state = [device_ newComputePipelineStateWithFunction:function error:&error];
    if (!state) throw std::runtime_error("[metal pipeline] kernel '" + name + "': " + Describe(error));
    auto& slot = pipelines_[key];
    slot = std::make_unique<MetalPipeline>(name, state);
    return *slot;
  }

  id<MTLDevice> device_;
  std::vector<id<MTLLibrary>> libraries_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<MetalPipeline>> pipelines_;
};

class MetalComputeEncoder : public gpu::GpuComputeEncoder {
 public:
  explicit MetalComputeEncoder(id<MTLComputeCommandEncoder> encoder) : encoder_(encoder) {}

  void set_pipeline(gpu::GpuPipeline& pipeline) override {
    [encoder_ setComputePipelineState:static_cast<MetalPipeline&>(pipeline).state()];
  }
  void set_buffer(const gpu::GpuBuffer& buffer, size_t offset, uint32_t index) override {
    // An empty buffer has no MTLBuffer; binding nil is what Metal allows for it.
    const auto* metal = dynamic_cast<const MetalBuffer*>(&buffer);
    [encoder_ setBuffer:(metal ? metal->buffer() : nil) offset:offset atIndex:index];
  }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    [encoder_ setBytes:data length:length atIndex:index];
  }
  void set_threadgroup_memory_length(size_t length, uint32_t index) override {
    [encoder_ setThreadgroupMemoryLength:length atIndex:index];
  }
  void dispatch_threadgroups(gpu::Size3 threadgroups, gpu::Size3 threads_per_threadgroup) override {
    [encoder_ dispatchThreadgroups:ToMTLSize(threadgroups) threadsPerThreadgroup:ToMTLSize(threads_per_threadgroup)];
  }
  void dispatch_threads(gpu::Size3 threads, gpu::Size3 threads_per_threadgroup) override {
    [encoder_ dispatchThreads:ToMTLSize(threads) threadsPerThreadgroup:ToMTLSize(threads_per_threadgroup)];
  }
  void end_encoding() override {
    if (ended_) return;
    [encoder_ endEncoding];
    ended_ = true;
  }

 private:
  id<MTLComputeCommandEncoder> encoder_;
  bool ended_ = false;
};

class MetalCommandBuffer : public gpu::GpuCommandBuffer {
 public:
  explicit MetalCommandBuffer(id<MTLCommandBuffer> command_buffer) : command_buffer_(command_buffer) {}

  gpu::GpuComputeEncoder& compute_encoder() override {
    @autoreleasepool {   // the encoder is autoreleased; encoder_ keeps it
      if (!encoder_) {
        id<MTLComputeCommandEncoder> encoder = [command_buffer_ computeCommandEncoder];
        // nil would turn every later dispatch into a silent no-op.
        if (!encoder) throw std::runtime_error("[metal device] computeCommandEncoder returned nil");
        encoder_ = std::make_unique<MetalComputeEncoder>(encoder);
      }
      return *encoder_;
    }
  }
  void commit() override {
    // Metal requires the encoder ended before commit.
    if (encoder_) encoder_->end_encoding();
    [command_buffer_ commit];
  }
  void wait_until_completed() override { [command_buffer_ waitUntilCompleted]; }
  Status status() const override {
    switch ([command_buffer_ status]) {
      case MTLCommandBufferStatusNotEnqueued:
      case MTLCommandBufferStatusEnqueued: return Status::kNotCommitted;
      case MTLCommandBufferStatusCommitted:
      case MTLCommandBufferStatusScheduled: return Status::kCommitted;
      case MTLCommandBufferStatusCompleted: return Status::kCompleted;
      case MTLCommandBufferStatusError: return Status::kError;
    }
    return Status::kError;
  }
  std::string error() const override {
    @autoreleasepool {
      return Describe([command_buffer_ error]);
    }
  }
  double gpu_start_time() const override { return [command_buffer_ GPUStartTime]; }
  double gpu_end_time() const override { return [command_buffer_ GPUEndTime]; }

 private:
  id<MTLCommandBuffer> command_buffer_;
  std::unique_ptr<MetalComputeEncoder> encoder_;
};

// The highest N with supportsFamily:MTLGPUFamilyAppleN, 0 for none (Intel, AMD).
int HighestAppleFamily(id<MTLDevice> device) {
  static const MTLGPUFamily kAppleFamilies[] = {MTLGPUFamilyApple1, MTLGPUFamilyApple2, MTLGPUFamilyApple3,
                                                MTLGPUFamilyApple4, MTLGPUFamilyApple5, MTLGPUFamilyApple6,
                                                MTLGPUFamilyApple7, MTLGPUFamilyApple8, MTLGPUFamilyApple9};
  int highest = 0;
  for (int n = 1; n <= 9; ++n)
    if ([device supportsFamily:kAppleFamilies[n - 1]]) highest = n;
  return highest;
}

// metalrt.metallib is installed beside the extension module this code is linked into.
std::string DefaultLibraryPath() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<const void*>(&DefaultLibraryPath), &info) || !info.dli_fname)
    throw std::runtime_error("[metal device] cannot locate the metalrt binary to find metalrt.metallib");
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/metalrt.metallib";
}

class MetalDevice : public gpu::GpuDevice {
 public:
  explicit MetalDevice(id<MTLDevice> device) : device_(device), queue_([device newCommandQueue]) {
    if (!queue_) throw std::runtime_error("[metal device] newCommandQueue failed");
  }

  std::string name() const override {
    @autoreleasepool {
      return ToString([device_ name]);
    }
  }
  bool is_simulated() const override { return false; }
  bool has_unified_memory() const override { return [device_ hasUnifiedMemory]; }

  std::string gpu_family() const override {
    if (const int apple = HighestAppleFamily(device_)) return "apple" + std::to_string(apple);
    return [device_ supportsFamily:MTLGPUFamilyMac2] ? "mac2" : "unknown";
  }

  size_t max_threadgroup_memory_length() const override { return [device_ maxThreadgroupMemoryLength]; }
  size_t max_buffer_length() const override { return [device_ maxBufferLength]; }

  std::shared_ptr<gpu::GpuBuffer> new_buffer(size_t length) override {
    if (length == 0) return std::make_shared<EmptyBuffer>();
    gpu::CheckBufferLength(*this, length, "[metal alloc]");
    id<MTLBuffer> buffer = [device_ newBufferWithLength:length options:MTLResourceStorageModeShared];
    if (!buffer) throw std::runtime_error("[metal alloc] newBufferWithLength failed for " + std::to_string(length) + " bytes");
    // Shared buffers are zeroed by Metal in practice but not by contract; the
    // interface promises zeros.
    std::memset([buffer contents], 0, length);
    WarnAboveWorkingSet();
    return std::make_shared<MetalBuffer>(buffer);
  }

  std::shared_ptr<gpu::GpuBuffer> new_buffer_no_copy(void* pointer, size_t length,
                                                     std::function<void()> deallocator) override {
    if (![device_ hasUnifiedMemory])
      throw std::invalid_argument("[new_buffer_no_copy] " + name() + " has no unified memory");
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    if (!pointer || reinterpret_cast<uintptr_t>(pointer) % page != 0 || length % page != 0)
      throw std::invalid_argument("[new_buffer_no_copy] memory and length must be page-aligned (" +
                                  std::to_string(page) + " bytes)");
    gpu::CheckBufferLength(*this, length, "[new_buffer_no_copy]");
    // The deallocator runs on whichever thread drops the buffer's last reference,
    // often Metal's completion queue: it must be thread-safe.
    id<MTLBuffer> buffer = [device_ newBufferWithBytesNoCopy:pointer
                                                      length:length
                                                     options:MTLResourceStorageModeShared
                                                 deallocator:^(void*, NSUInteger) {
                                                   if (deallocator) deallocator();
                                                 }];
    if (!buffer) throw std::runtime_error("[new_buffer_no_copy] newBufferWithBytesNoCopy failed");
    WarnAboveWorkingSet();
    return std::make_shared<MetalBuffer>(buffer);
  }

  // metalrt.metallib beside the binary when the build had Apple's Metal compiler;
  // else the embedded kernel sources, each file compiled on the first use of one of
  // its kernels (gpu/embedded_library.h, cpp/metal/metal.cmake).
  gpu::GpuLibrary& default_library() override {
    @autoreleasepool {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!default_library_) {
        const std::string path = DefaultLibraryPath();
        if (access(path.c_str(), R_OK) == 0) {
          NSError* error = nil;
          id<MTLLibrary> library = [device_ newLibraryWithURL:[NSURL fileURLWithPath:ToNSString(path)]
                                                        error:&error];
          if (!library)
            throw std::runtime_error("[metal device] cannot load " + path + ": " + Describe(error));
          default_library_ = std::make_unique<MetalLibrary>(device_, std::vector<id<MTLLibrary>>{library});
          default_library_origin_ = "metallib at " + path;
        } else {
          embedded_library_ = std::make_unique<gpu::EmbeddedLibrary>(
              EmbeddedKernelSources(), EmbeddedKernelFiles(), [this](const EmbeddedKernelSource& kernel) {
                @autoreleasepool {
                  id<MTLLibrary> library = CompileSource(kernel.source, "[metal device] " + kernel.file);
                  return std::shared_ptr<gpu::GpuLibrary>(
                      std::make_shared<MetalLibrary>(device_, std::vector<id<MTLLibrary>>{library}));
                }
              });
          default_library_origin_ = "compiled at run time from embedded sources, each file on the first use "
                                    "of its kernels (no metalrt.metallib at " + path + "): ";
        }
      }
      return default_library_ ? static_cast<gpu::GpuLibrary&>(*default_library_) : *embedded_library_;
    }
  }

  std::string default_library_origin() override {
    default_library();
    std::lock_guard<std::mutex> lock(mutex_);
    return default_library_origin_ + (embedded_library_ ? embedded_library_->summary() : std::string());
  }

  std::shared_ptr<gpu::GpuLibrary> compile_library(const std::string& source) override {
    @autoreleasepool {
      id<MTLLibrary> library = CompileSource(source, "[compile_library]");
      return std::make_shared<MetalLibrary>(device_, std::vector<id<MTLLibrary>>{library});
    }
  }

  std::unique_ptr<gpu::GpuCommandBuffer> new_command_buffer() override {
    @autoreleasepool {   // the command buffer is autoreleased; MetalCommandBuffer keeps it
      id<MTLCommandBuffer> command_buffer = [queue_ commandBuffer];
      if (!command_buffer) throw std::runtime_error("[metal device] commandBuffer failed");
      return std::make_unique<MetalCommandBuffer>(command_buffer);
    }
  }

 private:
  // Past the working set Metal recommends, the GPU pages memory in and out: slow, not
  // an error, so said once per process.
  void WarnAboveWorkingSet() {
    if (warned_working_set_.load()) return;
    const uint64_t allocated = [device_ currentAllocatedSize];
    const uint64_t recommended = [device_ recommendedMaxWorkingSetSize];
    if (recommended == 0 || allocated <= recommended || warned_working_set_.exchange(true)) return;
    std::fprintf(stderr,
                 "metalrt: warning: %llu bytes of Metal buffers exceed %s's recommendedMaxWorkingSetSize "
                 "(%llu bytes); the GPU will page memory in and out\n",
                 static_cast<unsigned long long>(allocated), name().c_str(),
                 static_cast<unsigned long long>(recommended));
  }

  // The metallib's language version and safe math with precise functions
  // (metal_compile_options.h). Called inside a pool.
  id<MTLLibrary> CompileSource(const std::string& source, const std::string& context) {
    const MetalCompileOptions wanted = RuntimeCompileOptions();
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    [options setLanguageVersion:static_cast<MTLLanguageVersion>(wanted.mtl_language_version())];
    bool math_set = false;
#if METALRT_SDK_HAS_MATH_MODE
    if (@available(macOS 15.0, *)) {
      const MetalMathSettings math = MathSettings(wanted);
      [options setMathMode:static_cast<MTLMathMode>(math.math_mode)];
      [options setMathFloatingPointFunctions:static_cast<MTLMathFloatingPointFunctions>(
                                                 math.floating_point_functions)];
      math_set = true;
    }
#endif
    // macOS 14 (or the macOS 14 SDK): one switch for both mode and functions.
    if (!math_set) [options setFastMathEnabled:wanted.fast_math ? YES : NO];
    NSError* error = nil;
    id<MTLLibrary> library = [device_ newLibraryWithSource:ToNSString(source) options:options error:&error];
    if (!library) throw std::runtime_error(context + ": " + Describe(error));
    return library;
  }

  id<MTLDevice> device_;
  id<MTLCommandQueue> queue_;
  std::mutex mutex_;
  std::unique_ptr<MetalLibrary> default_library_;            // the metallib, or
  std::unique_ptr<gpu::EmbeddedLibrary> embedded_library_;   // the embedded sources
  std::string default_library_origin_;
  std::atomic<bool> warned_working_set_{false};
};

gpu::NativeGpuCapabilities Capabilities(id<MTLDevice> device) {
  @autoreleasepool {
    gpu::NativeGpuCapabilities caps;
    caps.name = ToString([device name]);
    caps.apple_family = HighestAppleFamily(device);
    const NSOperatingSystemVersion os = [[NSProcessInfo processInfo] operatingSystemVersion];
    caps.os_major = static_cast<int>(os.majorVersion);
    caps.os_minor = static_cast<int>(os.minorVersion);
    caps.unified_memory = [device hasUnifiedMemory];
    return caps;
  }
}

// nullptr, saying why, where there is no GPU the kernels can run on: none, a macOS
// VM's "Apple Paravirtual device" (apple5), Intel/AMD GPUs, macOS 13
// (gpu::NativeGpuRefusal). Selection then falls back to the sim.
std::unique_ptr<gpu::GpuDevice> CreateMetalDevice(std::string& unavailable) {
  @autoreleasepool {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    if (!device) {
      unavailable = "MTLCreateSystemDefaultDevice returned nil (no Metal GPU)";
      return nullptr;
    }
    unavailable = gpu::NativeGpuRefusal(Capabilities(device));
    if (!unavailable.empty()) return nullptr;
    return std::make_unique<MetalDevice>(device);
  }
}

gpu::GpuDeviceRegistrar registrar(gpu::GpuDeviceKind::kNative, &CreateMetalDevice);

}  // namespace
}  // namespace metalrt::metal
