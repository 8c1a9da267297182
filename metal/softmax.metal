// softmax over the last dim, max-subtracted, one threadgroup per row, f32 like the CPU
// oracle: m = max x_i (NaN ignored), e_i = exp(x_i - m), y_i = e_i / sum(e). A row
// holding NaN or +Inf, or only -Inf, gives NaN.
#include <metal_stdlib>
#include "row_reduce.h"
using namespace metal;

template <typename T>
kernel void softmax_row(device const T* x [[buffer(0)]],
                        device T* out [[buffer(1)]],
                        constant SoftmaxArgs& args [[buffer(2)]],
                        uint row [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float max_partials[kRowSimdgroups];
  threadgroup float sum_partials[kRowSimdgroups];
  device const T* in = x + long(row) * args.cols;
  device T* y = out + long(row) * args.cols;
  float m = -INFINITY;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float v = float(in[i]);
    m = v > m ? v : m;
  }
  m = threadgroup_max(m, max_partials, simdgroup, lane);
  float s = 0.0f;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) s += exp(float(in[i]) - m);
  s = threadgroup_sum(s, sum_partials, simdgroup, lane);
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) y[i] = T(exp(float(in[i]) - m) / s);
}

#define METALRT_SOFTMAX(T, SUFFIX)                                                          \
  template [[host_name("softmax_row_" #SUFFIX)]] kernel void softmax_row<T>(               \
      device const T*, device T*, constant SoftmaxArgs&, uint, uint, uint, uint);

METALRT_SOFTMAX(float, f32)
METALRT_SOFTMAX(half, f16)
METALRT_SOFTMAX(bfloat, bf16)
