// Batches and the float64 reference of the paged attention gates (the CPU oracle's
// tests/cpp/test_paged_attention.cpp and the Metal kernels' test_metal_paged_attention.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "op_testing.h"

namespace metalrt::testing {

// One request of a batch: its query count, context length (queries included) and the
// cache blocks its block table lists, in table order.
struct AttentionRequest {
  int32_t q_len, seq_len;
  std::vector<int32_t> blocks;
};

using Lens = std::vector<std::pair<int32_t, int32_t>>;   // (q_len, seq_len) per request

// A named batch of a geometry: an op case of the paged attention gates.
struct AttentionCase {
  std::string name;
  int64_t heads, kv_heads, head_dim, block_size;
  Lens lens;
};

struct AttentionGeometry {
  int64_t heads, kv_heads, head_dim;
  int64_t block_size, num_blocks, max_blocks;   // cache blocks, block_tables row length
};

struct AttentionBatch {
  Tensor query, key_cache, value_cache, block_tables, seq_lens, query_start_loc;
  std::vector<double> q, k, v;   // the stored values as float64: q [T, H, D]; the caches whole
};

// Requests of the given (q_len, seq_len) with distinct cache blocks in shuffled order
// (non-contiguous tables); `g` gets block counts that fit them plus spare blocks and a
// padded (-1) table column.
inline std::vector<AttentionRequest> ShuffledRequests(const std::vector<std::pair<int32_t, int32_t>>& lens,
                                                      AttentionGeometry& g, uint32_t seed) {
  int64_t total = 0, widest = 0;
  for (const auto& [q_len, seq_len] : lens) {
    const int64_t n = (seq_len + g.block_size - 1) / g.block_size;
    total += n;
    widest = std::max(widest, n);
  }
  g.num_blocks = total + 3;
  g.max_blocks = widest + 1;
  std::vector<int32_t> order(static_cast<size_t>(g.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<AttentionRequest> reqs;
  size_t next = 0;
  for (const auto& [q_len, seq_len] : lens) {
    AttentionRequest r{q_len, seq_len, {}};
    for (int64_t i = 0; i < (seq_len + g.block_size - 1) / g.block_size; ++i) r.blocks.push_back(order[next++]);
    reqs.push_back(r);
  }
  return reqs;
}

// The first position some query of a request sees under a sliding window (0: none).
inline int64_t FirstSeen(const AttentionRequest& r, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, r.seq_len - r.q_len - window + 1) : 0;
}

// Builds the batch: queries uniform in [-2, 2), cache rows in [-1, 1), every cache slot
// NaN except the positions the requests own, so a read outside a request's context
// poisons the result. With a window, positions before a request's FirstSeen stay NaN
// too and the table entries of blocks wholly before it are -1: a kernel that reads them
// (or masks after reading) cannot pass.
inline AttentionBatch MakeAttentionBatch(const std::vector<AttentionRequest>& reqs,
                                         const AttentionGeometry& g, DType dtype, uint32_t seed = 41,
                                         int64_t window = 0) {
  AttentionBatch bt;
  int64_t tokens = 0;
  std::vector<int32_t> table(reqs.size() * static_cast<size_t>(g.max_blocks), -1), lens, starts = {0};
  for (size_t b = 0; b < reqs.size(); ++b) {
    tokens += reqs[b].q_len;
    lens.push_back(reqs[b].seq_len);
    starts.push_back(static_cast<int32_t>(tokens));
    std::copy(reqs[b].blocks.begin(), reqs[b].blocks.end(), table.begin() + b * g.max_blocks);
    std::fill_n(table.begin() + b * g.max_blocks, FirstSeen(reqs[b], window) / g.block_size, -1);
  }
  const int64_t batch = static_cast<int64_t>(reqs.size());
  const int64_t row = g.kv_heads * g.head_dim;
  bt.query = MakeFloat({tokens, g.heads, g.head_dim}, dtype,
                       RandomValues(tokens * g.heads * g.head_dim, seed, -2, 2));
  bt.q = ReadFloat(bt.query);
  const size_t cache_n = static_cast<size_t>(g.num_blocks * g.block_size * row);
  std::vector<double> kc(cache_n, std::numeric_limits<double>::quiet_NaN()), vc = kc;
  const std::vector<double> kr = RandomValues(cache_n, seed + 1), vr = RandomValues(cache_n, seed + 2);
  for (const AttentionRequest& r : reqs)
    for (int64_t j = FirstSeen(r, window); j < r.seq_len; ++j) {
      const int64_t slot = r.blocks[j / g.block_size] * g.block_size + j % g.block_size;
      for (int64_t e = slot * row; e < (slot + 1) * row; ++e) {
        kc[e] = kr[e];
        vc[e] = vr[e];
      }
    }
  const Shape cache_shape = {g.num_blocks, g.block_size, g.kv_heads, g.head_dim};
  bt.key_cache = MakeFloat(cache_shape, dtype, kc);
  bt.value_cache = MakeFloat(cache_shape, dtype, vc);
  bt.k = ReadFloat(bt.key_cache);
  bt.v = ReadFloat(bt.value_cache);
  bt.block_tables = MakeInts<int32_t>({batch, g.max_blocks}, DType::kI32, table);
  bt.seq_lens = MakeInts<int32_t>({batch}, DType::kI32, lens);
  bt.query_start_loc = MakeInts<int32_t>({batch + 1}, DType::kI32, starts);
  return bt;
}

// Sink logits (one per head) around the scores' range: 6 outweighs every score, -30
// weighs nothing; cycled over the heads. Exact in float32, so the op's float32 sinks
// tensor and AttentionReference see the same values.
inline std::vector<double> SinkLogits(int64_t heads) {
  const double pattern[] = {0.5, -1.0, 2.0, 6.0, -30.0, 0.0, 1.5, -0.25};
  std::vector<double> sinks;
  for (int64_t h = 0; h < heads; ++h) sinks.push_back(pattern[h % 8]);
  return sinks;
}

// float64 attention: query i of a request sits at position p = seq_len - q_len + i and
// attends to positions lo..p of its kv head h / (heads / kv_heads), lo = 0 or, with a
// window, max(0, p - window + 1) (transformers' sliding window); a head's sink logit
// (sinks non-empty) joins the softmax's denominator only (transformers' GptOssAttention).
inline std::vector<double> AttentionReference(const AttentionBatch& bt, const std::vector<AttentionRequest>& reqs,
                                              const AttentionGeometry& g, double scale, int64_t window = 0,
                                              const std::vector<double>& sinks = {}) {
  const int64_t heads = g.heads, kv_heads = g.kv_heads, head_dim = g.head_dim;
  std::vector<double> out(bt.q.size());
  int64_t token = 0;
  for (const AttentionRequest& r : reqs)
    for (int32_t i = 0; i < r.q_len; ++i, ++token)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kv = h / (heads / kv_heads), pos = r.seq_len - r.q_len + i;
        const double* q = bt.q.data() + (token * heads + h) * head_dim;
        auto kv_row = [&](const std::vector<double>& cache, int64_t j) {
          const int64_t slot = r.blocks[j / g.block_size] * g.block_size + j % g.block_size;
          return cache.data() + (slot * kv_heads + kv) * head_dim;
        };
        const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
        std::vector<double> s(static_cast<size_t>(pos + 1 - lo));
        for (int64_t j = lo; j <= pos; ++j) {
          double& x = s[j - lo];
          x = 0;
          for (int64_t d = 0; d < head_dim; ++d) x += q[d] * kv_row(bt.k, j)[d];
          x *= scale;
        }
        const double sink = sinks.empty() ? -INFINITY : sinks[h];
        const double m = std::max(sink, *std::max_element(s.begin(), s.end()));
        double l = std::exp(sink - m);
        for (double& x : s) l += (x = std::exp(x - m));
        double* o = out.data() + (token * heads + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          o[d] = 0;
          for (int64_t j = lo; j <= pos; ++j) o[d] += s[j - lo] / l * kv_row(bt.v, j)[d];
        }
      }
  return out;
}

}  // namespace metalrt::testing
