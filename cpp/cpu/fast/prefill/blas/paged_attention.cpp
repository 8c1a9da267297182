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

void AttendBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                 const std::vector<float>& keys, const std::vector<float>& values, bool vector_exp) {
  const int64_t head_dim = call.inputs[0].dim(2), group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t rows = (i1 - i0) * group;
  const int64_t past = r.seq_len - r.q_len;        // positions before the first query
  // Keys k0 .. the block's last position, k0 = the first its first query sees.
  const int64_t k0 = WindowStart(call, past + i0), n_keys = past + i1 - k0;
  const float* k = keys.data() + (g * r.kv_len + k0 - r.kv_begin) * head_dim;
  const float* v = values.data() + (g * r.kv_len + k0 - r.kv_begin) * head_dim;
  // Per thread and grown only: a fresh vector zero-filled its rows x n_keys scores, which
  // the sgemm then overwrote.
  static thread_local std::vector<float> q, s, o, l;
  LoadScaledQueries(call, r, g, i0, i1, q);
  s.resize(std::max(s.size(), static_cast<size_t>(rows * n_keys)));
  o.resize(q.size());
  l.resize(static_cast<size_t>(rows));
  Sgemm(rows, n_keys, head_dim, q.data(), head_dim, k, head_dim, true, s.data(), n_keys);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = past + i0 + row / group;
    l[row] = SoftmaxWeights(s.data() + row * n_keys, n_keys, WindowStart(call, p) - k0, p - k0,
                            Sink(call, g * group + row % group), vector_exp);
  }
  Sgemm(rows, head_dim, n_keys, s.data(), n_keys, v, head_dim, false, o.data(), head_dim);
  StoreBlock(call, r, g, i0, i1, o.data(), false, l);
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

}  // namespace

// Tried after the bf16 products and ahead of the decode attention.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kPrefill,
                             PrefillAttention);

}  // namespace metalrt::cpu::fast
