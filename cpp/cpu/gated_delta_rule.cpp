// CPU oracle of gated_delta_rule (metalrt/linear_attention_ops.h): the provider, the
// input rows, and the recurrent form. Per value head, with S in R^{dk x dv} (f32), each
// token does, as transformers' torch_recurrent_gated_delta_rule:
//   S = exp(g) S;  m = S^T k;  d = beta (v - m);  S += k d^T;  o = S^T q
// every sum over the key index ascending. Requests and heads are independent, so the
// split over threads changes no result.
#include "cpu/gated_delta_rule.h"

#include <cmath>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "linear_attention_args.h"   // delta_rule_key_head, shared with the kernels
#include "metalrt/linear_attention_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

// x[0 .. n) *= 1 / sqrt(sum x^2 + 1e-6): the FLA-compatible l2norm transformers uses.
void L2Normalize(float* x, int64_t n) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

bool CpuGatedDeltaRule(const OpCall& call) {
  const auto& p = call.param<ops::GatedDeltaRuleParams>();
  const int32_t* starts = call.inputs[4].data_as<int32_t>();
  const int32_t* slots = call.inputs[5].data_as<int32_t>();
  const int64_t requests = call.inputs[5].dim(0), hv = p.num_v_heads, dk = p.head_k_dim,
                dv = p.head_v_dim;
  float* state = call.inputs[3].data_as<float>();
  const Tensor& out = call.outputs[0];
  // Decode rows (op_registry.h, read on the calling thread): "auto" runs every request's
  // tokens one recurrent step at a time, as one-token steps run them.
  const bool auto_chunks = !DecodeRows();
  ParallelFor(requests * hv, 1, [&](int64_t begin, int64_t end) {
    DeltaRuleRows rows;
    std::vector<float> o;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / hv, h = item % hv, first = starts[r], len = starts[r + 1] - first;
      if (len == 0) continue;
      LoadDeltaRuleRows(call, first, len, h, rows);
      o.resize(static_cast<size_t>(len * dv));
      float* s = state + (int64_t{slots[r]} * hv + h) * dk * dv;
      const bool chunked = p.mode == ops::DeltaRuleMode::kChunked ||
                           (p.mode == ops::DeltaRuleMode::kAuto && len > 1 && auto_chunks);
      if (chunked)
        ChunkedDeltaRule(rows, s, o.data());
      else
        RecurrentDeltaRule(rows, s, o.data());
      for (int64_t t = 0; t < len; ++t)
        StoreRowF32(out.data(), out.dtype(), ((first + t) * hv + h) * dv, dv, o.data() + t * dv);
    }
  });
  return true;
}

}  // namespace

void LoadDeltaRuleRows(const OpCall& call, int64_t first, int64_t len, int64_t head,
                       DeltaRuleRows& rows) {
  const auto& p = call.param<ops::GatedDeltaRuleParams>();
  const Tensor& qkv = call.inputs[0];
  const int64_t hk = p.num_k_heads, dk = p.head_k_dim, hv = p.num_v_heads, dv = p.head_v_dim;
  const int64_t width = qkv.dim(1), key_head = delta_rule_key_head(head, hk, hv, p.v_heads_tiled);
  rows.len = len;
  rows.dk = dk;
  rows.dv = dv;
  rows.q.resize(static_cast<size_t>(len * dk));
  rows.k.resize(rows.q.size());
  rows.v.resize(static_cast<size_t>(len * dv));
  rows.g.resize(static_cast<size_t>(len));
  rows.beta.resize(rows.g.size());
  const float* g = call.inputs[1].data_as<float>();
  const float* beta = call.inputs[2].data_as<float>();
  for (int64_t t = 0; t < len; ++t) {
    const int64_t row = (first + t) * width;
    LoadRowF32(qkv.data(), qkv.dtype(), row + key_head * dk, dk, &rows.q[t * dk]);
    LoadRowF32(qkv.data(), qkv.dtype(), row + (hk + key_head) * dk, dk, &rows.k[t * dk]);
    LoadRowF32(qkv.data(), qkv.dtype(), row + 2 * hk * dk + head * dv, dv, &rows.v[t * dv]);
    L2Normalize(&rows.q[t * dk], dk);
    for (int64_t i = 0; i < dk; ++i) rows.q[t * dk + i] *= p.scale;
    L2Normalize(&rows.k[t * dk], dk);
    rows.g[t] = g[(first + t) * hv + head];
    rows.beta[t] = beta[(first + t) * hv + head];
  }
}

void RecurrentDeltaRule(const DeltaRuleRows& rows, float* state, float* o) {
  const int64_t dk = rows.dk, dv = rows.dv;
  std::vector<float> delta(static_cast<size_t>(dv));
  for (int64_t t = 0; t < rows.len; ++t) {
    const float* q = &rows.q[t * dk];
    const float* k = &rows.k[t * dk];
    const float* v = &rows.v[t * dv];
    const float decay = std::exp(rows.g[t]);
    for (int64_t i = 0; i < dk * dv; ++i) state[i] *= decay;
    for (int64_t d = 0; d < dv; ++d) {
      float m = 0.0f;
      for (int64_t i = 0; i < dk; ++i) m += state[i * dv + d] * k[i];
      delta[d] = (v[d] - m) * rows.beta[t];
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t d = 0; d < dv; ++d) state[i * dv + d] += k[i] * delta[d];
    for (int64_t d = 0; d < dv; ++d) {
      float acc = 0.0f;
      for (int64_t i = 0; i < dk; ++i) acc += state[i * dv + d] * q[i];
      o[t * dv + d] = acc;
    }
  }
}

METALRT_REGISTER_OP_PROVIDER("gated_delta_rule", DeviceType::kCPU, ProviderTier::kOracle,
                             CpuGatedDeltaRule);

}  // namespace metalrt::cpu
