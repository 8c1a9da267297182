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

// One block's products, kKeyTile positions at a time: a key tile is converted to f32,
// rounded to bf16 and multiplied into its columns of S; after the softmax, a value tile is
// converted, transposed to V^T and packed as the GEMM's activations (head_dim rows of the
// tile's keys), and O^T accumulates V^T . W^T tile after tile (the kernels' accumulate:
// the sums of one product over all the block's keys, bit for bit).
void AttendBlockBf16(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const Bf16Products& gemm,
                     bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group, past = r.seq_len - r.q_len;
  // S's column 0: the first position the block's first query sees, rounded down (from
  // kv_begin) to the AMX step, so that every tile is whole steps; n_pad columns.
  const int64_t origin = r.kv_begin + (WindowStart(call, past + i0) - r.kv_begin) / kAmxK * kAmxK;
  const int64_t n_keys = past + i1 - origin, n_pad = RoundUp(n_keys, kAmxK);
  static thread_local std::vector<float> q, s, o_t, l, tile, v_t;
  static thread_local std::vector<uint32_t> packed_q, packed_v;
  static thread_local std::vector<uint16_t> w, keys;
  LoadScaledQueries(call, r, g, i0, i1, q);
  packed_q.resize(static_cast<size_t>(Bf16PackedSize(rows, head_dim)));
  PackRowsBf16Avx512(q.data(), rows, head_dim, 0, Bf16RowBlocks(rows), packed_q.data());
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_pad)));
  tile.resize(static_cast<size_t>(kKeyTile * head_dim));
  keys.resize(tile.size());
  v_t.resize(tile.size());
  packed_v.resize(static_cast<size_t>(Bf16PackedSize(head_dim, kKeyTile)));
  NoteTileScratch(static_cast<int64_t>((tile.size() + v_t.size() + packed_v.size()) * 4 + keys.size() * 2));
  for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyTile) {
    const int64_t count = std::min(kKeyTile, n_keys - t0);
    LoadTile(call.inputs[1], head_dim, r, g, origin + t0, origin + t0 + count, tile.data());
    RoundToBf16Avx512(tile.data(), count * head_dim, keys.data());
    gemm.qk(packed_q.data(), rows, head_dim, keys.data(), count, s.data() + t0, n_pad, false);
  }
  l.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = past + i0 + row / group;
    l[row] = SoftmaxWeights(s.data() + row * n_pad, n_pad, WindowStart(call, p) - origin, p - origin,
                            Sink(call, g * group + row % group), vector_exp);
  }
  // O^T [head_dim, rows], 16 rows of V^T a product.
  w.resize(static_cast<size_t>(rows * kKeyTile));
  o_t.resize(static_cast<size_t>(head_dim * rows));
  for (int64_t t0 = 0; t0 < n_pad; t0 += kKeyTile) {
    const int64_t width = std::min(kKeyTile, n_pad - t0);   // whole AMX steps
    for (int64_t row = 0; row < rows; ++row)
      RoundToBf16Avx512(s.data() + row * n_pad + t0, width, w.data() + row * width);
    LoadTile(call.inputs[2], head_dim, r, g, origin + t0, origin + t0 + width, tile.data());
    for (int64_t t = 0; t < width; ++t)
      for (int64_t d = 0; d < head_dim; ++d) v_t[d * width + t] = tile[t * head_dim + d];
    PackRowsBf16Avx512(v_t.data(), head_dim, width, 0, Bf16RowBlocks(head_dim), packed_v.data());
    for (int64_t d0 = 0; d0 < head_dim; d0 += kBf16RowBlock)
      gemm.pv(packed_v.data() + d0 * (width / 2), std::min(kBf16RowBlock, head_dim - d0), width, w.data(), rows,
              o_t.data() + d0 * rows, rows, t0 > 0);
  }
  StoreBlock(call, r, g, i0, i1, o_t.data(), true, l);
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
  EachBlock(call, [&](const Request& r, int64_t g, int64_t i0, int64_t i1) {
    AttendBlockBf16(call, r, g, i0, i1, gemm, vector_exp);
  });
  return true;
}

}  // namespace

// Tried ahead of the f32 sgemms (prefill/blas/paged_attention.cpp); both ahead of the
// decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             PrefillAttentionBf16);

}  // namespace metalrt::cpu::fast
