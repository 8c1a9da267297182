// Chunk decoders of the quantized-weight kernels: values k0 .. k0 + W - 1 of one weight
// row (W = 8, or the GEMVs' wide 16; k0 a multiple of W) as integer codes c[i] with one scale and one bias, so that
// w = scale * c + bias (bias-free formats: w = scale * c, kHasBias false, which keeps
// the sign of a zero product as the reference does). The f32 operations that build
// scale and bias are the CPU oracle's (cpp/cpu/quantized_blocks.cpp), so dequantize is
// bit-exact with it. Layouts: ggml-common.h (GGUF), mlx/ops.cpp (affine).
#ifndef METALRT_METAL_QUANTIZED_BLOCKS_H_
#define METALRT_METAL_QUANTIZED_BLOCKS_H_
#include <metal_stdlib>
#include "mxfp4_values.h"
#include "quantized_args.h"
using namespace metal;

static_assert(kQuantAffineBitsConstant == 1, "affine_bits is function constant 1");
constant int affine_bits [[function_constant(1)]];

// W values sharing one scale and one bias: the 8-value chunk (QuantChunk) of every
// kernel, and the GEMVs' wide chunk of kQuantWideChunk values.
template <int W>
struct QuantChunkW {
  float scale;
  float bias;
  float c[W];
};
typedef QuantChunkW<kQuantChunk> QuantChunk;

inline float load_half(device const uchar* p) {
  return float(as_type<half>(ushort(ushort(p[0]) | ushort(ushort(p[1]) << 8))));
}

inline uint load_u32(device const uchar* p) {
  return uint(p[0]) | uint(p[1]) << 8 | uint(p[2]) << 16 | uint(p[3]) << 24;
}

// The W quant bytes p[0 .. W - 1] of a chunk. The 8-value chunk reads bytes (it also
// serves dequantize and the GEMM, whose callers check no alignment); the wide chunk reads
// kAlign-byte words: the host takes it only for data aligned to kQuantWideDataAlign, GGUF
// block sizes are all even, and kAlign = 4 where the block size and the quants' offset
// in it are multiples of 4 (Q4_1, Q5_1, Q4_K, Q5_K); kAlign = 1 reads bytes (MXFP4's
// odd 17-byte blocks).
template <int W, int kAlign>
inline void load_quants(device const uchar* p, thread uchar* q) {
  if (W == kQuantChunk || kAlign == 1) {
    for (int i = 0; i < W; ++i) q[i] = p[i];
  } else if (kAlign == 4) {
    for (int i = 0; i < W / 4; ++i) {
      const uint v = ((device const uint*)p)[i];
      for (int b = 0; b < 4; ++b) q[4 * i + b] = uchar(v >> (8 * b));
    }
  } else {
    for (int i = 0; i < W / 2; ++i) {
      const ushort v = ((device const ushort*)p)[i];
      q[2 * i] = uchar(v);
      q[2 * i + 1] = uchar(v >> 8);
    }
  }
}

// A little-endian uint32 at p, in kAlign-byte words for the wide chunk (as load_quants).
template <int W, int kAlign>
inline uint load_word(device const uchar* p) {
  if (W == kQuantChunk) return load_u32(p);
  if (kAlign == 4) return *(device const uint*)p;
  return uint(((device const ushort*)p)[0]) | uint(((device const ushort*)p)[1]) << 16;
}

// Q4_0 (18 bytes / 32 values: d, qs[16]) and Q4_1 (20: d, m, qs[16]): byte j holds
// value j (low nibble) and j + 16 (high nibble).
template <bool kMin, int W>
inline QuantChunkW<W> chunk_q4(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * (kMin ? 20 : 18);
  const int j = k0 % 32;
  uchar qs[W];
  load_quants<W, kMin ? 4 : 2>(b + (kMin ? 4 : 2) + (j % 16), qs);
  const int shift = j < 16 ? 0 : 4;
  QuantChunkW<W> q;
  q.scale = load_half(b);
  q.bias = kMin ? load_half(b + 2) : 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = float(int((qs[i] >> shift) & 15) - (kMin ? 0 : 8));
  return q;
}

// Q5_0 (22: d, qh[4], qs[16]) and Q5_1 (24: d, m, qh[4], qs[16]): bit v of qh is the
// fifth bit of value v.
template <bool kMin, int W>
inline QuantChunkW<W> chunk_q5(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * (kMin ? 24 : 22);
  const int j = k0 % 32;
  const uint qh = load_word<W, kMin ? 4 : 2>(b + (kMin ? 4 : 2));
  uchar qs[W];
  load_quants<W, kMin ? 4 : 2>(b + (kMin ? 8 : 6) + (j % 16), qs);
  const int shift = j < 16 ? 0 : 4;
  QuantChunkW<W> q;
  q.scale = load_half(b);
  q.bias = kMin ? load_half(b + 2) : 0.0f;
  for (int i = 0; i < W; ++i) {
    const int code = int((qs[i] >> shift) & 15) | int((qh >> (j + i)) & 1) << 4;
    q.c[i] = float(code - (kMin ? 0 : 16));
  }
  return q;
}

// Q8_0 (34: d, qs[32] int8).
template <int W>
inline QuantChunkW<W> chunk_q8_0(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * 34;
  uchar qs[W];
  load_quants<W, 2>(b + 2 + k0 % 32, qs);
  QuantChunkW<W> q;
  q.scale = load_half(b);
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = float(as_type<char>(qs[i]));
  return q;
}

// Q4_K (144: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12],
// qh[32], qs[128]): 64-value chunks c take the low then the high nibbles of
// qs[32c .. 32c + 31] (sub-blocks 2c, 2c + 1); Q5_K's fifth bit of sub-block s is bit s
// of qh[l]. w = (d * sc) * q - dmin * m.
template <bool kFive, int W>
inline QuantChunkW<W> chunk_qk(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 256) * (kFive ? 176 : 144);
  const int v = k0 % 256;
  const int sub = v / 32, l0 = v % 32;
  device const uchar* s = b + 4;
  int sc, m;
  if (sub < 4) {
    sc = s[sub] & 63;
    m = s[sub + 4] & 63;
  } else {
    sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
    m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
  uchar qs[W], qh[W];
  load_quants<W, 4>(b + (kFive ? 48 : 16) + 32 * (sub / 2) + l0, qs);
  if (kFive) load_quants<W, 4>(b + 16 + l0, qh);
  const int shift = (sub % 2) * 4;
  QuantChunkW<W> q;
  q.scale = load_half(b) * float(sc);
  q.bias = -(load_half(b + 2) * float(m));
  for (int i = 0; i < W; ++i) {
    int code = (qs[i] >> shift) & 15;
    if (kFive) code |= ((qh[i] >> sub) & 1) << 4;
    q.c[i] = float(code);
  }
  return q;
}

// Q6_K (210: ql[128], qh[64], scales[16] int8, d): value 128h + i takes its low bits
// from ql[64h + i % 64] (high nibble when i >= 64) and its top two bits from
// qh[32h + i % 32] at bit 2 * (i / 32). w = (d * scales[v / 16]) * (q - 32).
template <int W>
inline QuantChunkW<W> chunk_q6_k(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 256) * 210;
  const int v = k0 % 256, h = v / 128, i0 = v % 128;
  uchar ql[W], qh[W];
  load_quants<W, 2>(b + 64 * h + i0 % 64, ql);
  load_quants<W, 2>(b + 128 + 32 * h + i0 % 32, qh);
  const int lo_shift = i0 < 64 ? 0 : 4, hi_shift = 2 * (i0 / 32);
  QuantChunkW<W> q;
  q.scale = load_half(b + 208) * float(((device const char*)(b + 192))[v / 16]);
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i)
    q.c[i] = float(int(((ql[i] >> lo_shift) & 15) | ((qh[i] >> hi_shift) & 3) << 4) - 32);
  return q;
}

// Q3_K (110: hmask[32], qs[64], scales[12], d): value v = 128h + 32s + l takes its low
// two bits from qs[32h + l] at bit 2s and subtracts 4 where bit v / 32 of hmask[l] is
// clear; its 16 values' scale j = v / 16 is 6 bits (low nibble of byte j % 8, the high
// one for j >= 8; top two bits of byte 8 + j % 4 at bit 2 (j / 4)) minus 32.
// w = (d * sc) * q.
template <int W>
inline QuantChunkW<W> chunk_q3_k(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 256) * 110;
  const int v = k0 % 256, j = v / 16;
  uchar qs[W], hm[W];
  load_quants<W, 2>(b + 32 + 32 * (v / 128) + v % 32, qs);
  load_quants<W, 2>(b + v % 32, hm);
  device const uchar* s = b + 96;
  const int sc = (int((s[j % 8] >> (4 * (j / 8))) & 15) | int((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
  const int shift = 2 * (v % 128 / 32), high = v / 32;
  QuantChunkW<W> q;
  q.scale = load_half(b + 108) * float(sc);
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = float(int((qs[i] >> shift) & 3) - (((hm[i] >> high) & 1) ? 0 : 4));
  return q;
}

// Q2_K (84: scales[16], qs[64], d, dmin): value v = 128h + 32s + l is bits 2s of
// qs[32h + l]; byte v / 16 of scales holds its scale (low nibble) and min (high).
// w = (d * sc) * q - dmin * m.
template <int W>
inline QuantChunkW<W> chunk_q2_k(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 256) * 84;
  const int v = k0 % 256;
  uchar qs[W];
  load_quants<W, 4>(b + 16 + 32 * (v / 128) + v % 32, qs);
  const uchar s = b[v / 16];
  const int shift = 2 * (v % 128 / 32);
  QuantChunkW<W> q;
  q.scale = load_half(b + 80) * float(s & 15);
  q.bias = -(load_half(b + 82) * float(s >> 4));
  for (int i = 0; i < W; ++i) q.c[i] = float((qs[i] >> shift) & 3);
  return q;
}

// The E8M0 exponent e as the halved scale 2^(e - 128), and twice the E2M1 value of a
// code (mxfp4_values.h), with the sign of code 8's zero kept (split layout) or +0
// (GGUF, whose reference reads int8 kvalues).
inline float e8m0_half(uint e) { return as_type<float>(uint(e8m0_half_bits(e))); }
template <bool kSignedZero>
inline float e2m1_doubled(uint code) {
  const float magnitude = float(kE2M1Doubled[code & 7]);
  if (!(code & uint(kE2M1SignBit))) return magnitude;
  return kSignedZero ? -magnitude : 0.0f - magnitude;
}

// GGUF MXFP4 (17 bytes / 32 values: E8M0 e, qs[16]): byte j holds value j (low nibble)
// and j + 16 (high). w = 2^(e - 128) * (2 * e2m1). Blocks are odd-sized: byte loads.
template <int W>
inline QuantChunkW<W> chunk_mxfp4_gguf(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * 17;
  const int j = k0 % 32;
  uchar qs[W];
  load_quants<W, 1>(b + 1 + (j % 16), qs);
  const int shift = j < 16 ? 0 : 4;
  QuantChunkW<W> q;
  q.scale = e8m0_half(b[0]);
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = e2m1_doubled<false>((qs[i] >> shift) & 15);
  return q;
}

// Split MXFP4 (MLX mode "mxfp4", gpt-oss *_blocks): byte k / 2 of the row holds value
// k in its low nibble for even k, the high one for odd k; scales[row, k / 32] is the
// E8M0 exponent (S = uchar). w = 2^(e - 128) * (2 * e2m1).
template <typename S, int W>
inline QuantChunkW<W> chunk_mxfp4(device const uchar* row, device const S* scales, long row_index, int k0,
                                  constant QuantizedArgs& args) {
  uint words[W / 8];   // value i is nibble i % 8 of word i / 8 (little-endian bytes)
  for (int i = 0; i < W / 8; ++i) words[i] = load_word<W, 4>(row + k0 / 2 + 4 * i);
  QuantChunkW<W> q;
  q.scale = e8m0_half(uint(scales[row_index * args.groups + k0 / 32]));
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = e2m1_doubled<true>((words[i / 8] >> (4 * (i % 8))) & 15);
  return q;
}

// MLX affine: W codes of `bits` bits (function constant affine_bits) are W * bits / 8
// whole bytes of the row's LSB-first bitstream, starting at byte k0 * bits / 8 (the wide
// chunk: `bits` 2-byte words, as k0 * bits / 8 is even and rows are whole uint32 words);
// w = scale * q + bias of the value's group.
template <typename S, int W>
inline QuantChunkW<W> chunk_affine(device const uchar* row, device const S* scales, device const S* biases,
                                   long row_index, int k0, constant QuantizedArgs& args) {
  device const uchar* p = row + k0 * affine_bits / 8;
  const uint mask = (uint(1) << affine_bits) - 1;
  const long g = row_index * args.groups + k0 / args.group_size;
  QuantChunkW<W> q;
  q.scale = float(scales[g]);
  q.bias = float(biases[g]);
  if (W == kQuantChunk) {
    ulong bits = 0;
    for (int i = 0; i < affine_bits; ++i) bits |= ulong(p[i]) << (8 * i);
    for (int i = 0; i < W; ++i) q.c[i] = float(uint(bits >> (i * affine_bits)) & mask);
  } else {
    ushort words[kQuantWideChunk / 2];   // `bits` of them (bits <= 8)
    for (int i = 0; i < affine_bits; ++i) words[i] = ((device const ushort*)p)[i];
    for (int i = 0; i < W; ++i) {
      const int at = i * affine_bits, w = at / 16;
      const uint pair = uint(words[w]) | (w + 1 < affine_bits ? uint(words[w + 1]) << 16 : 0u);
      q.c[i] = float((pair >> (at % 16)) & mask);
    }
  }
  return q;
}

// The formats, one tag type each, so a kernel template is instantiated per format
// (static members live in the constant address space in MSL).
struct FormatQ4_0 { static constant constexpr bool kHasBias = false; };
struct FormatQ4_1 { static constant constexpr bool kHasBias = true; };
struct FormatQ5_0 { static constant constexpr bool kHasBias = false; };
struct FormatQ5_1 { static constant constexpr bool kHasBias = true; };
struct FormatQ8_0 { static constant constexpr bool kHasBias = false; };
struct FormatQ4_K { static constant constexpr bool kHasBias = true; };
struct FormatQ5_K { static constant constexpr bool kHasBias = true; };
struct FormatQ6_K { static constant constexpr bool kHasBias = false; };
struct FormatQ3_K { static constant constexpr bool kHasBias = false; };
struct FormatQ2_K { static constant constexpr bool kHasBias = true; };
struct FormatMxfp4Gguf { static constant constexpr bool kHasBias = false; };
struct FormatAffine { static constant constexpr bool kHasBias = true; };
struct FormatMxfp4 { static constant constexpr bool kHasBias = false; };

// The quantized formats every quantized kernel file instantiates, one X(tag type, kernel
// name part, scales type) each (affine once per scales dtype): quantized.metal and
// moe_matmul.metal expand this one list, so a new block type is a line here.
#define METALRT_QUANTIZED_FORMATS(X)   \
  X(FormatQ4_0, "q4_0", half)          \
  X(FormatQ4_1, "q4_1", half)          \
  X(FormatQ5_0, "q5_0", half)          \
  X(FormatQ5_1, "q5_1", half)          \
  X(FormatQ8_0, "q8_0", half)          \
  X(FormatQ4_K, "q4_k", half)          \
  X(FormatQ5_K, "q5_k", half)          \
  X(FormatQ6_K, "q6_k", half)          \
  X(FormatQ3_K, "q3_k", half)          \
  X(FormatQ2_K, "q2_k", half)          \
  X(FormatMxfp4Gguf, "mxfp4_gguf", half) \
  X(FormatMxfp4, "mxfp4", uchar)       \
  X(FormatAffine, "affine_f32", float) \
  X(FormatAffine, "affine_f16", half)  \
  X(FormatAffine, "affine_bf16", bfloat)
// Float weights (W = float, half, bfloat) through the same kernels: a chunk holds the 8
// values themselves with scale 1 (moe_matmul_bt's float experts).
template <typename W> struct FormatFloat { static constant constexpr bool kHasBias = false; };
template <typename F> struct FloatFormatValue {
  typedef float type;
  static constant constexpr bool kIsFloat = false;
};
template <typename W> struct FloatFormatValue<FormatFloat<W>> {
  typedef W type;
  static constant constexpr bool kIsFloat = true;
};

template <typename V, int W>
inline QuantChunkW<W> chunk_float(device const uchar* row, int k0) {
  device const V* p = (device const V*)row + k0;
  QuantChunkW<W> q;
  q.scale = 1.0f;
  q.bias = 0.0f;
  for (int i = 0; i < W; ++i) q.c[i] = float(p[i]);
  return q;
}

// Values k0 .. k0 + W - 1 of weight row row_index (k0 a multiple of W).
template <typename F, typename S, int W = kQuantChunk>
inline QuantChunkW<W> load_chunk(device const uchar* data, device const S* scales, device const S* biases,
                                 long row_index, int k0, constant QuantizedArgs& args) {
  device const uchar* row = data + row_index * args.row_bytes;
  if (is_same<F, FormatQ4_0>::value) return chunk_q4<false, W>(row, k0);
  if (is_same<F, FormatQ4_1>::value) return chunk_q4<true, W>(row, k0);
  if (is_same<F, FormatQ5_0>::value) return chunk_q5<false, W>(row, k0);
  if (is_same<F, FormatQ5_1>::value) return chunk_q5<true, W>(row, k0);
  if (is_same<F, FormatQ8_0>::value) return chunk_q8_0<W>(row, k0);
  if (is_same<F, FormatQ4_K>::value) return chunk_qk<false, W>(row, k0);
  if (is_same<F, FormatQ5_K>::value) return chunk_qk<true, W>(row, k0);
  if (is_same<F, FormatQ6_K>::value) return chunk_q6_k<W>(row, k0);
  if (is_same<F, FormatQ3_K>::value) return chunk_q3_k<W>(row, k0);
  if (is_same<F, FormatQ2_K>::value) return chunk_q2_k<W>(row, k0);
  if (is_same<F, FormatMxfp4Gguf>::value) return chunk_mxfp4_gguf<W>(row, k0);
  if (is_same<F, FormatMxfp4>::value) return chunk_mxfp4<S, W>(row, scales, row_index, k0, args);
  if (FloatFormatValue<F>::kIsFloat) return chunk_float<typename FloatFormatValue<F>::type, W>(row, k0);
  return chunk_affine<S, W>(row, scales, biases, row_index, k0, args);
}

// The weight of code i: scale * c + bias, rounded as the oracle rounds it: the
// product is its own statement, so -ffp-contract=on cannot fuse it with the sum.
template <typename F>
inline float chunk_value(thread const QuantChunk& q, int i) {
  const float product = q.scale * q.c[i];
  return F::kHasBias ? product + q.bias : product;
}

#endif  // METALRT_METAL_QUANTIZED_BLOCKS_H_
