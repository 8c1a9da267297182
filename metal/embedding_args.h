// Arguments and tuning constants of the embedding kernels (metal/embedding.metal),
// shared by the host dispatch (cpp/gpu/embedding.cpp) and MSL. A 2-D grid: x runs
// along the embedding dim, y over the tokens.
#ifndef METALRT_METAL_EMBEDDING_ARGS_H_
#define METALRT_METAL_EMBEDDING_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT uint32_t kEmbeddingThreads = 256;

struct EmbeddingArgs {
  int64_t vocab;   // rows of the weight; ids outside [0, vocab) give a zero row
  int32_t dim;     // columns of the weight and of the output
  int32_t unused;
};
static_assert(sizeof(EmbeddingArgs) == 16, "EmbeddingArgs must match between host and MSL");

#endif  // METALRT_METAL_EMBEDDING_ARGS_H_
