// Arguments and tuning constants of the MoE and gate kernels (metal/moe_*.metal,
// metal/gates.metal), shared by their host dispatch (cpp/gpu/moe_*.cpp, cpp/gpu/gates.cpp)
// and MSL.
#ifndef METALRT_METAL_MOE_ARGS_H_
#define METALRT_METAL_MOE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

struct GatedQuerySplitArgs {
  int32_t heads;
  int32_t head_dim;
};
static_assert(sizeof(GatedQuerySplitArgs) == 8, "GatedQuerySplitArgs must match between host and MSL");

// moe_router: one threadgroup of kRowThreads per token row (row_args.h).
struct MoeRouterArgs {
  int32_t experts;       // E
  int32_t top_k;
  int32_t renormalize;   // 1: divide the picked weights by their sum
  int32_t unused;
};
static_assert(sizeof(MoeRouterArgs) == 16, "MoeRouterArgs must match between host and MSL");

// moe_matmul_bt (with QuantizedArgs: n = rows per expert N of each stack, k = K).
struct MoeMatmulArgs {
  int32_t experts;    // E: ids outside [0, E) give zero rows
  int32_t slots;      // k: pairs per token
  int32_t per_slot;   // 1: x is [T, k, K] (one row per pair), 0: [T, K]
  int32_t stacks;     // 1, or 2: gate and up stacks (buffers 2-4 and 9-11), out rows of 2N
};
static_assert(sizeof(MoeMatmulArgs) == 16, "MoeMatmulArgs must match between host and MSL");

// moe_group_pairs: one threadgroup of kMoeThreads groups the (token, slot) pairs by
// expert for the batch GEMM: order[] = pair indices expert by expert (pair order within
// one), tiles[3 * t ..] = (expert, first position in order, pairs) of GEMM row tile t
// of kQuantGemmTile pairs, expert -1 for the unused tiles up to max_tiles =
// ceil(pairs / kQuantGemmTile) + min(E, pairs) (each expert's last tile may be partial).
struct MoeGroupArgs {
  int32_t experts;     // E <= kMoeGroupMaxExperts
  int32_t pairs;       // T * k
  int32_t max_tiles;
  int32_t n;           // output columns: rows of out for an id outside [0, E) are zeroed here
};
static_assert(sizeof(MoeGroupArgs) == 16, "MoeGroupArgs must match between host and MSL");
METALRT_CONSTANT int32_t kMoeGroupMaxExperts = 1024;

// moe_combine: one thread per output element.
struct MoeCombineArgs {
  int32_t tokens;
  int32_t slots;
  int32_t n;
  int32_t shared;   // 0: none, 1: add shared, 2: add sigmoid(shared_gate) * shared
};
static_assert(sizeof(MoeCombineArgs) == 16, "MoeCombineArgs must match between host and MSL");

// moe_bias_add: one thread per output element (column, pair).
struct MoeBiasAddArgs {
  int32_t pairs;     // T * k
  int32_t n;         // columns
  int32_t experts;   // E: an id outside [0, E) gives a NaN row
  int32_t unused;
};
static_assert(sizeof(MoeBiasAddArgs) == 16, "MoeBiasAddArgs must match between host and MSL");

METALRT_CONSTANT uint32_t kMoeThreads = 256;

#endif  // METALRT_METAL_MOE_ARGS_H_
