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

void AttendBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group;
  const int64_t past = r.seq_len - r.q_len;        // positions before the first query
  // Keys k0 .. the block's last position, k0 = the first its first query sees.
  const int64_t k0 = WindowStart(call, past + i0), n_keys = past + i1 - k0;
  // Per thread and grown only: a fresh vector zero-filled its rows x n_keys scores, which
  // the sgemm then overwrote. `tile`: kKeyTile positions of keys, then of values.
  static thread_local std::vector<float> q, s, o, l, tile;
  LoadScaledQueries(call, r, g, i0, i1, q);
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_keys)));
  o.resize(q.size());
  l.resize(static_cast<size_t>(rows));
  tile.resize(static_cast<size_t>(kKeyTile * head_dim));
  NoteTileScratch(static_cast<int64_t>(tile.size() * sizeof(float)));
  for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyTile) {
    const int64_t count = std::min(kKeyTile, n_keys - t0);
    LoadTile(call.inputs[1], head_dim, r, g, k0 + t0, k0 + t0 + count, tile.data());
    Sgemm(rows, count, head_dim, q.data(), head_dim, tile.data(), head_dim, true, s.data() + t0, n_keys);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = past + i0 + row / group;
    l[row] = SoftmaxWeights(s.data() + row * n_keys, n_keys, WindowStart(call, p) - k0, p - k0,
                            Sink(call, g * group + row % group), vector_exp);
  }
  // O = W . V, tile by tile onto the sums of the tiles before (the one product's sums in
  // another order).
  for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyTile) {
    const int64_t count = std::min(kKeyTile, n_keys - t0);
    LoadTile(call.inputs[2], head_dim, r, g, k0 + t0, k0 + t0 + count, tile.data());
    (t0 == 0 ? Sgemm : SgemmAccumulate)(rows, head_dim, count, s.data() + t0, n_keys, tile.data(), head_dim, false,
                                        o.data(), head_dim);
  }
  StoreBlock(call, r, g, i0, i1, o.data(), false, l);
}

bool PrefillAttention(const OpCall& call) {
  if (!HasPrefill(call) || call.inputs[0].numel() == 0 || !BlasAvailable()) return false;
  const bool vector_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  EachBlock(call, [&](const Request& r, int64_t g, int64_t i0, int64_t i1) { AttendBlock(call, r, g, i0, i1, vector_exp); });
  return true;
}

}  // namespace

// Tried after the bf16 products and ahead of the decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefill,
                             PrefillAttention);

}  // namespace metalrt::cpu::fast
