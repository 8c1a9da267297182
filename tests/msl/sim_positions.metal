// Every position/size attribute, written out per thread, in the uint3 and the
// narrower (uint2, ushort, uint) forms. One record of 24 uints per thread of the
// grid, at the thread's linear grid index.
#include <metal_stdlib>
using namespace metal;

kernel void positions_uint3(device uint* out [[buffer(0)]],
                            uint3 tpig [[thread_position_in_grid]],
                            uint3 tgpig [[threadgroup_position_in_grid]],
                            uint3 tptg [[thread_position_in_threadgroup]],
                            uint3 tptg_size [[threads_per_threadgroup]],
                            uint3 tgpg [[threadgroups_per_grid]],
                            uint3 tpg [[threads_per_grid]],
                            uint tiitg [[thread_index_in_threadgroup]],
                            uint tiisg [[thread_index_in_simdgroup]],
                            uint sgitg [[simdgroup_index_in_threadgroup]],
                            uint sgptg [[simdgroups_per_threadgroup]],
                            uint width [[thread_execution_width]],
                            uint simd_size [[threads_per_simdgroup]]) {
  device uint* r = out + 24 * ((tpig.z * tpg.y + tpig.y) * tpg.x + tpig.x);
  r[0] = tpig.x;  r[1] = tpig.y;  r[2] = tpig.z;
  r[3] = tgpig.x; r[4] = tgpig.y; r[5] = tgpig.z;
  r[6] = tptg.x;  r[7] = tptg.y;  r[8] = tptg.z;
  r[9] = tptg_size.x; r[10] = tptg_size.y; r[11] = tptg_size.z;
  r[12] = tgpg.x; r[13] = tgpg.y; r[14] = tgpg.z;
  r[15] = tpg.x;  r[16] = tpg.y;  r[17] = tpg.z;
  r[18] = tiitg; r[19] = tiisg; r[20] = sgitg; r[21] = sgptg;
  r[22] = width; r[23] = simd_size;
}

// A 2-D grid with the short forms: the record holds the same fields, z as 0.
kernel void positions_short(device uint* out [[buffer(0)]],
                            uint2 tpig [[thread_position_in_grid]],
                            ushort2 tgpig [[threadgroup_position_in_grid]],
                            ushort2 tptg [[thread_position_in_threadgroup]],
                            ushort2 tptg_size [[threads_per_threadgroup]],
                            uint2 tgpg [[threadgroups_per_grid]],
                            uint2 tpg [[threads_per_grid]],
                            ushort tiitg [[thread_index_in_threadgroup]],
                            ushort tiisg [[thread_index_in_simdgroup]],
                            ushort sgitg [[simdgroup_index_in_threadgroup]],
                            ushort sgptg [[simdgroups_per_threadgroup]],
                            ushort width [[thread_execution_width]],
                            ushort simd_size [[threads_per_simdgroup]]) {
  device uint* r = out + 24 * (tpig.y * tpg.x + tpig.x);
  r[0] = tpig.x;  r[1] = tpig.y;  r[2] = 0;
  r[3] = tgpig.x; r[4] = tgpig.y; r[5] = 0;
  r[6] = tptg.x;  r[7] = tptg.y;  r[8] = 0;
  r[9] = tptg_size.x; r[10] = tptg_size.y; r[11] = 0;
  r[12] = tgpg.x; r[13] = tgpg.y; r[14] = 0;
  r[15] = tpg.x;  r[16] = tpg.y;  r[17] = 0;
  r[18] = tiitg; r[19] = tiisg; r[20] = sgitg; r[21] = sgptg;
  r[22] = width; r[23] = simd_size;
}

// A 1-D grid with scalar uint positions.
kernel void positions_scalar(device uint* out [[buffer(0)]],
                             uint tpig [[thread_position_in_grid]],
                             uint tgpig [[threadgroup_position_in_grid]],
                             uint tptg [[thread_position_in_threadgroup]],
                             uint tptg_size [[threads_per_threadgroup]],
                             uint tgpg [[threadgroups_per_grid]],
                             uint tpg [[threads_per_grid]]) {
  device uint* r = out + 6 * tpig;
  r[0] = tpig; r[1] = tgpig; r[2] = tptg; r[3] = tptg_size; r[4] = tgpg; r[5] = tpg;
}
