// The oracle's SwiGLU row (cpu/silu_and_mul.cpp): silu(g) = g / (1 + exp(-g)) times up,
// in f32 (Shazeer 2020, "GLU Variants Improve Transformer"). Shared with the fast
// fused GEMV's fallback off AVX-512, so both compute the same bits.
#pragma once
#include <cmath>
#include <cstdint>

namespace metalrt::cpu {

// gate[i] = silu(gate[i]) * up[i] for i < n.
inline void SiluAndMulRow(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace metalrt::cpu
