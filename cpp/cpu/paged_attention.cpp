// CPU paged attention: the oracle for variable-length causal GQA attention over a
// paged KV cache (layout and batch description as in vLLM's paged attention).
//
// Per query token (request b, row i, position p = seq_len_b - q_len_b + i) and head h
// (kv head g = h / (heads / kv_heads)), all in f32, over the visible positions
// j = lo .. p (lo = 0, or max(0, p - window + 1) with a sliding window):
//   s_j = Dot(q, k_j) * scale
//   m = max_j s_j (and the head's sink logit, when sinks are given)
//   w_j = exp(s_j - m);  l = sum over j ascending of w_j (then + exp(sink - m))
//   out[d] = (sum over j ascending of w_j * v_j[d]) / l
// i.e. a two-pass softmax (scores first, then weights). Dot sums in 8 interleaved lanes
// (lane l takes d = l mod 8, ascending), then folds the lanes as a tree (l += l + 4,
// l += l + 2, l += l + 1): a fixed order that the compiler can vectorise, where one
// serial sum would be bound by the latency of its additions. Each request's cached keys and
// values are gathered once through its block table into f32 scratch (cpu/paged_kv.h;
// a quantized cache dequantized there, cpu/kv_blocks.h), from
// the first position any of its queries sees: positions outside every window are not read.
// The batch description (block tables, lengths, query starts) was validated by the
// entry point.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/paged_kv.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  float lane[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += a[d + l] * b[d + l];
  for (; d < n; ++d) lane[d % kLanes] += a[d] * b[d];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// One (token, head): q [head_dim] over keys/values [n][head_dim] -> out [head_dim];
// `sink` is the head's sink logit (-inf: none).
void AttendOne(const float* q, const float* keys, const float* values, int64_t n,
               int64_t head_dim, float scale, float sink, std::vector<float>& scores, float* out) {
  scores.resize(static_cast<size_t>(n));
  float m = sink;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = Dot(q, keys + j * head_dim, head_dim) * scale;
    m = std::max(m, scores[j]);
  }
  std::fill(out, out + head_dim, 0.0f);
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float w = std::exp(scores[j] - m);
    l += w;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += w * values[j * head_dim + d];
  }
  l += std::exp(sink - m);   // 0 without a sink
  for (int64_t d = 0; d < head_dim; ++d) out[d] /= l;
}

bool PagedAttention(const OpCall& call) {
  const Tensor& query = call.inputs[0];
  const Tensor& key_cache = call.inputs[1];
  const Tensor& value_cache = call.inputs[2];
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const Tensor& out = call.outputs[0];
  const auto& params = call.param<ops::PagedAttentionParams>();
  const float* sinks = call.inputs.size() > 6 ? call.inputs[6].data_as<float>() : nullptr;

  const int64_t heads = query.dim(1), head_dim = query.dim(2), kv_heads = key_cache.dim(2);
  if (query.numel() == 0) return true;   // no tokens, heads or features to attend
  const int64_t group = heads / kv_heads;
  std::vector<float> keys, values;
  for (int64_t b = 0; b < block_tables.dim(0); ++b) {
    const int64_t q_len = query_start_loc[b + 1] - query_start_loc[b], seq_len = seq_lens[b];
    if (q_len == 0) continue;
    const int32_t* blocks = block_tables.data_as<int32_t>() + b * block_tables.dim(1);
    // The first query's window starts first; later queries' windows start later.
    const int64_t first = params.window > 0 ? std::max<int64_t>(0, seq_len - q_len - params.window + 1) : 0;
    keys.resize(static_cast<size_t>(kv_heads * seq_len * head_dim));
    values.resize(keys.size());
    GatherContextRange(key_cache, head_dim, blocks, seq_len, first, seq_len, keys.data());
    GatherContextRange(value_cache, head_dim, blocks, seq_len, first, seq_len, values.data());
    // (query, head) pairs are independent, so threads change no result; a chunk does at
    // least ~64K multiply-adds so short decode steps stay on the calling thread.
    const int64_t seen = params.window > 0 ? std::min<int64_t>(seq_len, params.window) : seq_len;
    const int64_t min_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / (seen * head_dim));
    ParallelFor(q_len * heads, min_chunk, [&](int64_t begin, int64_t end) {
      std::vector<float> scores, q(static_cast<size_t>(head_dim)), o(q.size());
      for (int64_t item = begin; item < end; ++item) {
        const int64_t i = item / heads, h = item % heads;
        const int64_t p = seq_len - q_len + i;   // causal: positions lo .. p
        const int64_t lo = params.window > 0 ? std::max<int64_t>(0, p - params.window + 1) : 0;
        const int64_t row = ((query_start_loc[b] + i) * heads + h) * head_dim;
        const int64_t kv = ((h / group) * seq_len + lo) * head_dim;
        LoadRowF32(query.data(), query.dtype(), row, head_dim, q.data());
        AttendOne(q.data(), keys.data() + kv, values.data() + kv, p - lo + 1, head_dim, params.scale,
                  sinks ? sinks[h] : -INFINITY, scores, o.data());
        StoreRowF32(out.data(), out.dtype(), row, head_dim, o.data());
      }
    });
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kOracle,
                             PagedAttention);

}  // namespace
}  // namespace metalrt::cpu
