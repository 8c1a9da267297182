#include "gpu/simdgroup_layout_probe.h"

#include <cmath>
#include <stdexcept>

#include "simdgroup_layout.h"

namespace metalrt::gpu {
namespace {

constexpr const char* kProbe = "simdgroup_layout_probe";

std::mutex assumed_mutex;
std::optional<SimdgroupLayout> assumed_override;

// The element index a probe value names, or kUnknownElement.
uint8_t ElementIndex(float value) {
  return value >= 0.0f && value < 64.0f && value == std::floor(value) ? static_cast<uint8_t>(value)
                                                                       : kUnknownElement;
}

std::string Slot(uint8_t element) {
  if (element == kUnknownElement) return "no element of the matrix";
  return "(row " + std::to_string(element / 8) + ", column " + std::to_string(element % 8) + ")";
}

}  // namespace

SimdgroupLayout AssumedSimdgroupLayout() {
  SimdgroupLayout layout{};
  for (uint32_t lane = 0; lane < 32; ++lane)
    for (uint32_t e = 0; e < 2; ++e)
      layout[2 * lane + e] =
          static_cast<uint8_t>(8 * SimdgroupElementRow(lane) + SimdgroupElementColumn(lane) + e);
  return layout;
}

ProbedSimdgroupLayout ProbeSimdgroupLayout(GpuDevice& device) {
  std::shared_ptr<GpuBuffer> out = device.new_buffer(128 * sizeof(float));
  std::unique_ptr<GpuCommandBuffer> command_buffer = device.new_command_buffer();
  GpuComputeEncoder& encoder = command_buffer->compute_encoder();
  encoder.set_pipeline(device.default_library().pipeline(kProbe));
  encoder.set_buffer(*out, 0, 0);
  encoder.dispatch_threadgroups({1, 1, 1}, {32, 1, 1});
  encoder.end_encoding();
  command_buffer->commit();
  command_buffer->wait_until_completed();
  if (command_buffer->status() == GpuCommandBuffer::Status::kError)
    throw std::runtime_error(std::string("[") + kProbe + "] the probe kernel failed: " + command_buffer->error());
  const auto* values = static_cast<const float*>(out->contents());
  ProbedSimdgroupLayout probed;
  probed.stored.fill(kUnknownElement);
  for (uint8_t i = 0; i < 64; ++i) {
    probed.loaded[i] = ElementIndex(values[i]);
    // values[64 + m] names the lane element that simdgroup_store wrote to element m.
    const uint8_t slot = ElementIndex(values[64 + i]);
    if (slot != kUnknownElement) probed.stored[slot] = i;
  }
  return probed;
}

std::string SimdgroupLayoutMismatch(const ProbedSimdgroupLayout& probed, const SimdgroupLayout& assumed) {
  const struct {
    const SimdgroupLayout& layout;
    const char* how;
  } directions[] = {{probed.loaded, "after simdgroup_load"}, {probed.stored, "for simdgroup_store"}};
  for (const auto& d : directions)
    for (size_t i = 0; i < assumed.size(); ++i)
      if (d.layout[i] != assumed[i])
        return "the device's 8x8 simdgroup_matrix lane layout differs from the prefill kernel's: lane " +
               std::to_string(i / 2) + " element " + std::to_string(i % 2) + " holds " + Slot(d.layout[i]) +
               " " + d.how + ", the kernel assumes " + Slot(assumed[i]) + " (metal/simdgroup_layout.h)";
  return "";
}

std::string SimdgroupLayoutCheck::Mismatch() {
  std::call_once(once_, [this] {
    try {
      probed_ = ProbeSimdgroupLayout(device_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
  if (!probed_) return "the thread_elements() layout probe failed: " + error_;
  std::lock_guard<std::mutex> lock(assumed_mutex);
  return SimdgroupLayoutMismatch(*probed_, assumed_override ? *assumed_override : AssumedSimdgroupLayout());
}

void SetAssumedSimdgroupLayoutForTesting(std::optional<SimdgroupLayout> layout) {
  std::lock_guard<std::mutex> lock(assumed_mutex);
  assumed_override = layout;
}

}  // namespace metalrt::gpu
