// QKV split: a merged projection output [T, q + k + v] into three contiguous tensors.
#include <string>

#include "ops/op_common.h"

namespace metalrt::ops {

std::tuple<Tensor, Tensor, Tensor> QkvSplit(const Tensor& qkv, int64_t q_width, int64_t k_width,
                                            int64_t v_width) {
  using namespace detail;
  constexpr const char* kOp = "qkv_split";
  CheckRank(qkv, 2, kOp, "qkv");
  CheckContiguous(qkv, kOp, "qkv");
  Check(q_width > 0 && k_width > 0 && v_width > 0, kOp,
        "widths must be positive, got q " + std::to_string(q_width) + ", k " +
            std::to_string(k_width) + ", v " + std::to_string(v_width));
  Check(q_width + k_width + v_width == qkv.dim(1), kOp,
        "q + k + v widths (" + std::to_string(q_width) + " + " + std::to_string(k_width) + " + " +
            std::to_string(v_width) + ") must equal the last dim of qkv " +
            ShapeToString(qkv.shape()));
  const int64_t tokens = qkv.dim(0);
  const DeviceType device = qkv.device();
  Tensor q = Tensor::Empty({tokens, q_width}, qkv.dtype(), device);
  Tensor k = Tensor::Empty({tokens, k_width}, qkv.dtype(), device);
  Tensor v = Tensor::Empty({tokens, v_width}, qkv.dtype(), device);
  RunOp(kOp, device, OpCall{{qkv}, {q, k, v}, QkvSplitParams{q_width, k_width, v_width}});
  return {q, k, v};
}

}  // namespace metalrt::ops
