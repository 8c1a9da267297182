// The CPU oracle's f32 dot product of the matrix-vector ops (quantized_matmul_bt,
// moe_matmul_bt): 8 partial sums, lane j accumulating x[i] * w[i] for i = j (mod 8) in
// increasing i, combined as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), the order
// of the dense matmul oracle (cpp/cpu/matmul.cpp).
#pragma once
#include <cstdint>

namespace metalrt::cpu {

inline float Dot8(const float* x, const float* w, int64_t k) {
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += x[i + j] * w[i + j];
  for (int j = 0; i < k; ++i, ++j) lane[j] += x[i] * w[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

}  // namespace metalrt::cpu
