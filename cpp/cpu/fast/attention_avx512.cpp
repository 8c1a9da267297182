// The decode attention's inner loops on 512-bit AVX-512 F vectors (attention_tile.h;
// compiled with -mavx512f, fast.cmake; called only when SelectedGemvIsa() allows the
// 512-bit kernels, i.e. the CPU has them and the OS saves the ZMM state). Partial
// vectors (head_dim not a multiple of 16) use opmask loads and stores.
#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/fast/attention_tile.h"

namespace metalrt::cpu::fast {
namespace {

struct Avx512 {
  static constexpr int64_t kWidth = 16;
  static __mmask16 Mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static __m512 Set1(float x) { return _mm512_set1_ps(x); }
  static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 LoadPartial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static __m512 Fma(__m512 a, __m512 b, __m512 acc) { return _mm512_fmadd_ps(a, b, acc); }
  static float Sum(__m512 a) { return _mm512_reduce_add_ps(a); }
  static void Store(float* p, __m512 a) { _mm512_storeu_ps(p, a); }
  static void StorePartial(float* p, int64_t n, __m512 a) { _mm512_mask_storeu_ps(p, Mask(n), a); }
};

}  // namespace

AttentionKernels AttentionKernelsAvx512() { return KernelsOf<Avx512>(); }

}  // namespace metalrt::cpu::fast
#endif
