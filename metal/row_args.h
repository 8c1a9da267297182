// Arguments and tuning constants of the row kernels (rms_norm, greedy_argmax, and the other
// one-threadgroup-per-row ops), shared by host dispatch (cpp/gpu/<op>.cpp) and MSL.
#ifndef METALRT_METAL_ROW_ARGS_H_
#define METALRT_METAL_ROW_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// One threadgroup per row of kRowThreads threads (kRowSimdgroups SIMD-groups of 32).
METALRT_CONSTANT int32_t kRowThreads = 256;
METALRT_CONSTANT int32_t kRowSimdgroups = kRowThreads / 32;

struct RmsNormArgs {
  int32_t cols;
  float eps;
};
static_assert(sizeof(RmsNormArgs) == 8, "RmsNormArgs must match between host and MSL");

struct LayerNormArgs {
  int32_t cols;
  float eps;
  int32_t has_bias;   // 0: buffer(2) is a stand-in and no bias is added
  int32_t unused;
};
static_assert(sizeof(LayerNormArgs) == 16, "LayerNormArgs must match between host and MSL");

struct SoftmaxArgs {
  int32_t cols;
  int32_t unused;
};
static_assert(sizeof(SoftmaxArgs) == 8, "SoftmaxArgs must match between host and MSL");

// greedy_argmax (metal/greedy_argmax.metal): a threadgroup of kRowThreads per chunk of
// kArgmaxChunk columns of a row, so a thread makes at most kArgmaxLoadsPerThread
// serial loads; rows of more than one chunk are reduced by a second kernel.
METALRT_CONSTANT int32_t kArgmaxLoadsPerThread = 16;
METALRT_CONSTANT int32_t kArgmaxChunk = kRowThreads * kArgmaxLoadsPerThread;
// Chunks of a row of `vocab` logits (1 for an empty row).
inline int32_t ArgmaxChunks(int32_t vocab) {
  return vocab <= kArgmaxChunk ? 1 : (vocab - 1) / kArgmaxChunk + 1;
}

struct GreedyArgmaxArgs {
  int32_t vocab;
  int32_t chunks;   // ArgmaxChunks(vocab)
};

// A chunk's best logit and its column (0xffffffff: no candidate).
struct ArgmaxCandidate {
  float value;
  uint32_t index;
};
static_assert(sizeof(GreedyArgmaxArgs) == 8, "GreedyArgmaxArgs must match between host and MSL");

#endif  // METALRT_METAL_ROW_ARGS_H_
