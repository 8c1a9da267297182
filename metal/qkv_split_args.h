// Arguments and tuning constants of the qkv_split kernels (metal/qkv_split.metal),
// shared by the host dispatch (cpp/gpu/qkv_split.cpp) and MSL. A 2-D grid: x runs
// along a qkv row (q + k + v columns), y over the tokens.
#ifndef METALRT_METAL_QKV_SPLIT_ARGS_H_
#define METALRT_METAL_QKV_SPLIT_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT uint32_t kQkvSplitThreads = 256;

struct QkvSplitArgs {
  int32_t q_width;
  int32_t k_width;
  int32_t v_width;
  int32_t unused;
};
static_assert(sizeof(QkvSplitArgs) == 16, "QkvSplitArgs must match between host and MSL");

#endif  // METALRT_METAL_QKV_SPLIT_ARGS_H_
