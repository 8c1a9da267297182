// The quantized GEMV for AVX-512 VNNI (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni, see fast.cmake; called only when SelectedGemvIsa() found the CPU bits
// and the OS's ZMM state in XCR0). The codes are loaded and unpacked as for AVX2
// (gemv_x86.h); the dot is on full 512-bit vectors: the 32 codes widened to int16
// against the activation's int16 codes c = 254 q + r (q8_activation.h) in one vpmaddwd
// (pairs of products summed into int32), instead of two int8 dots, a multiply and an
// add on 256 bits. Lane l holds values 2l and 2l + 1 (|u c| <= 255 * 32385, two per
// lane: exact in int32, and below 2^24, so exact in the f32 the lanes are converted
// to); lanes 0-7 are the block's first half.
//
// Decode's m = 1 against Q4_0, Q4_1 and Q8_0 (the default model's weights) has a kernel
// of its own here, four weight rows per pass: the generic one spends as many
// instructions per block on its scalar f16 scales as on the dot.
#include "cpu/fast/gemv_args.h"

#if defined(__x86_64__)
#include "cpu/fast/gemv_x86.h"

namespace metalrt::cpu::fast {
namespace {

struct Avx512 : X86<true> {
  using Dot = __m512i;
  using Acc = __m512;
  static constexpr bool kWideDot = true;

  // Low nibbles in bytes 0-15, high in 16-31: the 16 bytes in both lanes, the upper
  // lane's 16-bit words shifted right by 4, then masked.
  static Codes SplitNibbles16(const uint8_t* qs) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    const __m256i shifts = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    return _mm256_and_si256(_mm256_srlv_epi16(v, shifts), _mm256_set1_epi8(15));
  }
  template <bool kSigned>
  static Dot BlockDot(const Codes& codes, const Q8Block& xb) {
    const __m512i w = kSigned ? _mm512_cvtepi8_epi16(codes) : _mm512_cvtepu8_epi16(codes);
    return _mm512_madd_epi16(w, _mm512_loadu_si512(xb.c));
  }
  static Acc Zero() { return _mm512_setzero_ps(); }
  static Acc Fma(Acc acc, const Dot& d, float s) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(s), acc); }
  static Acc Fma(Acc acc, const Dot& d, float s0, float s1) {
    const __m512d halves = _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(s0)),
                                              _mm256_castps_pd(_mm256_set1_ps(s1)), 1);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_castpd_ps(halves), acc);
  }
  static float Sum(Acc acc) { return _mm512_reduce_add_ps(acc); }
};

// Rows per pass of the m = 1 kernel.
constexpr int kRows = 4;

// Two rows' 32 codes as int16 in two vectors: lo holds values 0-15 of row 0 then of
// row 1, hi values 16-31 (Q4: the 16 bytes of each row, low and high nibbles).
template <GemvFormat F>
inline void PairCodes(const uint8_t* p0, const uint8_t* p1, __m512i* lo, __m512i* hi) {
  if constexpr (F == GemvFormat::kQ8_0) {
    *lo = _mm512_cvtepi8_epi16(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2), reinterpret_cast<const __m128i*>(p0 + 2)));
    *hi = _mm512_cvtepi8_epi16(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 18), reinterpret_cast<const __m128i*>(p0 + 18)));
  } else {
    constexpr int kQs = F == GemvFormat::kQ4_0 ? 2 : 4;
    const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + kQs), reinterpret_cast<const __m128i*>(p0 + kQs));
    const __m256i mask = _mm256_set1_epi8(15);
    *lo = _mm512_cvtepu8_epi16(_mm256_and_si256(q, mask));
    *hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask));
    // Q4_0's offset is taken out of the codes (q - 8), as in gemv_kernel.h.
    if constexpr (F == GemvFormat::kQ4_0) {
      *lo = _mm512_sub_epi16(*lo, _mm512_set1_epi16(8));
      *hi = _mm512_sub_epi16(*hi, _mm512_set1_epi16(8));
    }
  }
}

// Weight rows row[0..3] (repeats allowed: the tail pads with its last row) against the
// one activation row, out[w] = row[w]'s result. Per block, the four rows' f16 scale
// (and Q4_1 min) words go to one vector, converted at once and multiplied by the
// block's (d, d sum c) pair. Rows are taken in pairs, one row per 256-bit half: the
// activation's 32 int16 codes as values 0-15 and 16-31 each in both halves, one
// vpmaddwd and one vpdpwssd give each half its row's 8 lanes (|4 u c| < 2^24 for these
// formats: exact in f32), converted and FMA-ed with the two rows' scales, one per half.
// The halves of different rows never mix, so a row's result does not depend on its
// companions (and is the same on any thread split).
template <GemvFormat F>
void FourRows(const GemvArgs& a, const int64_t* row, float* out) {
  constexpr int kBytes = F == GemvFormat::kQ4_0 ? 18 : F == GemvFormat::kQ4_1 ? 20 : 34;
  const uint8_t* p[kRows];
  for (int w = 0; w < kRows; ++w) p[w] = a.data + row[w] * a.row_bytes;
  __m512 acc[kRows / 2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m256 bias = _mm256_setzero_ps();
  const __m512i scale_index[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                  _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)};
  const int64_t blocks = a.k / 32;
  // The four rows are four interleaved streams, which the hardware prefetchers
  // follow poorly from memory (Q8_0's lm_head ran 3x slower than one row at a time):
  // each block prefetches its share of the rows two passes ahead, one sequential
  // stream (an address past the weight's end is harmless: prefetches never fault; it
  // is computed as an integer, no pointer is formed past the end).
  constexpr int kAheadLines = (kRows * kBytes + 63) / 64;
  uintptr_t ahead = reinterpret_cast<uintptr_t>(a.data) + uintptr_t((row[0] + 2 * kRows) * a.row_bytes);
  for (int64_t t = 0; t < blocks; ++t) {
    const Q8Block& xb = a.x[t];
    // Lanes 2w and 2w + 1: row w's scale and min (Q4_1; the first codes otherwise,
    // never read) times the block's d and d sum c.
    const __m128i halves = _mm_setr_epi32(int(Word(p[0])), int(Word(p[1])), int(Word(p[2])), int(Word(p[3])));
    const __m256 pair = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(&xb.d)));
    const __m256 scales = _mm256_mul_ps(_mm256_cvtph_ps(halves), pair);
    if constexpr (F == GemvFormat::kQ4_1) bias = _mm256_add_ps(bias, scales);
    const __m512i c_lo = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.c)));
    const __m512i c_hi = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.c + 16)));
    for (int h = 0; h < kRows / 2; ++h) {
      __m512i lo, hi;
      PairCodes<F>(p[2 * h], p[2 * h + 1], &lo, &hi);
      const __m512i dot = _mm512_dpwssd_epi32(_mm512_madd_epi16(lo, c_lo), hi, c_hi);
      const __m512 scale = _mm512_permutexvar_ps(scale_index[h], _mm512_castps256_ps512(scales));
      acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[h]);
    }
    for (int l = 0; l < kAheadLines; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    ahead += 64 * kAheadLines;
    for (int w = 0; w < kRows; ++w) p[w] += kBytes;
  }
  alignas(32) float b[8];
  _mm256_store_ps(b, bias);
  for (int w = 0; w < kRows; ++w) {
    const __m512 v = acc[w / 2];
    const __m256 half = w % 2 ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    const float sum = _mm_cvtss_f32(s);
    out[w] = F == GemvFormat::kQ4_1 ? sum + b[2 * w + 1] : sum;
  }
}

template <GemvFormat F>
void RowsM1(const GemvArgs& a, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; j += kRows) {
    int64_t row[kRows];
    float out[kRows];
    const int64_t count = end - j < kRows ? end - j : kRows;
    for (int w = 0; w < kRows; ++w) row[w] = j + (w < count ? w : count - 1);
    FourRows<F>(a, row, out);
    for (int w = 0; w < count; ++w) a.out[j + w] = out[w];
  }
}

}  // namespace

void GemvRowsAvx512Vnni(const GemvArgs& args, int64_t begin, int64_t end) {
  if (args.m == 1) {
    switch (args.format) {
      case GemvFormat::kQ4_0: return RowsM1<GemvFormat::kQ4_0>(args, begin, end);
      case GemvFormat::kQ4_1: return RowsM1<GemvFormat::kQ4_1>(args, begin, end);
      case GemvFormat::kQ8_0: return RowsM1<GemvFormat::kQ8_0>(args, begin, end);
      default: break;
    }
  }
  GemvRows<Avx512>(args, begin, end);
}
}  // namespace metalrt::cpu::fast
#endif
