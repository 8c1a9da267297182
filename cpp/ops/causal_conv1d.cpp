// Causal depthwise conv1d with a carried state (metalrt/linear_attention_ops.h). The
// batch description is validated here, before any provider runs, so no kernel reads or
// writes outside the state pool.
#include <string>

#include "ops/op_common.h"
#include "ops/recurrent_batch.h"

namespace metalrt::ops {

Tensor CausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                    const Tensor& query_start, const Tensor& state_slots, bool silu,
                    const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "causal_conv1d";
  CheckRank(x, 2, kOp, "x");
  CheckFloat(x, kOp, "x");
  CheckRank(weight, 2, kOp, "weight");
  CheckSameDType(x, weight, kOp, "x", "weight");
  const int64_t channels = x.dim(1), width = weight.dim(1);
  Check(weight.dim(0) == channels, kOp,
        "weight must have one row per channel of x (" + std::to_string(channels) + "), got shape " +
            ShapeToString(weight.shape()));
  Check(width >= 1, kOp, "weight must have a kernel width K >= 1, got shape " + ShapeToString(weight.shape()));
  CheckRank(conv_state, 3, kOp, "conv_state");
  CheckSameDType(x, conv_state, kOp, "x", "conv_state");
  Check(conv_state.dim(1) == channels && conv_state.dim(2) == width - 1, kOp,
        "conv_state must have shape [slots, " + std::to_string(channels) + ", " +
            std::to_string(width - 1) + "] (channels of x, K - 1), got " +
            ShapeToString(conv_state.shape()));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{x, "x"},
                                {weight, "weight"},
                                {conv_state, "conv_state"}})
    CheckContiguous(t, kOp, name);
  CheckWritableState(conv_state, kOp, "conv_state");
  const DeviceType device = CommonDevice(
      {&x, &weight, &conv_state, &query_start, &state_slots, &OrUndefined(out)}, kOp);
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, kOp);
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{x, "x"},
                                {weight, "weight"},
                                {conv_state, "conv_state"},
                                {query_start, "query_start"},
                                {state_slots, "state_slots"}})
    CheckNoOverlap(result, t, kOp, name);
  CheckRecurrentBatch(query_start, state_slots, x.dim(0), conv_state.dim(0), kOp);
  RunOp(kOp, device,
        OpCall{{x, weight, conv_state, query_start, state_slots}, {result}, CausalConv1dParams{silu}});
  return result;
}

}  // namespace metalrt::ops
