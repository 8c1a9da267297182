// The quantized GEMV shared by every instruction set: each gemv_<isa>.cpp defines its
// SIMD policy (how 32 codes are loaded, unpacked and dotted with 32 int8 activations)
// and instantiates GemvRows<Policy> here. Everything has internal linkage (the
// anonymous namespace) so no instance compiled for one ISA is shared with another TU.
//
// The math (ggml's vec_dot_*_q8 idea; formulas ours): every format is read as blocks
// of 32 codes u with w = a[h] * u + b[h] for the block's halves h (16 values each;
// a and b are the same for both halves except in Q6_K). Against an activation block
// x ~= d * c with c = 254 q + r (two int8 codes, q8_activation.h),
//   sum w x = d * (a[0] * sum_h0 u c + a[1] * sum_h1 u c) + d * (b[0] * sum_h0 c + b[1] * sum_h1 c),
// sum u c = 254 sum u q + sum u r: two int8 dots in SIMD; the block sums precomputed.
// Block layouts: ggml-common.h, as in the oracle (cpu/quantized_blocks.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "cpu/fast/gemv/gemv_args.h"
#include "cpu/fast/gemv/gemv_low_kquant.h"
#include "cpu/fast/gemv/gemv_mxfp4.h"

namespace metalrt::cpu::fast {
namespace {

struct BlockMap {
  float a[2];
  float b[2];
};
// The common case, one a and b for the whole block: one broadcast scale, and the bias
// term from the block's precomputed d * sum c.
struct UniformMap {
  float a, b;
};

inline UniformMap Uniform(float a, float b) { return {a, b}; }
// No bias term (Q4_0, Q5_0, Q8_0: the offset is in the codes): the scale alone.
struct ScaleMap {
  float a;
};

// An f16 scale: one vcvtph2ps where the TU has F16C (the x86 kernels), else the 256 KB
// table (cpu/float_rows.h), whose lookups miss L1.
inline float Half([[maybe_unused]] const float* table, const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(bits);
#else
  return table[bits];
#endif
}

// A policy with kWideDot dots a block of codes with the activation's int16 codes
// c = 254 q + r in one step (BlockDot); the others dot q and r apart and combine.
template <class Isa, class = void>
struct WideDot : std::false_type {};
template <class Isa>
struct WideDot<Isa, std::void_t<decltype(Isa::kWideDot)>> : std::true_type {};

inline uint32_t Word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Affine scale or bias `index` of `values` (f16 through F16C where the TU has it).
inline float AffineValueAt(const GemvArgs& a, const void* values, int64_t index) {
  const uint16_t* half = static_cast<const uint16_t*>(values);
  switch (a.scale_dtype) {
    case ScaleDType::kF32: return static_cast<const float*>(values)[index];
    case ScaleDType::kF16: return Half(a.f16_table, reinterpret_cast<const uint8_t*>(half + index));
    case ScaleDType::kBF16: break;
  }
  const uint32_t bits = uint32_t{half[index]} << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// The 6-bit scale and min of K-quant sub-block j (ggml's get_scale_min_k4).
inline void ScaleMinK4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// R activation rows against one weight row: a vector accumulator per row for the
// scaled integer dots, a scalar one for the bias terms.
template <class Isa, int R>
struct Tile {
  typename Isa::Acc acc[R];
  float bias[R];
  const Q8Block* x[R];

  // sum u c of the block against activation row r's block (c = 254 q + r).
  template <bool kSigned>
  static typename Isa::Dot CodeDot(const typename Isa::Codes& codes, const Q8Block& xb) {
    if constexpr (WideDot<Isa>::value) return Isa::template BlockDot<kSigned>(codes, xb);
    // 254 * coarse + residual < 2^31: |u q| <= 255 * 127 per value, 32 values.
    else if constexpr (kSigned) return Isa::Combine(Isa::DotSigned(codes, xb.q), Isa::DotSigned(codes, xb.r));
    else return Isa::Combine(Isa::DotSmall(codes, xb.q), Isa::DotSmall(codes, xb.r));
  }

  template <bool kSigned>
  void Add(int64_t block, const typename Isa::Codes& codes, const ScaleMap& map) {
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r][block];
      acc[r] = Isa::Fma(acc[r], CodeDot<kSigned>(codes, xb), map.a * xb.d);
    }
  }

  template <bool kSigned>
  void Add(int64_t block, const typename Isa::Codes& codes, const UniformMap& map) {
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r][block];
      acc[r] = Isa::Fma(acc[r], CodeDot<kSigned>(codes, xb), map.a * xb.d);
      bias[r] += map.b * xb.dsum;
    }
  }

  template <bool kSigned>
  void Add(int64_t block, const typename Isa::Codes& codes, const BlockMap& map) {
    for (int r = 0; r < R; ++r) {
      const Q8Block& xb = x[r][block];
      acc[r] = Isa::Fma(acc[r], CodeDot<kSigned>(codes, xb), map.a[0] * xb.d, map.a[1] * xb.d);
      bias[r] += xb.d * (map.b[0] * float(xb.sum[0]) + map.b[1] * float(xb.sum[1]));
    }
  }
};

// Q5_0 / Q5_1 codes: the nibbles of Q4 plus bit j of qh as value j's fifth bit.
inline void Q5Codes(const uint8_t* qs, uint32_t qh, uint8_t* u) {
  for (int j = 0; j < 16; ++j) {
    u[j] = uint8_t((qs[j] & 15) | ((qh >> j) & 1) << 4);
    u[j + 16] = uint8_t((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
  }
}

// 32 MLX affine codes of kBits each from one LSB-first bitstream of 4 * kBits bytes:
// 4-bit byte j holds codes 2j (low nibble) and 2j + 1, 8-bit codes are the bytes; the
// other widths go through `u` (8 codes per kBits bytes, a fixed-size load each).
template <class Isa, int kBits>
inline typename Isa::Codes AffineCodes(const uint8_t* q, uint8_t* u) {
  if constexpr (kBits == 4) {
    return Isa::InterleavedNibbles16(q);
  } else if constexpr (kBits == 8) {
    return Isa::Load(q);
  } else {
    constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
    for (int c = 0; c < 4; ++c) {
      uint64_t v = 0;
      std::memcpy(&v, q + c * kBits, kBits);   // 8 codes, little-endian host
      for (int i = 0; i < 8; ++i) u[8 * c + i] = uint8_t((v >> (i * kBits)) & kMask);
    }
    return Isa::Load(u);
  }
}

// Feeds every 32-value block of MLX affine row `row` to sink.Add, in order; each
// group's scale and bias are read once. 8-bit codes are recentred to signed (u - 128,
// the bias absorbing 128 * scale) since only codes below 128 fit the
// unsigned-by-signed dot without overflow.
template <class Isa, int kBits, class Sink>
inline void VisitAffineRow(const GemvArgs& a, int64_t row, Sink& sink) {
  alignas(32) uint8_t u[32];
  const int64_t groups = a.k / a.group_size, per_group = a.group_size / 32;
  const uint8_t* p = a.data + row * a.row_bytes;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = AffineValueAt(a, a.scales, row * groups + g), bias = AffineValueAt(a, a.biases, row * groups + g);
    const UniformMap map = Uniform(scale, kBits == 8 ? bias + 128.0f * scale : bias);
    for (int64_t t = g * per_group; t < (g + 1) * per_group; ++t) {
      const typename Isa::Codes codes = AffineCodes<Isa, kBits>(p + t * 4 * kBits, u);
      if constexpr (kBits == 8) sink.template Add<true>(t, Isa::Centered(codes, 128), map);
      else sink.template Add<false>(t, codes, map);
    }
  }
}

// Feeds every 32-value block of weight row `row` to sink.Add, in order.
template <class Isa, GemvFormat F, class Sink>
inline void VisitRow(const GemvArgs& a, int64_t row, Sink& sink) {
  const uint8_t* p = a.data + row * a.row_bytes;
  const float* f16 = a.f16_table;
  alignas(32) uint8_t u[32];
  const int64_t blocks = a.k / 32;
  if constexpr (F == GemvFormat::kQ4_0 || F == GemvFormat::kQ4_1) {
    constexpr int kBytes = F == GemvFormat::kQ4_0 ? 18 : 20;
    for (int64_t t = 0; t < blocks; ++t, p += kBytes) {
      const float d = Half(f16, p);
      const typename Isa::Codes codes = Isa::SplitNibbles16(p + kBytes - 16);
      // Q4_0's offset is taken out of the codes (signed q - 8), not put in the bias:
      // d (sum u c) - 8 d (sum c) cancels to the result's size from terms ~8x larger.
      if constexpr (F == GemvFormat::kQ4_0) sink.template Add<true>(t, Isa::Centered(codes, 8), ScaleMap{d});
      else sink.template Add<false>(t, codes, Uniform(d, Half(f16, p + 2)));
    }
  } else if constexpr (F == GemvFormat::kQ5_0 || F == GemvFormat::kQ5_1) {
    constexpr int kBytes = F == GemvFormat::kQ5_0 ? 22 : 24;
    for (int64_t t = 0; t < blocks; ++t, p += kBytes) {
      const float d = Half(f16, p);
      Q5Codes(p + kBytes - 16, Word(p + kBytes - 20), u);
      if constexpr (F == GemvFormat::kQ5_0) sink.template Add<true>(t, Isa::Centered(Isa::Load(u), 16), ScaleMap{d});
      else sink.template Add<false>(t, Isa::Load(u), Uniform(d, Half(f16, p + 2)));
    }
  } else if constexpr (F == GemvFormat::kQ8_0) {
    for (int64_t t = 0; t < blocks; ++t, p += 34) sink.template Add<true>(t, Isa::Load(p + 2), ScaleMap{Half(f16, p)});
  } else if constexpr (F == GemvFormat::kQ4_K || F == GemvFormat::kQ5_K) {
    // 256 values as four 64-value chunks: the low nibbles of qs[32c ..] are sub-block
    // 2c, their high nibbles 2c + 1; Q5_K's bit j of qh[l] is sub-block j's fifth bit.
    constexpr bool kFive = F == GemvFormat::kQ5_K;
    constexpr int kBytes = kFive ? 176 : 144;
    for (int64_t sb = 0; sb < blocks / 8; ++sb, p += kBytes) {
      const float d = Half(f16, p), dmin = Half(f16, p + 2);
      const uint8_t* qh = p + 16;
      const uint8_t* qs = p + (kFive ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        ScaleMinK4(p + 4, j, &sc, &m);
        const UniformMap map = Uniform(d * float(sc), -(dmin * float(m)));
        if constexpr (kFive) {
          const uint8_t* q = qs + 32 * (j / 2);
          for (int l = 0; l < 32; ++l) u[l] = uint8_t(((q[l] >> (4 * (j % 2))) & 15) | ((qh[l] >> j) & 1) << 4);
          sink.template Add<false>(8 * sb + j, Isa::Load(u), map);
        } else if (j % 2 == 0) {
          typename Isa::Codes lo, hi;
          Isa::NibblePlanes32(qs + 16 * j, &lo, &hi);
          sink.template Add<false>(8 * sb + j, lo, map);
          int sc1, m1;
          ScaleMinK4(p + 4, j + 1, &sc1, &m1);
          sink.template Add<false>(8 * sb + j + 1, hi, Uniform(d * float(sc1), -(dmin * float(m1))));
        }
      }
    }
  } else if constexpr (F == GemvFormat::kQ6_K) {
    // Element 128h + i: low 4 bits from ql[64h + i % 64] (high nibble for i >= 64),
    // top 2 bits from qh[32h + i % 32] at bit 2 * (i / 32); w = d * scales[e / 16] * (u - 32).
    for (int64_t sb = 0; sb < blocks / 8; ++sb, p += 210) {
      const int8_t* scales = reinterpret_cast<const int8_t*>(p + 192);
      const float d = Half(f16, p + 208);
      for (int j = 0; j < 8; ++j) {
        // Block j is i = 32 (j % 4) + l of half h = j / 4: its low bits are the
        // nibbles (high for j % 4 >= 2) of ql[64h + 32 (j % 2) + l], its top bits
        // qh[32h + l] >> 2 (j % 4): shifts fixed per block, so the loop vectorises.
        const int h = j / 4, quarter = j % 4;
        const uint8_t* ql = p + 64 * h + 32 * (quarter % 2);
        const uint8_t* qh = p + 128 + 32 * h;
        const int low_shift = quarter >= 2 ? 4 : 0, high_shift = 2 * quarter;
        for (int l = 0; l < 32; ++l)
          u[l] = uint8_t(((ql[l] >> low_shift) & 15) | ((qh[l] >> high_shift) & 3) << 4);
        const float a0 = d * float(scales[2 * j]), a1 = d * float(scales[2 * j + 1]);
        sink.template Add<false>(8 * sb + j, Isa::Load(u), BlockMap{{a0, a1}, {-32.0f * a0, -32.0f * a1}});
      }
    }
  } else if constexpr (F == GemvFormat::kQ3_K) {
    // Signed codes u - 4 (the offset out of the bias, as Q4_0), one scale per half.
    for (int64_t sb = 0; sb < blocks / 8; ++sb, p += kQ3KBytes) {
      const float d = Half(f16, p + 108);
      int sc[16];
      Q3KScales(p, sc);
      // Unrolled, so each block's shifts are constants and its code loop vectorises.
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        Q3KCodes(p, j, u);
        const BlockMap map{{d * float(sc[2 * j]), d * float(sc[2 * j + 1])}, {0.0f, 0.0f}};
        sink.template Add<true>(8 * sb + j, Isa::Centered(Isa::Load(u), 4), map);
      }
    }
  } else if constexpr (F == GemvFormat::kQ2_K) {
    for (int64_t sb = 0; sb < blocks / 8; ++sb, p += kQ2KBytes) {
      const float d = Half(f16, p + 80), dmin = Half(f16, p + 82);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const uint8_t s0 = p[2 * j], s1 = p[2 * j + 1];   // before u's stores, which may alias p
        Q2KCodes(p, j, u);
        const BlockMap map{{d * float(s0 & 15), d * float(s1 & 15)}, {-(dmin * float(s0 >> 4)), -(dmin * float(s1 >> 4))}};
        sink.template Add<false>(8 * sb + j, Isa::Load(u), map);
      }
    }
  } else if constexpr (F == GemvFormat::kMxfp4Gguf) {
    // Codes j (low nibbles) and j + 16 (high) as Q4_0's, mapped to 2 * e2m1.
    for (int64_t t = 0; t < blocks; ++t, p += 17)
      sink.template Add<true>(t, Isa::Lookup16(Isa::SplitNibbles16(p + 1), kE2M1Int8.v), ScaleMap{E8M0Half(p[0])});
  } else if constexpr (F == GemvFormat::kMxfp4) {
    // Codes 2i and 2i + 1 in byte i (as MLX affine 4-bit), one E8M0 exponent a block.
    const uint8_t* e = static_cast<const uint8_t*>(a.scales) + row * blocks;
    for (int64_t t = 0; t < blocks; ++t, p += 16)
      sink.template Add<true>(t, Isa::Lookup16(Isa::InterleavedNibbles16(p), kE2M1Int8.v), ScaleMap{E8M0Half(e[t])});
  } else {
    switch (a.bits) {
      case 2: return VisitAffineRow<Isa, 2>(a, row, sink);
      case 3: return VisitAffineRow<Isa, 3>(a, row, sink);
      case 4: return VisitAffineRow<Isa, 4>(a, row, sink);
      case 5: return VisitAffineRow<Isa, 5>(a, row, sink);
      case 6: return VisitAffineRow<Isa, 6>(a, row, sink);
      default: return VisitAffineRow<Isa, 8>(a, row, sink);
    }
  }
}

// Activation rows i0 .. i0 + R - 1 against weight row j.
template <class Isa, GemvFormat F, int R>
inline void RowTile(const GemvArgs& a, int64_t j, int64_t i0) {
  Tile<Isa, R> tile;
  for (int r = 0; r < R; ++r) {
    tile.acc[r] = Isa::Zero();
    tile.bias[r] = 0.0f;
    tile.x[r] = a.x + (i0 + r) * (a.k / 32);
  }
  VisitRow<Isa, F>(a, j, tile);
  for (int r = 0; r < R; ++r) a.out[(i0 + r) * a.out_stride + j] = Isa::Sum(tile.acc[r]) + tile.bias[r];
}

// Weight rows outside, activation tiles of 4 inside: each weight row is streamed from
// memory once and reread from L1 for the other tiles.
template <class Isa, GemvFormat F>
void RowsOfFormat(const GemvArgs& a, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) {
    int64_t i = 0;
    for (; i + 4 <= a.m; i += 4) RowTile<Isa, F, 4>(a, j, i);
    switch (a.m - i) {
      case 3: RowTile<Isa, F, 3>(a, j, i); break;
      case 2: RowTile<Isa, F, 2>(a, j, i); break;
      case 1: RowTile<Isa, F, 1>(a, j, i); break;
      default: break;
    }
  }
}

template <class Isa>
void GemvRows(const GemvArgs& a, int64_t begin, int64_t end) {
  switch (a.format) {
    case GemvFormat::kQ4_0: return RowsOfFormat<Isa, GemvFormat::kQ4_0>(a, begin, end);
    case GemvFormat::kQ4_1: return RowsOfFormat<Isa, GemvFormat::kQ4_1>(a, begin, end);
    case GemvFormat::kQ5_0: return RowsOfFormat<Isa, GemvFormat::kQ5_0>(a, begin, end);
    case GemvFormat::kQ5_1: return RowsOfFormat<Isa, GemvFormat::kQ5_1>(a, begin, end);
    case GemvFormat::kQ8_0: return RowsOfFormat<Isa, GemvFormat::kQ8_0>(a, begin, end);
    case GemvFormat::kQ4_K: return RowsOfFormat<Isa, GemvFormat::kQ4_K>(a, begin, end);
    case GemvFormat::kQ5_K: return RowsOfFormat<Isa, GemvFormat::kQ5_K>(a, begin, end);
    case GemvFormat::kQ6_K: return RowsOfFormat<Isa, GemvFormat::kQ6_K>(a, begin, end);
    case GemvFormat::kQ3_K: return RowsOfFormat<Isa, GemvFormat::kQ3_K>(a, begin, end);
    case GemvFormat::kQ2_K: return RowsOfFormat<Isa, GemvFormat::kQ2_K>(a, begin, end);
    case GemvFormat::kMxfp4Gguf: return RowsOfFormat<Isa, GemvFormat::kMxfp4Gguf>(a, begin, end);
    case GemvFormat::kMxfp4: return RowsOfFormat<Isa, GemvFormat::kMxfp4>(a, begin, end);
    case GemvFormat::kAffine: return RowsOfFormat<Isa, GemvFormat::kAffine>(a, begin, end);
  }
}

}  // namespace
}  // namespace metalrt::cpu::fast
