// The CPU device's bf16 prefill attention (cpu_bf16_paged_attention) runs the blocks of
// prefill_attention.h with both products on the bf16 GEMM
// (gemm_bf16.h: AMX tiles or AVX-512 BF16; operands rounded to bf16, f32 sums) wherever
// the GEMMs of the projections that made q, k and v run on it: a batch of more than
// kGemvMaxRows tokens (fewer run on the f32 GEMV) and PrefillGemmIsBf16 of
// coarse_projections (quantized or bf16 weights), so a model's prefill runs on one
// arithmetic under every METALRT_CPU_GEMM: scale * Q and K rounded for
// S, the softmax weights W and V rounded for O, l summed from the unrounded weights
// (why, measured: docs/cpu.md, "bf16 prefill GEMM"). O is computed transposed, O^T = V^T . W^T,
// so that V^T is packed once per request as the GEMM's activation operand (a block of
// 16 of its rows read over the block's first keys only) and W's rows are its weight
// rows, of the block's key count rounded up to the AMX step.
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

int64_t RoundUp(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

// One request's operands of the bf16 products, over its gathered positions (Request's
// kv_len of them, `seq_len` here): K as bf16 rows [kv_heads][seq_len][head_dim];
// V^T per kv head packed as the GEMM's activations (gemm_bf16.h), head_dim rows of
// keys_pad = seq_len rounded up to the AMX step, the keys past seq_len zero.
struct Bf16Context {
  int64_t keys_pad = 0, packed_per_head = 0;
  std::vector<uint16_t> keys;
  std::vector<float> values_t_f32;   // V^T before packing, [kv_heads][head_dim][keys_pad]
  std::vector<uint32_t> values_t;
};

// Items (kv head, 16-row block of V^T), so that the 3 kv heads of the default model
// spread over 2 threads; each also rounds its share of K.
void PrepareBf16(const std::vector<float>& keys, const std::vector<float>& values, int64_t kv_heads,
                 int64_t seq_len, int64_t head_dim, Bf16Context& ctx) {
  ctx.keys_pad = RoundUp(seq_len, kAmxK);
  ctx.packed_per_head = Bf16PackedSize(head_dim, ctx.keys_pad);
  const int64_t n = kv_heads * seq_len * head_dim;   // the gathered keys (the vector may be longer)
  const auto grow = [](auto& v, int64_t size) { v.resize(std::max(v.size(), static_cast<size_t>(size))); };
  grow(ctx.keys, n);
  grow(ctx.values_t_f32, kv_heads * head_dim * ctx.keys_pad);
  grow(ctx.values_t, kv_heads * ctx.packed_per_head);
  const int64_t row_blocks = Bf16RowBlocks(head_dim), items = kv_heads * row_blocks;
  ParallelFor(items, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t k0 = n * item / items, k1 = n * (item + 1) / items;
      RoundToBf16Avx512(keys.data() + k0, k1 - k0, ctx.keys.data() + k0);
      const int64_t g = item / row_blocks, block = item % row_blocks;
      const int64_t d0 = block * kBf16RowBlock, d1 = std::min(head_dim, d0 + kBf16RowBlock);
      float* v_t = ctx.values_t_f32.data() + g * head_dim * ctx.keys_pad;
      const float* v = values.data() + g * seq_len * head_dim;
      for (int64_t t = 0; t < seq_len; ++t)
        for (int64_t d = d0; d < d1; ++d) v_t[d * ctx.keys_pad + t] = v[t * head_dim + d];
      for (int64_t d = d0; d < d1; ++d)
        std::fill(v_t + d * ctx.keys_pad + seq_len, v_t + (d + 1) * ctx.keys_pad, 0.0f);
      PackRowsBf16Avx512(v_t, head_dim, ctx.keys_pad, block, block + 1, ctx.values_t.data() + g * ctx.packed_per_head);
    }
  });
}

// The bf16 GEMM kernels of the two products, chosen on the op's thread (SelectedBf16Gemm
// reads METALRT_CPU_AMX and may throw): Q.K^T over head_dim, V^T.W^T over a multiple of
// the AMX step.
struct Bf16Products {
  Bf16GemmFn qk, pv;
};

void AttendBlockBf16(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const Bf16Context& ctx,
                     const Bf16Products& gemm, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group, past = r.seq_len - r.q_len;
  // Gathered rows k0 .. the block's last position: k0 the first its first query sees,
  // rounded down to the AMX step so that it starts a pair group of the packed V^T.
  const int64_t k0 = (WindowStart(call, past + i0) - r.kv_begin) / kAmxK * kAmxK;
  const int64_t n_keys = past + i1 - r.kv_begin - k0, n_pad = RoundUp(n_keys, kAmxK);
  static thread_local std::vector<float> q, s, o_t, l;
  static thread_local std::vector<uint32_t> packed_q;
  static thread_local std::vector<uint16_t> w;
  LoadScaledQueries(call, r, g, i0, i1, q);
  packed_q.resize(static_cast<size_t>(Bf16PackedSize(rows, head_dim)));
  PackRowsBf16Avx512(q.data(), rows, head_dim, 0, Bf16RowBlocks(rows), packed_q.data());
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_pad)));
  gemm.qk(packed_q.data(), rows, head_dim, ctx.keys.data() + (g * r.kv_len + k0) * head_dim, n_keys, s.data(),
          n_pad);
  l.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = past + i0 + row / group, origin = r.kv_begin + k0;   // s's column 0
    l[row] = SoftmaxWeights(s.data() + row * n_pad, n_pad, WindowStart(call, p) - origin, p - origin,
                            Sink(call, g * group + row % group), vector_exp);
  }
  w.resize(std::max(w.size(), static_cast<size_t>(rows * n_pad)));
  RoundToBf16Avx512(s.data(), rows * n_pad, w.data());
  // O^T [head_dim, rows], 16 rows of V^T a product: the block's keys are a prefix of each
  // 16-row group's pairs in the request's packing, not of the whole packing.
  o_t.resize(static_cast<size_t>(head_dim * rows));
  // Key k0's pair group: kBf16RowBlock words a pair (gemm_bf16.h's packing).
  const uint32_t* v_t = ctx.values_t.data() + g * ctx.packed_per_head + k0 / 2 * kBf16RowBlock;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kBf16RowBlock)
    gemm.pv(v_t + d0 * (ctx.keys_pad / 2), std::min(kBf16RowBlock, head_dim - d0), n_pad, w.data(), rows,
            o_t.data() + d0 * rows, rows);
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
  static thread_local Bf16Context scratch;   // grown only, as EachBlock's K/V
  Bf16Context& ctx = scratch;
  EachBlock(
      call,
      [&](const Request& r, const std::vector<float>& k, const std::vector<float>& v) {
        PrepareBf16(k, v, call.inputs[1].dim(2), r.kv_len, head_dim, ctx);
      },
      [&](const Request& r, const std::vector<float>&, const std::vector<float>&, int64_t g, int64_t i0, int64_t i1) {
        AttendBlockBf16(call, r, g, i0, i1, ctx, gemm, vector_exp);
      });
  return true;
}

}  // namespace

// Tried ahead of the f32 sgemms (prefill/blas/paged_attention.cpp); both ahead of the
// decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             PrefillAttentionBf16);

}  // namespace metalrt::cpu::fast
