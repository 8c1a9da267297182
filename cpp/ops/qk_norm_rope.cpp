// Qwen3's q/k recipe: RMSNorm over head_dim of every q and k head, then NeoX RoPE.
// Everything is validated here, so errors name this op rather than its parts.
#include <cmath>
#include <string>

#include "ops/op_common.h"

namespace metalrt::ops {

std::tuple<Tensor, Tensor> QkNormRope(const Tensor& q, const Tensor& k, const Tensor& q_weight,
                                      const Tensor& k_weight, const Tensor& positions, float eps,
                                      int64_t rotary_dim, float base) {
  using namespace detail;
  constexpr const char* kOp = "qk_norm_rope";
  CheckRank(q, 3, kOp, "q");
  CheckFloat(q, kOp, "q");
  CheckRank(k, 3, kOp, "k");
  CheckSameDType(q, k, kOp, "q", "k");
  const int64_t tokens = q.dim(0), head_dim = q.dim(2);
  Check(k.dim(0) == tokens && k.dim(2) == head_dim, kOp,
        "k must be [" + std::to_string(tokens) + ", kv_heads, " + std::to_string(head_dim) +
            "] to match q " + ShapeToString(q.shape()) + ", got " + ShapeToString(k.shape()));
  CheckShape(q_weight, {head_dim}, kOp, "q_weight");
  CheckSameDType(q, q_weight, kOp, "q", "q_weight");
  CheckShape(k_weight, {head_dim}, kOp, "k_weight");
  CheckSameDType(q, k_weight, kOp, "q", "k_weight");
  CheckShape(positions, {tokens}, kOp, "positions");
  CheckDType(positions, DType::kI32, kOp, "positions");
  Check(std::isfinite(eps) && eps >= 0, kOp, "eps must be finite and >= 0, got " + std::to_string(eps));
  Check(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim, kOp,
        "rotary_dim must be positive, even and <= head_dim " + std::to_string(head_dim) + ", got " +
            std::to_string(rotary_dim));
  Check(std::isfinite(base) && base > 0, kOp, "base must be positive, got " + std::to_string(base));
  CheckContiguous(q, kOp, "q");
  CheckContiguous(k, kOp, "k");
  CheckContiguous(q_weight, kOp, "q_weight");
  CheckContiguous(k_weight, kOp, "k_weight");
  CheckContiguous(positions, kOp, "positions");
  const DeviceType device = CommonDevice({&q, &k, &q_weight, &k_weight, &positions}, kOp);
  Tensor q_out = Tensor::Empty(q.shape(), q.dtype(), device);
  Tensor k_out = Tensor::Empty(k.shape(), k.dtype(), device);
  RunOp(kOp, device,
        OpCall{{q, k, q_weight, k_weight, positions},
               {q_out, k_out},
               QkNormRopeParams{eps, rotary_dim, base}});
  return {q_out, k_out};
}

}  // namespace metalrt::ops
