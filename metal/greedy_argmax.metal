// greedy_argmax: logits [R, V] -> int32 [R], the index of each row's maximum, matching
// the CPU oracle (cpp/cpu/greedy_argmax.cpp) exactly: the lowest index wins ties, NaN
// never wins, a row with no non-NaN value gives 0.
//
// Candidates are ordered by (value descending, index ascending); the best candidate
// under that total order is the oracle's answer, and since the order does not depend
// on how candidates are grouped, any reduction tree finds it. "No candidate" is
// (-inf, kNone): a real -inf at any index beats it by its lower index, and NaN compares
// false so it never replaces a candidate. Two levels, so no thread makes more than
// kArgmaxLoadsPerThread serial loads (one threadgroup scanning a 49,152-entry row made
// 192 a thread):
// 1. greedy_argmax_row: a threadgroup per (chunk of kArgmaxChunk columns, row); each
//    thread scans columns tid, tid + kRowThreads, ... of its chunk keeping its best;
//    each SIMD-group takes simd_max of the values, then simd_min of the indices of the
//    lanes holding that maximum; lane 0 stores the pair in threadgroup memory; after
//    one barrier thread 0 combines the SIMD-groups' pairs and writes the row's index
//    (a row of one chunk) or the chunk's candidate to the partials;
// 2. greedy_argmax_merge (rows of more than one chunk): a threadgroup per row combines
//    its chunks' candidates the same way and writes the index.
#include <metal_stdlib>
#include "row_args.h"
using namespace metal;

constant uint kNone = 0xffffffffu;

inline bool better(float value, uint index, float best_value, uint best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

// The threadgroup's best of its threads' candidates (value, index), in thread 0's
// return value (the other threads' are unspecified).
inline ArgmaxCandidate threadgroup_best(float value, uint index, threadgroup ArgmaxCandidate* groups,
                                        uint tid, uint simdgroup, uint lane) {
  const float simd_best = simd_max(value);
  const uint simd_index = simd_min(value == simd_best ? index : kNone);
  if (lane == 0) groups[simdgroup] = ArgmaxCandidate{simd_best, simd_index};
  threadgroup_barrier(mem_flags::mem_threadgroup);
  ArgmaxCandidate best = {-INFINITY, kNone};
  if (tid == 0)
    for (int32_t s = 0; s < kRowSimdgroups; ++s)
      if (better(groups[s].value, groups[s].index, best.value, best.index)) best = groups[s];
  return best;
}

inline int index_of(ArgmaxCandidate best) { return best.index == kNone ? 0 : int(best.index); }

// Grid: (args.chunks, R) threadgroups of kRowThreads. partials: [R, args.chunks]
// candidates, written when args.chunks > 1 (else out is).
template <typename T>
kernel void greedy_argmax_row(device const T* logits [[buffer(0)]],
                              device int* out [[buffer(1)]],
                              constant GreedyArgmaxArgs& args [[buffer(2)]],
                              device ArgmaxCandidate* partials [[buffer(3)]],
                              uint2 group [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  threadgroup ArgmaxCandidate groups[kRowSimdgroups];
  const uint row = group.y, first = group.x * uint(kArgmaxChunk);
  device const T* x = logits + long(row) * args.vocab;
  const uint end = min(uint(args.vocab), first + uint(kArgmaxChunk));
  float best_value = -INFINITY;
  uint best_index = kNone;
  for (uint i = first + tid; i < end; i += kRowThreads) {
    const float v = float(x[i]);
    if (better(v, i, best_value, best_index)) {
      best_value = v;
      best_index = i;
    }
  }
  const ArgmaxCandidate best = threadgroup_best(best_value, best_index, groups, tid, simdgroup, lane);
  if (tid != 0) return;
  if (args.chunks == 1)
    out[row] = index_of(best);
  else
    partials[long(row) * args.chunks + group.x] = best;
}

// Grid: (R) threadgroups of kRowThreads; reads the args.chunks candidates of its row.
kernel void greedy_argmax_merge(device const ArgmaxCandidate* partials [[buffer(0)]],
                                device int* out [[buffer(1)]],
                                constant GreedyArgmaxArgs& args [[buffer(2)]],
                                uint row [[threadgroup_position_in_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint simdgroup [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]]) {
  threadgroup ArgmaxCandidate groups[kRowSimdgroups];
  device const ArgmaxCandidate* candidates = partials + long(row) * args.chunks;
  float best_value = -INFINITY;
  uint best_index = kNone;
  for (int32_t c = int32_t(tid); c < args.chunks; c += kRowThreads)
    if (better(candidates[c].value, candidates[c].index, best_value, best_index)) {
      best_value = candidates[c].value;
      best_index = candidates[c].index;
    }
  const ArgmaxCandidate best = threadgroup_best(best_value, best_index, groups, tid, simdgroup, lane);
  if (tid == 0) out[row] = index_of(best);
}

#define METALRT_GREEDY_ARGMAX(T, SUFFIX)                                                      \
  template [[host_name("greedy_argmax_row_" #SUFFIX)]] kernel void greedy_argmax_row<T>(     \
      device const T*, device int*, constant GreedyArgmaxArgs&, device ArgmaxCandidate*,     \
      uint2, uint, uint, uint);

METALRT_GREEDY_ARGMAX(float, f32)
METALRT_GREEDY_ARGMAX(half, f16)
METALRT_GREEDY_ARGMAX(bfloat, bf16)
