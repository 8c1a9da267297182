// The gates g and beta of a Gated-DeltaNet layer (metalrt/linear_attention_ops.h).
#include <string>

#include "ops/op_common.h"

namespace metalrt::ops {

std::tuple<Tensor, Tensor> GdnGating(const Tensor& a, const Tensor& b, const Tensor& A_log,
                                     const Tensor& dt_bias) {
  using namespace detail;
  constexpr const char* kOp = "gdn_gating";
  CheckRank(a, 2, kOp, "a");
  CheckFloat(a, kOp, "a");
  CheckShape(b, a.shape(), kOp, "b");
  CheckSameDType(a, b, kOp, "a", "b");
  const int64_t heads = a.dim(1);
  CheckShape(A_log, {heads}, kOp, "A_log");
  CheckFloat(A_log, kOp, "A_log");
  CheckShape(dt_bias, {heads}, kOp, "dt_bias");
  CheckSameDType(A_log, dt_bias, kOp, "A_log", "dt_bias");
  // A_log stays f32 in checkpoints that keep it so (mlx-lm#902); else the model's dtype.
  CheckType(A_log.dtype() == DType::kF32 || A_log.dtype() == a.dtype(), kOp,
            std::string("A_log must be float32 or a's dtype (") + DTypeName(a.dtype()) + "), got " +
                DTypeName(A_log.dtype()));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{a, "a"},
                                {b, "b"},
                                {A_log, "A_log"},
                                {dt_bias, "dt_bias"}})
    CheckContiguous(t, kOp, name);
  const DeviceType device = CommonDevice({&a, &b, &A_log, &dt_bias}, kOp);
  Tensor g = Tensor::Empty(a.shape(), DType::kF32, device);
  Tensor beta = Tensor::Empty(a.shape(), DType::kF32, device);
  RunOp(kOp, device, OpCall{{a, b, A_log, dt_bias}, {g, beta}, {}});
  return {g, beta};
}

}  // namespace metalrt::ops
