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
// Decode's m = 1 against Q4_0, Q4_1 and Q8_0 (the default model's weights) and MXFP4
// (both layouts, where the CPU has VBMI) has kernels of its own here, several weight
// rows per pass: the generic one spends as many instructions per block on its scalar
// scales as on the dot.
#include "cpu/fast/gemv/gemv_args.h"

#if defined(__x86_64__)
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/fast/gemv/gemv_kquant_avx512.h"
#include "cpu/fast/gemv/gemv_prefetch_avx512.h"
#include "cpu/fast/gemv/gemv_x86.h"
#include "cpu/fast/simd/cpu_features.h"

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

// Rows per pass of the m = 1 kernels: Q4's eight are two vectors of four rows sharing
// the activation's loads and one scale conversion (1.17 ns a block-row against 1.25 for
// four rows a pass, docs/cpu.md).
constexpr int kRowsQ8 = 4;
constexpr int kRowsQ4 = 8;

// Two Q8_0 rows' 32 codes as int16 in two vectors: lo holds values 0-15 of row 0 then
// of row 1, hi values 16-31.
inline void PairCodesQ8(const uint8_t* p0, const uint8_t* p1, __m512i* lo, __m512i* hi) {
  *lo = _mm512_cvtepi8_epi16(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2), reinterpret_cast<const __m128i*>(p0 + 2)));
  *hi = _mm512_cvtepi8_epi16(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 18), reinterpret_cast<const __m128i*>(p0 + 18)));
}

// The activation block's (d, d sum c), adjacent floats, as one double's bits.
inline __m128d DPair(const Q8Block& xb) {
  double v;
  std::memcpy(&v, &xb.d, sizeof v);
  return _mm_set_sd(v);
}

// The f16 scale (and Q4_1 min) words of rows p[0..3]'s block, converted and multiplied
// by the activation block's (d, d sum c) pair: lanes 2w and 2w + 1 are row w's scale
// and min times d and d sum c (Q4_0, Q8_0: the min lane holds codes, never read).
inline __m256 BlockScales(const uint8_t* const* p, const Q8Block& xb) {
  const __m128i halves = _mm_setr_epi32(int(Word(p[0])), int(Word(p[1])), int(Word(p[2])), int(Word(p[3])));
  return _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_castpd_ps(_mm256_broadcastsd_pd(DPair(xb))));
}

// The sum of four floats in a fixed order: a Q4 row's 128-bit lane, or a Q8_0 row's
// 256-bit half folded to 128 bits.
inline float LaneSum(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// Q8_0 rows row[0..3] (repeats allowed: the tail pads with its last row) against the
// one activation row, out[w] = row[w]'s result. Rows are taken in pairs, one row per
// 256-bit half: the activation's 32 int16 codes as values 0-15 and 16-31 each in both
// halves, one vpmaddwd and one vpdpwssd give each half its row's 8 lanes (|4 w c| <
// 2^24: exact in f32), converted and FMA-ed with the two rows' scales, one per half.
// The halves of different rows never mix, so a row's result does not depend on its
// companions (and is the same on any thread split).
void FourRowsQ8(const GemvArgs& a, const int64_t* row, float* out) {
  const uint8_t* p[kRowsQ8];
  for (int w = 0; w < kRowsQ8; ++w) p[w] = a.data + row[w] * a.row_bytes;
  __m512 acc[kRowsQ8 / 2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i scale_index[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                  _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)};
  Prefetcher<kRowsQ8, 34> prefetch(a, row[0]);
  for (int64_t t = 0; t < a.k / 32; ++t) {
    const Q8Block& xb = a.x[t];
    const __m256 scales = BlockScales(p, xb);
    const __m512i c_lo = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.c)));
    const __m512i c_hi = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.c + 16)));
    for (int h = 0; h < kRowsQ8 / 2; ++h) {
      __m512i lo, hi;
      PairCodesQ8(p[2 * h], p[2 * h + 1], &lo, &hi);
      const __m512i dot = _mm512_dpwssd_epi32(_mm512_madd_epi16(lo, c_lo), hi, c_hi);
      const __m512 scale = _mm512_permutexvar_ps(scale_index[h], _mm512_castps256_ps512(scales));
      acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[h]);
    }
    prefetch.Step();
    for (int w = 0; w < kRowsQ8; ++w) p[w] += 34;
  }
  for (int w = 0; w < kRowsQ8; ++w) {
    const __m512 v = acc[w / 2];
    const __m256 half = w % 2 ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
    out[w] = LaneSum(_mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1)));
  }
}

// The 4-bit formats of the eight-row kernel: where a block's 16 code bytes sit, how
// the codes map to integers, the scale's encoding, the activation order.
template <GemvFormat F>
struct Q4Layout {
  static constexpr bool kMxfp4 = F == GemvFormat::kMxfp4Gguf || F == GemvFormat::kMxfp4;
  // Bytes a block takes in a weight row, and the offset of its codes.
  static constexpr int kBytes = F == GemvFormat::kQ4_0 ? 18 : F == GemvFormat::kQ4_1 ? 20 : F == GemvFormat::kMxfp4Gguf ? 17 : 16;
  static constexpr int kQs = kBytes - 16;
  // What the unsigned byte codes carry above the format's integers, taken out of the
  // dot through the activation's sums (Q4_0: u - 8; MXFP4: 2 e2m1 + 12, gemv_mxfp4.h).
  static constexpr int kOffset = F == GemvFormat::kQ4_0 ? 8 : kMxfp4 ? kE2M1Offset : 0;
  // Split MXFP4's byte i holds values 2i (low nibble) and 2i + 1 (as MLX affine
  // 4-bit); the others' byte j holds values j and j + 16 (ggml's block_q4_0).
  static constexpr bool kInterleaved = F == GemvFormat::kMxfp4;
};

// The activation block's int16 codes c split into bytes for vpdpbusd (u8 x s8, four
// products summed into each int32 lane): c = 256 h + l with h = c >> 8 signed and
// l = c & 255 unsigned, so u c = 256 (u h) + l u, both products of a byte the
// instruction takes (the 4-bit codes u, and MXFP4's offset integers, below 128, fit
// either side). Bytes 0-15 of h and l meet the low nibbles of a row's 16 code bytes,
// 16-31 the high ones: values 0-31 in order, or for an interleaved layout the even
// values then the odd ones. offset[j] = -kOffset times the sum of the c that int32
// lane j of a 128-bit lane sees (bytes 4j .. 4j + 3 and 16 + 4j .. 16 + 4j + 3): the
// format's sum of integers times c is the unsigned sum plus it, exact in int32.
struct ByteCodes {
  int8_t h[32];
  uint8_t l[32];
  int32_t offset[4];
};

// Only offset formats read the offsets (Q4_1's codes are unsigned, its min the dsum term).
template <GemvFormat F>
void SplitActivation(const Q8Block* x, int64_t blocks, ByteCodes* out) {
  using L = Q4Layout<F>;
  const __m512i order = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                         30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t t = 0; t < blocks; ++t) {
    __m512i c = _mm512_loadu_si512(x[t].c);
    if constexpr (L::kInterleaved) c = _mm512_permutexvar_epi16(order, c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[t].h), _mm512_cvtepi16_epi8(_mm512_srai_epi16(c, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[t].l), _mm512_cvtepi16_epi8(c));
    if constexpr (L::kOffset != 0) {
      alignas(64) int16_t v[32];
      _mm512_store_si512(v, c);
      for (int j = 0; j < 4; ++j) {
        int32_t sum = 0;
        for (int i = 0; i < 4; ++i) sum += v[4 * j + i] + v[16 + 4 * j + i];
        out[t].offset[j] = -L::kOffset * sum;
      }
    }
  }
}

inline __m512i Broadcast128(const void* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// table[index & 63] for each byte: vpermb (AVX512_VBMI), which maps MXFP4's nibbles
// through the 16-entry table copied four times without masking them first (faster
// than vpand + vpshufb, docs/cpu.md). Inline asm: this TU is compiled without
// -mavx512vbmi, which would let the compiler emit VBMI anywhere in it, and some CPUs
// with VNNI have no VBMI (Cascade Lake); called only where CpuHasAvx512Vbmi().
inline __m512i PermuteBytes(__m512i index, __m512i table) {
  __m512i out;
  __asm__("vpermb %2, %1, %0" : "=v"(out) : "v"(index), "v"(table));
  return out;
}

// 2^(e - 128) of eight E8M0 exponents (e8m0_half_bits in SIMD).
inline __m256 E8M0Halves(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmplt_epu32_mask(e, _mm256_set1_epi32(2)), normal, subnormal));
}

// Block t's scales of the eight rows p (at the block) and row[], times the activation
// block's d (and Q4_1's min times d sum c): lanes 2w and 2w + 1 hold row w's scale and
// min (Q4_0: codes, never read) for the f16 formats, lane w row w's scale for MXFP4.
template <GemvFormat F>
inline __m512 EightScales(const GemvArgs& a, const uint8_t* const* p, const int64_t* row, int64_t t) {
  if constexpr (F == GemvFormat::kMxfp4) {
    const uint8_t* e = static_cast<const uint8_t*>(a.scales) + t;
    const int64_t blocks = a.k / 32;
    const __m256i ev = _mm256_setr_epi32(e[row[0] * blocks], e[row[1] * blocks], e[row[2] * blocks], e[row[3] * blocks],
                                         e[row[4] * blocks], e[row[5] * blocks], e[row[6] * blocks], e[row[7] * blocks]);
    return _mm512_castps256_ps512(_mm256_mul_ps(E8M0Halves(ev), _mm256_set1_ps(a.x[t].d)));
  } else {
    const __m256i words = _mm256_setr_epi32(int(Word(p[0])), int(Word(p[1])), int(Word(p[2])), int(Word(p[3])),
                                            int(Word(p[4])), int(Word(p[5])), int(Word(p[6])), int(Word(p[7])));
    if constexpr (F == GemvFormat::kMxfp4Gguf) {
      const __m256i ev = _mm256_and_si256(words, _mm256_set1_epi32(255));
      return _mm512_castps256_ps512(_mm256_mul_ps(E8M0Halves(ev), _mm256_set1_ps(a.x[t].d)));
    } else {
      return _mm512_mul_ps(_mm512_cvtph_ps(words), _mm512_castpd_ps(_mm512_broadcastsd_pd(DPair(a.x[t]))));
    }
  }
}

// Q4_0 / Q4_1 / MXFP4 rows row[0..7] as FourRowsQ8, in two groups of four, one row
// per 128-bit lane: a group's 16 code bytes per row in one vector, split into the low
// nibbles and the high ones (MXFP4: each mapped to 2 e2m1 + 12 by one vpermb),
// dotted with the activation's bytes (ByteCodes) in four vpdpbusd and a shift, no
// widening to int16 (the int16 kernel spent a vpmovzxbw per row-block and a convert
// and FMA per two). Each int32 lane sums 8 products, |8 u c| < 2^24 (MXFP4: 8 * 24 *
// 32385 < 2^24 before the offset): exact in f32, so one convert and one FMA serve four
// rows. A row's lanes never mix with another's.
template <GemvFormat F>
void EightRowsQ4(const GemvArgs& a, const ByteCodes* xc, const int64_t* row, float* out) {
  using L = Q4Layout<F>;
  constexpr int R = kRowsQ4, G = R / 4;
  const uint8_t* p[R];
  for (int w = 0; w < R; ++w) p[w] = a.data + row[w] * a.row_bytes;
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  __m512 bias = _mm512_setzero_ps();
  // The scale lanes of row 4g + w (EightScales).
  const __m512i scale_index[2] = {
      L::kMxfp4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                : _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6),
      L::kMxfp4 ? _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)
                : _mm512_setr_epi32(8, 8, 8, 8, 10, 10, 10, 10, 12, 12, 12, 12, 14, 14, 14, 14)};
  const __m512i mask = _mm512_set1_epi8(15);
  const __m512i table = Broadcast128(kE2M1Offset8.v);   // four copies: vpermb reads 6 index bits
  Prefetcher<R, L::kBytes> prefetch(a, row[0]);
  for (int64_t t = 0; t < a.k / 32; ++t) {
    const ByteCodes& c = xc[t];
    const __m512i h0 = Broadcast128(c.h), h1 = Broadcast128(c.h + 16), l0 = Broadcast128(c.l), l1 = Broadcast128(c.l + 16);
    const __m512 scales = EightScales<F>(a, p, row, t);
    if constexpr (F == GemvFormat::kQ4_1) bias = _mm512_add_ps(bias, scales);
    for (int g = 0; g < G; ++g) {
      const uint8_t* const* pg = p + 4 * g;
      const __m256i q01 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(pg[1] + L::kQs), reinterpret_cast<const __m128i*>(pg[0] + L::kQs));
      const __m256i q23 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(pg[3] + L::kQs), reinterpret_cast<const __m128i*>(pg[2] + L::kQs));
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
      const __m512i high_nibbles = _mm512_srli_epi16(q, 4);
      const __m512i lo = L::kMxfp4 ? PermuteBytes(q, table) : _mm512_and_si512(q, mask);
      const __m512i hi = L::kMxfp4 ? PermuteBytes(high_nibbles, table) : _mm512_and_si512(high_nibbles, mask);
      // The high and low bytes' dots in two chains, the offset the low chain's start
      // (no subtraction).
      const __m512i low_start = L::kOffset != 0 ? Broadcast128(c.offset) : _mm512_setzero_si512();
      const __m512i high = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, h0), hi, h1);
      const __m512i low = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(low_start, l0, lo), l1, hi);
      const __m512i dot = _mm512_add_epi32(_mm512_slli_epi32(high, 8), low);
      const __m512 scale = _mm512_permutexvar_ps(scale_index[g], scales);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[g]);
    }
    prefetch.Step();
    for (int w = 0; w < R; ++w) p[w] += L::kBytes;
  }
  alignas(64) float b[16];
  _mm512_store_ps(b, bias);
  for (int g = 0; g < G; ++g) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[g]);
    for (int w = 0; w < 4; ++w) {
      const float sum = LaneSum(_mm_load_ps(lanes + 4 * w));
      out[4 * g + w] = F == GemvFormat::kQ4_1 ? sum + b[2 * (4 * g + w) + 1] : sum;
    }
  }
}

template <GemvFormat F>
void RowsM1(const GemvArgs& a, int64_t begin, int64_t end) {
  constexpr int kRows = F == GemvFormat::kQ8_0 ? kRowsQ8 : kRowsQ4;
  PrefetchFirstPasses(a, begin, end, kRows);   // first: the split below overlaps the fetch
  // Split once per call into per-thread scratch reused across calls.
  thread_local std::vector<ByteCodes> split;
  if constexpr (F != GemvFormat::kQ8_0) {
    if (split.size() < size_t(a.k / 32)) split.resize(size_t(a.k / 32));
    SplitActivation<F>(a.x, a.k / 32, split.data());
  }
  for (int64_t j = begin; j < end; j += kRows) {
    int64_t row[kRows];
    float out[kRows];
    const int64_t count = end - j < kRows ? end - j : kRows;
    for (int w = 0; w < kRows; ++w) row[w] = j + (w < count ? w : count - 1);
    if constexpr (F == GemvFormat::kQ8_0) FourRowsQ8(a, row, out);
    else EightRowsQ4<F>(a, split.data(), row, out);
    for (int w = 0; w < count; ++w) a.out[j + w] = out[w];
  }
}

// Weight rows a tile of RowByRow: read from memory by the first activation row, still in
// the L1/L2 for the others (64 rows of a 4096-wide Q4_1 weight are 147 KB).
constexpr int64_t kRowByRowTile = 64;

// The m activation rows of `a`, each through the m = 1 kernel `m1` over tiles of weight
// rows, so a row's result is the bits it gets alone: a speculative verify step's k + 1
// rows and a batch's rows equal one-row decode steps (DecodeRows, op_registry.h). The
// work is m one-row passes; the weights still come from memory once.
template <class Fn>
void RowByRow(const GemvArgs& a, int64_t begin, int64_t end, const Fn& m1) {
  if (a.m == 1) return m1(a, begin, end);
  for (int64_t j0 = begin; j0 < end; j0 += kRowByRowTile) {
    const int64_t j1 = end - j0 < kRowByRowTile ? end : j0 + kRowByRowTile;
    for (int64_t i = 0; i < a.m; ++i) {
      GemvArgs row = a;
      row.m = 1;
      row.x = a.x + i * (a.k / 32);
      row.out = a.out + i * a.out_stride;
      m1(row, j0, j1);
    }
  }
}

}  // namespace

void GemvRowsAvx512Vnni(const GemvArgs& args, int64_t begin, int64_t end) {
  switch (args.format) {
    case GemvFormat::kQ4_0: return RowByRow(args, begin, end, RowsM1<GemvFormat::kQ4_0>);
    case GemvFormat::kQ4_1: return RowByRow(args, begin, end, RowsM1<GemvFormat::kQ4_1>);
    case GemvFormat::kQ8_0: return RowByRow(args, begin, end, RowsM1<GemvFormat::kQ8_0>);
    // MXFP4's kernel needs VBMI (PermuteBytes); without it the generic loop serves.
    case GemvFormat::kMxfp4Gguf:
      if (CpuHasAvx512Vbmi()) return RowByRow(args, begin, end, RowsM1<GemvFormat::kMxfp4Gguf>);
      break;
    case GemvFormat::kMxfp4:
      if (CpuHasAvx512Vbmi()) return RowByRow(args, begin, end, RowsM1<GemvFormat::kMxfp4>);
      break;
    case GemvFormat::kQ4_K:
    case GemvFormat::kQ5_K:
    case GemvFormat::kQ6_K: return RowByRow(args, begin, end, GemvRowsKQuantM1Avx512);
    default: break;
  }
  GemvRows<Avx512>(args, begin, end);
}
}  // namespace metalrt::cpu::fast
#endif
