// metalrt/diagnostics.h: the Metal backend's part.
#include "metalrt/diagnostics.h"

#include <algorithm>
#include <stdexcept>

#include "gpu/metal_backend.h"

namespace metalrt {

MetalLimits GetMetalLimits() {
  gpu::GpuDevice& device = gpu::ActiveMetalBackend().device();
  // Metal reports the thread limit per pipeline: that of a kernel with no threadgroup
  // memory is the device's.
  gpu::GpuPipeline& pipeline = device.default_library().pipeline("add_f32");
  MetalLimits limits;
  limits.max_threadgroup_memory_bytes = device.max_threadgroup_memory_length();
  limits.max_threads_per_threadgroup = pipeline.max_total_threads_per_threadgroup();
  limits.simd_width = pipeline.thread_execution_width();
  return limits;
}

MetalLibraryInfo GetMetalLibraryInfo() {
  gpu::MetalBackend& backend = gpu::ActiveMetalBackend();
  MetalLibraryInfo info;
  info.device = backend.name();
  info.selection = backend.selection();
  info.library = backend.device().default_library_origin();
  info.kernels = backend.device().default_library().function_names();
  std::sort(info.kernels.begin(), info.kernels.end());
  return info;
}

std::string MetalPrefillAttentionDecline() { return gpu::ActiveMetalBackend().simdgroup_layout().Mismatch(); }

void SetMetalAssumedSimdgroupLayoutForTesting(const std::optional<std::vector<int>>& element) {
  if (!element) return gpu::SetAssumedSimdgroupLayoutForTesting(std::nullopt);
  gpu::SimdgroupLayout layout{};
  if (element->size() != layout.size())
    throw std::invalid_argument("[simdgroup_layout_probe] a layout has 64 elements, got " +
                                std::to_string(element->size()));
  for (size_t i = 0; i < layout.size(); ++i) {
    if ((*element)[i] < 0 || (*element)[i] > 63)
      throw std::invalid_argument("[simdgroup_layout_probe] element indices are 0..63, got " +
                                  std::to_string((*element)[i]));
    layout[i] = static_cast<uint8_t>((*element)[i]);
  }
  gpu::SetAssumedSimdgroupLayoutForTesting(layout);
}

}  // namespace metalrt
