// layer_norm: LayerNorm (Ba, Kiros & Hinton 2016) over the last dim, one threadgroup per
// row, f32 accumulation, two passes like the CPU oracle: mean, then the biased variance
// of (x - mean); y_i = (x_i - mean) * rsqrt(var + eps) * weight_i (+ bias_i).
#include <metal_stdlib>
#include "row_reduce.h"
using namespace metal;

template <typename T>
kernel void layer_norm_row(device const T* x [[buffer(0)]],
                           device const T* weight [[buffer(1)]],
                           device const T* bias [[buffer(2)]],
                           device T* out [[buffer(3)]],
                           constant LayerNormArgs& args [[buffer(4)]],
                           uint row [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]],
                           uint simdgroup [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float sum_partials[kRowSimdgroups];
  threadgroup float ss_partials[kRowSimdgroups];
  device const T* in = x + long(row) * args.cols;
  device T* y = out + long(row) * args.cols;
  float sum = 0.0f;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) sum += float(in[i]);
  const float mean = threadgroup_sum(sum, sum_partials, simdgroup, lane) / float(args.cols);
  float ss = 0.0f;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float d = float(in[i]) - mean;
    ss += d * d;
  }
  ss = threadgroup_sum(ss, ss_partials, simdgroup, lane);
  const float r = 1.0f / sqrt(ss / float(args.cols) + args.eps);
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float b = args.has_bias ? float(bias[i]) : 0.0f;
    y[i] = T((float(in[i]) - mean) * r * float(weight[i]) + b);
  }
}

#define METALRT_LAYER_NORM(T, SUFFIX)                                                     \
  template [[host_name("layer_norm_row_" #SUFFIX)]] kernel void layer_norm_row<T>(       \
      device const T*, device const T*, device const T*, device T*, constant LayerNormArgs&, \
      uint, uint, uint, uint);

METALRT_LAYER_NORM(float, f32)
METALRT_LAYER_NORM(half, f16)
METALRT_LAYER_NORM(bfloat, bf16)
