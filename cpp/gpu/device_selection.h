// Which GpuDevice the kMETAL backend runs on.
//
// Each GpuDevice implementation registers a factory at static-initialisation time:
// cpp/metal (the Apple GPU; compiled on Apple platforms only) as kNative, cpp/sim as
// kSim. Registering the first factory also registers the kMETAL backend, so
// HasBackend(DeviceType::kMETAL) is true exactly when some device is linked in.
// The device itself is created lazily, on the first GetBackend(kMETAL).
#pragma once
#include <memory>

#include "gpu/gpu_device.h"

namespace metalrt::gpu {

enum class GpuDeviceKind : uint8_t { kNative, kSim };
// Returns nullptr when no such device exists here (e.g. no Apple GPU in a macOS VM).
using GpuDeviceFactory = std::unique_ptr<GpuDevice> (*)();

void RegisterGpuDeviceFactory(GpuDeviceKind kind, GpuDeviceFactory factory);

// The device for kMETAL: METALRT_METAL=native|sim forces one (std::runtime_error when
// it is unavailable, std::invalid_argument for another value); unset, the Apple GPU
// where one exists, else the simulated device.
std::unique_ptr<GpuDevice> SelectGpuDevice();

struct GpuDeviceRegistrar {
  GpuDeviceRegistrar(GpuDeviceKind kind, GpuDeviceFactory factory) {
    RegisterGpuDeviceFactory(kind, factory);
  }
};

}  // namespace metalrt::gpu
