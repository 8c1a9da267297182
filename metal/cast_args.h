// Arguments and tuning constants of the cast kernels (metal/cast.metal), shared by the
// host dispatch (cpp/gpu/cast.cpp) and MSL. One thread per element.
#ifndef METALRT_METAL_CAST_ARGS_H_
#define METALRT_METAL_CAST_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT uint32_t kCastThreads = 256;

struct CastArgs {
  uint32_t n;        // elements
  uint32_t unused;   // keeps the struct a multiple of 8 bytes on both sides
};
static_assert(sizeof(CastArgs) == 8, "CastArgs must match between host and MSL");

#endif  // METALRT_METAL_CAST_ARGS_H_
