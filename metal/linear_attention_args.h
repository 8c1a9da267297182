// Arguments and tuning constants of the Gated-DeltaNet kernels (metal/causal_conv1d.metal,
// metal/gdn_gating.metal, metal/gated_delta_rule.metal), shared by the host dispatch
// (cpp/gpu/causal_conv1d.cpp, gdn_gating.cpp, gated_delta_rule.cpp) and MSL.
#ifndef METALRT_METAL_LINEAR_ATTENTION_ARGS_H_
#define METALRT_METAL_LINEAR_ATTENTION_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// causal_conv1d: one thread per (channel, request), threadgroups of kConvThreads along
// the channels.
METALRT_CONSTANT uint32_t kConvThreads = 64;
// gdn_gating: one thread per (token, head) element.
METALRT_CONSTANT uint32_t kGatingThreads = 256;

// gated_delta_rule: one threadgroup per (request, value head) of kDeltaThreads threads;
// thread d owns value column d of the head's state, so Dv <= kDeltaThreads, and the
// recurrent kernel keeps that column's Dk <= kDeltaMaxHeadDim entries in registers.
// Larger heads are declined (the CPU reference tier serves them).
METALRT_CONSTANT int32_t kDeltaThreads = 128;
METALRT_CONSTANT int32_t kDeltaSimdgroups = kDeltaThreads / 32;
METALRT_CONSTANT int32_t kDeltaMaxHeadDim = 128;
// head_k_dim (Dk) is the function constant of this index, set per pipeline, so the
// loops over the recurrent kernel's register column have a compile-time trip count
// and unroll (a run-time bound would leave the column in stack memory).
METALRT_CONSTANT uint32_t kDeltaHeadKDimConstant = 0;
// Chunked form: chunks of kDeltaChunk tokens (= ops::kDeltaRuleChunk). Threadgroup memory
// per threadgroup: the chunk's 64 x 64 f32 matrix (16 KiB: q.k decays on and below the
// diagonal, the UT system's k.k above it, transposed), q and k staged kDeltaKeySlice
// features at a time (2 x 64 x 16 f32 = 8 KiB) and four per-row vectors (1 KiB):
// 25 KiB of the 32 KiB limit.
METALRT_CONSTANT int32_t kDeltaChunk = 64;
METALRT_CONSTANT int32_t kDeltaKeySlice = 16;

struct CausalConv1dArgs {
  int32_t channels;
  int32_t width;      // K; the state holds K - 1 columns per channel
  int32_t requests;
  int32_t silu;       // 1: SiLU after the convolution
};
static_assert(sizeof(CausalConv1dArgs) == 16, "CausalConv1dArgs must match between host and MSL");

struct GdnGatingArgs {
  int32_t heads;
  int32_t elements;   // tokens * heads
};
static_assert(sizeof(GdnGatingArgs) == 8, "GdnGatingArgs must match between host and MSL");

// head_k_dim is not here: it is function constant kDeltaHeadKDimConstant.
struct GatedDeltaRuleArgs {
  int32_t num_k_heads;
  int32_t num_v_heads;
  int32_t head_v_dim;
  float scale;        // applied to the normalised q
  int32_t mode;       // ops::DeltaRuleMode: 0 recurrent, 1 chunked, 2 auto
  int32_t v_heads_tiled;   // 1: value head h reads key head h % Hk (else h / (Hv / Hk))
  int32_t unused[2];
};
static_assert(sizeof(GatedDeltaRuleArgs) == 32, "GatedDeltaRuleArgs must match between host and MSL");

// The key head value head h reads: grouped (transformers' order) or tiled (llama.cpp's
// qwen35 files); the CPU oracle and the kernels share it.
template <typename I>
inline I delta_rule_key_head(I h, I k_heads, I v_heads, bool tiled) {
  return tiled ? h % k_heads : h / (v_heads / k_heads);
}

#endif  // METALRT_METAL_LINEAR_ATTENTION_ARGS_H_
