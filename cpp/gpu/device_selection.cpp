#include "gpu/device_selection.h"

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {
namespace {

struct Factories {
  std::mutex mutex;
  GpuDeviceFactory native = nullptr;
  GpuDeviceFactory sim = nullptr;
};

Factories& TheFactories() {
  static Factories factories;
  return factories;
}

std::unique_ptr<GpuDevice> Create(GpuDeviceFactory factory) {
  return factory ? factory() : nullptr;
}

}  // namespace

void RegisterGpuDeviceFactory(GpuDeviceKind kind, GpuDeviceFactory factory) {
  Factories& f = TheFactories();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    (kind == GpuDeviceKind::kNative ? f.native : f.sim) = factory;
  }
  RegisterMetalBackend();
}

std::unique_ptr<GpuDevice> SelectGpuDevice() {
  GpuDeviceFactory native, sim;
  {
    Factories& f = TheFactories();
    std::lock_guard<std::mutex> lock(f.mutex);
    native = f.native;
    sim = f.sim;
  }
  const char* env = std::getenv("METALRT_METAL");
  const std::string choice = env ? env : "";
  std::unique_ptr<GpuDevice> device;
  if (choice == "native") {
    device = Create(native);
    if (!device)
      throw std::runtime_error(
          "METALRT_METAL=native but no Apple GPU is available here (metalrt was built " +
          std::string(native ? "with" : "without") + " the Metal.framework device); use METALRT_METAL=sim");
  } else if (choice == "sim") {
    device = Create(sim);
    if (!device) throw std::runtime_error("METALRT_METAL=sim but the simulated Metal device is not built in");
  } else if (choice.empty()) {
    device = Create(native);
    if (!device) device = Create(sim);
    if (!device) throw std::runtime_error("no Metal device: no Apple GPU and no simulated device");
  } else {
    throw std::invalid_argument("METALRT_METAL must be 'native' or 'sim', got '" + choice + "'");
  }
  return device;
}

}  // namespace metalrt::gpu
