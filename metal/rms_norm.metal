// rms_norm: RMSNorm (Zhang & Sennrich 2019) over the last dim, one threadgroup per row:
// y_i = x_i * rsqrt(mean(x^2) + eps) * weight_i, accumulated in f32 and rounded once to
// the output dtype.
#include <metal_stdlib>
#include "row_reduce.h"
using namespace metal;

template <typename T>
kernel void rms_norm_row(device const T* x [[buffer(0)]],
                         device const T* weight [[buffer(1)]],
                         device T* out [[buffer(2)]],
                         constant RmsNormArgs& args [[buffer(3)]],
                         uint row [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[kRowSimdgroups];
  device const T* in = x + long(row) * args.cols;
  device T* y = out + long(row) * args.cols;
  float ss = 0.0f;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float v = float(in[i]);
    ss += v * v;
  }
  ss = threadgroup_sum(ss, partials, simdgroup, lane);
  const float r = 1.0f / sqrt(ss / float(args.cols) + args.eps);
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    y[i] = T(float(in[i]) * r * float(weight[i]));
  }
}

#define METALRT_RMS_NORM(T, SUFFIX)                                                         \
  template [[host_name("rms_norm_row_" #SUFFIX)]] kernel void rms_norm_row<T>(             \
      device const T*, device const T*, device T*, constant RmsNormArgs&, uint, uint, uint, \
      uint);

METALRT_RMS_NORM(float, f32)
METALRT_RMS_NORM(half, f16)
METALRT_RMS_NORM(bfloat, bf16)
