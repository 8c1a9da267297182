// The decode attention's inner loops on 256-bit AVX2 + FMA vectors (attention_tile.h;
// compiled with -mavx2 -mfma, fast.cmake; called only when SelectedGemvIsa() allows
// AVX2). Partial vectors (head_dim not a multiple of 8) use masked loads and stores.
#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/fast/attention/attention_tile.h"

namespace metalrt::cpu::fast {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int64_t kWidth = 8;
  static __m256i Mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static __m256 Zero() { return _mm256_setzero_ps(); }
  static __m256 Set1(float x) { return _mm256_set1_ps(x); }
  static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 LoadPartial(const float* p, int64_t n) { return _mm256_maskload_ps(p, Mask(n)); }
  static __m256 Fma(__m256 a, __m256 b, __m256 acc) { return _mm256_fmadd_ps(a, b, acc); }
  static __m256 Mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  // 8 vectors to one in three levels, each adding pairs after a shuffle that lines up
  // lanes of two inputs: (1) a0, a1 within 64 bits, (2) 4 inputs per 128-bit half, (3)
  // the halves.
  static __m256 SumEach(const __m256* a) {
    __m256 b[4];
    for (int i = 0; i < 4; ++i)
      b[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    const __m256 c0 = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x44), _mm256_shuffle_ps(b[0], b[1], 0xEE));
    const __m256 c1 = _mm256_add_ps(_mm256_shuffle_ps(b[2], b[3], 0x44), _mm256_shuffle_ps(b[2], b[3], 0xEE));
    return _mm256_add_ps(_mm256_permute2f128_ps(c0, c1, 0x20), _mm256_permute2f128_ps(c0, c1, 0x31));
  }
  static float Sum(__m256 a) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
  }
  static void Store(float* p, __m256 a) { _mm256_storeu_ps(p, a); }
  static void StorePartial(float* p, int64_t n, __m256 a) { _mm256_maskstore_ps(p, Mask(n), a); }
  static __m256 Add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256 Max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static float MaxOf(__m256 a) {
    __m128 v = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    v = _mm_max_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
  }
  static __m256 Exp(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(ExpPoly::kMin), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(ExpPoly::kMin));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(ExpPoly::kLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ExpPoly::kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ExpPoly::kLn2Lo), r);
    __m256 p = _mm256_set1_ps(ExpPoly::kP[0]);
    for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ExpPoly::kP[i]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
  }
};

}  // namespace

AttentionKernels AttentionKernelsAvx2() { return KernelsOf<Avx2>(); }

}  // namespace metalrt::cpu::fast
#endif
