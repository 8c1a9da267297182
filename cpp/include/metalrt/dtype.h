// Element types of metalrt tensors and exact conversions between them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace metalrt {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kU8, kI32, kI64, kU32 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);   // "float32", "float16", "bfloat16", "int8", ...
DType DTypeFromName(const std::string& name);  // inverse of DTypeName; throws TypeError
bool IsFloating(DType dtype);          // f32, f16, bf16

// IEEE 754 binary16 / bfloat16 conversions, round-to-nearest-even; NaN stays NaN
// (quiet), +-Inf and subnormals are exact where representable.
uint16_t F32ToF16(float value);
float F16ToF32(uint16_t bits);
uint16_t F32ToBF16(float value);
float BF16ToF32(uint16_t bits);

// Reads element `index` of a float-typed buffer (f32/f16/bf16) as f32, and writes
// an f32 value into it with round-to-nearest-even. Throws TypeError for other dtypes.
float LoadAsF32(const void* data, DType dtype, int64_t index);
void StoreFromF32(void* data, DType dtype, int64_t index, float value);

}  // namespace metalrt
