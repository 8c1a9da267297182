// RoPE math shared by metal/rope.metal, metal/qk_norm_rope.metal and
// metal/qkv_rope_cache.metal (Su et al. 2021,
// "RoFormer"): accurate cos/sin of the angle position * inv_freq_i, and the rotation
// of one feature pair exactly as the CPU oracle (cpp/cpu/rope.cpp) rounds it.
//
// Why not cos(float(position) * inv_freq): near position 131072 a float angle is
// spaced 2^-6 rad apart, so the product alone is off by up to ~8e-3 rad (and fast::cos
// is only specified on [-pi, pi]). Instead the host passes, per pair i, the frequency in
// turns f_i = inv_freq_i / 2pi computed in double and split into two floats
// (freq[2i] = hi, freq[2i + 1] = lo, hi + lo = f_i to ~2^-48 relative). The kernel
// reduces position * f_i modulo 1 turn with error-free products (fma) and exact
// fraction removals (x - rint(x)), converts the reduced turn to radians in [-pi, pi]
// with a two-float 2pi, and only then calls precise::cos / precise::sin. The angle's
// error is about half a float ulp of the reduced angle (<= 1.2e-7 rad) for positions
// up to 2^24, and grows gently (to ~1e-6 turns) towards 2^31. The reduction relies on
// IEEE evaluation order, which fast math's re-association would break: the metallib is
// built with -fno-fast-math (docs/apple-validation.md).
#ifndef METALRT_METAL_ROPE_MATH_H_
#define METALRT_METAL_ROPE_MATH_H_
#include <metal_stdlib>
#include "rope_args.h"
using namespace metal;

// 2pi = kTwoPiHi + kTwoPiLo (kTwoPiHi is 2pi rounded to float, kTwoPiLo the float
// nearest the rest).
constant float kTwoPiHi = 6.283185482e+00f;
constant float kTwoPiLo = -1.748455531e-07f;

// (cos, sin) of position * inv_freq_i; `freq` holds the hi/lo turn frequencies above.
inline float2 rope_cos_sin(int32_t position, constant float* freq, int32_t i) {
  const float f_hi = freq[2 * i], f_lo = freq[2 * i + 1];
  // position = ph * 65536 + pl with both parts exact in float. ph multiplies
  // frac(65536 f) instead of f: the whole turns of 65536 f times an integer drop out.
  const float ph = float(position >> 16), pl = float(position & 0xFFFF);
  const float scaled = 65536.0f * f_hi;        // exact (a power-of-two scaling)
  const float g_hi = scaled - rint(scaled);    // frac(65536 f_hi), exact
  const float g_lo = 65536.0f * f_lo;          // exact
  const float a = ph * g_hi;
  const float b = pl * f_hi;
  const float a_err = fma(ph, g_hi, -a);       // a + a_err == ph * g_hi exactly
  const float b_err = fma(pl, f_hi, -b);
  const float fa = a - rint(a);                // exact, in [-0.5, 0.5]
  const float fb = b - rint(b);
  // TwoSum (Knuth): whole + whole_err == fa + fb exactly.
  const float whole = fa + fb;
  const float fb_part = whole - fa;
  const float whole_err = (fa - (whole - fb_part)) + (fb - fb_part);
  // Everything below a few 2^-11 turns (for positions < 2^24); rounded normally.
  const float small = whole_err + a_err + b_err + ph * g_lo + pl * f_lo;
  const float turn = whole - rint(whole + small);   // turn + small in [-0.5, 0.5]
  const float angle = fma(turn, kTwoPiHi, fma(small, kTwoPiHi, turn * kTwoPiLo));
  return float2(precise::cos(angle), precise::sin(angle));
}

// The rotated pair (a c - b s, b c + a s) with each product rounded to f32 before the
// sum, as the CPU oracle computes it (separate statements: a compiler may fuse a
// multiply into an add only within one expression), so applying a cos|sin cache is
// bit-exact.
inline float2 rope_rotate(float a, float b, float c, float s) {
  const float a_c = a * c;
  const float b_s = b * s;
  const float b_c = b * c;
  const float a_s = a * s;
  return float2(a_c - b_s, b_c + a_s);
}

// Threads [0, threads) of a threadgroup fill cos_sin[0, half) with the cosines and
// cos_sin[half, 2 half) with the sines of one token; the caller then barriers.
inline void rope_token_cos_sin(int32_t position, constant float* freq, int32_t half,
                               threadgroup float* cos_sin, uint tid, int32_t threads) {
  for (int32_t i = int32_t(tid); i < half; i += threads) {
    const float2 cs = rope_cos_sin(position, freq, i);
    cos_sin[i] = cs.x;
    cos_sin[half + i] = cs.y;
  }
}

// Rotates `heads` consecutive head rows of head_dim features from `in` to `out` (which
// may be `in`) with one token's cos|sin (cos_sin[j], cos_sin[half + j] for pair j);
// features past rotary_dim are copied. Threads [0, threads) of the threadgroup share
// the work. NeoX pairs are (j, j + half), interleaved ones (2j, 2j + 1).
template <typename T, bool kNeox, typename CosSin>
inline void rope_rotate_heads(device const T* in, device T* out, int32_t heads, int32_t head_dim,
                              int32_t rotary_dim, CosSin cos_sin, uint tid, int32_t threads) {
  const int32_t half = rotary_dim / 2;
  const int32_t per_head = head_dim - half;   // half pairs, then the pass-through features
  for (int32_t e = int32_t(tid); e < heads * per_head; e += threads) {
    const int32_t h = e / per_head, j = e % per_head;
    device const T* x = in + long(h) * head_dim;
    device T* y = out + long(h) * head_dim;
    if (j < half) {
      const int32_t ia = kNeox ? j : 2 * j, ib = kNeox ? j + half : 2 * j + 1;
      const float2 r = rope_rotate(float(x[ia]), float(x[ib]), cos_sin[j], cos_sin[half + j]);
      y[ia] = T(r.x);
      y[ib] = T(r.y);
    } else {
      const int32_t f = rotary_dim + (j - half);
      y[f] = x[f];
    }
  }
}

#endif  // METALRT_METAL_ROPE_MATH_H_
