// moe_bias_add_*: one thread per output element (column, pair): the pair's expert
// output plus its expert's bias row, in f32 as the oracle (cpp/cpu/moe_bias_add.cpp),
// rounded once. An id outside [0, E) writes NaN (never read out of bounds). Expected:
// bound by reading y and the selected bias rows.
#include <metal_stdlib>
#include "moe_args.h"
using namespace metal;

template <typename T>
kernel void moe_bias_add(device const T* y [[buffer(0)]],
                         device const T* bias [[buffer(1)]],
                         device const int32_t* expert_ids [[buffer(2)]],
                         device T* out [[buffer(3)]],
                         constant MoeBiasAddArgs& args [[buffer(4)]],
                         uint2 position [[thread_position_in_grid]]) {
  const int32_t c = int32_t(position.x), pair = int32_t(position.y);
  if (c >= args.n || pair >= args.pairs) return;
  const int32_t e = expert_ids[pair];
  const long at = long(pair) * args.n + c;
  if (e < 0 || e >= args.experts) {
    out[at] = T(NAN);
    return;
  }
  out[at] = T(float(y[at]) + float(bias[long(e) * args.n + c]));
}

#define METALRT_MOE_BIAS_ADD(T, SUFFIX)                                                        \
  template [[host_name("moe_bias_add_" #SUFFIX)]] kernel void moe_bias_add<T>(                 \
      device const T*, device const T*, device const int32_t*, device T*,                      \
      constant MoeBiasAddArgs&, uint2);

METALRT_MOE_BIAS_ADD(float, f32)
METALRT_MOE_BIAS_ADD(half, f16)
METALRT_MOE_BIAS_ADD(bfloat, bf16)
