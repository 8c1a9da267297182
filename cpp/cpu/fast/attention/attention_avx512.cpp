// The decode attention's inner loops on 512-bit AVX-512 F vectors (attention_tile.h;
// compiled with -mavx512f, fast.cmake; called only when SelectedGemvIsa() allows the
// 512-bit kernels, i.e. the CPU has them and the OS saves the ZMM state). Partial
// vectors (head_dim not a multiple of 16) use opmask loads and stores.
#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/fast/attention/attention_tile.h"

namespace metalrt::cpu::fast {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int64_t kWidth = 16;
  static __mmask16 Mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static __m512 Set1(float x) { return _mm512_set1_ps(x); }
  static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 LoadPartial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static __m512 Fma(__m512 a, __m512 b, __m512 acc) { return _mm512_fmadd_ps(a, b, acc); }
  static __m512 Mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static float Sum(__m512 a) { return _mm512_reduce_add_ps(a); }
  // 16 vectors to one in four levels, each adding pairs after a shuffle that lines up
  // lanes of two inputs: (1) a0, a1 within 64 bits, (2) 4 inputs per 128-bit lane,
  // (3) and (4) the 128-bit lanes; 45 instructions for 16 sums.
  static __m512 SumEach(const __m512* a) {
    __m512 b[8], c[4];
    for (int i = 0; i < 8; ++i)
      b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; ++i)
      c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    const __m512 d01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
    const __m512 d23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, 0x88), _mm512_shuffle_f32x4(d01, d23, 0xDD));
  }
  static void Store(float* p, __m512 a) { _mm512_storeu_ps(p, a); }
  static void StorePartial(float* p, int64_t n, __m512 a) { _mm512_mask_storeu_ps(p, Mask(n), a); }
  static __m512 Add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 Max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
  static float MaxOf(__m512 a) { return _mm512_reduce_max_ps(a); }
  static __m512 Exp(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ExpPoly::kMin), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(ExpPoly::kMin));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ExpPoly::kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ExpPoly::kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ExpPoly::kLn2Lo), r);
    __m512 p = _mm512_set1_ps(ExpPoly::kP[0]);
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ExpPoly::kP[i]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i two_n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(two_n));
  }
};

}  // namespace

AttentionKernels AttentionKernelsAvx512() { return KernelsOf<Avx512>(); }

}  // namespace metalrt::cpu::fast
#endif
