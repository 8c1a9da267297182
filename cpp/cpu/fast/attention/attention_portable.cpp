// The decode attention's inner loops in portable C++ (attention_tile.h): vectors of 8
// floats as arrays whose loops the compiler maps to SSE2 or NEON, every CPU's baseline.
#include "cpu/fast/attention/attention_tile.h"

#include <cmath>
#include <cstring>

#include "cpu/fast/simd/cpu_features.h"

namespace metalrt::cpu::fast {
namespace {

struct Lanes8 {
  static constexpr int64_t kWidth = 8;
  struct Vec {
    float v[kWidth];
  };
  static Vec Zero() { return Vec{}; }
  static Vec Set1(float x) {
    Vec r;
    for (int l = 0; l < kWidth; ++l) r.v[l] = x;
    return r;
  }
  static Vec Load(const float* p) {
    Vec r;
    for (int l = 0; l < kWidth; ++l) r.v[l] = p[l];
    return r;
  }
  static Vec LoadPartial(const float* p, int64_t n) {
    Vec r{};
    for (int64_t l = 0; l < n; ++l) r.v[l] = p[l];
    return r;
  }
  static Vec Fma(const Vec& a, const Vec& b, Vec acc) {
    for (int l = 0; l < kWidth; ++l) acc.v[l] += a.v[l] * b.v[l];
    return acc;
  }
  static Vec Mul(Vec a, const Vec& b) {
    for (int l = 0; l < kWidth; ++l) a.v[l] *= b.v[l];
    return a;
  }
  // Lanes folded as a tree (l += l + 4, l += l + 2, l += l + 1), as the oracle's Dot.
  static float Sum(Vec a) {
    for (int width = kWidth / 2; width > 0; width /= 2)
      for (int l = 0; l < width; ++l) a.v[l] += a.v[l + width];
    return a.v[0];
  }
  static Vec SumEach(const Vec* a) {
    Vec r;
    for (int l = 0; l < kWidth; ++l) r.v[l] = Sum(a[l]);
    return r;
  }
  static void Store(float* p, const Vec& a) {
    for (int l = 0; l < kWidth; ++l) p[l] = a.v[l];
  }
  static void StorePartial(float* p, int64_t n, const Vec& a) {
    for (int64_t l = 0; l < n; ++l) p[l] = a.v[l];
  }
  static Vec Add(Vec a, const Vec& b) {
    for (int l = 0; l < kWidth; ++l) a.v[l] += b.v[l];
    return a;
  }
  static Vec Max(Vec a, const Vec& b) {
    for (int l = 0; l < kWidth; ++l) a.v[l] = a.v[l] > b.v[l] ? a.v[l] : b.v[l];
    return a;
  }
  static float MaxOf(const Vec& a) {
    float m = a.v[0];
    for (int l = 1; l < kWidth; ++l) m = a.v[l] > m ? a.v[l] : m;
    return m;
  }
  // ExpPoly lane by lane, as the SIMD policies (the same n, r and polynomial).
  static Vec Exp(Vec a) {
    for (int l = 0; l < kWidth; ++l) {
      const float x = a.v[l];
      if (!(x >= ExpPoly::kMin)) {
        a.v[l] = 0.0f;
        continue;
      }
      const float n = std::nearbyint(x * ExpPoly::kLog2e);
      float r = x - n * ExpPoly::kLn2Hi;
      r = r - n * ExpPoly::kLn2Lo;
      float p = ExpPoly::kP[0];
      for (int i = 1; i < 6; ++i) p = p * r + ExpPoly::kP[i];
      p = p * (r * r) + (r + 1.0f);
      const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
      float two_n;
      std::memcpy(&two_n, &bits, sizeof(two_n));
      a.v[l] = p * two_n;
    }
    return a;
  }
};

}  // namespace

AttentionKernels AttentionKernelsPortable() { return KernelsOf<Lanes8>(); }

AttentionKernels SelectedAttentionKernels() {
  switch (SelectedGemvIsa()) {
#if defined(__x86_64__)
    case GemvIsa::kAvx2: return AttentionKernelsAvx2();
    case GemvIsa::kAvx512Vnni: return AttentionKernelsAvx512();
#endif
    default: return AttentionKernelsPortable();
  }
}

}  // namespace metalrt::cpu::fast
