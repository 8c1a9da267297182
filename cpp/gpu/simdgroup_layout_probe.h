// The one-time probe of a device's 8x8 SIMD-group matrix lane layout
// (thread_elements()), which MSL leaves unspecified and the prefill attention kernel
// assumes (metal/simdgroup_layout.h). The kernel metal/simdgroup_layout_probe.metal
// reports the layout in both directions, simdgroup_load and simdgroup_store; a device
// that differs in either has the prefill kernel declined (cpp/gpu/paged_attention.cpp),
// so the reference tier serves, and `metalrt doctor` says why.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "gpu/gpu_device.h"

namespace metalrt::gpu {

// For element e of lane l, at index 2l + e: the index 8 * row + column of the matrix
// element it holds; kUnknownElement where the probe read no such index.
using SimdgroupLayout = std::array<uint8_t, 64>;
inline constexpr uint8_t kUnknownElement = 0xff;

// The layout the prefill attention kernel assumes (metal/simdgroup_layout.h).
SimdgroupLayout AssumedSimdgroupLayout();

struct ProbedSimdgroupLayout {
  SimdgroupLayout loaded{};   // after simdgroup_load
  SimdgroupLayout stored{};   // as simdgroup_store wrote it
};

// Runs simdgroup_layout_probe on `device` (one command buffer, waited for). Throws
// std::runtime_error "[simdgroup_layout_probe] ..." when the kernel fails.
ProbedSimdgroupLayout ProbeSimdgroupLayout(GpuDevice& device);

// "" when `probed` is `assumed` in both directions, else the first difference, as the
// reason the prefill kernel is declined.
std::string SimdgroupLayoutMismatch(const ProbedSimdgroupLayout& probed, const SimdgroupLayout& assumed);

// One device's probe, run at the first call of Mismatch (thread-safe).
class SimdgroupLayoutCheck {
 public:
  explicit SimdgroupLayoutCheck(GpuDevice& device) : device_(device) {}
  // "" when the device lays the matrix out as the prefill kernel assumes (or as the
  // test hook below says it does), else why it is declined: the difference, or the
  // probe's error.
  std::string Mismatch();

 private:
  GpuDevice& device_;
  std::once_flag once_;
  std::optional<ProbedSimdgroupLayout> probed_;
  std::string error_;
};

// Test hook: the layout every check compares its probe with, in place of
// AssumedSimdgroupLayout(); nullopt restores that.
void SetAssumedSimdgroupLayoutForTesting(std::optional<SimdgroupLayout> layout);

}  // namespace metalrt::gpu
