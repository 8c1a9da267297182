// K split across SIMD-groups, shared by the float GEMV (matmul_gemv.h) and the
// quantized GEMV (quantized_gemv.h): `splits` consecutive SIMD-groups of a threadgroup
// share one block of weight rows, part p of them taking every splits-th stretch of K,
// and their simd_sum'd partial sums meet in threadgroup memory.
#ifndef METALRT_METAL_GEMV_SPLIT_H_
#define METALRT_METAL_GEMV_SPLIT_H_
#include <metal_stdlib>
using namespace metal;

// Parts 1.. of each row block leave their first `count` sums in `partials`
// ([simdgroups][kSums]) and part 0 adds them to its own in part order (a fixed order:
// the result does not depend on scheduling). With splits > 1 every thread of the
// threadgroup must call it (one barrier); with splits == 1 it does nothing.
template <int kSums>
inline void gemv_reduce_parts(thread float* acc, threadgroup float* partials, int count, uint simdgroup,
                              int32_t part, int32_t splits, uint lane) {
  if (splits == 1) return;
  if (part != 0 && lane == 0)
    for (int e = 0; e < count; ++e) partials[int(simdgroup) * kSums + e] = acc[e];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (part != 0) return;
  for (int32_t s = 1; s < splits; ++s)
    for (int e = 0; e < count; ++e) acc[e] += partials[(int(simdgroup) + s) * kSums + e];
}

#endif  // METALRT_METAL_GEMV_SPLIT_H_
