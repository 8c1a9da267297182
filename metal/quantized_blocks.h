// Chunk decoders of the quantized-weight kernels: values k0 .. k0 + 7 of one weight row
// (k0 a multiple of 8) as integer codes c[i] with one scale and one bias, so that
// w = scale * c + bias (bias-free formats: w = scale * c, kHasBias false, which keeps
// the sign of a zero product as the reference does). The f32 operations that build
// scale and bias are the CPU oracle's (cpp/cpu/quantized_blocks.cpp), so dequantize is
// bit-exact with it. Layouts: ggml-common.h (GGUF), mlx/ops.cpp (affine).
#ifndef METALRT_METAL_QUANTIZED_BLOCKS_H_
#define METALRT_METAL_QUANTIZED_BLOCKS_H_
#include <metal_stdlib>
#include "quantized_args.h"
using namespace metal;

struct QuantChunk {
  float scale;
  float bias;
  float c[8];
};

inline float load_half(device const uchar* p) {
  return float(as_type<half>(ushort(ushort(p[0]) | ushort(ushort(p[1]) << 8))));
}

inline uint load_u32(device const uchar* p) {
  return uint(p[0]) | uint(p[1]) << 8 | uint(p[2]) << 16 | uint(p[3]) << 24;
}

// Q4_0 (18 bytes / 32 values: d, qs[16]) and Q4_1 (20: d, m, qs[16]): byte j holds
// value j (low nibble) and j + 16 (high nibble).
template <bool kMin>
inline QuantChunk chunk_q4(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * (kMin ? 20 : 18);
  const int j = k0 % 32;
  device const uchar* qs = b + (kMin ? 4 : 2) + (j % 16);
  const int shift = j < 16 ? 0 : 4;
  QuantChunk q;
  q.scale = load_half(b);
  q.bias = kMin ? load_half(b + 2) : 0.0f;
  for (int i = 0; i < 8; ++i) q.c[i] = float(int((qs[i] >> shift) & 15) - (kMin ? 0 : 8));
  return q;
}

// Q5_0 (22: d, qh[4], qs[16]) and Q5_1 (24: d, m, qh[4], qs[16]): bit v of qh is the
// fifth bit of value v.
template <bool kMin>
inline QuantChunk chunk_q5(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * (kMin ? 24 : 22);
  const int j = k0 % 32;
  const uint qh = load_u32(b + (kMin ? 4 : 2));
  device const uchar* qs = b + (kMin ? 8 : 6) + (j % 16);
  const int shift = j < 16 ? 0 : 4;
  QuantChunk q;
  q.scale = load_half(b);
  q.bias = kMin ? load_half(b + 2) : 0.0f;
  for (int i = 0; i < 8; ++i) {
    const int code = int((qs[i] >> shift) & 15) | int((qh >> (j + i)) & 1) << 4;
    q.c[i] = float(code - (kMin ? 0 : 16));
  }
  return q;
}

// Q8_0 (34: d, qs[32] int8).
inline QuantChunk chunk_q8_0(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 32) * 34;
  device const char* qs = (device const char*)(b + 2 + k0 % 32);
  QuantChunk q;
  q.scale = load_half(b);
  q.bias = 0.0f;
  for (int i = 0; i < 8; ++i) q.c[i] = float(qs[i]);
  return q;
}

// Q4_K (144: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12],
// qh[32], qs[128]): 64-value chunks c take the low then the high nibbles of
// qs[32c .. 32c + 31] (sub-blocks 2c, 2c + 1); Q5_K's fifth bit of sub-block s is bit s
// of qh[l]. w = (d * sc) * q - dmin * m.
template <bool kFive>
inline QuantChunk chunk_qk(device const uchar* row, int k0) {
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
  device const uchar* qs = b + (kFive ? 48 : 16) + 32 * (sub / 2) + l0;
  device const uchar* qh = b + 16 + l0;
  const int shift = (sub % 2) * 4;
  QuantChunk q;
  q.scale = load_half(b) * float(sc);
  q.bias = -(load_half(b + 2) * float(m));
  for (int i = 0; i < 8; ++i) {
    int code = (qs[i] >> shift) & 15;
    if (kFive) code |= ((qh[i] >> sub) & 1) << 4;
    q.c[i] = float(code);
  }
  return q;
}

// Q6_K (210: ql[128], qh[64], scales[16] int8, d): value 128h + i takes its low bits
// from ql[64h + i % 64] (high nibble when i >= 64) and its top two bits from
// qh[32h + i % 32] at bit 2 * (i / 32). w = (d * scales[v / 16]) * (q - 32).
inline QuantChunk chunk_q6_k(device const uchar* row, int k0) {
  device const uchar* b = row + (k0 / 256) * 210;
  const int v = k0 % 256, h = v / 128, i0 = v % 128;
  device const uchar* ql = b + 64 * h + i0 % 64;
  device const uchar* qh = b + 128 + 32 * h + i0 % 32;
  const int lo_shift = i0 < 64 ? 0 : 4, hi_shift = 2 * (i0 / 32);
  QuantChunk q;
  q.scale = load_half(b + 208) * float(((device const char*)(b + 192))[v / 16]);
  q.bias = 0.0f;
  for (int i = 0; i < 8; ++i)
    q.c[i] = float(int(((ql[i] >> lo_shift) & 15) | ((qh[i] >> hi_shift) & 3) << 4) - 32);
  return q;
}

// MLX affine: 8 codes of `bits` bits are `bits` whole bytes of the row's LSB-first
// bitstream, starting at byte k0 * bits / 8; w = scale * q + bias of the value's group.
template <typename S>
inline QuantChunk chunk_affine(device const uchar* row, device const S* scales, device const S* biases,
                               long row_index, int k0, constant QuantizedArgs& args) {
  device const uchar* p = row + k0 * args.bits / 8;
  ulong bits = 0;
  for (int i = 0; i < args.bits; ++i) bits |= ulong(p[i]) << (8 * i);
  const ulong mask = (ulong(1) << args.bits) - 1;
  const long g = row_index * args.groups + k0 / args.group_size;
  QuantChunk q;
  q.scale = float(scales[g]);
  q.bias = float(biases[g]);
  for (int i = 0; i < 8; ++i) q.c[i] = float(uint((bits >> (i * args.bits)) & mask));
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
struct FormatAffine { static constant constexpr bool kHasBias = true; };
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

template <typename W>
inline QuantChunk chunk_float(device const uchar* row, int k0) {
  device const W* p = (device const W*)row + k0;
  QuantChunk q;
  q.scale = 1.0f;
  q.bias = 0.0f;
  for (int i = 0; i < 8; ++i) q.c[i] = float(p[i]);
  return q;
}

template <typename F, typename S>
inline QuantChunk load_chunk(device const uchar* data, device const S* scales, device const S* biases,
                             long row_index, int k0, constant QuantizedArgs& args) {
  device const uchar* row = data + row_index * args.row_bytes;
  if (is_same<F, FormatQ4_0>::value) return chunk_q4<false>(row, k0);
  if (is_same<F, FormatQ4_1>::value) return chunk_q4<true>(row, k0);
  if (is_same<F, FormatQ5_0>::value) return chunk_q5<false>(row, k0);
  if (is_same<F, FormatQ5_1>::value) return chunk_q5<true>(row, k0);
  if (is_same<F, FormatQ8_0>::value) return chunk_q8_0(row, k0);
  if (is_same<F, FormatQ4_K>::value) return chunk_qk<false>(row, k0);
  if (is_same<F, FormatQ5_K>::value) return chunk_qk<true>(row, k0);
  if (is_same<F, FormatQ6_K>::value) return chunk_q6_k(row, k0);
  if (FloatFormatValue<F>::kIsFloat) return chunk_float<typename FloatFormatValue<F>::type>(row, k0);
  return chunk_affine(row, scales, biases, row_index, k0, args);
}

// The weight of code i: scale * c + bias, rounded as the oracle rounds it: the
// product is its own statement, so -ffp-contract=on cannot fuse it with the sum.
template <typename F>
inline float chunk_value(thread const QuantChunk& q, int i) {
  const float product = q.scale * q.c[i];
  return F::kHasBias ? product + q.bias : product;
}

#endif  // METALRT_METAL_QUANTIZED_BLOCKS_H_
