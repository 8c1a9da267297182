// Until the simulated device lands, the test binary's kMETAL backend runs on the
// fake device (with the test kernels of fake_metal.h).
#include "fake_metal.h"
#include "gpu/device_selection.h"

namespace {
std::unique_ptr<metalrt::gpu::GpuDevice> MakeFakeDevice() {
  auto device = std::make_unique<metalrt::testing::FakeGpuDevice>();
  metalrt::testing::AddTestKernels(device->library);
  return device;
}
metalrt::gpu::GpuDeviceRegistrar registrar(metalrt::gpu::GpuDeviceKind::kSim, &MakeFakeDevice);
}  // namespace
