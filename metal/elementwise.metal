// Elementwise kernels, one thread per output element, each computed in f32 and rounded
// once to the output dtype like the CPU oracle (cpp/cpu/elementwise.cpp):
// * add/mul: out[i] = a[i] op b[i mod inner] (b is a's shape or a trailing suffix of it);
// * relu: x < 0 ? 0 : x (NaN propagates);
// * gelu: tanh approximation (Hendrycks & Gimpel 2016) as x / (1 + exp(-2u)),
//   u = sqrt(2/pi) (x + 0.044715 x^3).
#include <metal_stdlib>
#include "elementwise_args.h"
using namespace metal;

struct AddOp {
  static float apply(float a, float b) { return a + b; }
};
struct MulOp {
  static float apply(float a, float b) { return a * b; }
};
struct ReluOp {
  static float apply(float x) { return x < 0.0f ? 0.0f : x; }
};
struct GeluOp {
  static float apply(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float e = exp(-2.0f * u);
    return isinf(e) ? -0.0f : x / (1.0f + e);   // the limit, also for x = -Inf
  }
};

template <typename T, typename Op>
kernel void binary(device const T* a [[buffer(0)]],
                   device const T* b [[buffer(1)]],
                   device T* out [[buffer(2)]],
                   constant ElementwiseArgs& args [[buffer(3)]],
                   uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  out[i] = T(Op::apply(float(a[i]), float(b[i % args.inner])));
}

template <typename T, typename Op>
kernel void unary(device const T* x [[buffer(0)]],
                  device T* out [[buffer(1)]],
                  constant ElementwiseArgs& args [[buffer(2)]],
                  uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  out[i] = T(Op::apply(float(x[i])));
}

#define METALRT_ELEMENTWISE(T, SUFFIX)                                                       \
  template [[host_name("add_" #SUFFIX)]] kernel void binary<T, AddOp>(                      \
      device const T*, device const T*, device T*, constant ElementwiseArgs&, uint);         \
  template [[host_name("mul_" #SUFFIX)]] kernel void binary<T, MulOp>(                      \
      device const T*, device const T*, device T*, constant ElementwiseArgs&, uint);         \
  template [[host_name("relu_" #SUFFIX)]] kernel void unary<T, ReluOp>(                     \
      device const T*, device T*, constant ElementwiseArgs&, uint);                          \
  template [[host_name("gelu_" #SUFFIX)]] kernel void unary<T, GeluOp>(                     \
      device const T*, device T*, constant ElementwiseArgs&, uint);

METALRT_ELEMENTWISE(float, f32)
METALRT_ELEMENTWISE(half, f16)
METALRT_ELEMENTWISE(bfloat, bf16)
