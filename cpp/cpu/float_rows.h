// Row conversions between float-typed tensor memory (f32/f16/bf16) and f32 scratch.
// CPU oracle kernels convert a whole row at a time so the dtype switch is paid once
// per row, not once per element; the rounding is dtype.h's (round-to-nearest-even).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu/parallel.h"
#include "metalrt/dtype.h"
#include "metalrt/errors.h"
#include "metalrt/tensor.h"

namespace metalrt::cpu {

// f16 -> f32 by table: 64K entries built once from the exact F16ToF32, so converting
// weights for GEMV/GEMM is a load instead of a branchy bit manipulation.
inline const float* F16ToF32Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) t[bits] = F16ToF32(static_cast<uint16_t>(bits));
    return t;
  }();
  return table.data();
}

// dst[i] = element (offset + i) of `data`, i < n.
inline void LoadRowF32(const void* data, DType dtype, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(data) + offset, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const float* table = F16ToF32Table();
      for (int64_t i = 0; i < n; ++i) dst[i] = table[static_cast<const uint16_t*>(data)[offset + i]];
      return;
    }
    case DType::kBF16: {
      // bf16 is the top half of an f32 (BF16ToF32, inlined here so the loop vectorizes).
      const uint16_t* src = static_cast<const uint16_t*>(data) + offset;
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &bits, sizeof(float));
      }
      return;
    }
    default:
      throw TypeError(std::string("expected a float dtype, got ") + DTypeName(dtype));
  }
}

// Element (offset + i) of `data` = src[i] rounded to `dtype`, i < n.
inline void StoreRowF32(void* data, DType dtype, int64_t offset, int64_t n, const float* src) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(data) + offset, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(data)[offset + i] = F32ToF16(src[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(data)[offset + i] = F32ToBF16(src[i]);
      return;
    default:
      throw TypeError(std::string("expected a float dtype, got ") + DTypeName(dtype));
  }
}

// All elements of a contiguous float tensor as f32.
inline std::vector<float> ToF32(const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  LoadRowF32(t.data(), t.dtype(), 0, t.numel(), values.data());
  return values;
}

// Runs fn(row, n) on every row of the last dim of the contiguous float tensor x,
// converted to f32 in a scratch row, and stores the row into out (x's shape and
// dtype). Rows are spread over threads with ParallelFor.
inline void MapRowsF32(const Tensor& x, const Tensor& out,
                       const std::function<void(float*, int64_t)>& fn) {
  const int64_t n = x.ndim() == 0 ? 1 : x.dim(-1);
  if (n == 0 || x.numel() == 0) return;
  ParallelFor(x.numel() / n, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      LoadRowF32(x.data(), x.dtype(), r * n, n, row.data());
      fn(row.data(), n);
      StoreRowF32(out.data(), out.dtype(), r * n, n, row.data());
    }
  });
}

}  // namespace metalrt::cpu
