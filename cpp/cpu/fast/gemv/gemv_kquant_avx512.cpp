// The m = 1 K-quant GEMV on AVX-512 VNNI (gemv_kquant_avx512.h). The generic kernel
// (gemv_kernel.h) decoded each 32-value sub-block's 6-bit scale and min in scalar code
// and fed it through a 256-bit dot: ~25% of the bandwidth probe on Llama-3.2-1B Q4_K_M
// at every thread count (bench/results/sizes-h200-16core-*.json). Here a row's
// 256-value super-block is two 512-bit loads of codes (one of Q6_K's low bits plus a
// broadcast of its top bits), its eight (Q6_K: sixteen) scales are decoded once with
// word operations and converted in one instruction, and R rows per pass share the
// activation's loads.
//
// The math is EightRowsQ4's (gemv_avx512_vnni.cpp): the activation's int16 codes
// c = 256 h + l (q8_activation.h) split into a signed and an unsigned byte, so
// u c = 256 (u h) + l u in four vpdpbusd per 64 codes; each int32 lane sums 4 products,
// |4 u c| <= 4 * 63 * 32385 < 2^24: exact in f32. Lane groups of a 512-bit load: for
// Q4_K and Q5_K, codes qs[64 H + b] are, in the low nibbles, sub-blocks 4H (b < 32)
// and 4H + 2, in the high nibbles 4H + 1 and 4H + 3 (ggml-common.h's block_q4_K);
// for Q6_K, value 128 H + b (low nibbles) and 128 H + 64 + b (high), 16 values per
// 128-bit lane, one scale each. The activation bytes are laid out per call in the
// order those loads read them. A row's result depends on no other row (any thread
// split gives the same bytes).
#include "cpu/fast/gemv/gemv_kquant_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "cpu/fast/gemv/gemv_prefetch_avx512.h"

namespace metalrt::cpu::fast {
namespace {

constexpr int kRows = 4;   // weight rows per pass

// One call's activation, split and reordered once per thread: h, l are the bytes of
// c = 256 h + l, 256 per super-block in the order the format's code loads read them;
// d and dsum per 32-value block (Q4_K, Q5_K: natural order); Q6_K's d16 (d per 16
// values) and bias16 (-32 d sum c over the 16 values: its codes are u - 32).
struct SplitActivation {
  std::vector<int8_t> h;
  std::vector<uint8_t> l;
  std::vector<float> d, dsum, d16, bias16;
};

// Q4_K / Q5_K read a super-block's 32-value blocks as (0, 2), (1, 3), (4, 6), (5, 7).
constexpr int kOrderK4[8] = {0, 2, 1, 3, 4, 6, 5, 7};

void Split(const GemvArgs& a, bool q6, SplitActivation* s) {
  const int64_t blocks = a.k / 32;
  s->h.resize(size_t(a.k));
  s->l.resize(size_t(a.k));
  s->d.resize(size_t(blocks));
  s->dsum.resize(size_t(blocks));
  s->d16.resize(size_t(2 * blocks));
  s->bias16.resize(size_t(2 * blocks));
  for (int64_t t = 0; t < blocks; ++t) {
    const Q8Block& xb = a.x[t];
    const int64_t slot = q6 ? t : (t & ~int64_t{7}) + kOrderK4[t & 7];
    const __m512i c = _mm512_loadu_si512(xb.c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s->h.data() + 32 * slot), _mm512_cvtepi16_epi8(_mm512_srai_epi16(c, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s->l.data() + 32 * slot), _mm512_cvtepi16_epi8(c));
    s->d[size_t(t)] = xb.d;
    s->dsum[size_t(t)] = xb.dsum;
    for (int half = 0; half < 2; ++half) {
      s->d16[size_t(2 * t + half)] = xb.d;
      s->bias16[size_t(2 * t + half)] = -32.0f * xb.d * float(xb.sum[half]);
    }
  }
}

inline uint32_t Word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float Half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// The eight 6-bit scales (bytes 0-7) and mins (8-15) of a Q4_K / Q5_K super-block's
// 12 scale bytes s: sub-blocks 0-3 are s[j] and s[j + 4] & 63; 4-7 take their low four
// bits from s[j + 4]'s nibbles and their top two from the bits 6-7 of s[j - 4] (scales)
// and s[j] (mins), as the oracle's ScaleMinK4 (cpu/quantized_blocks.cpp).
inline __m128i ScalesMinsK4(const uint8_t* s) {
  const uint32_t w0 = Word(s), w1 = Word(s + 4), w2 = Word(s + 8);
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
  return _mm_setr_epi32(int(sc_lo), int(sc_hi), int(m_lo), int(m_hi));
}

// sum u c per int32 lane (4 products) for codes u against the activation bytes h, l.
inline __m512i CodeDot(__m512i u, __m512i h, __m512i l) {
  return _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, h), 8), l, u);
}

inline __m512i Load64(const void* p) { return _mm512_loadu_si512(p); }

// Per 16-bit word, the shift of the lower 256 bits (16 words) and of the upper.
inline __m512i HalfShifts(int lower, int upper) {
  return _mm512_inserti64x4(_mm512_set1_epi16(short(lower)), _mm256_set1_epi16(short(upper)), 1);
}

// Q4_K (kFive false) or Q5_K rows row[0..R-1] against the split activation x.
template <bool kFive, int R>
void RowsQ4K(const GemvArgs& a, const SplitActivation& x, const int64_t* row, float* out) {
  constexpr int kBytes = kFive ? 176 : 144;
  const uint8_t* p[R];
  for (int w = 0; w < R; ++w) p[w] = a.data + row[w] * a.row_bytes;
  __m512 acc[R];
  __m256 bias[R];
  for (int w = 0; w < R; ++w) {
    acc[w] = _mm512_setzero_ps();
    bias[w] = _mm256_setzero_ps();
  }
  const __m512i mask = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
  // Lanes 0-7 take sub-block 4H + (hi) of the 8 scales, lanes 8-15 sub-block 4H + 2 + (hi).
  const __m512i index[2][2] = {{_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3)},
                               {_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
                                _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)}};
  // Q5_K: bit j of qh[b] is sub-block j's fifth bit, moved to bit 0 of each byte.
  const __m512i fifth[2][2] = {{HalfShifts(0, 2), HalfShifts(1, 3)}, {HalfShifts(4, 6), HalfShifts(5, 7)}};
  Prefetcher<R, kBytes> prefetch(a, row[0]);
  for (int64_t sb = 0; sb < a.k / 256; ++sb) {
    const __m256 xd = _mm256_loadu_ps(x.d.data() + 8 * sb), xdsum = _mm256_loadu_ps(x.dsum.data() + 8 * sb);
    __m512 scale[R];
    for (int w = 0; w < R; ++w) {
      const __m128i sm = ScalesMinsK4(p[w] + 4);
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
      scale[w] = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(Half(p[w]))), xd));
      bias[w] = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(Half(p[w] + 2))), xdsum, bias[w]);
    }
    for (int H = 0; H < 2; ++H) {
      const int8_t* xh = x.h.data() + 256 * sb + 128 * H;
      const uint8_t* xl = x.l.data() + 256 * sb + 128 * H;
      const __m512i h_lo = Load64(xh), h_hi = Load64(xh + 64), l_lo = Load64(xl), l_hi = Load64(xl + 64);
      for (int w = 0; w < R; ++w) {
        const __m512i q = Load64(p[w] + (kFive ? 48 : 16) + 64 * H);
        __m512i lo = _mm512_and_si512(q, mask), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
        if constexpr (kFive) {
          const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[w] + 16)));
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, fifth[H][0]), one), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, fifth[H][1]), one), 4));
        }
        acc[w] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(CodeDot(lo, h_lo, l_lo)), _mm512_permutexvar_ps(index[H][0], scale[w]), acc[w]);
        acc[w] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(CodeDot(hi, h_hi, l_hi)), _mm512_permutexvar_ps(index[H][1], scale[w]), acc[w]);
      }
    }
    prefetch.Step();
    for (int w = 0; w < R; ++w) p[w] += kBytes;
  }
  for (int w = 0; w < R; ++w) {
    const __m256 b = bias[w];
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    out[w] = _mm512_reduce_add_ps(acc[w]) - _mm_cvtss_f32(v);
  }
}

// Q6_K rows row[0..R-1]: w = d * scales[e / 16] * (u - 32), u's low four bits from
// ql[64 H + b] (values 128 H + b: low nibble; + 64: high), its top two from
// qh[32 H + b % 32] at bits 2 (b / 32) (low nibbles) and 4 + 2 (b / 32) (high).
template <int R>
void RowsQ6K(const GemvArgs& a, const SplitActivation& x, const int64_t* row, float* out) {
  const uint8_t* p[R];
  for (int w = 0; w < R; ++w) p[w] = a.data + row[w] * a.row_bytes;
  __m512 acc[R], bias[R];
  for (int w = 0; w < R; ++w) acc[w] = bias[w] = _mm512_setzero_ps();
  const __m512i mask = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
  // Top bits to bits 4-5: the low nibbles' shifted left by 4 and 2, the high's right by 0 and 2.
  const __m512i up = HalfShifts(4, 2), down = HalfShifts(0, 2);
  // 128-bit lane L of half H's low-nibble vector is scale 8H + L, of its high one 8H + 4 + L.
  __m512i index[2][2];
  for (int H = 0; H < 2; ++H)
    for (int n = 0; n < 2; ++n) {
      alignas(64) int32_t idx[16];
      for (int i = 0; i < 16; ++i) idx[i] = 8 * H + 4 * n + i / 4;
      index[H][n] = _mm512_load_si512(idx);
    }
  Prefetcher<R, 210> prefetch(a, row[0]);
  for (int64_t sb = 0; sb < a.k / 256; ++sb) {
    const __m512 xd = _mm512_loadu_ps(x.d16.data() + 16 * sb), xb = _mm512_loadu_ps(x.bias16.data() + 16 * sb);
    __m512 scale[R];
    for (int w = 0; w < R; ++w) {
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[w] + 192));
      const __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)), _mm512_set1_ps(Half(p[w] + 208)));
      bias[w] = _mm512_fmadd_ps(s, xb, bias[w]);
      scale[w] = _mm512_mul_ps(s, xd);
    }
    for (int H = 0; H < 2; ++H) {
      const int8_t* xh = x.h.data() + 256 * sb + 128 * H;
      const uint8_t* xl = x.l.data() + 256 * sb + 128 * H;
      const __m512i h_lo = Load64(xh), h_hi = Load64(xh + 64), l_lo = Load64(xl), l_hi = Load64(xl + 64);
      for (int w = 0; w < R; ++w) {
        const __m512i ql = Load64(p[w] + 64 * H);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[w] + 128 + 32 * H)));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(ql, mask), _mm512_and_si512(_mm512_sllv_epi16(qh, up), top));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), mask),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, down), top));
        acc[w] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(CodeDot(lo, h_lo, l_lo)), _mm512_permutexvar_ps(index[H][0], scale[w]), acc[w]);
        acc[w] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(CodeDot(hi, h_hi, l_hi)), _mm512_permutexvar_ps(index[H][1], scale[w]), acc[w]);
      }
    }
    prefetch.Step();
    for (int w = 0; w < R; ++w) p[w] += 210;
  }
  for (int w = 0; w < R; ++w) out[w] = _mm512_reduce_add_ps(acc[w]) + _mm512_reduce_add_ps(bias[w]);
}

}  // namespace

void GemvRowsKQuantM1Avx512(const GemvArgs& a, int64_t begin, int64_t end) {
  PrefetchFirstPasses(a, begin, end, kRows);   // first: the split below overlaps the fetch
  thread_local SplitActivation split;   // per-thread scratch reused across calls
  const bool q6 = a.format == GemvFormat::kQ6_K;
  Split(a, q6, &split);
  for (int64_t j = begin; j < end; j += kRows) {
    int64_t row[kRows];
    float out[kRows];
    const int64_t count = end - j < kRows ? end - j : kRows;
    for (int w = 0; w < kRows; ++w) row[w] = j + (w < count ? w : count - 1);   // the tail repeats its last row
    if (q6) RowsQ6K<kRows>(a, split, row, out);
    else if (a.format == GemvFormat::kQ5_K) RowsQ4K<true, kRows>(a, split, row, out);
    else RowsQ4K<false, kRows>(a, split, row, out);
    for (int w = 0; w < count; ++w) a.out[j + w] = out[w];
  }
}

}  // namespace metalrt::cpu::fast
#endif
