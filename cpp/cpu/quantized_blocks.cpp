// Block decoders of the CPU oracle. Layouts: ggml-common.h block structs; element
// orders and formulas: ggml-quants.c dequantize_row_* and gguf-py's quants.py, whose
// f32 rounding steps are reproduced one for one (a product, then a sum, never fused;
// the build disables FMA contraction). docs/quantization.md lists the layouts.
#include "cpu/quantized_blocks.h"

#include <cstring>

#include "metalrt/dtype.h"
#include "mxfp4_values.h"

namespace metalrt::cpu {
namespace {

float Half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return F16ToF32(bits);
}

uint32_t Word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Q4_0 / Q4_1: byte j holds element j (low nibble) and j + 16 (high nibble);
// y = d * (q - 8), or d * q + m.
void Q4Block(const uint8_t* b, bool has_min, float* y) {
  const float d = Half(b), m = has_min ? Half(b + 2) : 0.0f;
  const uint8_t* qs = b + (has_min ? 4 : 2);
  for (int j = 0; j < 16; ++j) {
    const int lo = qs[j] & 15, hi = qs[j] >> 4;
    if (has_min) {
      y[j] = d * float(lo) + m;
      y[j + 16] = d * float(hi) + m;
    } else {
      y[j] = d * float(lo - 8);
      y[j + 16] = d * float(hi - 8);
    }
  }
}

// Q5_0 / Q5_1: as Q4 with a fifth bit, bit j of the uint32 qh for element j;
// y = d * (q - 16), or d * q + m.
void Q5Block(const uint8_t* b, bool has_min, float* y) {
  const float d = Half(b), m = has_min ? Half(b + 2) : 0.0f;
  const uint32_t qh = Word(b + (has_min ? 4 : 2));
  const uint8_t* qs = b + (has_min ? 8 : 6);
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | int((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    if (has_min) {
      y[j] = d * float(lo) + m;
      y[j + 16] = d * float(hi) + m;
    } else {
      y[j] = d * float(lo - 16);
      y[j + 16] = d * float(hi - 16);
    }
  }
}

void Q8_0Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = float(static_cast<int8_t>(b[2 + j])) * d;
}

// The 6-bit scale and min of sub-block j (ggml-quants.c get_scale_min_k4).
void ScaleMinK4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K / Q5_K: 256 values as four 64-value chunks; chunk c is the low nibbles of
// qs[32c..32c+31] (sub-block 2c) then their high nibbles (sub-block 2c + 1); Q5_K adds
// bit j of qh[l] as the fifth bit of sub-block j. y = (d * sc) * q - (dmin * m).
void QKBlock(const uint8_t* b, bool five_bit, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (five_bit ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMinK4(scales, j, &sc, &m);
    const float ds = d * float(sc), dm = dmin * float(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      int code = (q[l] >> shift) & 15;
      if (five_bit) code |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = ds * float(code) - dm;
    }
  }
}

// Q6_K: halves of 128 values; element 128h + i takes its low 4 bits from
// ql[64h + i % 64] (low nibble for i < 64, high above) and its top 2 bits from
// qh[32h + i % 32] at bit 2 * (i / 32); y = (d * scales[i / 16]) * (q - 32).
void Q6KBlock(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 128; ++i) {
      const int lo = (ql[64 * h + i % 64] >> (i < 64 ? 0 : 4)) & 15;
      const int hi = (qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
      const float ds = d * float(scales[(128 * h + i) / 16]);
      y[128 * h + i] = ds * float((lo | hi << 4) - 32);
    }
}

// Q3_K: hmask[32], qs[64], 12 bytes of sixteen 6-bit scales, f16 d. Element
// e = 128h + 32s + l has the 2 low bits (qs[32h + l] >> 2s) & 3 and the high bit
// (hmask[l] >> (e / 32)) & 1, which when CLEAR subtracts 4: q = low - 4 (1 - high).
// Scale j: low nibble of byte j % 8 (high nibble for j >= 8), top 2 bits of byte
// 8 + j % 4 at bit 2 (j / 4); sc = that - 32. y = (d * sc[e / 16]) * q.
void Q3KBlock(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* s = b + 96;
  const float d = Half(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    const int sc = (((s[j % 8] >> (4 * (j / 8))) & 15) | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
    const int low = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
    const int high = (hmask[e % 32] >> (e / 32)) & 1;
    y[e] = (d * float(sc)) * float(low - (high ? 0 : 4));
  }
}

// Q2_K: scales[16] (low nibble scale, high nibble min of each 16 values), qs[64],
// f16 d, f16 dmin; element e = 128h + 32s + l has the code (qs[32h + l] >> 2s) & 3.
// y = (d * sc) * q - (dmin * m).
void Q2KBlock(const uint8_t* b, float* y) {
  const uint8_t* s = b;
  const uint8_t* qs = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int q = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
    y[e] = (d * float(s[e / 16] & 15)) * float(q) - dmin * float(s[e / 16] >> 4);
  }
}

// 2^(e - 128), the halved E8M0 scale of mxfp4_values.h.
float E8M0Half(uint8_t e) {
  const uint32_t bits = e8m0_half_bits(e);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Twice the E2M1 value of a 4-bit code. gguf-py's MXFP4 reads its kvalues as int8
// (code 8 is +0); MLX and transformers keep the sign of code 8 (-0), `signed_zero`.
float E2M1Doubled(int code, bool signed_zero) {
  const float magnitude = float(kE2M1Doubled[code & 7]);
  if (!(code & kE2M1SignBit)) return magnitude;
  return signed_zero ? -magnitude : 0.0f - magnitude;
}

// GGUF MXFP4 (block_mxfp4): E8M0 e, qs[16]; byte j holds value j (low nibble) and
// j + 16 (high nibble). y = 2^(e - 128) * (2 * e2m1), gguf-py's d * kvalues[q].
void Mxfp4GgufBlock(const uint8_t* b, float* y) {
  const float d = E8M0Half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * E2M1Doubled(b[1 + j] & 15, false);
    y[j + 16] = d * E2M1Doubled(b[1 + j] >> 4, false);
  }
}

void GgufBlock(QuantFormat format, const uint8_t* b, float* y) {
  switch (format) {
    case QuantFormat::kQ4_0: return Q4Block(b, false, y);
    case QuantFormat::kQ4_1: return Q4Block(b, true, y);
    case QuantFormat::kQ5_0: return Q5Block(b, false, y);
    case QuantFormat::kQ5_1: return Q5Block(b, true, y);
    case QuantFormat::kQ8_0: return Q8_0Block(b, y);
    case QuantFormat::kQ4_K: return QKBlock(b, false, y);
    case QuantFormat::kQ5_K: return QKBlock(b, true, y);
    case QuantFormat::kQ6_K: return Q6KBlock(b, y);
    case QuantFormat::kQ3_K: return Q3KBlock(b, y);
    case QuantFormat::kQ2_K: return Q2KBlock(b, y);
    case QuantFormat::kMxfp4Gguf: return Mxfp4GgufBlock(b, y);
    case QuantFormat::kAffine:
    case QuantFormat::kMxfp4: break;
  }
}

// Values k .. k + 7 of an affine row: their 8 codes of `bits` bits are `bits` whole
// bytes of the row's LSB-first bitstream of little-endian uint32 words, starting at
// byte k * bits / 8 (a 3/5/6-bit code may straddle two words). w = scale * q + bias.
template <int kBits>
void AffineChunk(const uint8_t* row, int64_t k, float scale, float bias, float* y) {
  uint64_t v = 0;
  std::memcpy(&v, row + k * kBits / 8, kBits);   // little-endian host
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  for (int i = 0; i < 8; ++i) y[i] = scale * float(static_cast<uint32_t>((v >> (i * kBits)) & kMask)) + bias;
}

// One affine row, the code width a template argument so the chunk loads inline.
template <int kBits>
void AffineRow(const QuantizedTensor& w, int64_t row, float* out) {
  const int64_t groups = w.cols / w.group_size;
  const uint8_t* bytes = w.data.data_as<uint8_t>() + row * (w.cols * kBits / 8);
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = LoadAsF32(w.scales.data(), w.scales.dtype(), row * groups + g);
    const float bias = LoadAsF32(w.biases.data(), w.biases.dtype(), row * groups + g);
    for (int64_t k = g * w.group_size; k < (g + 1) * w.group_size; k += 8)
      AffineChunk<kBits>(bytes, k, scale, bias, out + k);
  }
}

// Split MXFP4: byte i of the row holds values 2i (low nibble) and 2i + 1; scale g of
// the row's K / 32 E8M0 exponents covers values 32g .. 32g + 31. y = 2^(e - 128) *
// (2 * e2m1): the value times 2^(e - 127) as mx.dequantize and transformers' ldexp give
// it, for every e (see Mxfp4GgufBlock's note on the sign of zero).
void Mxfp4Row(const QuantizedTensor& w, int64_t row, float* out) {
  const int64_t groups = w.cols / 32;
  const uint8_t* q = w.data.data_as<uint8_t>() + row * (w.cols / 2);
  const uint8_t* e = w.scales.data_as<uint8_t>() + row * groups;
  for (int64_t k = 0; k < w.cols; k += 2) {
    const float d = E8M0Half(e[k / 32]);
    out[k] = d * E2M1Doubled(q[k / 2] & 15, true);
    out[k + 1] = d * E2M1Doubled(q[k / 2] >> 4, true);
  }
}

}  // namespace

void DequantizeRow(const QuantizedTensor& w, int64_t row, float* out) {
  if (w.format == QuantFormat::kMxfp4) return Mxfp4Row(w, row, out);
  if (w.format == QuantFormat::kAffine) {
    switch (w.bits) {
      case 2: return AffineRow<2>(w, row, out);
      case 3: return AffineRow<3>(w, row, out);
      case 4: return AffineRow<4>(w, row, out);
      case 5: return AffineRow<5>(w, row, out);
      case 6: return AffineRow<6>(w, row, out);
      default: return AffineRow<8>(w, row, out);   // MakeQuantizedTensor allows no other width
    }
  }
  const int64_t block_values = BlockValues(w.format), block_bytes = BlockBytes(w.format);
  const int64_t blocks = w.cols / block_values;
  const uint8_t* b = w.data.data_as<uint8_t>() + row * blocks * block_bytes;
  for (int64_t i = 0; i < blocks; ++i) GgufBlock(w.format, b + i * block_bytes, out + i * block_values);
}

}  // namespace metalrt::cpu
