// silu_and_mul: a gated linear unit on x[..., 2n] -> [..., n], one thread per output
// element, computed in f32 and rounded once to the output dtype like the CPU oracle
// (cpp/cpu/silu_and_mul.cpp). activation 0: SwiGLU (Shazeer 2020), silu(x[..., :n]) *
// x[..., n:]; 1: gpt-oss's swiglu_oai (metalrt/expert_ops.h) on interleaved gate/up
// pairs, 2: the same on gate | up halves; the clamps written as comparisons so a NaN stays NaN (MSL's min/max drop it).
#include <metal_stdlib>
#include "elementwise_args.h"
using namespace metal;

template <typename T>
kernel void silu_and_mul(device const T* x [[buffer(0)]],
                         device T* out [[buffer(1)]],
                         constant GluArgs& args [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  const uint row = i / args.inner, col = i % args.inner;
  device const T* gate_up = x + ulong(row) * 2 * args.inner;
  if (args.activation != 0) {
    const bool pairs = args.activation == 1;
    const float gate = float(gate_up[pairs ? 2 * col : col]);
    const float up = float(gate_up[pairs ? 2 * col + 1 : args.inner + col]);
    const float g = gate > args.limit ? args.limit : gate;
    float u = up > args.limit ? args.limit : up;
    u = u < -args.limit ? -args.limit : u;
    out[i] = T((u + 1.0f) * (g / (1.0f + exp(-args.alpha * g))));
    return;
  }
  const float gate = float(gate_up[col]);
  const float up = float(gate_up[args.inner + col]);
  out[i] = T(gate / (1.0f + exp(-gate)) * up);
}

#define METALRT_SILU_AND_MUL(T, SUFFIX)                                                 \
  template [[host_name("silu_and_mul_" #SUFFIX)]] kernel void silu_and_mul<T>(        \
      device const T*, device T*, constant GluArgs&, uint);

METALRT_SILU_AND_MUL(float, f32)
METALRT_SILU_AND_MUL(half, f16)
METALRT_SILU_AND_MUL(bfloat, bf16)
