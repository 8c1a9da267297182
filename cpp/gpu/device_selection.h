// Which GpuDevice the kMETAL backend runs on.
//
// Each GpuDevice implementation registers a factory at static-initialisation time:
// cpp/metal (the Apple GPU; compiled on Apple platforms only) as kNative, cpp/sim as
// kSim. Registering the first factory also registers the kMETAL backend, so
// HasBackend(DeviceType::kMETAL) is true exactly when some device is linked in.
// The device itself is created lazily, on the first GetBackend(kMETAL).
#pragma once
#include <memory>
#include <string>

#include "gpu/gpu_device.h"

namespace metalrt::gpu {

enum class GpuDeviceKind : uint8_t { kNative, kSim };
// Returns nullptr when no such device exists here, and then says why in
// `unavailable` (e.g. "GPU family apple5 is below apple7" in a macOS VM).
using GpuDeviceFactory = std::unique_ptr<GpuDevice> (*)(std::string& unavailable);

void RegisterGpuDeviceFactory(GpuDeviceKind kind, GpuDeviceFactory factory);

// What a native GPU reports about itself, the input of NativeGpuRefusal.
struct NativeGpuCapabilities {
  std::string name;          // MTLDevice.name, e.g. "Apple M2 Pro", "Apple Paravirtual device"
  int apple_family = 0;      // highest N with supportsFamily:MTLGPUFamilyAppleN; 0 for none (Intel, AMD)
  int os_major = 0;          // macOS version (NSProcessInfo.operatingSystemVersion)
  int os_minor = 0;
  bool unified_memory = false;
};

// The project's kernels need SIMD-group reductions and matrices with 32 lanes and
// bfloat: MTLGPUFamilyApple7 or later (Metal feature set tables), MSL 3.1 (macOS 14,
// the language version the kernels are compiled for) and unified memory (every
// buffer is shared storage). Returns "" when `caps` meets all three, else why not,
// naming the device. A pure function, so the rule is gated without a Mac.
std::string NativeGpuRefusal(const NativeGpuCapabilities& caps);

// The device for kMETAL: METALRT_METAL=native|sim forces one (std::runtime_error when
// it is unavailable, saying why; std::invalid_argument for another value); unset, the
// Apple GPU where one can run the kernels, else the simulated device. `selection`,
// when given, receives a one-line account of the choice ("native: ..." or
// "sim: native unavailable: ...").
std::unique_ptr<GpuDevice> SelectGpuDevice(std::string* selection = nullptr);

struct GpuDeviceRegistrar {
  GpuDeviceRegistrar(GpuDeviceKind kind, GpuDeviceFactory factory) {
    RegisterGpuDeviceFactory(kind, factory);
  }
};

}  // namespace metalrt::gpu
