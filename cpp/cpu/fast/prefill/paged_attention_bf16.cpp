// The CPU device's bf16 prefill attention (cpu_bf16_paged_attention) runs the blocks of
// prefill_attention.h with both products on the bf16 GEMM
// (gemm_bf16.h: AMX tiles or AVX-512 BF16; operands rounded to bf16, f32 sums) wherever
// the GEMMs of the projections that made q, k and v run on it: a batch of more than
// kGemvMaxRows tokens (fewer run on the f32 GEMV) and PrefillGemmIsBf16 of
// coarse_projections (quantized or bf16 weights), so a model's prefill runs on one
// arithmetic under every METALRT_CPU_GEMM: scale * Q and K rounded for
// S, the softmax weights W and V rounded for O, l summed from the unrounded weights
// (why, measured: docs/cpu.md, "bf16 prefill GEMM"). O is computed transposed, O^T = V^T . W^T,
// so that V^T is the GEMM's activation operand (packed a tile of keys at a time) and W's
// rows are its weight rows, of the block's key count rounded up to the AMX step.
#include <algorithm>
#include <vector>

#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/fast/prefill/prefill_attention.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/fast/simd/cpu_features.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

using namespace prefill_attention;

static_assert(kKeyTile % kAmxK == 0, "a key tile is whole AMX steps");

int64_t RoundUp(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

// The bf16 GEMM kernels of the two products, chosen on the op's thread (SelectedBf16Gemm
// reads METALRT_CPU_AMX and may throw): Q.K^T over head_dim, V^T.W^T over a multiple of
// the AMX step.
struct Bf16Products {
  Bf16GemmFn qk, pv;
};

// Blocks [b0, b1) of kv head g, tile by tile of their keys (prefill_attention.h): a key
// tile is converted to f32, rounded to bf16 and multiplied into each block's S; a value
// tile is converted, transposed to V^T and packed as the GEMM's activations (head_dim
// rows of the tile's keys), and each block's O^T accumulates V^T . W^T onto its rescaled
// self (the kernels' accumulate). Tiles start at the range's first key rounded down (from
// kv_begin) to the AMX step and hold whole steps; a block multiplies the tile's columns
// from its first key, rounded down to a step, to its last, rounded up (extra keys get
// weight 0; keys past seq_len are zeros).
void AttendRangeBf16(const OpCall& call, const Request& r, int64_t g, int64_t b0, int64_t b1, const Bf16Products& gemm,
                     bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t past = r.seq_len - r.q_len, stride = kQueryBlock * group;
  const int64_t packed_q_size = Bf16PackedSize(stride, head_dim);
  static thread_local std::vector<float> q, o_t, m, l, s, tile, v_t;
  static thread_local std::vector<uint32_t> packed_q, packed_v;
  static thread_local std::vector<uint16_t> w, keys;
  const size_t blocks = static_cast<size_t>(b1 - b0);
  packed_q.resize(blocks * packed_q_size);
  o_t.assign(blocks * stride * head_dim, 0.0f);
  m.resize(blocks * stride);
  l.resize(blocks * stride);
  s.resize(static_cast<size_t>(stride * kKeyTile));
  w.resize(s.size());
  tile.resize(static_cast<size_t>(kKeyTile * head_dim));
  keys.resize(tile.size());
  v_t.resize(tile.size());
  packed_v.resize(static_cast<size_t>(Bf16PackedSize(head_dim, kKeyTile)));
  NoteTileScratch(static_cast<int64_t>((tile.size() + v_t.size() + packed_v.size()) * 4 + keys.size() * 2));
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock), rows = (i1 - i0) * group;
    LoadScaledQueries(call, r, g, i0, i1, q);
    PackRowsBf16Avx512(q.data(), rows, head_dim, 0, Bf16RowBlocks(rows), packed_q.data() + (b - b0) * packed_q_size);
    for (int64_t row = 0; row < rows; ++row)
      OnlineStart(call, g * group + row % group, m[(b - b0) * stride + row], l[(b - b0) * stride + row]);
  }
  const auto step_down = [&](int64_t p) { return r.kv_begin + (p - r.kv_begin) / kAmxK * kAmxK; };
  const int64_t lo = step_down(WindowStart(call, past + b0 * kQueryBlock));
  const int64_t hi = past + std::min(r.q_len, b1 * kQueryBlock);
  for (int64_t t0 = lo; t0 < hi; t0 += kKeyTile) {
    const int64_t width = std::min(kKeyTile, RoundUp(hi - t0, kAmxK));   // whole AMX steps
    LoadTile(call.inputs[1], head_dim, r, g, t0, t0 + width, tile.data());
    RoundToBf16Avx512(tile.data(), width * head_dim, keys.data());
    LoadTile(call.inputs[2], head_dim, r, g, t0, t0 + width, tile.data());
    for (int64_t t = 0; t < width; ++t)
      for (int64_t d = 0; d < head_dim; ++d) v_t[d * width + t] = tile[t * head_dim + d];
    PackRowsBf16Avx512(v_t.data(), head_dim, width, 0, Bf16RowBlocks(head_dim), packed_v.data());
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock), rows = (i1 - i0) * group;
      const int64_t c0 = std::max(t0, step_down(WindowStart(call, past + i0))) - t0;
      const int64_t c1 = std::min(width, RoundUp(past + i1 - t0, kAmxK));
      if (c0 >= c1) continue;
      const int64_t n = c1 - c0;
      float* block_o_t = o_t.data() + (b - b0) * stride * head_dim;
      gemm.qk(packed_q.data() + (b - b0) * packed_q_size, rows, head_dim, keys.data() + c0 * head_dim, n, s.data(), n,
              false);
      WeighTile(call, s.data(), rows, n, past + i0, t0 + c0, m.data() + (b - b0) * stride,
                l.data() + (b - b0) * stride, block_o_t, true, vector_exp);
      RoundToBf16Avx512(s.data(), rows * n, w.data());
      // Key c0's pair group: kBf16RowBlock words a pair (gemm_bf16.h's packing).
      for (int64_t d0 = 0; d0 < head_dim; d0 += kBf16RowBlock)
        gemm.pv(packed_v.data() + d0 * (width / 2) + c0 / 2 * kBf16RowBlock, std::min(kBf16RowBlock, head_dim - d0), n,
                w.data(), rows, block_o_t + d0 * rows, rows, true);
    }
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock);
    StoreBlock(call, r, g, i0, i1, o_t.data() + (b - b0) * stride * head_dim, true, l.data() + (b - b0) * stride);
  }
}

bool PrefillAttentionBf16(const OpCall& call) {
  // Pairs of head_dim for the bf16 products.
  const int64_t head_dim = call.inputs[0].dim(2);
  // The projections of a batch of up to kGemvMaxRows tokens ran on the f32 GEMV.
  if (!HasPrefill(call) || call.inputs[0].dim(0) <= kGemvMaxRows || head_dim % 2 != 0 ||
      !PrefillGemmIsBf16(call.param<ops::PagedAttentionParams>().coarse_projections))
    return false;
  const Bf16Products gemm{SelectedBf16Gemm(head_dim), SelectedBf16Gemm(kAmxK)};
  const bool vector_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  EachRange(call, [&](const Request& r, int64_t g, int64_t b0, int64_t b1) {
    AttendRangeBf16(call, r, g, b0, b1, gemm, vector_exp);
  });
  return true;
}

}  // namespace

// Tried ahead of the f32 sgemms (prefill/blas/paged_attention.cpp); both ahead of the
// decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             PrefillAttentionBf16);

}  // namespace metalrt::cpu::fast
