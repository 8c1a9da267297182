// Arguments and tuning constants of the RoPE kernels (metal/rope.metal) and the fused
// q/k-norm + RoPE kernel (metal/qk_norm_rope.metal), shared by host dispatch
// (cpp/gpu/rope.cpp, cpp/gpu/qk_norm_rope.cpp) and MSL.
#ifndef METALRT_METAL_ROPE_ARGS_H_
#define METALRT_METAL_ROPE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// One threadgroup per token of kRopeThreads threads: the token's cos|sin are computed
// once into threadgroup memory and shared by all of its heads.
METALRT_CONSTANT int32_t kRopeThreads = 128;
// The fused q/k-norm + RoPE kernel runs one threadgroup of kRowThreads (row_args.h)
// per (head row, token), reducing exactly as rms_norm's row kernel does.
// Largest rotary_dim the kernels serve: the frequency table (two floats per pair, see
// rope_angle.h) is passed with setBytes (at most 4 KiB), and a token's cos|sin
// (rotary_dim floats) live in threadgroup memory.
METALRT_CONSTANT int32_t kRopeMaxRotaryDim = 1024;

struct RopeArgs {
  int32_t heads;
  int32_t head_dim;
  int32_t rotary_dim;
  int32_t cache_rows;   // rope_from_cache: rows of the cos|sin cache; 0 otherwise
};
static_assert(sizeof(RopeArgs) == 16, "RopeArgs must match between host and MSL");

struct QkNormRopeArgs {
  int32_t heads;      // q heads; rows [heads, heads + kv_heads) of a token are k's
  int32_t kv_heads;
  int32_t head_dim;
  int32_t rotary_dim;
  float eps;
  int32_t unused;     // keeps the struct a multiple of 8 bytes on both sides
};
static_assert(sizeof(QkNormRopeArgs) == 24, "QkNormRopeArgs must match between host and MSL");

#endif  // METALRT_METAL_ROPE_ARGS_H_
