// greedy_argmax: logits [R, V] -> int32 [R], the index of each row's maximum, matching
// the CPU oracle (cpp/cpu/greedy_argmax.cpp) exactly: the lowest index wins ties, NaN
// never wins, a row with no non-NaN value gives 0.
//
// Candidates are ordered by (value descending, index ascending); the best candidate
// under that total order is the oracle's answer, and since the order does not depend
// on how candidates are grouped, any reduction tree finds it. "No candidate" is
// (-inf, kNone): a real -inf at any index beats it by its lower index, and NaN compares
// false so it never replaces a candidate. One threadgroup per row, two levels:
// 1. each thread scans columns tid, tid + 256, ... keeping its best;
// 2. each SIMD-group takes simd_max of the values, then simd_min of the indices of
//    the lanes holding that maximum; lane 0 stores the pair in threadgroup memory;
// 3. after one barrier, thread 0 combines the SIMD-groups' pairs and writes the row.
#include <metal_stdlib>
#include "row_args.h"
using namespace metal;

constant uint kNone = 0xffffffffu;

inline bool better(float value, uint index, float best_value, uint best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

template <typename T>
kernel void greedy_argmax_row(device const T* logits [[buffer(0)]],
                              device int* out [[buffer(1)]],
                              constant GreedyArgmaxArgs& args [[buffer(2)]],
                              uint row [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float group_values[kRowSimdgroups];
  threadgroup uint group_indices[kRowSimdgroups];
  device const T* x = logits + long(row) * args.vocab;
  float best_value = -INFINITY;
  uint best_index = kNone;
  for (uint i = tid; i < uint(args.vocab); i += kRowThreads) {
    const float v = float(x[i]);
    if (better(v, i, best_value, best_index)) {
      best_value = v;
      best_index = i;
    }
  }
  const float simd_best = simd_max(best_value);
  const uint simd_index = simd_min(best_value == simd_best ? best_index : kNone);
  if (lane == 0) {
    group_values[simdgroup] = simd_best;
    group_indices[simdgroup] = simd_index;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid != 0) return;
  best_value = -INFINITY;
  best_index = kNone;
  for (int32_t s = 0; s < kRowSimdgroups; ++s)
    if (better(group_values[s], group_indices[s], best_value, best_index)) {
      best_value = group_values[s];
      best_index = group_indices[s];
    }
  out[row] = best_index == kNone ? 0 : int(best_index);
}

#define METALRT_GREEDY_ARGMAX(T, SUFFIX)                                                      \
  template [[host_name("greedy_argmax_row_" #SUFFIX)]] kernel void greedy_argmax_row<T>(     \
      device const T*, device int*, constant GreedyArgmaxArgs&, uint, uint, uint, uint);

METALRT_GREEDY_ARGMAX(float, f32)
METALRT_GREEDY_ARGMAX(half, f16)
METALRT_GREEDY_ARGMAX(bfloat, bf16)
