#include "cpu/fast/q8_activation.h"

#include <cmath>

namespace metalrt::cpu::fast {

bool QuantizeRowsQ8(const float* x, int64_t rows, int64_t k, std::vector<Q8Block>* blocks) {
  blocks->resize(static_cast<size_t>(rows * (k / 32)));
  for (size_t b = 0; b < blocks->size(); ++b) {
    const float* v = x + 32 * static_cast<int64_t>(b);
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    float sum_x = 0.0f;   // NaN or infinite exactly when some v[i] is
    for (int i = 0; i < 32; ++i) sum_x += v[i] * 0.0f;
    if (sum_x != 0.0f) return false;
    Q8Block& out = (*blocks)[b];
    out.d = amax / 127.0f;
    // A block below ~1e-36 (where 127 / amax overflows) is taken as zero.
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (!(inv <= 3.4e38f)) inv = out.d = 0.0f;
    int sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(v[i] * inv));
      out.q[i] = static_cast<int8_t>(q);
      sum[i / 16] += q;
    }
    out.sum[0] = static_cast<int16_t>(sum[0]);
    out.sum[1] = static_cast<int16_t>(sum[1]);
  }
  return true;
}

}  // namespace metalrt::cpu::fast
