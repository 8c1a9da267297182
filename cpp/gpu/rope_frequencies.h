// The per-pair frequency table the RoPE kernels take (metal/rope_math.h explains why):
// f_i = inv_freq_i / 2pi in turns per position, inv_freq_i = base^(-2i / rotary_dim)
// computed in double exactly as the CPU oracle does (cpp/cpu/rope.cpp), passed as
// two floats hi + lo. Used by cpp/gpu/rope.cpp and cpp/gpu/qk_norm_rope.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/gpu_device.h"
#include "rope_args.h"

namespace metalrt::gpu {

// True when the kernels can serve rotary_dim: a token's cos|sin goes through threadgroup
// memory sized for kRopeMaxRotaryDim, and the table (rotary_dim floats) through setBytes,
// which takes fewer than kSetBytesLimit bytes: 1024 dims (exactly 4096 bytes) do not fit.
inline bool RopeKernelsServe(int64_t rotary_dim) {
  return rotary_dim <= kRopeMaxRotaryDim &&
         rotary_dim * static_cast<int64_t>(sizeof(float)) < static_cast<int64_t>(kSetBytesLimit);
}

// freq[2i] = hi, freq[2i + 1] = lo, for i < rotary_dim / 2.
inline std::vector<float> RopeTurnFrequencies(int64_t rotary_dim, float base) {
  const double two_pi = 6.283185307179586476925286766559;
  std::vector<float> freq(static_cast<size_t>(rotary_dim));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const double inv_freq = std::pow(static_cast<double>(base), -2.0 * i / rotary_dim);
    const double turns = inv_freq / two_pi;
    const float hi = static_cast<float>(turns);
    freq[2 * i] = hi;
    freq[2 * i + 1] = static_cast<float>(turns - hi);
  }
  return freq;
}

}  // namespace metalrt::gpu
