// The lane layout of an 8x8 SIMD-group matrix's thread_elements() that the prefill
// attention kernel (metal/paged_attention.metal) assumes, shared with the host's
// one-time probe of the device (cpp/gpu/simdgroup_layout_probe.cpp), which declines
// that kernel on a device that lays the elements out otherwise. MSL leaves the layout
// unspecified (MSL 3.1 §6.7); this is Apple GPUs' to date, the one MLX's MMA fragments
// (BaseMMAFrag::get_coord) rely on too: lane l (bits l0..l4) holds row
// 4*l4 + 2*l2 + l1, columns 4*l3 + 2*l0 and the next one.
#ifndef METALRT_METAL_SIMDGROUP_LAYOUT_H_
#define METALRT_METAL_SIMDGROUP_LAYOUT_H_
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// The row of lane `lane`'s two elements.
inline int32_t SimdgroupElementRow(uint32_t lane) {
  return int32_t(4 * ((lane >> 4) & 1) + 2 * ((lane >> 2) & 1) + ((lane >> 1) & 1));
}
// The first of the lane's two adjacent columns.
inline int32_t SimdgroupElementColumn(uint32_t lane) { return int32_t(4 * ((lane >> 3) & 1) + 2 * (lane & 1)); }

#endif  // METALRT_METAL_SIMDGROUP_LAYOUT_H_
