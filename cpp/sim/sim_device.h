// The simulated Metal device: a GpuDevice that runs the MSL kernels (compiled as
// C++ through the shim in metal/shim) on the CPU, with Metal's execution model
// (threadgroups, 32-wide SIMD-groups, barriers, threadgroup memory, asynchronous
// in-order command buffers). See docs/simulated-device.md.
#pragma once
#include <memory>

#include "gpu/gpu_device.h"
#include "sim/fiber_order.h"

namespace metalrt::sim {

// A new simulated device with its own queue thread and METALRT_SIM_THREADS
// workers (default: the hardware threads). Its name says it is simulated.
std::unique_ptr<gpu::GpuDevice> CreateSimDevice();

}  // namespace metalrt::sim
