// The activation side of the quantized GEMV: each row of x quantized once per call to
// blocks of 32 int8 pairs (ggml's Q8_1 idea, a scale plus the code sums so a weight
// format with a min or an offset needs no second pass over x, refined with a second
// byte): x ~= d * (254 q + r), q the int8 rounding of x at step 254 d and r the int8
// rounding of what q leaves, so the integer dots stay int8 x weight codes while x
// keeps ~16 bits. One int8 byte alone (what ggml does) measured NMSE up to 9e-4 on the
// default model's k/v projections (activation outliers 29x the RMS) and flipped a
// near-tied greedy token; with the second byte it is ~1e-9. This rounding is the fast
// provider's only departure from the oracle's f32 dot (bar: docs/cpu.md).
#pragma once
#include <cstdint>
#include <cstring>

namespace metalrt::cpu::fast {

// Codes q (coarse) and r (residual) of 32 values; sum[h] = sum of 254 q + r over half h
// (values 16h .. 16h + 15), the halves Q6_K's 16-value scales need.
struct Q8Block {
  float d;
  float dsum;   // d * (sum[0] + sum[1]); next to d, so one 8-byte load reads both
  int32_t sum[2];
  int8_t q[32];
  int8_t r[32];
  int16_t c[32];   // 254 q + r (|c| <= 32385): the AVX-512 kernel's one int16 dot per block
};

// The coarse code's step in units of d: 254 makes |r| <= 127 (|x - 254 d q| <= 127 d).
inline constexpr int kResidualSteps = 254;

// The step D = amax / 127 of a block whose largest |x| is amax, with d = D / 254
// written to out->d. False, with the block zeroed, when d is 0 or below ~1e-36 (where
// its reciprocal overflows): the block is then taken as zero. Shared by the scalar
// and the vector quantization so both round the same.
inline bool BlockStep(float amax, Q8Block* out, float* step) {
  *step = amax / 127.0f;
  out->d = *step / float(kResidualSteps);
  if (out->d > 0.0f && 1.0f / out->d <= 3.4e38f) return true;
  std::memset(out, 0, sizeof(*out));
  return false;
}

// rows x k f32 values (k a multiple of 32) as rows * k / 32 blocks, row-major: per
// block the step D = max|x| / 127 of q = round(x / D) in [-127, 127], d = D / 254 and
// r = round((x - D q) / d) in [-127, 127], rounding half away from zero (d = 0,
// q = r = 0 for an all-zero block).
// `blocks` has room for rows * k / 32 (the caller's scratch, reused across calls).
// False, with the blocks unspecified, when x holds a NaN or an infinity: int8 codes
// cannot carry them, so the caller leaves the call to the oracle, which propagates them.
bool QuantizeRowsQ8(const float* x, int64_t rows, int64_t k, Q8Block* blocks);

// QuantizeRowsQ8 on AVX-512 F/BW vectors, byte-identical to it (q8_activation_avx512.cpp);
// x86-64 only, callable only where SelectedGemvIsa() is avx512_vnni.
bool QuantizeRowsQ8Avx512(const float* x, int64_t rows, int64_t k, Q8Block* blocks);

}  // namespace metalrt::cpu::fast
