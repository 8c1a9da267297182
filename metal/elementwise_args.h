// Arguments and tuning constants of the elementwise kernels (metal/elementwise.metal,
// metal/silu_and_mul.metal), shared by their host dispatch (cpp/gpu/elementwise.cpp,
// cpp/gpu/silu_and_mul.cpp) and MSL. One thread per output element.
#ifndef METALRT_METAL_ELEMENTWISE_ARGS_H_
#define METALRT_METAL_ELEMENTWISE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT uint32_t kElementwiseThreads = 256;

struct ElementwiseArgs {
  uint32_t n;       // output elements
  uint32_t inner;   // add/mul: b's element count (b repeats over a)
};
static_assert(sizeof(ElementwiseArgs) == 8, "ElementwiseArgs must match between host and MSL");

// silu_and_mul and its swiglu_oai variant (metalrt/expert_ops.h GluActivation).
struct GluArgs {
  uint32_t n;            // output elements
  uint32_t inner;        // the output's last dim
  int32_t activation;    // 0: SwiGLU (gate | up halves), 1: swiglu_oai (interleaved pairs),
                         // 2: swiglu_oai (gate | up halves)
  float alpha;           // swiglu_oai's sigmoid slope
  float limit;           // swiglu_oai's clamp
};
static_assert(sizeof(GluArgs) == 20, "GluArgs must match between host and MSL");

#endif  // METALRT_METAL_ELEMENTWISE_ARGS_H_
