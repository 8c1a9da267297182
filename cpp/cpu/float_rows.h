// Row conversions between float-typed tensor memory (f32/f16/bf16) and f32 scratch.
// CPU oracle kernels convert a whole row at a time so the dtype switch is paid once
// per row, not once per element; the rounding is dtype.h's (round-to-nearest-even).
#pragma once
#include <cstdint>
#include <cstring>

#include "metalrt/dtype.h"
#include "metalrt/errors.h"

namespace metalrt::cpu {

// dst[i] = element (offset + i) of `data`, i < n.
inline void LoadRowF32(const void* data, DType dtype, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(data) + offset, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(static_cast<const uint16_t*>(data)[offset + i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(static_cast<const uint16_t*>(data)[offset + i]);
      return;
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

}  // namespace metalrt::cpu
