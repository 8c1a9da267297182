// CPU oracles of the MoE ops (math in metalrt/moe_ops.h; the routing of transformers'
// Qwen3MoeSparseMoeBlock / Qwen3NextSparseMoeBlock):
// * moe_router: per row, NaN -> -inf, m = max, p_e = exp(l_e - m) / sum_e exp(l_e - m)
//   (sum in index order); the k largest logits picked one at a time, the lower index
//   winning ties; weights p (divided by their slot-order sum iff renormalize);
// * moe_matmul_bt: the (token, slot) pairs grouped by expert, each selected expert row
//   dequantized (DequantizeRow) or converted once and dotted with its pairs' rows in
//   the order of Dot8 — the other experts' rows are never read; gated (two stacks):
//   output column c < N from the gate stack's row, c >= N from the up stack's row c - N;
// * moe_combine: sum over slots in slot order of weight * y, plus the gated shared
//   expert, in f32, rounded once.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/dot.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "cpu/quantized_blocks.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool CpuMoeRouter(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  const auto& p = call.param<ops::MoeRouterParams>();
  float* weights = call.outputs[0].data_as<float>();
  int32_t* ids = call.outputs[1].data_as<int32_t>();
  const int64_t experts = logits.dim(1), k = p.top_k;
  ParallelFor(logits.dim(0), 4, [&](int64_t begin, int64_t end) {
    std::vector<float> v(static_cast<size_t>(experts));
    std::vector<char> taken(static_cast<size_t>(experts));
    for (int64_t t = begin; t < end; ++t) {
      LoadRowF32(logits.data(), logits.dtype(), t * experts, experts, v.data());
      float m = -kInf;
      for (float& l : v) {
        if (std::isnan(l)) l = -kInf;
        m = l > m ? l : m;
      }
      float* w = weights + t * k;
      int32_t* id = ids + t * k;
      if (m == -kInf) {   // nothing finite to route on: valid, distinct ids, no weight
        for (int64_t j = 0; j < k; ++j) id[j] = static_cast<int32_t>(j), w[j] = 0.0f;
        continue;
      }
      // exp(l - m), or for +inf logits their equal share (the softmax's limit).
      auto mass = [m](float l) { return m == kInf ? (l == kInf ? 1.0f : 0.0f) : std::exp(l - m); };
      float sum = 0.0f;
      for (float l : v) sum += mass(l);
      std::fill(taken.begin(), taken.end(), 0);
      float picked = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < experts; ++e)
          if (!taken[e] && (best < 0 || v[e] > v[best])) best = e;
        taken[best] = 1;
        id[j] = static_cast<int32_t>(best);
        w[j] = mass(v[best]) / sum;
        picked += w[j];
      }
      if (p.renormalize)
        for (int64_t j = 0; j < k; ++j) w[j] /= picked;
    }
  });
  return true;
}

bool CpuMoeMatmulBT(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const int32_t* ids = call.inputs[1].data_as<int32_t>();
  const auto& p = call.param<ops::MoeMatmulParams>();
  const Tensor& out = call.outputs[0];
  const int64_t pairs = call.inputs[1].numel(), slots = call.inputs[1].dim(1);
  const int64_t k = x.dim(-1), width = out.dim(2), n = p.gated ? width / 2 : width;
  const bool per_slot = x.ndim() == 3;
  const std::vector<float> xf = ToF32(x);
  // The pairs of each expert. The CPU entry point rejects ids outside [0, E); one that
  // reaches this provider as Metal's reference tier gives a zero row, as the kernels do.
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(p.num_experts));
  for (int64_t i = 0; i < pairs; ++i)
    if (ids[i] >= 0 && ids[i] < p.num_experts) by_expert[ids[i]].push_back(i);
  std::vector<int64_t> active;
  for (int64_t e = 0; e < p.num_experts; ++e)
    if (!by_expert[e].empty()) active.push_back(e);
  std::vector<float> result(static_cast<size_t>(pairs * width));
  ParallelFor(static_cast<int64_t>(active.size()) * width, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t e = active[item / width], c = item % width, up = c / n, weight_row = e * n + c % n;
      if (p.quantized) DequantizeRow(up ? p.up : p.w, weight_row, row.data());
      else {
        const Tensor& w = call.inputs[2 + up];
        LoadRowF32(w.data(), w.dtype(), weight_row * k, k, row.data());
      }
      for (int64_t i : by_expert[e]) {
        const float* xr = xf.data() + (per_slot ? i : i / slots) * k;
        result[i * width + c] = Dot8(xr, row.data(), k);
      }
    }
  });
  StoreRowF32(out.data(), out.dtype(), 0, pairs * width, result.data());
  return true;
}

bool CpuMoeCombine(const OpCall& call) {
  const Tensor& y = call.inputs[0];
  const float* weights = call.inputs[1].data_as<float>();
  const Tensor& shared = call.inputs[2];
  const Tensor& shared_gate = call.inputs[3];
  const Tensor& out = call.outputs[0];
  const int64_t tokens = y.dim(0), slots = y.dim(1), n = y.dim(2);
  ParallelFor(tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(n)), row(static_cast<size_t>(n));
    for (int64_t t = begin; t < end; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < slots; ++j) {
        LoadRowF32(y.data(), y.dtype(), (t * slots + j) * n, n, row.data());
        const float w = weights[t * slots + j];
        for (int64_t c = 0; c < n; ++c) acc[c] += w * row[c];
      }
      if (shared.defined()) {
        const float g = shared_gate.defined()
                            ? 1.0f / (1.0f + std::exp(-LoadAsF32(shared_gate.data(), shared_gate.dtype(), t)))
                            : 1.0f;
        LoadRowF32(shared.data(), shared.dtype(), t * n, n, row.data());
        for (int64_t c = 0; c < n; ++c) acc[c] += g * row[c];
      }
      StoreRowF32(out.data(), out.dtype(), t * n, n, acc.data());
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("moe_router", DeviceType::kCPU, ProviderTier::kOracle, CpuMoeRouter);
METALRT_REGISTER_OP_PROVIDER("moe_matmul_bt", DeviceType::kCPU, ProviderTier::kOracle, CpuMoeMatmulBT);
METALRT_REGISTER_OP_PROVIDER("moe_combine", DeviceType::kCPU, ProviderTier::kOracle, CpuMoeCombine);

}  // namespace metalrt::cpu
