// The AVX-512 exp rows (exp_avx512.h). Internal linkage for everything but the entry
// points, so no AVX-512 code is shared with the rest of the binary.
#include "cpu/fast/simd/exp_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/fast/simd/exp_poly.h"

namespace metalrt::cpu::fast {
namespace {

// exp(x) for 16 lanes (exp_avx512.h: Cephes expf's reduction and polynomial).
__m512 Exp(__m512 x) {
  // Past +-100 the result is inf or 0 whatever x; the clamp keeps j finite (a NaN x
  // becomes 100, and the NaN returns through gate).
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-100.0f));
  const __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ExpPoly::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(ExpPoly::kLn2Hi), x);
  r = _mm512_fnmadd_ps(j, _mm512_set1_ps(ExpPoly::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(ExpPoly::kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ExpPoly::kP[i]));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, j);
}

__m512 Swiglu(__m512 g, __m512 u) {
  const __m512 denominator = _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), g)));
  return _mm512_mul_ps(_mm512_div_ps(g, denominator), u);
}

// (u + 1) * g * sigmoid(alpha g) of 16 gate and up lanes. min/max return their second
// operand when either is NaN, so the limits come first.
__m512 SwigluOaiLanes(__m512 gate, __m512 up, __m512 alpha, __m512 limit) {
  const __m512 g = _mm512_min_ps(limit, gate);
  const __m512 u = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), limit), _mm512_min_ps(limit, up));
  const __m512 denominator =
      _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(alpha, g))));
  return _mm512_mul_ps(_mm512_add_ps(u, _mm512_set1_ps(1.0f)), _mm512_div_ps(g, denominator));
}

// SwigluOaiLanes of 16 interleaved pairs (a: pairs 0-7, b: pairs 8-15).
__m512 SwigluOai(__m512 a, __m512 b, __m512 alpha, __m512 limit) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  return SwigluOaiLanes(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b), alpha, limit);
}

}  // namespace

void SwigluOaiRowAvx512(const float* x, int64_t n, float alpha, float limit, float* out) {
  const __m512 a = _mm512_set1_ps(alpha), l = _mm512_set1_ps(limit);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, SwigluOai(_mm512_loadu_ps(x + 2 * i), _mm512_loadu_ps(x + 2 * i + 16), a, l));
  if (i < n) {
    const int64_t values = 2 * (n - i);   // 2 .. 30 floats left
    const auto low = static_cast<__mmask16>(values >= 16 ? 0xFFFFu : (1u << values) - 1);
    const auto high = static_cast<__mmask16>(values > 16 ? (1u << (values - 16)) - 1 : 0u);
    const __m512 y = SwigluOai(_mm512_maskz_loadu_ps(low, x + 2 * i), _mm512_maskz_loadu_ps(high, x + 2 * i + 16), a, l);
    _mm512_mask_storeu_ps(out + i, static_cast<__mmask16>((1u << (n - i)) - 1), y);
  }
}

void SwigluOaiHalvesRowAvx512(const float* gate, const float* up, int64_t n, float alpha, float limit,
                              float* out) {
  const __m512 a = _mm512_set1_ps(alpha), l = _mm512_set1_ps(limit);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, SwigluOaiLanes(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i), a, l));
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mask, SwigluOaiLanes(_mm512_maskz_loadu_ps(mask, gate + i),
                                                        _mm512_maskz_loadu_ps(mask, up + i), a, l));
  }
}

void SiluAndMulRowAvx512(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Swiglu(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mask,
                          Swiglu(_mm512_maskz_loadu_ps(mask, gate + i), _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

float ExpShiftedRowAvx512(float* s, int64_t n, float shift) {
  const __m512 m = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 w = Exp(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, w);
    sum = _mm512_add_ps(sum, w);
  }
  if (j < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 w = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), m));
    _mm512_mask_storeu_ps(s + j, mask, w);
    sum = _mm512_mask_add_ps(sum, mask, sum, w);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace metalrt::cpu::fast
#else
#include <stdexcept>

// Off x86 no caller selects the AVX-512 rows; these only satisfy the linker.
namespace metalrt::cpu::fast {
namespace {
[[noreturn]] void NoKernel() { throw std::logic_error("the AVX-512 exp rows exist only on x86-64"); }
}  // namespace
void SiluAndMulRowAvx512(const float*, const float*, int64_t, float*) { NoKernel(); }
void SwigluOaiRowAvx512(const float*, int64_t, float, float, float*) { NoKernel(); }
void SwigluOaiHalvesRowAvx512(const float*, const float*, int64_t, float, float, float*) { NoKernel(); }
float ExpShiftedRowAvx512(float*, int64_t, float) { NoKernel(); }
}  // namespace metalrt::cpu::fast
#endif
