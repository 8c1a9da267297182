// Random quantized weights for the gates of the quantized ops: GGUF blocks of random
// codes with finite random f16 scales (negative ones included), MLX affine words with
// random scales (negative included) and biases, and MXFP4 (both layouts) with random
// codes and E8M0 exponents of moderate scales (kMxfp4Exponents).
#pragma once
#include <cstring>
#include <random>
#include <vector>

#include "metalrt/quantized.h"
#include <initializer_list>

#include "op_testing.h"

namespace metalrt::testing {

struct WeightSpec {
  QuantFormat format;
  int bits = 0;        // affine only
  int group_size = 0;  // affine only
  DType scales = DType::kF16;   // affine only
};

// Every GGUF block format the runtime reads.
inline constexpr QuantFormat kGgufFormats[] = {QuantFormat::kQ4_1, QuantFormat::kQ8_0, QuantFormat::kQ4_K,
                                               QuantFormat::kQ6_K, QuantFormat::kQ5_0, QuantFormat::kQ4_0,
                                               QuantFormat::kQ5_K, QuantFormat::kQ5_1, QuantFormat::kQ3_K,
                                               QuantFormat::kQ2_K, QuantFormat::kMxfp4Gguf};

// Split-layout MXFP4 (MLX mode mxfp4, gpt-oss's experts): 4-bit codes, a scale per 32.
inline constexpr WeightSpec kMxfp4Spec{QuantFormat::kMxfp4, 4, 32, DType::kU8};

// E8M0 exponents of the random MXFP4 weights: scales 2^(e - 127) from 2^-9 to 2^-3, so
// the largest value 6 * 2^-3 is as the other formats' random weights.
inline constexpr int kMxfp4Exponents[2] = {118, 124};

// Every GGUF format, then the given MLX affine layouts: the weight specs of a
// boundary table that covers every format.
inline std::vector<WeightSpec> GgufSpecsAnd(std::initializer_list<WeightSpec> affine) {
  std::vector<WeightSpec> specs;
  for (QuantFormat f : kGgufFormats) specs.push_back({f});
  specs.insert(specs.end(), affine);
  return specs;
}

// The K-quants: blocks of 256 values.
inline bool IsKQuant(QuantFormat f) {
  return f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K || f == QuantFormat::kQ6_K ||
         f == QuantFormat::kQ3_K || f == QuantFormat::kQ2_K;
}

inline bool IsAffine(const WeightSpec& s) { return s.format == QuantFormat::kAffine; }
// Formats whose scales are a tensor of their own (affine, split MXFP4).
inline bool HasScales(const WeightSpec& s) { return HasScaleTensor(s.format); }

// "q4_1", "affine4g64bf16".
inline std::string SpecName(const WeightSpec& s) {
  if (!IsAffine(s)) return QuantFormatName(s.format);
  return "affine" + std::to_string(s.bits) + "g" + std::to_string(s.group_size) + DTypeName(s.scales);
}

// Byte offsets of a GGUF block's f16 fields (d, and dmin / m where there is one).
inline std::vector<int> HalfFields(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ4_1: case QuantFormat::kQ5_1: case QuantFormat::kQ4_K: case QuantFormat::kQ5_K:
      return {0, 2};
    case QuantFormat::kQ6_K: return {208};
    case QuantFormat::kQ3_K: return {108};
    case QuantFormat::kQ2_K: return {80, 82};
    case QuantFormat::kMxfp4Gguf: return {};   // its scale is the E8M0 byte 0
    default: return {0};
  }
}

// The weight's tensors on the CPU: {data} (GGUF), {data, scales, biases} (affine) or
// {data, scales} (mxfp4).
inline std::vector<Tensor> RandomWeight(const WeightSpec& s, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> magnitude(0.002, 0.05);
  std::uniform_int_distribution<int> exponent(kMxfp4Exponents[0], kMxfp4Exponents[1]);
  if (s.format == QuantFormat::kMxfp4) {
    Tensor scales = Tensor::Empty({n, k / 32}, DType::kU8, DeviceType::kCPU);
    for (int64_t i = 0; i < n * (k / 32); ++i) scales.data_as<uint8_t>()[i] = static_cast<uint8_t>(exponent(gen));
    return {RandomBits({n, k / 2}, DType::kU8, seed), scales};
  }
  if (!IsAffine(s)) {
    const int64_t blocks = k / BlockValues(s.format), block_bytes = BlockBytes(s.format);
    Tensor data = RandomBits({n, blocks * block_bytes}, DType::kU8, seed);
    auto* bytes = data.data_as<uint8_t>();
    for (int64_t b = 0; b < n * blocks; ++b)
      for (int offset : HalfFields(s.format)) {
        const double v = magnitude(gen) * (gen() % 4 == 0 ? -1.0 : 1.0);
        const uint16_t h = F32ToF16(static_cast<float>(v));
        std::memcpy(bytes + b * block_bytes + offset, &h, 2);
      }
    if (s.format == QuantFormat::kMxfp4Gguf)
      for (int64_t b = 0; b < n * blocks; ++b) bytes[b * block_bytes] = static_cast<uint8_t>(exponent(gen));
    return {data};
  }
  const int64_t groups = k / s.group_size;
  Tensor data = RandomBits({n, k * s.bits / 32}, DType::kU32, seed);
  std::vector<double> scales(static_cast<size_t>(n * groups)), biases(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = magnitude(gen) * (gen() % 3 == 0 ? -1.0 : 1.0);   // MLX stores negative scales
    biases[i] = magnitude(gen) * 8.0 * (gen() % 2 ? -1.0 : 1.0);
  }
  return {data, MakeFloat({n, groups}, s.scales, scales), MakeFloat({n, groups}, s.scales, biases)};
}

// The QuantizedTensor over tensors[first ...] as RandomWeight laid them out.
inline QuantizedTensor WeightOf(const WeightSpec& s, int64_t n, int64_t k, const std::vector<Tensor>& t,
                                size_t first) {
  if (s.format == QuantFormat::kMxfp4) return MakeQuantizedTensor(s.format, n, k, t[first], t[first + 1]);
  if (!IsAffine(s)) return MakeQuantizedTensor(s.format, n, k, t[first]);
  return MakeQuantizedTensor(s.format, n, k, t[first], t[first + 1], t[first + 2], s.bits, s.group_size);
}

}  // namespace metalrt::testing
