// The AVX2-width (256-bit) SIMD policy of the quantized GEMV, shared by gemv_avx2.cpp
// and gemv_avx512_vnni.cpp, which differ only in the integer dot (kVnni): AVX2 pairs
// products into int16 with maddubs (exact while codes stay below 128) and widens with
// madd; AVX-512 VNNI's dpbusd sums four u8 x s8 products straight into int32.
// Internal linkage throughout (see gemv_kernel.h). Lane j of a dot holds values
// 4j .. 4j + 3, so lanes 0-3 are the block's first half.
#pragma once
#include <immintrin.h>

#include "cpu/fast/gemv/gemv_kernel.h"

namespace metalrt::cpu::fast {
namespace {

template <bool kVnni>
struct X86 {
  using Codes = __m256i;
  using Dot = __m256i;
  using Acc = __m256;

  static Codes Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Codes SplitNibbles16(const uint8_t* qs) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
  }
  // Codes 2j and 2j + 1 in the low and high nibble of byte j (MLX affine 4-bit).
  static Codes InterleavedNibbles16(const uint8_t* q) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  }
  // table[c] for each code c < 16 (one byte shuffle within each 128-bit lane).
  static Codes Lookup16(const Codes& c, const int8_t* table) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table))), c);
  }
  // codes - offset as int8 (DotSigned reads them signed).
  static Codes Centered(const Codes& c, int offset) { return _mm256_sub_epi8(c, _mm256_set1_epi8(char(offset))); }
  static void NibblePlanes32(const uint8_t* qs, Codes* lo, Codes* hi) {
    const __m256i v = Load(qs), mask = _mm256_set1_epi8(15);
    *lo = _mm256_and_si256(v, mask);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  }
  // u (unsigned, < 128 for AVX2) times x (signed).
  static Dot DotUnsigned(__m256i u, __m256i x) {
    if constexpr (kVnni) {
      return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x);
    } else {
      return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
    }
  }
  static Dot DotSmall(const Codes& c, const int8_t* x) { return DotUnsigned(c, Load(reinterpret_cast<const uint8_t*>(x))); }
  // Signed codes: |w| * (x with w's sign); |-128| = 128 still fits the unsigned side.
  static Dot DotSigned(const Codes& c, const int8_t* x) {
    const __m256i xv = Load(reinterpret_cast<const uint8_t*>(x));
    return DotUnsigned(_mm256_sign_epi8(c, c), _mm256_sign_epi8(xv, c));
  }
  static Dot Combine(const Dot& coarse, const Dot& residual) {
    return _mm256_add_epi32(_mm256_mullo_epi32(coarse, _mm256_set1_epi32(kResidualSteps)), residual);
  }
  static Acc Zero() { return _mm256_setzero_ps(); }
  static Acc Fma(Acc acc, const Dot& d, float s0, float s1) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0)), acc);
  }
  static Acc Fma(Acc acc, const Dot& d, float s) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(s), acc); }
  static float Sum(Acc acc) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
  }
};

}  // namespace
}  // namespace metalrt::cpu::fast
