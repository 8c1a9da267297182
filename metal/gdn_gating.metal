// gdn_gating: the gates of a Gated-DeltaNet layer, one thread per (token, head), in f32
// (the CPU oracle cpp/cpu/gdn_gating.cpp is the spec):
//   g = -exp(A_log) * softplus(a + dt_bias), softplus(x) = x > 20 ? x : log1p(exp(x))
//   beta = 1 / (1 + exp(-b))
// Kernels gdn_gating_<a's dtype>_<A_log's dtype>.
#include <metal_stdlib>
#include "linear_attention_args.h"
using namespace metal;

// log(1 + u) accurate for small u, which MSL's log cannot give once 1 + u rounds to 1
// (MSL has no log1p): log(w) * u / (w - 1) with w = 1 + u cancels w's rounding error
// (Goldberg 1991, "What every computer scientist should know about floating-point").
inline float log1p_accurate(float u) {
  const float w = 1.0f + u;
  return w == 1.0f ? u : log(w) * u / (w - 1.0f);
}

template <typename T, typename P>
kernel void gdn_gating(device const T* a [[buffer(0)]],
                       device const T* b [[buffer(1)]],
                       device const P* a_log [[buffer(2)]],
                       device const P* dt_bias [[buffer(3)]],
                       device float* g [[buffer(4)]],
                       device float* beta [[buffer(5)]],
                       constant GdnGatingArgs& args [[buffer(6)]],
                       uint i [[thread_position_in_grid]]) {
  if (int32_t(i) >= args.elements) return;
  const int32_t h = int32_t(i) % args.heads;
  const float x = float(a[i]) + float(dt_bias[h]);
  const float softplus = x > 20.0f ? x : log1p_accurate(exp(x));
  g[i] = -exp(float(a_log[h])) * softplus;
  beta[i] = 1.0f / (1.0f + exp(-float(b[i])));
}

#define METALRT_GDN_GATING(T, P, SUFFIX)                                                     \
  template [[host_name("gdn_gating_" #SUFFIX)]] kernel void gdn_gating<T, P>(               \
      device const T*, device const T*, device const P*, device const P*, device float*,     \
      device float*, constant GdnGatingArgs&, uint);

METALRT_GDN_GATING(float, float, f32_f32)
METALRT_GDN_GATING(half, float, f16_f32)
METALRT_GDN_GATING(half, half, f16_f16)
METALRT_GDN_GATING(bfloat, float, bf16_f32)
METALRT_GDN_GATING(bfloat, bfloat, bf16_bf16)
