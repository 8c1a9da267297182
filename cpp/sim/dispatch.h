// One encoded dispatch, frozen at encode time: the kernel, its bindings, the grid
// and the function-constant values of its pipeline; and what a command buffer keeps
// of its encoding (EncodedCommands).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
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

// What a command buffer's encoder keeps: the dispatches, the set_bytes copies and the
// buffers retained until completion. The queue hands the lists of completed command
// buffers to new ones, so encoding allocates nothing once they reached a step's sizes.
struct EncodedCommands {
  // Lists sized for a command buffer of the command stream's default cap of dispatches
  // (48, about ten buffers each), so that recycled lists rarely grow.
  EncodedCommands();
  EncodedCommands(EncodedCommands&&) = default;
  EncodedCommands& operator=(EncodedCommands&&) = default;

  // Copies `length` bytes, followed by 16 zero bytes (the slack set_bytes copies
  // always had), to 16-byte aligned memory that stays put until Clear().
  unsigned char* CopyBytes(const void* data, size_t length);
  void Clear();   // keeps the capacity

  std::vector<Dispatch> dispatches;
  std::vector<std::shared_ptr<const void>> retained;

 private:
  static constexpr size_t kChunkBytes = 64 * 1024;   // > any set_bytes copy (4 KiB)
  std::vector<std::unique_ptr<unsigned char[]>> chunks_;
  size_t chunk_ = 0, offset_ = 0;   // where the next copy goes
};

}  // namespace metalrt::sim
