// Makes the simulated device available to the kMETAL backend (gpu/device_selection.h).
#include "gpu/device_selection.h"
#include "sim/sim_device.h"

namespace {
metalrt::gpu::GpuDeviceRegistrar registrar(metalrt::gpu::GpuDeviceKind::kSim,
                                           &metalrt::sim::CreateSimDevice);
}  // namespace
