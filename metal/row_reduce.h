// Threadgroup-wide f32 reductions for the row kernels (one threadgroup per row): a
// SIMD-group reduction, then every thread combines the SIMD-groups' partials in index
// order, so all threads get the same result with a single barrier. Each reduction of a
// kernel takes its own `partials` array (kRowSimdgroups floats), so no second barrier
// is needed before the next one.
#ifndef METALRT_METAL_ROW_REDUCE_H_
#define METALRT_METAL_ROW_REDUCE_H_
#include <metal_stdlib>
#include "row_args.h"
using namespace metal;

inline float threadgroup_sum(float value, threadgroup float* partials, uint simdgroup, uint lane) {
  value = simd_sum(value);
  if (lane == 0) partials[simdgroup] = value;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (int32_t s = 0; s < kRowSimdgroups; ++s) total += partials[s];
  return total;
}

// The maximum, NaN ignored (the comparison is false for NaN); -INFINITY when empty.
inline float threadgroup_max(float value, threadgroup float* partials, uint simdgroup, uint lane) {
  value = simd_max(value);
  if (lane == 0) partials[simdgroup] = value;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float result = -INFINITY;
  for (int32_t s = 0; s < kRowSimdgroups; ++s) result = partials[s] > result ? partials[s] : result;
  return result;
}

#endif  // METALRT_METAL_ROW_REDUCE_H_
