// The CPU device's f32 prefill attention: the blocks of prefill_attention.h with both
// products on the BLAS sgemm, for what the bf16 products (prefill/paged_attention_bf16.cpp)
// decline.
#include <vector>

#include "cpu/fast/prefill/blas/sgemm.h"
#include "cpu/fast/prefill/prefill_attention.h"
#include "cpu/fast/simd/cpu_features.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

using namespace prefill_attention;

// Blocks [b0, b1) of kv head g, tile by tile of their keys (prefill_attention.h).
void AttendRange(const OpCall& call, const Request& r, int64_t g, int64_t b0, int64_t b1, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t past = r.seq_len - r.q_len;        // positions before the first query
  const int64_t stride = kQueryBlock * group;      // rows of a block's state
  // Per thread and grown only. Per block: its scaled queries, output, m and l.
  static thread_local std::vector<float> q, o, m, l, s, keys, values, block_q;
  const size_t blocks = static_cast<size_t>(b1 - b0);
  q.resize(blocks * stride * head_dim);
  o.assign(blocks * stride * head_dim, 0.0f);
  m.resize(blocks * stride);
  l.resize(blocks * stride);
  s.resize(static_cast<size_t>(stride * kKeyTile));
  keys.resize(static_cast<size_t>(kKeyTile * head_dim));
  values.resize(keys.size());
  NoteTileScratch(static_cast<int64_t>((keys.size() + values.size()) * sizeof(float)));
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock);
    LoadScaledQueries(call, r, g, i0, i1, block_q);
    std::copy(block_q.begin(), block_q.end(), q.begin() + (b - b0) * stride * head_dim);
    for (int64_t row = 0; row < (i1 - i0) * group; ++row)
      OnlineStart(call, g * group + row % group, m[(b - b0) * stride + row], l[(b - b0) * stride + row]);
  }
  // The range's keys: from the first its first query sees to its last query's position.
  const int64_t lo = WindowStart(call, past + b0 * kQueryBlock), hi = past + std::min(r.q_len, b1 * kQueryBlock);
  for (int64_t t0 = lo; t0 < hi; t0 += kKeyTile) {
    const int64_t count = std::min(kKeyTile, hi - t0);
    LoadTile(call.inputs[1], head_dim, r, g, t0, t0 + count, keys.data());
    LoadTile(call.inputs[2], head_dim, r, g, t0, t0 + count, values.data());
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock), rows = (i1 - i0) * group;
      // The tile's columns the block sees: [c0, c1).
      const int64_t c0 = std::max(t0, WindowStart(call, past + i0)) - t0, c1 = std::min(t0 + count, past + i1) - t0;
      if (c0 >= c1) continue;
      const int64_t n = c1 - c0;
      float* block_o = o.data() + (b - b0) * stride * head_dim;
      Sgemm(rows, n, head_dim, q.data() + (b - b0) * stride * head_dim, head_dim, keys.data() + c0 * head_dim,
            head_dim, true, s.data(), n);
      WeighTile(call, s.data(), rows, n, past + i0, t0 + c0, m.data() + (b - b0) * stride,
                l.data() + (b - b0) * stride, block_o, false, vector_exp);
      SgemmAccumulate(rows, head_dim, n, s.data(), n, values.data() + c0 * head_dim, head_dim, false, block_o,
                      head_dim);
    }
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i0 = b * kQueryBlock, i1 = std::min(r.q_len, i0 + kQueryBlock);
    StoreBlock(call, r, g, i0, i1, o.data() + (b - b0) * stride * head_dim, false, l.data() + (b - b0) * stride);
  }
}

bool PrefillAttention(const OpCall& call) {
  if (!HasPrefill(call) || call.inputs[0].numel() == 0 || !BlasAvailable()) return false;
  const bool vector_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  EachRange(call, [&](const Request& r, int64_t g, int64_t b0, int64_t b1) { AttendRange(call, r, g, b0, b1, vector_exp); });
  return true;
}

}  // namespace

// Tried after the bf16 products and ahead of the decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefill,
                             PrefillAttention);

}  // namespace metalrt::cpu::fast
