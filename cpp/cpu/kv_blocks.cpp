#include "cpu/kv_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/float_rows.h"

namespace metalrt::cpu {
namespace {

DType FloatDType(KvType type) {
  return type == KvType::kF32 ? DType::kF32 : type == KvType::kF16 ? DType::kF16 : DType::kBF16;
}

void QuantizeQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kKvQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f, inverse = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t scale = F32ToF16(d);
  std::memcpy(block, &scale, 2);
  for (int64_t i = 0; i < kKvQuantBlock; ++i)
    block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * inverse)));
}

void QuantizeQ4_0(const float* x, uint8_t* block) {
  float amax = 0.0f, m = 0.0f;
  for (int64_t i = 0; i < kKvQuantBlock; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  const float d = m / -8.0f, inverse = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t scale = F32ToF16(d);
  std::memcpy(block, &scale, 2);
  auto code = [&](float v) {
    return static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v * inverse + 8.5f))));
  };
  for (int64_t i = 0; i < kKvQuantBlock / 2; ++i)
    block[2 + i] = static_cast<uint8_t>(code(x[i]) | (code(x[i + kKvQuantBlock / 2]) << 4));
}

void DequantizeBlock(KvType type, const uint8_t* block, float* x) {
  uint16_t scale;
  std::memcpy(&scale, block, 2);
  const float d = F16ToF32Table()[scale];
  if (type == KvType::kQ8_0) {
    for (int64_t i = 0; i < kKvQuantBlock; ++i) x[i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
    return;
  }
  for (int64_t i = 0; i < kKvQuantBlock / 2; ++i) {
    x[i] = d * static_cast<float>((block[2 + i] & 15) - 8);
    x[i + kKvQuantBlock / 2] = d * static_cast<float>((block[2 + i] >> 4) - 8);
  }
}

}  // namespace

void StoreKvRow(void* cache, KvType type, int64_t row, int64_t head_dim, const float* src) {
  if (!IsQuantized(type)) return StoreRowF32(cache, FloatDType(type), row * head_dim, head_dim, src);
  uint8_t* dst = static_cast<uint8_t*>(cache) + row * KvRowBytes(type, head_dim);
  for (int64_t b = 0; b < head_dim / kKvQuantBlock; ++b) {
    uint8_t* block = dst + b * KvBlockBytes(type);
    (type == KvType::kQ8_0 ? QuantizeQ8_0 : QuantizeQ4_0)(src + b * kKvQuantBlock, block);
  }
}

void LoadKvRows(const void* cache, KvType type, int64_t row, int64_t rows, int64_t head_dim, float* dst) {
  if (!IsQuantized(type)) return LoadRowF32(cache, FloatDType(type), row * head_dim, rows * head_dim, dst);
  const uint8_t* src = static_cast<const uint8_t*>(cache) + row * KvRowBytes(type, head_dim);
  for (int64_t b = 0; b < rows * head_dim / kKvQuantBlock; ++b)
    DequantizeBlock(type, src + b * KvBlockBytes(type), dst + b * kKvQuantBlock);
}

}  // namespace metalrt::cpu
