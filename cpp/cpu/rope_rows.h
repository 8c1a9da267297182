// The RoPE oracle's two steps (cpu/rope.cpp), shared with the fast fused provider
// (cpu/fast/rowwise/qkv_rope_cache.cpp) so both compute the same bytes by one definition.
#pragma once
#include <cstdint>

namespace metalrt::cpu {

// cos_sin[0, half) = cos(angle_i), cos_sin[half, 2 half) = sin(angle_i), half =
// rotary_dim / 2, angle_i = position * base^(-2i / rotary_dim), all in double, rounded
// once to f32.
void RopeCosSinRow(int32_t position, int64_t rotary_dim, float base, float* cos_sin);

// Rotates the first rotary_dim features of one head's f32 row in place: NeoX pairs
// (i, i + half), interleaved pairs (2i, 2i + 1); (a, b) -> (a c - b s, b c + a s) in f32.
void RopeRotateRow(float* row, const float* cos_sin, int64_t rotary_dim, bool neox);

}  // namespace metalrt::cpu
