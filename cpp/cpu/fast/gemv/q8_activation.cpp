#include "cpu/fast/gemv/q8_activation.h"

#include <cmath>
#include <cstring>

namespace metalrt::cpu::fast {
namespace {

// v rounded half away from zero and clamped to [-127, 127], branch-free so the loop
// over a block vectorises: a sign branch here mispredicted on every other value and
// made this pass ~10% of a decode step. copysign and the clamps are bit operations
// and min/max, never library calls.
// The conversion truncates toward zero (one cvttps2dq per vector).
inline int32_t Code(float v) {
  v = v > 127.0f ? 127.0f : v;
  v = v < -127.0f ? -127.0f : v;
  return static_cast<int32_t>(v + std::copysign(0.5f, v));
}

}  // namespace

bool QuantizeRowsQ8(const float* x, int64_t rows, int64_t k, Q8Block* blocks) {
  const int64_t count = rows * (k / 32);
  for (int64_t b = 0; b < count; ++b) {
    const float* v = x + 32 * b;
    // |x| by its bits: for finite floats the integer order of the magnitude bits is
    // the order of the magnitudes, and an exponent of all ones is a NaN or an infinity.
    uint32_t bits[32], amax_bits = 0, special = 0;
    std::memcpy(bits, v, sizeof(bits));
    for (int i = 0; i < 32; ++i) {
      const uint32_t a = bits[i] & 0x7fffffffu;
      amax_bits = a > amax_bits ? a : amax_bits;
      special |= a >= 0x7f800000u ? 1u : 0u;
    }
    if (special) return false;
    float amax;
    std::memcpy(&amax, &amax_bits, 4);
    Q8Block& out = blocks[b];
    float step;
    if (!BlockStep(amax, &out, &step)) continue;
    int32_t c[32];   // int32 here so the loop vectorises with one lane width
    for (int i = 0; i < 32; ++i) {
      const int32_t q = Code(v[i] / step);
      const int32_t r = Code((v[i] - step * float(q)) / out.d);
      out.q[i] = static_cast<int8_t>(q);
      out.r[i] = static_cast<int8_t>(r);
      c[i] = kResidualSteps * q + r;
    }
    int32_t sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      out.c[i] = static_cast<int16_t>(c[i]);
      sum[i / 16] += c[i];
    }
    out.sum[0] = sum[0];
    out.sum[1] = sum[1];
    out.dsum = out.d * float(sum[0] + sum[1]);
  }
  return true;
}

}  // namespace metalrt::cpu::fast
