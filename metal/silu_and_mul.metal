// silu_and_mul: SwiGLU (Shazeer 2020), x[..., 2n] -> silu(x[..., :n]) * x[..., n:], one
// thread per output element, computed in f32 and rounded once to the output dtype like
// the CPU oracle (cpp/cpu/silu_and_mul.cpp).
#include <metal_stdlib>
#include "elementwise_args.h"
using namespace metal;

template <typename T>
kernel void silu_and_mul(device const T* x [[buffer(0)]],
                         device T* out [[buffer(1)]],
                         constant ElementwiseArgs& args [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  const uint row = i / args.inner, col = i % args.inner;
  device const T* gate_up = x + ulong(row) * 2 * args.inner;
  const float gate = float(gate_up[col]);
  const float up = float(gate_up[args.inner + col]);
  out[i] = T(gate / (1.0f + exp(-gate)) * up);
}

#define METALRT_SILU_AND_MUL(T, SUFFIX)                                                 \
  template [[host_name("silu_and_mul_" #SUFFIX)]] kernel void silu_and_mul<T>(        \
      device const T*, device T*, constant ElementwiseArgs&, uint);

METALRT_SILU_AND_MUL(float, f32)
METALRT_SILU_AND_MUL(half, f16)
METALRT_SILU_AND_MUL(bfloat, bf16)
