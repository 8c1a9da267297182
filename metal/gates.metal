// The gate kernels of the hybrid attention layers (math: metalrt/moe_ops.h; oracle:
// cpp/cpu/gates.cpp), all in f32:
// * gated_rms_norm_row_*: one threadgroup per row as rms_norm_row; n = x * r and
//   p = w * n rounded to the dtype as HF RMSNormGated rounds them, y = p * silu(z);
// * gated_query_split_*: one thread per (query element, token), copying the element
//   and its gate partner (bit-exact);
// * sigmoid_mul_*: one thread per element.
// Expected: bound by the bytes read and written.
#include <metal_stdlib>
#include "elementwise_args.h"
#include "moe_args.h"
#include "row_reduce.h"
using namespace metal;

template <typename T>
kernel void gated_rms_norm_row(device const T* x [[buffer(0)]],
                               device const T* z [[buffer(1)]],
                               device const T* weight [[buffer(2)]],
                               device T* out [[buffer(3)]],
                               constant RmsNormArgs& args [[buffer(4)]],
                               uint row [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint simdgroup [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[kRowSimdgroups];
  device const T* in = x + long(row) * args.cols;
  device const T* gate = z + long(row) * args.cols;
  device T* y = out + long(row) * args.cols;
  float ss = 0.0f;
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float v = float(in[i]);
    ss += v * v;
  }
  ss = threadgroup_sum(ss, partials, simdgroup, lane);
  const float r = 1.0f / sqrt(ss / float(args.cols) + args.eps);
  for (int32_t i = int32_t(tid); i < args.cols; i += kRowThreads) {
    const float normed = float(T(float(in[i]) * r));
    const float scaled = float(T(float(weight[i]) * normed));
    const float g = float(gate[i]);
    y[i] = T(scaled * (g / (1.0f + exp(-g))));
  }
}

template <typename T>
kernel void gated_query_split(device const T* q_gate [[buffer(0)]],
                              device T* q [[buffer(1)]],
                              device T* gate [[buffer(2)]],
                              constant GatedQuerySplitArgs& args [[buffer(3)]],
                              uint2 position [[thread_position_in_grid]]) {
  const int32_t width = args.heads * args.head_dim;
  const int32_t c = int32_t(position.x);
  if (c >= width) return;
  const int32_t head = c / args.head_dim, d = c % args.head_dim;
  device const T* src = q_gate + long(position.y) * 2 * width + long(head) * 2 * args.head_dim + d;
  const long dst = long(position.y) * width + c;
  q[dst] = src[0];
  gate[dst] = src[args.head_dim];
}

template <typename T>
kernel void sigmoid_mul(device const T* x [[buffer(0)]],
                        device const T* gate [[buffer(1)]],
                        device T* out [[buffer(2)]],
                        constant ElementwiseArgs& args [[buffer(3)]],
                        uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  out[i] = T(float(x[i]) * (1.0f / (1.0f + exp(-float(gate[i])))));
}

#define METALRT_GATES(T, SUFFIX)                                                                     \
  template [[host_name("gated_rms_norm_row_" #SUFFIX)]] kernel void gated_rms_norm_row<T>(          \
      device const T*, device const T*, device const T*, device T*, constant RmsNormArgs&, uint, uint, \
      uint, uint);                                                                                   \
  template [[host_name("gated_query_split_" #SUFFIX)]] kernel void gated_query_split<T>(            \
      device const T*, device T*, device T*, constant GatedQuerySplitArgs&, uint2);                  \
  template [[host_name("sigmoid_mul_" #SUFFIX)]] kernel void sigmoid_mul<T>(                        \
      device const T*, device const T*, device T*, constant ElementwiseArgs&, uint);

METALRT_GATES(float, f32)
METALRT_GATES(half, f16)
METALRT_GATES(bfloat, bf16)
