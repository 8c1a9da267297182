// The oracle's gated-unit rows (cpu/silu_and_mul.cpp), in f32: SwiGLU's silu(g) =
// g / (1 + exp(-g)) times up (Shazeer 2020, "GLU Variants Improve Transformer"), and
// gpt-oss's clamped, interleaved swiglu_oai (metalrt/expert_ops.h). SiluAndMulRow is
// shared with the fast fused GEMV's fallback off AVX-512, so both compute the same bits.
#pragma once
#include <cmath>
#include <cstdint>

namespace metalrt::cpu {

// gate[i] = silu(gate[i]) * up[i] for i < n.
inline void SiluAndMulRow(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// out[i] = (u + 1) * g / (1 + exp(-alpha g)) with g = min(gate[step i], limit) and
// u = clamp(up[step i], -limit, limit), for i < n; the comparisons keep a NaN. Interleaved
// pairs: up = gate + 1, step 2; halves: up = gate + n, step 1.
inline void SwigluOaiRow(const float* gate, const float* up, int64_t step, int64_t n, float alpha,
                         float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[step * i] > limit ? limit : gate[step * i];
    float u = up[step * i] > limit ? limit : up[step * i];
    u = u < -limit ? -limit : u;
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  }
}

}  // namespace metalrt::cpu
