#include "cpu/fast/q8_activation.h"

#include <cmath>

namespace metalrt::cpu::fast {
namespace {

// v rounded half away from zero and clamped to [-127, 127]; comparisons rather than
// fmax/nearbyint, which are library calls here (errno semantics) in a per-value loop.
int8_t Code(float v) {
  v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
  return static_cast<int8_t>(static_cast<int>(v + (v >= 0.0f ? 0.5f : -0.5f)));
}

}  // namespace

bool QuantizeRowsQ8(const float* x, int64_t rows, int64_t k, std::vector<Q8Block>* blocks) {
  blocks->resize(static_cast<size_t>(rows * (k / 32)));
  for (size_t b = 0; b < blocks->size(); ++b) {
    const float* v = x + 32 * static_cast<int64_t>(b);
    float amax = 0.0f, probe = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(v[i]);
      amax = a > amax ? a : amax;
      probe += v[i] * 0.0f;   // NaN exactly when some v[i] is NaN or infinite
    }
    if (probe != 0.0f) return false;
    Q8Block& out = (*blocks)[b];
    const float step = amax / 127.0f;
    out.d = step / float(kResidualSteps);
    // A block below ~1e-36 (where the reciprocals overflow) is taken as zero.
    const bool zero = !(out.d > 0.0f) || !(1.0f / out.d <= 3.4e38f);
    if (zero) out.d = 0.0f;
    int sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int8_t q = zero ? 0 : Code(v[i] / step);
      const int8_t r = zero ? 0 : Code((v[i] - step * float(q)) / out.d);
      out.q[i] = q;
      out.r[i] = r;
      sum[i / 16] += kResidualSteps * q + r;
    }
    out.sum[0] = sum[0];
    out.sum[1] = sum[1];
    out.dsum = out.d * float(sum[0] + sum[1]);
  }
  return true;
}

}  // namespace metalrt::cpu::fast
