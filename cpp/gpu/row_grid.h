// The grid of the one-threadgroup-per-row kernels (rms_norm, layer_norm, softmax):
// rows = all leading dims, cols = the last dim, sized for the kernels' int32 counts.
#pragma once
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "metalrt/tensor.h"

namespace metalrt::gpu {

struct RowGrid {
  uint32_t rows;
  int32_t cols;
};

// False when the shape exceeds the kernels' index types (the provider then declines).
inline bool RowGridOf(const Tensor& x, RowGrid* grid) {
  const int64_t cols = x.dim(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (!FitsInt(cols) || !FitsUint(rows)) return false;
  *grid = {static_cast<uint32_t>(rows), static_cast<int32_t>(cols)};
  return true;
}

}  // namespace metalrt::gpu
