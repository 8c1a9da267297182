// The gated delta rule over a batch of requests with pooled state
// (metalrt/linear_attention_ops.h). Shapes, the head geometry and the batch description
// are validated here, before any provider runs.
#include <cmath>
#include <string>

#include "ops/op_common.h"
#include "ops/recurrent_batch.h"

namespace metalrt::ops {

Tensor GatedDeltaRule(const Tensor& mixed_qkv, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Tensor& query_start, const Tensor& state_slots,
                      const GatedDeltaRuleParams& params, const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "gated_delta_rule";
  const int64_t hk = params.num_k_heads, dk = params.head_k_dim, hv = params.num_v_heads,
                dv = params.head_v_dim;
  Check(hk >= 1 && dk >= 1 && hv >= 1 && dv >= 1, kOp,
        "num_k_heads, head_k_dim, num_v_heads and head_v_dim must be >= 1, got " +
            std::to_string(hk) + ", " + std::to_string(dk) + ", " + std::to_string(hv) + ", " +
            std::to_string(dv));
  Check(hv % hk == 0, kOp,
        "num_v_heads (" + std::to_string(hv) + ") must be a multiple of num_k_heads (" +
            std::to_string(hk) + ")");
  Check(std::isfinite(params.scale), kOp, "scale must be finite, got " + std::to_string(params.scale));
  Check(params.mode == DeltaRuleMode::kRecurrent || params.mode == DeltaRuleMode::kChunked ||
            params.mode == DeltaRuleMode::kAuto,
        kOp, "mode must be recurrent, chunked or auto");
  CheckRank(mixed_qkv, 2, kOp, "mixed_qkv");
  CheckFloat(mixed_qkv, kOp, "mixed_qkv");
  const int64_t tokens = mixed_qkv.dim(0), width = 2 * hk * dk + hv * dv;
  Check(mixed_qkv.dim(1) == width, kOp,
        "mixed_qkv must have 2*num_k_heads*head_k_dim + num_v_heads*head_v_dim = " +
            std::to_string(width) + " channels (q | k | v), got shape " +
            ShapeToString(mixed_qkv.shape()));
  CheckShape(g, {tokens, hv}, kOp, "g");
  CheckDType(g, DType::kF32, kOp, "g");
  CheckShape(beta, {tokens, hv}, kOp, "beta");
  CheckDType(beta, DType::kF32, kOp, "beta");
  CheckRank(state, 4, kOp, "state");
  CheckDType(state, DType::kF32, kOp, "state");
  Check(state.dim(1) == hv && state.dim(2) == dk && state.dim(3) == dv, kOp,
        "state must have shape [slots, num_v_heads, head_k_dim, head_v_dim] = [slots, " +
            std::to_string(hv) + ", " + std::to_string(dk) + ", " + std::to_string(dv) + "], got " +
            ShapeToString(state.shape()));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{mixed_qkv, "mixed_qkv"},
                                {g, "g"},
                                {beta, "beta"},
                                {state, "state"}})
    CheckContiguous(t, kOp, name);
  CheckWritableState(state, kOp, "state");
  const DeviceType device = CommonDevice(
      {&mixed_qkv, &g, &beta, &state, &query_start, &state_slots, &OrUndefined(out)}, kOp);
  Tensor result = OutputOrNew(out, {tokens, hv, dv}, mixed_qkv.dtype(), device, kOp);
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{mixed_qkv, "mixed_qkv"},
                                {g, "g"},
                                {beta, "beta"},
                                {state, "state"},
                                {query_start, "query_start"},
                                {state_slots, "state_slots"}})
    CheckNoOverlap(result, t, kOp, name);
  CheckRecurrentBatch(query_start, state_slots, tokens, state.dim(0), kOp);
  RunOp(kOp, device,
        OpCall{{mixed_qkv, g, beta, state, query_start, state_slots}, {result}, params});
  return result;
}

}  // namespace metalrt::ops
