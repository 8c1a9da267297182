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
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/fast/blas/sgemm.h"
#include "cpu/fast/cpu_features.h"
#include "cpu/fast/exp_avx512.h"
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

// Queries [i0, i1) of request r, heads of kv head g: rows (i - i0) * group + (h - g * group).
void AttendBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                 const std::vector<float>& keys, const std::vector<float>& values, bool vector_exp) {
  const Tensor& query = call.inputs[0];
  const Tensor& out = call.outputs[0];
  const float scale = call.param<ops::PagedAttentionParams>().scale;
  const int64_t heads = query.dim(1), head_dim = query.dim(2), kv_heads = call.inputs[1].dim(2);
  const int64_t group = heads / kv_heads, rows = (i1 - i0) * group;
  const int64_t past = r.seq_len - r.q_len;        // positions before the first query
  const int64_t n_keys = past + i1;                // keys 0 .. the block's last position
  const float* k = keys.data() + g * r.seq_len * head_dim;
  const float* v = values.data() + g * r.seq_len * head_dim;
  // Per thread and grown only: a fresh vector zero-filled its rows x n_keys scores, which
  // the sgemm then overwrote.
  static thread_local std::vector<float> q, s, o, l;
  q.resize(static_cast<size_t>(rows * head_dim));
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_keys)));
  o.resize(q.size());
  l.resize(static_cast<size_t>(rows));
  for (int64_t i = i0; i < i1; ++i)
    LoadRowF32(query.data(), query.dtype(), ((r.first_row + i) * heads + g * group) * head_dim,
               group * head_dim, q.data() + (i - i0) * group * head_dim);
  // The scale on the queries, not on the rows x n_keys scores: a pass less.
  for (float& x : q) x *= scale;
  Sgemm(rows, n_keys, head_dim, q.data(), head_dim, k, head_dim, true, s.data(), n_keys);
  for (int64_t row = 0; row < rows; ++row)
    l[row] = SoftmaxWeights(s.data() + row * n_keys, n_keys, past + i0 + row / group, vector_exp);
  Sgemm(rows, head_dim, n_keys, s.data(), n_keys, v, head_dim, false, o.data(), head_dim);
  for (int64_t row = 0; row < rows; ++row) {
    float* o_row = o.data() + row * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) o_row[d] /= l[row];
  }
  for (int64_t i = i0; i < i1; ++i)
    StoreRowF32(out.data(), out.dtype(), ((r.first_row + i) * heads + g * group) * head_dim,
                group * head_dim, o.data() + (i - i0) * group * head_dim);
}

bool PrefillAttention(const OpCall& call) {
  const Tensor& query = call.inputs[0];
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const int64_t batch = block_tables.dim(0), kv_heads = call.inputs[1].dim(2);
  bool has_prefill = false;
  for (int64_t b = 0; b < batch; ++b) has_prefill |= query_start_loc[b + 1] - query_start_loc[b] > 1;
  if (!has_prefill || query.numel() == 0 || !BlasAvailable()) return false;
  const bool vector_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  std::vector<float> keys, values;
  for (int64_t b = 0; b < batch; ++b) {
    const Request r{query_start_loc[b + 1] - query_start_loc[b], seq_lens[b], query_start_loc[b]};
    if (r.q_len == 0) continue;
    const int32_t* blocks = block_tables.data_as<int32_t>() + b * block_tables.dim(1);
    GatherContext(call.inputs[1], blocks, r.seq_len, keys);
    GatherContext(call.inputs[2], blocks, r.seq_len, values);
    // Items (block, kv head), the blocks ordered first, last, second, second-to-last...
    // so that contiguous chunks of items carry about the same causal work.
    const int64_t n_blocks = (r.q_len + kQueryBlock - 1) / kQueryBlock;
    ParallelFor(n_blocks * kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / kv_heads, g = item % kv_heads;
        const int64_t block = t % 2 == 0 ? t / 2 : n_blocks - 1 - t / 2;
        const int64_t i0 = block * kQueryBlock;
        AttendBlock(call, r, g, i0, std::min(r.q_len, i0 + kQueryBlock), keys, values, vector_exp);
      }
    });
  }
  return true;
}

}  // namespace

// Ahead of the oracle (priority 0).
METALRT_REGISTER_PROVIDER("paged_attention", DeviceType::kCPU, "cpu_blas_paged_attention", 10,
                          PrefillAttention);

}  // namespace metalrt::cpu::fast
