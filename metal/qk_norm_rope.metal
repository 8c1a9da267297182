// qk_norm_rope: Qwen3's q/k recipe fused into one dispatch — per head, RMSNorm over
// head_dim (Zhang & Sennrich 2019) with q_weight / k_weight, then NeoX RoPE (Su et al.
// 2021). One threadgroup per (head row, token), rows [0, heads) of q then
// [heads, heads + kv_heads) of k. It equals the composite rms_norm then rope_neox
// (cpp/cpu/qk_norm_rope.cpp) on this device bit for bit: the sum of squares is reduced
// in the same order as metal/rms_norm.metal's row kernel (kRowThreads threads,
// threadgroup_sum), the normalised value is rounded to T as the composite stores it,
// and the cos|sin and the rotation are rope_math.h's, as in metal/rope.metal.
#include <metal_stdlib>
#include "rope_math.h"
#include "row_reduce.h"
using namespace metal;

// x_j * r * w_j rounded to T (the composite's stored intermediate), as f32.
template <typename T>
inline float rms_normalized(device const T* in, device const T* weight, float r, int32_t j) {
  return float(T(float(in[j]) * r * float(weight[j])));
}

template <typename T>
kernel void qk_norm_rope(device const T* q [[buffer(0)]],
                         device const T* k [[buffer(1)]],
                         device const T* q_weight [[buffer(2)]],
                         device const T* k_weight [[buffer(3)]],
                         device const int32_t* positions [[buffer(4)]],
                         constant float* freq [[buffer(5)]],
                         device T* q_out [[buffer(6)]],
                         device T* k_out [[buffer(7)]],
                         constant QkNormRopeArgs& args [[buffer(8)]],
                         uint2 group [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[kRowSimdgroups];
  threadgroup float cos_sin[kRopeMaxRotaryDim];
  const int32_t row = int32_t(group.x), half = args.rotary_dim / 2;
  const bool is_q = row < args.heads;
  const long head_row = long(group.y) * (is_q ? args.heads : args.kv_heads) +
                        (is_q ? row : row - args.heads);
  device const T* in = (is_q ? q : k) + head_row * args.head_dim;
  device const T* weight = is_q ? q_weight : k_weight;
  device T* y = (is_q ? q_out : k_out) + head_row * args.head_dim;

  rope_token_cos_sin(positions[group.y], freq, half, cos_sin, tid, kRowThreads);
  float ss = 0.0f;
  for (int32_t i = int32_t(tid); i < args.head_dim; i += kRowThreads) {
    const float v = float(in[i]);
    ss += v * v;
  }
  // Its barrier also makes cos_sin visible to every thread.
  ss = threadgroup_sum(ss, partials, simdgroup, lane);
  const float r = 1.0f / sqrt(ss / float(args.head_dim) + args.eps);
  for (int32_t j = int32_t(tid); j < half; j += kRowThreads) {
    const float2 rotated = rope_rotate(rms_normalized(in, weight, r, j),
                                       rms_normalized(in, weight, r, j + half), cos_sin[j],
                                       cos_sin[half + j]);
    y[j] = T(rotated.x);
    y[j + half] = T(rotated.y);
  }
  for (int32_t i = args.rotary_dim + int32_t(tid); i < args.head_dim; i += kRowThreads)
    y[i] = T(rms_normalized(in, weight, r, i));
}

#define METALRT_QK_NORM_ROPE(T, SUFFIX)                                      \
  template [[host_name("qk_norm_rope_fused_" #SUFFIX)]] [[kernel]]           \
      decltype(qk_norm_rope<T>) qk_norm_rope<T>;

METALRT_QK_NORM_ROPE(float, f32)
METALRT_QK_NORM_ROPE(half, f16)
METALRT_QK_NORM_ROPE(bfloat, bf16)
