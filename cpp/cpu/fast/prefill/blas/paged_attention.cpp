// The CPU device's prefill attention: paged_attention for batches holding a prefill (a
// request with more than one query), through the BLAS sgemm; batches of decode requests
// only are declined (to a decode provider or the oracle, cpp/cpu/paged_attention.cpp).
//
// The math is the oracle's two-pass softmax, per (request, kv head, block of up to
// kQueryBlock queries) with the GQA group's query heads stacked as rows:
//   S = (scale * Q) . K^T over keys 0 .. the block's last position     (one sgemm)
//   per row (position p): w_j = exp(s_j - max_{j<=p} s_j) for j <= p, else 0; l = sum w_j
//   O = (W . V) / l                                                     (one sgemm)
// so every key and value tile is read once per block for all its queries and heads. The
// order of the f32 sums differs from the oracle's, and on AVX-512 CPUs the exps are the
// vectorised ones of exp_avx512.h (within 2 ulp of expf). Blocks are spread over
// ParallelFor's threads, each running single-threaded sgemms.
//
// cpu_bf16_paged_attention runs the same blocks with both products on the bf16 GEMM
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
#include <cmath>
#include <vector>

#include "cpu/fast/prefill/blas/sgemm.h"
#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/simd/exp_avx512.h"
#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/float_rows.h"
#include "cpu/paged_kv.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// 32 queries x 3 heads of a group: 96 rows per sgemm, and a 512-token prompt still
// splits into 16 blocks per kv head for the threads.
constexpr int64_t kQueryBlock = 32;

struct Request {
  int64_t q_len, seq_len, first_row;
};

// max(s[0 .. n)), NaN ignored as std::max ignores it, -inf for n = 0. Sixteen running
// maxima: one chain of dependent max latencies was most of this op's own time.
float RowMax(const float* s, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -INFINITY);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t i = 0; i < kLanes; ++i) lanes[i] = std::max(lanes[i], s[j + i]);
  for (; j < n; ++j) lanes[0] = std::max(lanes[0], s[j]);
  return *std::max_element(lanes, lanes + kLanes);
}

// Softmax weights of one score row in place (positions beyond `last` get 0); returns l.
// The exps by the AVX-512 row (exp_avx512.h, within 2 ulp of expf) where `vector_exp`.
float SoftmaxWeights(float* s, int64_t n_keys, int64_t last, bool vector_exp) {
  const float m = RowMax(s, last + 1);
  float l = 0.0f;
  if (vector_exp && std::isfinite(m)) {
    l = ExpShiftedRowAvx512(s, last + 1, m);
  } else {
    for (int64_t j = 0; j <= last; ++j) {
      s[j] = std::exp(s[j] - m);
      l += s[j];
    }
  }
  std::fill(s + last + 1, s + n_keys, 0.0f);
  return l;
}

// Queries [i0, i1) of request r, heads of kv head g: rows (i - i0) * group + (h - g * group),
// times the scale (on the queries, not on the rows x n_keys scores: a pass less).
void LoadScaledQueries(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                       std::vector<float>& q) {
  const Tensor& query = call.inputs[0];
  const int64_t heads = query.dim(1), head_dim = query.dim(2), group = heads / call.inputs[1].dim(2);
  q.resize(static_cast<size_t>((i1 - i0) * group * head_dim));
  for (int64_t i = i0; i < i1; ++i)
    LoadRowF32(query.data(), query.dtype(), ((r.first_row + i) * heads + g * group) * head_dim,
               group * head_dim, q.data() + (i - i0) * group * head_dim);
  const float scale = call.param<ops::PagedAttentionParams>().scale;
  for (float& x : q) x *= scale;
}

// Output rows of the block, o[row * head_dim + d] / l[row] (row-major), or o[d * rows + row]
// / l[row] where `transposed`.
void StoreBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const float* o,
                bool transposed, const std::vector<float>& l) {
  const Tensor& out = call.outputs[0];
  const int64_t heads = out.dim(1), head_dim = out.dim(2), group = heads / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group;
  static thread_local std::vector<float> row_values;
  row_values.resize(static_cast<size_t>(group * head_dim));
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t h = 0; h < group; ++h) {
      const int64_t row = (i - i0) * group + h;
      for (int64_t d = 0; d < head_dim; ++d)
        row_values[h * head_dim + d] = (transposed ? o[d * rows + row] : o[row * head_dim + d]) / l[row];
    }
    StoreRowF32(out.data(), out.dtype(), ((r.first_row + i) * heads + g * group) * head_dim, group * head_dim,
                row_values.data());
  }
}

void AttendBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                 const std::vector<float>& keys, const std::vector<float>& values, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group;
  const int64_t past = r.seq_len - r.q_len;        // positions before the first query
  const int64_t n_keys = past + i1;                // keys 0 .. the block's last position
  const float* k = keys.data() + g * r.seq_len * head_dim;
  const float* v = values.data() + g * r.seq_len * head_dim;
  // Per thread and grown only: a fresh vector zero-filled its rows x n_keys scores, which
  // the sgemm then overwrote.
  static thread_local std::vector<float> q, s, o, l;
  LoadScaledQueries(call, r, g, i0, i1, q);
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_keys)));
  o.resize(q.size());
  l.resize(static_cast<size_t>(rows));
  Sgemm(rows, n_keys, head_dim, q.data(), head_dim, k, head_dim, true, s.data(), n_keys);
  for (int64_t row = 0; row < rows; ++row)
    l[row] = SoftmaxWeights(s.data() + row * n_keys, n_keys, past + i0 + row / group, vector_exp);
  Sgemm(rows, head_dim, n_keys, s.data(), n_keys, v, head_dim, false, o.data(), head_dim);
  StoreBlock(call, r, g, i0, i1, o.data(), false, l);
}

int64_t RoundUp(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

// One request's operands of the bf16 products: K as bf16 rows [kv_heads][seq_len][head_dim];
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
  const int64_t rows = (i1 - i0) * group;
  const int64_t n_keys = r.seq_len - r.q_len + i1, n_pad = RoundUp(n_keys, kAmxK);
  static thread_local std::vector<float> q, s, o_t, l;
  static thread_local std::vector<uint32_t> packed_q;
  static thread_local std::vector<uint16_t> w;
  LoadScaledQueries(call, r, g, i0, i1, q);
  packed_q.resize(static_cast<size_t>(Bf16PackedSize(rows, head_dim)));
  PackRowsBf16Avx512(q.data(), rows, head_dim, 0, Bf16RowBlocks(rows), packed_q.data());
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_pad)));
  gemm.qk(packed_q.data(), rows, head_dim, ctx.keys.data() + g * r.seq_len * head_dim, n_keys, s.data(), n_pad);
  l.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row)
    l[row] = SoftmaxWeights(s.data() + row * n_pad, n_pad, r.seq_len - r.q_len + i0 + row / group, vector_exp);
  w.resize(std::max(w.size(), static_cast<size_t>(rows * n_pad)));
  RoundToBf16Avx512(s.data(), rows * n_pad, w.data());
  // O^T [head_dim, rows], 16 rows of V^T a product: the block's keys are a prefix of each
  // 16-row group's pairs in the request's packing, not of the whole packing.
  o_t.resize(static_cast<size_t>(head_dim * rows));
  const uint32_t* v_t = ctx.values_t.data() + g * ctx.packed_per_head;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kBf16RowBlock)
    gemm.pv(v_t + d0 * (ctx.keys_pad / 2), std::min(kBf16RowBlock, head_dim - d0), n_pad, w.data(), rows,
            o_t.data() + d0 * rows, rows);
  StoreBlock(call, r, g, i0, i1, o_t.data(), true, l);
}

bool HasPrefill(const OpCall& call) {
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  for (int64_t b = 0; b < call.inputs[3].dim(0); ++b)
    if (query_start_loc[b + 1] - query_start_loc[b] > 1) return true;
  return false;
}

// Positions per chunk of the K/V gather: each is kv_heads rows of head_dim values.
constexpr int64_t kMinGatherPositions = 64;

// Every request's blocks through attend(request, keys, values, kv head, i0, i1), after
// prepare(request, keys, values) has made its operands from the gathered K/V.
template <typename Prepare, typename Attend>
void EachBlock(const OpCall& call, const Prepare& prepare, const Attend& attend) {
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const int64_t kv_heads = call.inputs[1].dim(2), head_dim = call.inputs[1].dim(3);
  // The op's thread's, grown only: fresh vectors were zero-filled and faulted in by this
  // thread alone, once per layer, while the pool waited. Reached through references: a
  // thread_local named in the lambdas would be each pool thread's own.
  static thread_local std::vector<float> keys_scratch, values_scratch;
  std::vector<float>& keys = keys_scratch;
  std::vector<float>& values = values_scratch;
  for (int64_t b = 0; b < block_tables.dim(0); ++b) {
    const Request r{query_start_loc[b + 1] - query_start_loc[b], seq_lens[b], query_start_loc[b]};
    if (r.q_len == 0) continue;
    const int32_t* blocks = block_tables.data_as<int32_t>() + b * block_tables.dim(1);
    keys.resize(std::max(keys.size(), static_cast<size_t>(kv_heads * r.seq_len * head_dim)));
    values.resize(keys.size());
    ParallelFor(r.seq_len, kMinGatherPositions, [&](int64_t begin, int64_t end) {
      GatherContextRange(call.inputs[1], blocks, r.seq_len, begin, end, keys.data());
      GatherContextRange(call.inputs[2], blocks, r.seq_len, begin, end, values.data());
    });
    prepare(r, keys, values);
    // Items (block, kv head), the blocks ordered first, last, second, second-to-last...
    // so that contiguous chunks of items carry about the same causal work.
    const int64_t n_blocks = (r.q_len + kQueryBlock - 1) / kQueryBlock;
    ParallelFor(n_blocks * kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / kv_heads, g = item % kv_heads;
        const int64_t block = t % 2 == 0 ? t / 2 : n_blocks - 1 - t / 2;
        const int64_t i0 = block * kQueryBlock;
        attend(r, keys, values, g, i0, std::min(r.q_len, i0 + kQueryBlock));
      }
    });
  }
}

bool PrefillAttention(const OpCall& call) {
  if (!HasPrefill(call) || call.inputs[0].numel() == 0 || !BlasAvailable()) return false;
  const bool vector_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  EachBlock(
      call, [](const Request&, const std::vector<float>&, const std::vector<float>&) {},
      [&](const Request& r, const std::vector<float>& keys, const std::vector<float>& values, int64_t g, int64_t i0,
          int64_t i1) { AttendBlock(call, r, g, i0, i1, keys, values, vector_exp); });
  return true;
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
        PrepareBf16(k, v, call.inputs[1].dim(2), r.seq_len, head_dim, ctx);
      },
      [&](const Request& r, const std::vector<float>&, const std::vector<float>&, int64_t g, int64_t i0, int64_t i1) {
        AttendBlockBf16(call, r, g, i0, i1, ctx, gemm, vector_exp);
      });
  return true;
}

}  // namespace

// Ahead of the oracle (priority 0), the bf16 products ahead of the f32 sgemms.
METALRT_REGISTER_PROVIDER("paged_attention", DeviceType::kCPU, "cpu_blas_paged_attention", 10,
                          PrefillAttention);
METALRT_REGISTER_PROVIDER("paged_attention", DeviceType::kCPU, "cpu_bf16_paged_attention", 11,
                          PrefillAttentionBf16);

}  // namespace metalrt::cpu::fast
