// Quantized-weight kernels: every format decodes through the chunk decoders of
// metal/quantized_blocks.h (8 values sharing one scale and one bias), activations and
// accumulators in f32. Instantiated per op, variant, format and dtype as
// <op>_<variant>_<format>_<dtype> (affine: <format> = affine_<scales dtype>), so the
// profiler shows which ran. Function constants (quantized_args.h): the affine code
// width affine_bits, and the GEMVs' activation rows gemv_m, so the loops over their
// private arrays unroll (a pipeline per m the model runs, up to kQuantGemvMaxM per GEMV):
// * quantized_matmul_bt_gemv_* (m <= 8, decode and small batches). Design: MLX qmv /
//   llama.cpp mul_mv_q (reference/quantization.md section 3): 2 SIMD-groups of 4 weight
//   rows each, lanes strided along K one 8-value chunk at a time (quantized_matmul_bt_
//   gemv16_*, QuantGemvChunk: K >= 512 per K part: 16-value chunks over whole passes of
//   512 values, then 8-value ones; quants as 2/4-byte words, one scale per 16 values); each weight chunk is
//   decoded once and reused by all m activation rows, each activation chunk loaded once
//   (two 4-wide vector loads) and shared by the 4 rows; the chunk's sum of x is taken once, so the bias costs one
//   multiply per chunk and row (scale * sum(c x) + bias * sum(x)); simd_sum at the end.
//   Long rows on a small grid (QuantGemvSplits: K >= 1024 and fewer than 256
//   threadgroups, e.g. down_proj) split K: both SIMD-groups take one row block, every
//   other 256-value stretch each, and part 1's sums meet part 0's in threadgroup memory
//   (metal/gemv_split.h) before the epilogue, so every GEMV user below gets the split.
//   Expected: bound by the weight bytes (the packed size, ~4.5-8.5 bits per weight) on
//   Apple GPUs, within ~2x of MLX's qmv_fast, which also vectorises the activation loads.
// * quantized_matmul_bt_add_gemv_* and quantized_matmul_bt_swiglu_gemv_*: the same GEMV
//   with a fused epilogue (the residual add after the o / down projection; SwiGLU of
//   the merged gate|up projection), so a decode layer needs neither the add nor the
//   silu_and_mul dispatch.
// * quantized_matmul_bt_concat_gemv_*: the same GEMV over up to three weights of one
//   format and K (a GGUF's separate Q, K and V), their outputs concatenated along N, so
//   a layer whose file keeps them apart still needs one projection dispatch.
// * quantized_matmul_bt_gemm_* (m > 8, prefill). Design: MLX qmm_t: 32x32 output tiles,
//   the weight tile dequantized into threadgroup memory (one chunk per thread), the
//   activation tile staged as f32 (never half: activations beyond 65504 stay finite),
//   four SIMD-groups of 2x2 8x8 simdgroup_multiply_accumulate. Expected: compute-bound
//   like the dense matmul_bt_gemm, plus the decode of each weight tile once per 32 rows.
// * dequantize_rows_* and quantized_embedding_gather_*: one thread per chunk of a row
//   (the row of the grid's y, or of ids[y]); bit-exact with the CPU oracle. Expected:
//   bound by the bytes written.
#include <metal_stdlib>
#include "quantized_blocks.h"
#include "quantized_gemm.h"
#include "quantized_gemv.h"
using namespace metal;

// Decode GEMV: MLX qmv's shape (rows per SIMD-group, shared activation loads, the sum
// of x for the bias; body in quantized_gemv.h); expected to reach the weight-bandwidth
// bound (see the top).
template <typename F, typename T, typename S, int W>
kernel void quantized_matmul_bt_gemv(device const T* x [[buffer(0)]],
                                     device const uchar* data [[buffer(1)]],
                                     device const S* scales [[buffer(2)]],
                                     device const S* biases [[buffer(3)]],
                                     device T* out [[buffer(4)]],
                                     constant QuantizedArgs& args [[buffer(5)]],
                                     uint group [[threadgroup_position_in_grid]],
                                     uint simdgroup [[simdgroup_index_in_threadgroup]],
                                     uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[quant_gemv_partials(kQuantGemvRows)];
  quantized_gemv<F, T, S, W>(x, data, scales, biases, 0, args.n, out, args, partials, group, simdgroup, lane);
}

// Fused residual add: out [m, n] = residual + x w^T, the product rounded to T before
// the add as quantized_matmul_bt then add would (so bit-exact with that composition);
// out may be residual itself (each element is read, then written, by one lane).
template <typename F, typename T, typename S, int W>
kernel void quantized_matmul_bt_add_gemv(device const T* x [[buffer(0)]],
                                         device const uchar* data [[buffer(1)]],
                                         device const S* scales [[buffer(2)]],
                                         device const S* biases [[buffer(3)]],
                                         device T* out [[buffer(4)]],
                                         constant QuantizedArgs& args [[buffer(5)]],
                                         device const T* residual [[buffer(6)]],
                                         uint group [[threadgroup_position_in_grid]],
                                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[quant_gemv_partials(kQuantGemvRows)];
  const QuantGemvPlace place = gemv_place(group, simdgroup, args);
  long rows[kQuantGemvRows];
  gemv_rows(0, place.row0, args.n, rows);
  float acc[kQuantGemvMaxM * kQuantGemvRows];
  gemv_accumulate<F, T, S, kQuantGemvRows, W>(x, data, scales, biases, args, rows, acc, partials, place.part,
                                           simdgroup, lane);
  if (place.part != 0 || lane != 0) return;
  for (int32_t i = 0; i < gemv_m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r) {
      if (rows[r] < 0) continue;
      const long e = long(i) * args.n + rows[r];
      out[e] = T(float(T(acc[i * kQuantGemvRows + r])) + float(residual[e]));
    }
}

// Fused SwiGLU: w holds the gate rows then the up rows (n = 2 I); out [m, I] =
// silu(x w_gate^T) * (x w_up^T). The SIMD-group computes gate rows row0.. and the up
// rows I + row0.. together, so the epilogue has both; gate and up are rounded to T
// first and combined as silu_and_mul does (bit-exact with that composition).
template <typename F, typename T, typename S, int W>
kernel void quantized_matmul_bt_swiglu_gemv(device const T* x [[buffer(0)]],
                                            device const uchar* data [[buffer(1)]],
                                            device const S* scales [[buffer(2)]],
                                            device const S* biases [[buffer(3)]],
                                            device T* out [[buffer(4)]],
                                            constant QuantizedArgs& args [[buffer(5)]],
                                            uint group [[threadgroup_position_in_grid]],
                                            uint simdgroup [[simdgroup_index_in_threadgroup]],
                                            uint lane [[thread_index_in_simdgroup]]) {
  constexpr int R = 2 * kQuantGemvRows;
  threadgroup float partials[quant_gemv_partials(R)];
  const int32_t inner = args.n / 2;
  const QuantGemvPlace place = gemv_place(group, simdgroup, args);
  long rows[R];
  gemv_rows(0, place.row0, inner, rows);
  for (int r = 0; r < kQuantGemvRows; ++r) rows[kQuantGemvRows + r] = rows[r] < 0 ? -1 : inner + rows[r];
  float acc[kQuantGemvMaxM * R];
  gemv_accumulate<F, T, S, R, W>(x, data, scales, biases, args, rows, acc, partials, place.part, simdgroup,
                              lane);
  if (place.part != 0 || lane != 0) return;
  for (int32_t i = 0; i < gemv_m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r) {
      if (rows[r] < 0) continue;
      const float gate = float(T(acc[i * R + r])), up = float(T(acc[i * R + kQuantGemvRows + r]));
      out[long(i) * inner + rows[r]] = T(gate / (1.0f + exp(-gate)) * up);
    }
}

// Concatenated GEMV: out [m, n0 + n1 + n2] = x [w0 | w1 | w2]^T. SIMD-group blocks of
// kQuantGemvRows rows are numbered across the weights, each weight starting a fresh
// block, so every SIMD-group's rows belong to one weight; the body and its rounding are
// quantized_matmul_bt_gemv's (bit-exact with three of those).
template <typename F, typename T, typename S, int W>
kernel void quantized_matmul_bt_concat_gemv(device const T* x [[buffer(0)]],
                                            device const uchar* data0 [[buffer(1)]],
                                            device const S* scales0 [[buffer(2)]],
                                            device const S* biases0 [[buffer(3)]],
                                            device T* out [[buffer(4)]],
                                            constant QuantizedArgs& args [[buffer(5)]],
                                            device const uchar* data1 [[buffer(6)]],
                                            device const S* scales1 [[buffer(7)]],
                                            device const S* biases1 [[buffer(8)]],
                                            device const uchar* data2 [[buffer(9)]],
                                            device const S* scales2 [[buffer(10)]],
                                            device const S* biases2 [[buffer(11)]],
                                            constant QuantizedConcatArgs& parts [[buffer(12)]],
                                            uint group [[threadgroup_position_in_grid]],
                                            uint simdgroup [[simdgroup_index_in_threadgroup]],
                                            uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[quant_gemv_partials(kQuantGemvRows)];
  const QuantGemvPlace place = gemv_place(group, simdgroup, args);
  int32_t row0 = place.row0, column0 = 0;
  int part = 0;
  for (; part < kQuantConcatMaxParts - 1; ++part) {
    const int32_t blocks = (parts.rows[part] + kQuantGemvRows - 1) / kQuantGemvRows;
    if (row0 < blocks * kQuantGemvRows) break;
    row0 -= blocks * kQuantGemvRows;
    column0 += parts.rows[part];
  }
  const int32_t n = parts.rows[part];
  device const uchar* data = part == 0 ? data0 : part == 1 ? data1 : data2;
  device const S* scales = part == 0 ? scales0 : part == 1 ? scales1 : scales2;
  device const S* biases = part == 0 ? biases0 : part == 1 ? biases1 : biases2;
  long rows[kQuantGemvRows];
  gemv_rows(0, row0, n, rows);
  float acc[kQuantGemvMaxM * kQuantGemvRows];
  gemv_accumulate<F, T, S, kQuantGemvRows, W>(x, data, scales, biases, args, rows, acc, partials, place.part,
                                           simdgroup, lane);
  if (place.part != 0 || lane != 0) return;
  for (int32_t i = 0; i < gemv_m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r)
      if (rows[r] >= 0) out[long(i) * args.n + column0 + rows[r]] = T(acc[i * kQuantGemvRows + r]);
}

// Prefill GEMM: MLX qmm_t's shape (dequantized weight tile in threadgroup memory, f32
// activation tile, simdgroup matrices; body in quantized_gemm.h); expected
// compute-bound like matmul_bt_gemm.
template <typename F, typename T, typename S>
kernel void quantized_matmul_bt_gemm(device const T* x [[buffer(0)]],
                                     device const uchar* data [[buffer(1)]],
                                     device const S* scales [[buffer(2)]],
                                     device const S* biases [[buffer(3)]],
                                     device T* out [[buffer(4)]],
                                     constant QuantizedArgs& args [[buffer(5)]],
                                     uint2 group [[threadgroup_position_in_grid]],
                                     uint tid [[thread_index_in_threadgroup]],
                                     uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float x_tile[kQuantGemmTile * kQuantGemmTileK];   // [row][k]
  threadgroup float w_tile[kQuantGemmTile * kQuantGemmTileK];   // [weight row][k]
  threadgroup float c_tile[kQuantGemmTile * kQuantGemmTile];    // [row][column]
  const QuantGemmDenseRows rows{args.m};
  quantized_gemm_tile<F, T, S>(x, rows, int32_t(group.y) * kQuantGemmTile, data, scales, biases, 0,
                               int32_t(group.x) * kQuantGemmTile, out, args, tid, simdgroup, x_tile, w_tile,
                               c_tile);
}

// Row gather / dequantize: one thread per chunk, bound by the bytes written.
// Row y of the output is weight row y (dequantize) or ids[y] (quantized_embedding; an
// id outside [0, n) gives a zero row).
template <typename F, typename T, typename S, bool kGather>
kernel void quantized_rows(device const int* ids [[buffer(0)]],
                           device const uchar* data [[buffer(1)]],
                           device const S* scales [[buffer(2)]],
                           device const S* biases [[buffer(3)]],
                           device T* out [[buffer(4)]],
                           constant QuantizedArgs& args [[buffer(5)]],
                           uint2 position [[thread_position_in_grid]]) {
  const int32_t k0 = int32_t(position.x) * kQuantChunk;
  if (k0 >= args.k) return;
  const long row = kGather ? long(ids[position.y]) : long(position.y);
  device T* dst = out + long(position.y) * args.k + k0;
  if (row < 0 || row >= args.n) {
    for (int j = 0; j < 8; ++j) dst[j] = T(0.0f);
    return;
  }
  const QuantChunk q = load_chunk<F>(data, scales, biases, row, k0, args);
  for (int j = 0; j < 8; ++j) dst[j] = T(chunk_value<F>(q, j));
}

// The GEMVs with W values per lane and pass, named <op>_<VARIANT>_<format>_<dtype>.
#define METALRT_QUANTIZED_GEMVS(F, FNAME, T, TNAME, S, W, VARIANT)                                        \
  template [[host_name("quantized_matmul_bt_" VARIANT "_" FNAME "_" TNAME)]] kernel void                      \
  quantized_matmul_bt_gemv<F, T, S, W>(device const T*, device const uchar*, device const S*,             \
                                    device const S*, device T*, constant QuantizedArgs&, uint, uint, uint); \
  template [[host_name("quantized_matmul_bt_add_" VARIANT "_" FNAME "_" TNAME)]] kernel void                  \
  quantized_matmul_bt_add_gemv<F, T, S, W>(device const T*, device const uchar*, device const S*,         \
                                        device const S*, device T*, constant QuantizedArgs&,            \
                                        device const T*, uint, uint, uint);                             \
  template [[host_name("quantized_matmul_bt_swiglu_" VARIANT "_" FNAME "_" TNAME)]] kernel void               \
  quantized_matmul_bt_swiglu_gemv<F, T, S, W>(device const T*, device const uchar*, device const S*,      \
                                           device const S*, device T*, constant QuantizedArgs&,         \
                                           uint, uint, uint);                                           \
  template [[host_name("quantized_matmul_bt_concat_" VARIANT "_" FNAME "_" TNAME)]] kernel void               \
  quantized_matmul_bt_concat_gemv<F, T, S, W>(device const T*, device const uchar*, device const S*,      \
                                           device const S*, device T*, constant QuantizedArgs&,         \
                                           device const uchar*, device const S*, device const S*,       \
                                           device const uchar*, device const S*, device const S*,       \
                                           constant QuantizedConcatArgs&, uint, uint, uint);

#define METALRT_QUANTIZED(F, FNAME, T, TNAME, S)                                                         \
  METALRT_QUANTIZED_GEMVS(F, FNAME, T, TNAME, S, kQuantChunk, "gemv")                                 \
  METALRT_QUANTIZED_GEMVS(F, FNAME, T, TNAME, S, kQuantWideChunk, "gemv16")                            \
  template [[host_name("quantized_matmul_bt_gemm_" FNAME "_" TNAME)]] kernel void                      \
  quantized_matmul_bt_gemm<F, T, S>(device const T*, device const uchar*, device const S*,             \
                                    device const S*, device T*, constant QuantizedArgs&, uint2, uint, uint); \
  template [[host_name("dequantize_rows_" FNAME "_" TNAME)]] kernel void                               \
  quantized_rows<F, T, S, false>(device const int*, device const uchar*, device const S*,              \
                                 device const S*, device T*, constant QuantizedArgs&, uint2);          \
  template [[host_name("quantized_embedding_gather_" FNAME "_" TNAME)]] kernel void                    \
  quantized_rows<F, T, S, true>(device const int*, device const uchar*, device const S*,               \
                                device const S*, device T*, constant QuantizedArgs&, uint2);

#define METALRT_QUANTIZED_DTYPES(F, FNAME, S)       \
  METALRT_QUANTIZED(F, FNAME, float, "f32", S)     \
  METALRT_QUANTIZED(F, FNAME, half, "f16", S)      \
  METALRT_QUANTIZED(F, FNAME, bfloat, "bf16", S)

METALRT_QUANTIZED_FORMATS(METALRT_QUANTIZED_DTYPES)
