// moe_matmul_bt kernels: the experts' linear layers reading only the selected experts'
// rows (math: metalrt/moe_ops.h; oracle: cpp/cpu/moe.cpp). Weights [E * N, K]: GGUF
// blocks, MLX affine or float (FormatFloat), decoded by metal/quantized_blocks.h.
// * moe_matmul_bt_gemv_<format>_<dtype> (gemv16_: 16 values per lane and pass, by
//   QuantGemvChunk's rule with no K split): one threadgroup per (block of 8 rows of N,
//   (token, slot) pair): the quantized GEMV body (metal/quantized_gemv.h) over expert
//   e = expert_ids[pair]'s rows e*N .. e*N + N - 1 with m = 1 (function constant gemv_m,
//   which the host sets to 1). An id outside [0, E)
//   writes a NaN row (poison: the host cannot check device ids without a wait, so a
//   bad id must never look like a result) and reads no weight. Expected: bound by the selected experts'
//   weight bytes (each pair reads its expert's N rows once). Decode and batches of up
//   to kQuantGemvMaxM tokens.
// * Both take a second stack (buffers 9-11: the up projection beside the gate one in
//   buffers 2-4, each read in place where the file put it) when moe.stacks == 2: the
//   grid's x doubles, its second half reads the up stack and writes columns N .. 2N - 1
//   of the pair's output row of 2N.
// * moe_group_pairs_<dtype> then moe_matmul_bt_gemm_<format>_<dtype> (larger batches):
//   the pairs grouped by expert on the device (a count and a scan of expert_ids per
//   expert, pair order kept, so the result does not depend on thread timing), then one
//   threadgroup per (32 columns of N, tile of up to 32 pairs of one expert): the
//   quantized GEMM tile (metal/quantized_gemm.h) over gathered x rows and the expert's
//   weight rows, so each selected expert's weights are read once per 32 of its pairs.
#include <metal_stdlib>
#include "moe_args.h"
#include "quantized_gemm.h"
#include "quantized_gemv.h"
using namespace metal;

template <typename F, typename T, typename S, int W>
kernel void moe_matmul_bt_gemv(device const T* x [[buffer(0)]],
                               device const int* expert_ids [[buffer(1)]],
                               device const uchar* data [[buffer(2)]],
                               device const S* scales [[buffer(3)]],
                               device const S* biases [[buffer(4)]],
                               device T* out [[buffer(5)]],
                               constant QuantizedArgs& args [[buffer(6)]],
                               constant MoeMatmulArgs& moe [[buffer(7)]],
                               device const uchar* up_data [[buffer(9)]],
                               device const S* up_scales [[buffer(10)]],
                               device const S* up_biases [[buffer(11)]],
                               uint2 group [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint simdgroup [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]]) {
  constexpr int32_t kBlockRows = kQuantGemvRows * kQuantGemvSimdgroups;
  const uint blocks = uint((args.n + kBlockRows - 1) / kBlockRows);
  const uint stack = group.x / blocks, block = group.x % blocks;
  const long pair = long(group.y);
  const int expert = expert_ids[pair];
  device T* y = out + (pair * moe.stacks + stack) * args.n;
  if (expert < 0 || expert >= moe.experts) {
    const int32_t r = int32_t(block) * kBlockRows + int32_t(tid);
    if (int32_t(tid) < kBlockRows && r < args.n) y[r] = T(NAN);
    return;
  }
  device const T* row = x + (moe.per_slot ? pair : pair / moe.slots) * args.k;
  threadgroup float partials[quant_gemv_partials(kQuantGemvRows)];
  quantized_gemv<F, T, S, W>(row, stack ? up_data : data, stack ? up_scales : scales, stack ? up_biases : biases,
                             long(expert) * args.n, args.n, y, args, partials, block, simdgroup, lane);
}

template <typename T>
kernel void moe_group_pairs(device const int* expert_ids [[buffer(0)]],
                            device int* order [[buffer(1)]],
                            device int* tiles [[buffer(2)]],
                            device T* out [[buffer(3)]],
                            constant MoeGroupArgs& args [[buffer(4)]],
                            uint tid [[thread_index_in_threadgroup]]) {
  threadgroup int counts[kMoeGroupMaxExperts];
  threadgroup int offsets[kMoeGroupMaxExperts];
  threadgroup int first_tile[kMoeGroupMaxExperts];
  threadgroup int used_tiles[1];
  for (int32_t e = int32_t(tid); e < args.experts; e += int32_t(kMoeThreads)) {
    int count = 0;
    for (int32_t p = 0; p < args.pairs; ++p) count += expert_ids[p] == e ? 1 : 0;
    counts[e] = count;
  }
  // A pair with an id outside [0, E) is in no group: its row is NaN (as in the GEMV).
  for (int32_t p = int32_t(tid); p < args.pairs; p += int32_t(kMoeThreads))
    if (expert_ids[p] < 0 || expert_ids[p] >= args.experts)
      for (int32_t c = 0; c < args.n; ++c) out[long(p) * args.n + c] = T(NAN);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) {
    int position = 0, tile = 0;
    for (int32_t e = 0; e < args.experts; ++e) {
      offsets[e] = position;
      first_tile[e] = tile;
      position += counts[e];
      tile += (counts[e] + kQuantGemmTile - 1) / kQuantGemmTile;
    }
    used_tiles[0] = tile;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int32_t e = int32_t(tid); e < args.experts; e += int32_t(kMoeThreads)) {
    int position = offsets[e];
    for (int32_t p = 0; p < args.pairs; ++p)
      if (expert_ids[p] == e) order[position++] = p;
    for (int32_t j = 0; j * kQuantGemmTile < counts[e]; ++j) {
      device int* t = tiles + 3 * long(first_tile[e] + j);
      t[0] = e;
      t[1] = offsets[e] + j * kQuantGemmTile;
      t[2] = min(kQuantGemmTile, counts[e] - j * kQuantGemmTile);
    }
  }
  for (int32_t t = used_tiles[0] + int32_t(tid); t < args.max_tiles; t += int32_t(kMoeThreads)) tiles[3 * long(t)] = -1;
}

// Tile rows of one expert's pairs: order[begin + i] for i < count. out rows are of one
// stack's N columns: pair p's output row of stacks * N holds stacks of them.
struct MoeGemmRows {
  device const int* order;
  int32_t begin;
  int32_t count;
  int32_t slots;
  int32_t per_slot;
  int32_t stacks;
  int32_t stack;
  long pair(int32_t i) const { return i < count ? long(order[begin + i]) : -1; }
  long out_row(int32_t i) const {
    const long p = pair(i);
    return p < 0 ? -1 : p * stacks + stack;
  }
  long x_row(int32_t i) const {
    const long p = pair(i);
    return p < 0 || per_slot ? p : p / slots;
  }
};

template <typename F, typename T, typename S>
kernel void moe_matmul_bt_gemm(device const T* x [[buffer(0)]],
                               device const int* order [[buffer(1)]],
                               device const uchar* data [[buffer(2)]],
                               device const S* scales [[buffer(3)]],
                               device const S* biases [[buffer(4)]],
                               device T* out [[buffer(5)]],
                               constant QuantizedArgs& args [[buffer(6)]],
                               constant MoeMatmulArgs& moe [[buffer(7)]],
                               device const int* tiles [[buffer(8)]],
                               device const uchar* up_data [[buffer(9)]],
                               device const S* up_scales [[buffer(10)]],
                               device const S* up_biases [[buffer(11)]],
                               uint2 group [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float x_tile[kQuantGemmTile * kQuantGemmTileK];   // [pair][k]
  threadgroup float w_tile[kQuantGemmTile * kQuantGemmTileK];   // [weight row][k]
  threadgroup float c_tile[kQuantGemmTile * kQuantGemmTile];    // [pair][column]
  device const int* tile = tiles + 3 * long(group.y);
  const int expert = tile[0];
  if (expert < 0) return;   // an unused tile (the grid is sized for the worst grouping)
  const uint column_tiles = uint((args.n + kQuantGemmTile - 1) / kQuantGemmTile);
  const uint stack = group.x / column_tiles;
  const MoeGemmRows rows{order, tile[1], tile[2], moe.slots, moe.per_slot, moe.stacks, int32_t(stack)};
  quantized_gemm_tile<F, T, S>(x, rows, 0, stack ? up_data : data, stack ? up_scales : scales,
                               stack ? up_biases : biases, long(expert) * args.n,
                               int32_t(group.x % column_tiles) * kQuantGemmTile, out, args, tid, simdgroup,
                               x_tile, w_tile, c_tile);
}

#define METALRT_MOE_MATMUL(F, FNAME, T, TNAME, S)                                                     \
  template [[host_name("moe_matmul_bt_gemv_" FNAME "_" TNAME)]] kernel void                          \
  moe_matmul_bt_gemv<F, T, S, kQuantChunk>(device const T*, device const int*, device const uchar*, device const S*, \
                              device const S*, device T*, constant QuantizedArgs&,                   \
                              constant MoeMatmulArgs&, device const uchar*, device const S*,         \
                              device const S*, uint2, uint, uint, uint);                             \
  template [[host_name("moe_matmul_bt_gemv16_" FNAME "_" TNAME)]] kernel void                          \
  moe_matmul_bt_gemv<F, T, S, kQuantWideChunk>(device const T*, device const int*, device const uchar*, device const S*, \
                              device const S*, device T*, constant QuantizedArgs&,                   \
                              constant MoeMatmulArgs&, device const uchar*, device const S*,         \
                              device const S*, uint2, uint, uint, uint);                             \
  template [[host_name("moe_matmul_bt_gemm_" FNAME "_" TNAME)]] kernel void                          \
  moe_matmul_bt_gemm<F, T, S>(device const T*, device const int*, device const uchar*, device const S*, \
                              device const S*, device T*, constant QuantizedArgs&,                   \
                              constant MoeMatmulArgs&, device const int*, device const uchar*,       \
                              device const S*, device const S*, uint2, uint, uint);

#define METALRT_MOE_MATMUL_DTYPES(F, FNAME, S)       \
  METALRT_MOE_MATMUL(F, FNAME, float, "f32", S)     \
  METALRT_MOE_MATMUL(F, FNAME, half, "f16", S)      \
  METALRT_MOE_MATMUL(F, FNAME, bfloat, "bf16", S)

METALRT_QUANTIZED_FORMATS(METALRT_MOE_MATMUL_DTYPES)
// Float experts in the activations' dtype (the scales/biases buffers are stand-ins).
METALRT_MOE_MATMUL(FormatFloat<float>, "float", float, "f32", float)
METALRT_MOE_MATMUL(FormatFloat<half>, "float", half, "f16", half)
METALRT_MOE_MATMUL(FormatFloat<bfloat>, "float", bfloat, "bf16", bfloat)

#define METALRT_MOE_GROUP(T, SUFFIX)                                                            \
  template [[host_name("moe_group_pairs_" #SUFFIX)]] kernel void moe_group_pairs<T>(           \
      device const int*, device int*, device int*, device T*, constant MoeGroupArgs&, uint);

METALRT_MOE_GROUP(float, f32)
METALRT_MOE_GROUP(half, f16)
METALRT_MOE_GROUP(bfloat, bf16)
