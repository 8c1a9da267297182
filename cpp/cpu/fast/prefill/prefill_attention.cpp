#include "cpu/fast/prefill/prefill_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "cpu/fast/simd/exp_avx512.h"
#include "cpu/float_rows.h"
#include "cpu/kv_blocks.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast::prefill_attention {
namespace {

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

std::atomic<int64_t> tile_scratch_high_water{0};

}  // namespace

void LoadTile(const Tensor& cache, int64_t head_dim, const Request& r, int64_t g, int64_t begin, int64_t end,
              float* dst) {
  const int64_t block_size = cache.dim(1), kv_heads = cache.dim(2);
  const KvType type = KvTypeOf(cache, head_dim, "paged_attention", "a cache");
  const int64_t end_read = std::min(end, r.seq_len);
  for (int64_t j = begin; j < end_read; ++j) {
    const int64_t slot = static_cast<int64_t>(r.blocks[j / block_size]) * block_size + j % block_size;
    LoadKvRows(cache.data(), type, slot * kv_heads + g, 1, head_dim, dst + (j - begin) * head_dim);
  }
  std::fill(dst + (std::max(end_read, begin) - begin) * head_dim, dst + (end - begin) * head_dim, 0.0f);
}

void NoteTileScratch(int64_t bytes) {
  int64_t seen = tile_scratch_high_water.load(std::memory_order_relaxed);
  while (bytes > seen && !tile_scratch_high_water.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
  }
}

int64_t TileScratchHighWater() { return tile_scratch_high_water.load(std::memory_order_relaxed); }

void ResetTileScratchHighWater() { tile_scratch_high_water.store(0, std::memory_order_relaxed); }

int64_t WindowStart(const OpCall& call, int64_t p) {
  const int64_t window = call.param<ops::PagedAttentionParams>().window;
  return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
}

float Sink(const OpCall& call, int64_t head) {
  return call.inputs.size() > 6 ? call.inputs[6].data_as<float>()[head] : -INFINITY;
}

float OnlineWeights(float* s, int64_t n, int64_t first, int64_t last, float& m, float& l, bool vector_exp) {
  first = std::max<int64_t>(first, 0);
  last = std::min<int64_t>(last, n - 1);
  if (first > last) {
    std::fill(s, s + n, 0.0f);
    return 1.0f;
  }
  float* row = s + first;
  const int64_t count = last + 1 - first;
  const float next = std::max(m, RowMax(row, count));
  float sum = 0.0f;
  if (vector_exp && std::isfinite(next)) {
    sum = ExpShiftedRowAvx512(row, count, next);
  } else {
    for (int64_t j = 0; j < count; ++j) {
      row[j] = std::exp(row[j] - next);
      sum += row[j];
    }
  }
  std::fill(s, row, 0.0f);
  std::fill(s + last + 1, s + n, 0.0f);
  const float a = m == -INFINITY ? 0.0f : std::exp(m - next);
  l = l * a + sum;
  m = next;
  return a;
}

void WeighTile(const OpCall& call, float* s, int64_t rows, int64_t n, int64_t first_query, int64_t origin,
               float* m, float* l, float* o, bool transposed, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = first_query + row / group;
    const float a = OnlineWeights(s + row * n, n, WindowStart(call, p) - origin, p - origin, m[row], l[row], vector_exp);
    if (a == 1.0f) continue;
    for (int64_t d = 0; d < head_dim; ++d) (transposed ? o[d * rows + row] : o[row * head_dim + d]) *= a;
  }
}

void OnlineStart(const OpCall& call, int64_t head, float& m, float& l) {
  m = Sink(call, head);
  l = m == -INFINITY ? 0.0f : 1.0f;
}

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

void StoreBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const float* o,
                bool transposed, const float* l) {
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

bool HasPrefill(const OpCall& call) {
  if (DecodeRows()) return false;   // every query row as a decode's (op_registry.h)
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  for (int64_t b = 0; b < call.inputs[3].dim(0); ++b)
    if (query_start_loc[b + 1] - query_start_loc[b] > 1) return true;
  return false;
}

}  // namespace metalrt::cpu::fast::prefill_attention
