// Until the simulated device lands, the test binary's kMETAL backend runs on the
// fake device (with the twins of the test kernels).
#include "metal_fixture.h"

namespace {
metalrt::gpu::GpuDeviceRegistrar registrar(metalrt::gpu::GpuDeviceKind::kSim,
                                           &metalrt::testing::NewFakeDevice);
}  // namespace
