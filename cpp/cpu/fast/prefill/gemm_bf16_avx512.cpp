// The bf16 prefill GEMM's kernels for AVX-512 BF16 (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512bf16, see fast.cmake; called only when prefill_gemm.cpp found the
// CPU bits and the OS's ZMM state). Internal linkage for everything but the entry
// points, so no AVX-512 code can be shared with the rest of the binary.
#include "cpu/fast/prefill/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace metalrt::cpu::fast {
namespace {

// out[i] = column i of the 16 x 16 matrix of 32-bit words whose rows are r[0 .. 16) (r is
// overwritten): pairs of words, then of quads, interleaved within 128-bit lanes, then the
// lanes regrouped.
inline void Transpose16x16(__m512i r[16], __m512i out[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // r[4q + e], lane L: word 4L + e of rows 4q .. 4q + 3.
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i even01 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x88);    // lanes 0, 2 of each
    const __m512i odd01 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xDD);     // lanes 1, 3
    const __m512i even23 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x88);
    const __m512i odd23 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xDD);
    out[e] = _mm512_shuffle_i32x4(even01, even23, 0x88);        // lane 0: word e
    out[8 + e] = _mm512_shuffle_i32x4(even01, even23, 0xDD);    // lane 2: word 8 + e
    out[4 + e] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);      // lane 1: word 4 + e
    out[12 + e] = _mm512_shuffle_i32x4(odd01, odd23, 0xDD);     // lane 3: word 12 + e
  }
}

// A register tile: kRows weight rows x kBlocks blocks of 16 activation rows, as
// kRows * kBlocks accumulators (8 x 3 = 24 of the 32 ZMM registers; the rest hold the
// activation pairs and a broadcast weight pair). Per pair of k: kBlocks loads, kRows
// broadcasts, kRows * kBlocks vdpbf16ps.
constexpr int kMaxRows = 8;
constexpr int kMaxBlocks = 3;

template <int kRows, int kBlocks>
void Tile(const uint16_t* w, int64_t k, const uint32_t* a, float* c, int64_t ldc, int64_t valid_rows, bool accumulate) {
  const int64_t pairs = k / 2;
  __m512 acc[kRows][kBlocks];
  alignas(64) float lanes[kBf16RowBlock];
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t rows = std::min<int64_t>(kBf16RowBlock, valid_rows - b * kBf16RowBlock);
    for (int r = 0; r < kRows; ++r) {
      if (!accumulate) {
        acc[r][b] = _mm512_setzero_ps();
        continue;
      }
      std::fill(lanes, lanes + kBf16RowBlock, 0.0f);
      for (int64_t l = 0; l < rows; ++l) lanes[l] = c[(b * kBf16RowBlock + l) * ldc + r];
      acc[r][b] = _mm512_load_ps(lanes);
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh x[kBlocks];
    for (int b = 0; b < kBlocks; ++b)
      x[b] = (__m512bh)_mm512_loadu_si512(a + (b * pairs + p) * kBf16RowBlock);
    for (int r = 0; r < kRows; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + r * k + 2 * p, sizeof(pair));
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(pair);
      for (int b = 0; b < kBlocks; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], wv, x[b]);
    }
  }
  // Lane l of acc[r][b] is output (activation row 16 b + l, weight row r).
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t rows = std::min<int64_t>(kBf16RowBlock, valid_rows - b * kBf16RowBlock);
    for (int r = 0; r < kRows; ++r) {
      _mm512_store_ps(lanes, acc[r][b]);
      for (int64_t l = 0; l < rows; ++l) c[(b * kBf16RowBlock + l) * ldc + r] = lanes[l];
    }
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint32_t*, float*, int64_t, int64_t, bool);

template <int kRows, int... kBlocks>
constexpr auto TileRow(std::integer_sequence<int, kBlocks...>) {
  return std::array<TileFn, kMaxBlocks>{Tile<kRows, kBlocks + 1>...};
}
template <int... kRows>
constexpr auto TileTable(std::integer_sequence<int, kRows...>) {
  return std::array<std::array<TileFn, kMaxBlocks>, kMaxRows>{
      TileRow<kRows + 1>(std::make_integer_sequence<int, kMaxBlocks>())...};
}
// kTiles[rows - 1][blocks - 1]: every edge tile of a panel is a full-speed kernel too.
constexpr auto kTiles = TileTable(std::make_integer_sequence<int, kMaxRows>());

float HalfAt(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

// Stores the 32 f32 values lo (elements 0-15) and hi (16-31) as bf16.
void Store32Bf16(__m512 lo, __m512 hi, uint16_t* dst) {
  _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// One 32-value block of Q4_0 / Q4_1 (byte j: element j in the low nibble, j + 16 in
// the high): y = d * (q - 8), or d * q + m, as separate multiply and add.
template <bool kHasMin>
void Q4BlockBf16(const uint8_t* b, uint16_t* dst) {
  const __m512 d = _mm512_set1_ps(HalfAt(b));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (kHasMin ? 4 : 2)));
  const __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(bytes, _mm_set1_epi8(15)));
  const __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(15)));
  if constexpr (kHasMin) {
    const __m512 m = _mm512_set1_ps(HalfAt(b + 2));
    Store32Bf16(_mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), m),
                _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), m), dst);
  } else {
    const __m512i eight = _mm512_set1_epi32(8);
    Store32Bf16(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight))),
                _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight))), dst);
  }
}

// One 32-value block of Q8_0: y = q * d.
void Q8_0BlockBf16(const uint8_t* b, uint16_t* dst) {
  const __m512 d = _mm512_set1_ps(HalfAt(b));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  Store32Bf16(_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d), dst);
}

template <void (*kBlock)(const uint8_t*, uint16_t*)>
void BlocksBf16(const uint8_t* b, int64_t blocks, int64_t block_bytes, uint16_t* dst) {
  for (int64_t i = 0; i < blocks; ++i) kBlock(b + i * block_bytes, dst + i * 32);
}

}  // namespace

bool DequantizesToBf16(const QuantizedTensor& w) {
  return w.format == QuantFormat::kQ4_0 || w.format == QuantFormat::kQ4_1 || w.format == QuantFormat::kQ8_0;
}

void DequantizeRowsBf16Avx512(const QuantizedTensor& w, int64_t row0, int64_t count, uint16_t* dst) {
  const int64_t block_bytes = BlockBytes(w.format), blocks = w.cols / 32;
  const uint8_t* data = w.data.data_as<uint8_t>();
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* b = data + (row0 + r) * blocks * block_bytes;
    uint16_t* out = dst + r * w.cols;
    switch (w.format) {
      case QuantFormat::kQ4_0: BlocksBf16<Q4BlockBf16<false>>(b, blocks, block_bytes, out); break;
      case QuantFormat::kQ4_1: BlocksBf16<Q4BlockBf16<true>>(b, blocks, block_bytes, out); break;
      default: BlocksBf16<Q8_0BlockBf16>(b, blocks, block_bytes, out); break;   // kQ8_0
    }
  }
}

void RoundToBf16Avx512(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
    _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)v);
  }
}

void PackRowsBf16Avx512(const float* a, int64_t m, int64_t k, int64_t block_begin, int64_t block_end,
                        uint32_t* packed) {
  // 16 rows x 16 pairs at a time: each row's 32 values rounded into one register of 16
  // pairs, the 16 x 16 pairs transposed in registers, then one full store per pair.
  // (Scattering each row's pairs into the blocks' 16-word groups was 4-byte stores.)
  const int64_t pairs = k / 2;
  for (int64_t block = block_begin; block < block_end; ++block) {
    uint32_t* dst = packed + block * pairs * kBf16RowBlock;
    const int64_t row0 = block * kBf16RowBlock, rows = std::min<int64_t>(kBf16RowBlock, m - row0);
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      const int64_t n = std::min<int64_t>(32, k - 2 * p0);   // values of each row here
      const __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(16, n)) - 1);
      const __mmask16 hi = static_cast<__mmask16>(n > 16 ? (1u << (n - 16)) - 1 : 0);
      __m512i r[16], column[16];
      for (int64_t l = 0; l < 16; ++l) {
        if (l >= rows) {
          r[l] = _mm512_setzero_si512();
          continue;
        }
        const float* src = a + (row0 + l) * k + 2 * p0;
        r[l] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + 16), _mm512_maskz_loadu_ps(lo, src));
      }
      Transpose16x16(r, column);
      // A constant trip count keeps the columns in registers; a variable one made GCC
      // copy them through the stack in 8-byte moves, each stalled on a 64-byte store.
      const int64_t valid = std::min<int64_t>(16, pairs - p0);
      for (int q = 0; q < 16; ++q)
        if (q < valid) _mm512_storeu_si512(dst + (p0 + q) * kBf16RowBlock, column[q]);
    }
  }
}

void GemmBf16Avx512(const uint32_t* packed_a, int64_t m, int64_t k, const uint16_t* w, int64_t count,
                    float* c, int64_t ldc, bool accumulate) {
  const int64_t pairs = k / 2, blocks = Bf16RowBlocks(m);
  for (int64_t b0 = 0; b0 < blocks; b0 += kMaxBlocks) {
    const int64_t nb = std::min<int64_t>(kMaxBlocks, blocks - b0), row0 = b0 * kBf16RowBlock;
    for (int64_t r0 = 0; r0 < count; r0 += kMaxRows) {
      const int64_t nr = std::min<int64_t>(kMaxRows, count - r0);
      kTiles[nr - 1][nb - 1](w + r0 * k, k, packed_a + b0 * pairs * kBf16RowBlock, c + row0 * ldc + r0, ldc,
                             m - row0, accumulate);
    }
  }
}

}  // namespace metalrt::cpu::fast
#else
#include <stdexcept>

// Off x86 SelectedPrefillGemm() never picks bf16; these only satisfy the linker.
namespace metalrt::cpu::fast {
namespace {
[[noreturn]] void NoKernel() { throw std::logic_error("the AVX-512 BF16 GEMM exists only on x86-64"); }
}  // namespace
void PackRowsBf16Avx512(const float*, int64_t, int64_t, int64_t, int64_t, uint32_t*) { NoKernel(); }
void RoundToBf16Avx512(const float*, int64_t, uint16_t*) { NoKernel(); }
void GemmBf16Avx512(const uint32_t*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t, bool) { NoKernel(); }
bool DequantizesToBf16(const QuantizedTensor&) { return false; }
void DequantizeRowsBf16Avx512(const QuantizedTensor&, int64_t, int64_t, uint16_t*) { NoKernel(); }
}  // namespace metalrt::cpu::fast
#endif
