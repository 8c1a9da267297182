// moe_combine_*: one thread per output element (token, column): the slots' expert
// outputs weighted in slot order, plus the (gated) shared expert, in f32 as the oracle
// (cpp/cpu/moe.cpp) orders it, rounded once. Expected: bound by reading y.
#include <metal_stdlib>
#include "moe_args.h"
using namespace metal;

template <typename T>
kernel void moe_combine(device const T* y [[buffer(0)]],
                        device const float* weights [[buffer(1)]],
                        device const T* shared [[buffer(2)]],
                        device const T* shared_gate [[buffer(3)]],
                        device T* out [[buffer(4)]],
                        constant MoeCombineArgs& args [[buffer(5)]],
                        uint2 position [[thread_position_in_grid]]) {
  const int32_t c = int32_t(position.x), t = int32_t(position.y);
  if (c >= args.n || t >= args.tokens) return;
  float acc = 0.0f;
  for (int32_t j = 0; j < args.slots; ++j) {
    const long pair = long(t) * args.slots + j;
    const float product = weights[pair] * float(y[pair * args.n + c]);
    acc += product;
  }
  if (args.shared != 0) {
    const float g = args.shared == 2 ? 1.0f / (1.0f + exp(-float(shared_gate[t]))) : 1.0f;
    const float product = g * float(shared[long(t) * args.n + c]);
    acc += product;
  }
  out[long(t) * args.n + c] = T(acc);
}

#define METALRT_MOE_COMBINE(T, SUFFIX)                                                          \
  template [[host_name("moe_combine_" #SUFFIX)]] kernel void moe_combine<T>(                   \
      device const T*, device const float*, device const T*, device const T*, device T*,       \
      constant MoeCombineArgs&, uint2);

METALRT_MOE_COMBINE(float, f32)
METALRT_MOE_COMBINE(half, f16)
METALRT_MOE_COMBINE(bfloat, bf16)
