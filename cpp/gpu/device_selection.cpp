#include "gpu/device_selection.h"

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {
namespace {

constexpr int kMinAppleFamily = 7;
constexpr int kMinMacOSMajor = 14;

struct Factories {
  std::mutex mutex;
  GpuDeviceFactory native = nullptr;
  GpuDeviceFactory sim = nullptr;
};

Factories& TheFactories() {
  static Factories factories;
  return factories;
}

std::unique_ptr<GpuDevice> Create(GpuDeviceFactory factory, const char* missing, std::string& unavailable) {
  if (!factory) {
    unavailable = missing;
    return nullptr;
  }
  return factory(unavailable);
}

}  // namespace

std::string NativeGpuRefusal(const NativeGpuCapabilities& caps) {
  const std::string device = "'" + caps.name + "'";
  if (caps.apple_family < kMinAppleFamily) {
    const std::string family = caps.apple_family > 0 ? "GPU family apple" + std::to_string(caps.apple_family)
                                                     : std::string("not an Apple GPU family");
    return device + " is " + family +
           "; the kernels need apple7 or later (32-wide SIMD-group reductions and matrices, bfloat)";
  }
  if (caps.os_major < kMinMacOSMajor)
    return device + " runs macOS " + std::to_string(caps.os_major) + "." + std::to_string(caps.os_minor) +
           "; the kernels need macOS 14.0 or later (Metal Shading Language 3.1)";
  if (!caps.unified_memory) return device + " has no unified memory; every metalrt buffer is shared storage";
  return "";
}

void RegisterGpuDeviceFactory(GpuDeviceKind kind, GpuDeviceFactory factory) {
  Factories& f = TheFactories();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    (kind == GpuDeviceKind::kNative ? f.native : f.sim) = factory;
  }
  RegisterMetalBackend();
}

std::unique_ptr<GpuDevice> SelectGpuDevice(std::string* selection) {
  GpuDeviceFactory native, sim;
  {
    Factories& f = TheFactories();
    std::lock_guard<std::mutex> lock(f.mutex);
    native = f.native;
    sim = f.sim;
  }
  constexpr const char* kNoNative = "metalrt was built without the Metal.framework device (not on macOS)";
  constexpr const char* kNoSim = "the simulated Metal device is not built in";
  const char* env = std::getenv("METALRT_METAL");
  const std::string choice = env ? env : "";
  std::string native_unavailable, sim_unavailable, account;
  std::unique_ptr<GpuDevice> device;
  if (choice == "native") {
    device = Create(native, kNoNative, native_unavailable);
    if (!device)
      throw std::runtime_error("METALRT_METAL=native but no usable Apple GPU: " + native_unavailable +
                               "; use METALRT_METAL=sim");
    account = "native (METALRT_METAL=native): " + device->name();
  } else if (choice == "sim") {
    device = Create(sim, kNoSim, sim_unavailable);
    if (!device) throw std::runtime_error("METALRT_METAL=sim but " + sim_unavailable);
    account = "sim (METALRT_METAL=sim)";
  } else if (choice.empty()) {
    device = Create(native, kNoNative, native_unavailable);
    if (device) {
      account = "native: " + device->name();
    } else {
      device = Create(sim, kNoSim, sim_unavailable);
      if (!device)
        throw std::runtime_error("no Metal device: " + native_unavailable + ", and " + sim_unavailable);
      account = "sim: native unavailable: " + native_unavailable;
    }
  } else {
    throw std::invalid_argument("METALRT_METAL must be 'native' or 'sim', got '" + choice + "'");
  }
  if (selection) *selection = account;
  return device;
}

}  // namespace metalrt::gpu
