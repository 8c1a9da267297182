// What the moe_matmul_bt gates share (test_metal_moe.cpp against the Metal kernels,
// test_cpu_fast_moe.cpp against the fast CPU provider): the case geometry, random
// expert ids, and NaN-poisoned weight rows for the experts no pair selects.
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quantized_testing.h"

namespace metalrt::testing {

struct MoeShape {
  int64_t tokens, slots, experts, k, n;
};

// Distinct ids per token drawn from experts [0, used): experts >= used stay unselected.
inline std::vector<int32_t> RandomIds(int64_t tokens, int64_t slots, int64_t used, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> experts(static_cast<size_t>(used));
    for (int32_t e = 0; e < used; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), gen);
    ids.insert(ids.end(), experts.begin(), experts.begin() + slots);
  }
  return ids;
}

// NaN into the scales of weight rows [begin, end): any read of them gives a NaN output.
// MXFP4 has no NaN scale (E8M0 255 is 2^128, mxfp4_values.h): codes 6.0 under it are
// +inf, which against activations of both signs sum to NaN.
inline void PoisonRows(const WeightSpec& s, std::vector<Tensor>& w, int64_t begin, int64_t end) {
  if (s.format == QuantFormat::kMxfp4 || s.format == QuantFormat::kMxfp4Gguf) {
    const int64_t row_bytes = w[0].dim(1);
    std::memset(w[0].data_as<uint8_t>() + begin * row_bytes, 0x77, (end - begin) * row_bytes);
    if (s.format == QuantFormat::kMxfp4) {
      std::memset(w[1].data_as<uint8_t>() + begin * w[1].dim(1), 255, (end - begin) * w[1].dim(1));
    } else {
      for (int64_t i = begin * row_bytes; i < end * row_bytes; i += 17) w[0].data_as<uint8_t>()[i] = 255;
    }
    return;
  }
  if (IsAffine(s)) {
    const int64_t groups = w[1].dim(1);
    for (int64_t i = begin * groups; i < end * groups; ++i)
      StoreFromF32(w[1].data(), w[1].dtype(), i, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const int64_t block_bytes = BlockBytes(s.format), row_bytes = w[0].dim(1);
  auto* bytes = w[0].data_as<uint8_t>();
  const uint16_t nan = 0x7E00;
  for (int64_t r = begin; r < end; ++r)
    for (int64_t b = 0; b < row_bytes / block_bytes; ++b)
      for (int offset : HalfFields(s.format)) std::memcpy(bytes + r * row_bytes + b * block_bytes + offset, &nan, 2);
}

}  // namespace metalrt::testing
