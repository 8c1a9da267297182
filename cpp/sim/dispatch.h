// One encoded dispatch, frozen at encode time: the kernel, its bindings, the grid
// and the function-constant values of its pipeline.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/gpu_device.h"
#include "shim/sim_module.h"

namespace metalrt::sim {

// A function-constant value to write into a module before the kernel runs.
struct ConstantValue {
  const FunctionConstantInfo* slot;
  std::array<uint8_t, 4> bytes;
  bool defined;
};

struct Dispatch {
  const KernelInfo* kernel = nullptr;
  const ModuleInfo* module = nullptr;
  const std::vector<ConstantValue>* constants = nullptr;   // owned by the pipeline
  std::array<void*, kMaxBufferBindings> buffers{};
  std::array<size_t, kMaxThreadgroupBindings> threadgroup_lengths{};
  gpu::Size3 threadgroups;        // groups in the grid
  gpu::Size3 group_size;          // threads per full group
  gpu::Size3 grid_threads;        // threads in the grid (edge groups may be partial)
};

}  // namespace metalrt::sim
