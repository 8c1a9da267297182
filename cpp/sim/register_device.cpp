// Makes the simulated device available to the kMETAL backend (gpu/device_selection.h).
#include "gpu/device_selection.h"
#include "sim/sim_device.h"

namespace {
// The simulated device exists wherever it is built in.
std::unique_ptr<metalrt::gpu::GpuDevice> CreateSim(std::string&) { return metalrt::sim::CreateSimDevice(); }

metalrt::gpu::GpuDeviceRegistrar registrar(metalrt::gpu::GpuDeviceKind::kSim, &CreateSim);
}  // namespace
