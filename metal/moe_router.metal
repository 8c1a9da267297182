// moe_router_row_*: softmax + top-k of one token's router logits per threadgroup of
// kRowThreads (math: metalrt/moe_ops.h; oracle: cpp/cpu/moe.cpp). NaN logits read as
// -inf; the max and the softmax denominator are threadgroup reductions; then top_k
// rounds each pick the largest remaining logit in the order (value descending, index
// ascending) — the next pick is the best element strictly after the previous one in
// that order, so nothing needs marking and a pick can never repeat or leave [0, E),
// whatever the logits (vllm-project/vllm#39391, sgl-project/sglang#30079). Expected:
// top_k passes over E logits, bound by the reads (E <= 512 in released models).
#include <metal_stdlib>
#include "moe_args.h"
#include "row_reduce.h"
using namespace metal;

inline float router_logit(float v) { return isnan(v) ? -INFINITY : v; }

// Whether (v, i) comes before (best_v, best_i) in (value descending, index ascending).
inline bool router_before(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// exp(l - m), or for +inf logits their equal share (the softmax's limit).
inline float router_mass(float l, float m) {
  return m == INFINITY ? (l == INFINITY ? 1.0f : 0.0f) : exp(l - m);
}

template <typename T>
kernel void moe_router_row(device const T* logits [[buffer(0)]],
                           device float* weights [[buffer(1)]],
                           device int* ids [[buffer(2)]],
                           constant MoeRouterArgs& args [[buffer(3)]],
                           uint row [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]],
                           uint simdgroup [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float max_partials[kRowSimdgroups];
  threadgroup float sum_partials[kRowSimdgroups];
  // Per pick round, double-buffered so a thread starting the next round cannot
  // overwrite what a slower thread still reads.
  threadgroup float pick_value[2][kRowSimdgroups];
  threadgroup int pick_index[2][kRowSimdgroups];
  device const T* l = logits + long(row) * args.experts;
  device float* w = weights + long(row) * args.top_k;
  device int* id = ids + long(row) * args.top_k;

  float m = -INFINITY;
  for (int32_t e = int32_t(tid); e < args.experts; e += kRowThreads) m = max(m, router_logit(float(l[e])));
  m = threadgroup_max(m, max_partials, simdgroup, lane);
  if (m == -INFINITY) {   // nothing to route on: valid, distinct ids with weight 0
    for (int32_t j = int32_t(tid); j < args.top_k; j += kRowThreads) {
      id[j] = j;
      w[j] = 0.0f;
    }
    return;
  }
  float sum = 0.0f;
  for (int32_t e = int32_t(tid); e < args.experts; e += kRowThreads) sum += router_mass(router_logit(float(l[e])), m);
  sum = threadgroup_sum(sum, sum_partials, simdgroup, lane);

  const int no_index = numeric_limits<int>::max();   // after every expert index
  float prev_v = INFINITY;
  int prev_i = -1;   // before every element: (v, i) comes after (+inf, -1)
  float picked = 0.0f;
  for (int32_t j = 0; j < args.top_k; ++j) {
    float best_v = -INFINITY;
    int best_i = no_index;
    for (int32_t e = int32_t(tid); e < args.experts; e += kRowThreads) {
      const float v = router_logit(float(l[e]));
      if (router_before(prev_v, prev_i, v, e) && router_before(v, e, best_v, best_i)) {
        best_v = v;
        best_i = e;
      }
    }
    const float simd_best = simd_max(best_v);
    const int simd_index = simd_min(best_v == simd_best ? best_i : no_index);
    const int buffer = j & 1;
    if (lane == 0) {
      pick_value[buffer][simdgroup] = simd_best;
      pick_index[buffer][simdgroup] = simd_index;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    best_v = -INFINITY;
    best_i = no_index;
    for (int32_t s = 0; s < kRowSimdgroups; ++s)
      if (router_before(pick_value[buffer][s], pick_index[buffer][s], best_v, best_i)) {
        best_v = pick_value[buffer][s];
        best_i = pick_index[buffer][s];
      }
    prev_v = best_v;
    prev_i = best_i;
    const float p = router_mass(best_v, m) / sum;
    picked += p;
    if (tid == 0) {
      id[j] = best_i;
      w[j] = p;
    }
  }
  if (args.renormalize && tid == 0)
    for (int32_t j = 0; j < args.top_k; ++j) w[j] = w[j] / picked;
}

#define METALRT_MOE_ROUTER(T, SUFFIX)                                                          \
  template [[host_name("moe_router_row_" #SUFFIX)]] kernel void moe_router_row<T>(            \
      device const T*, device float*, device int*, constant MoeRouterArgs&, uint, uint, uint, uint);

METALRT_MOE_ROUTER(float, f32)
METALRT_MOE_ROUTER(half, f16)
METALRT_MOE_ROUTER(bfloat, bf16)
