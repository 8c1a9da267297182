// The MoE and gate ops (metalrt/moe_ops.h, metalrt/expert_ops.h); metalrt/ops/moe.py and gates.py wrap them.
#include "bind.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "metalrt/expert_ops.h"
#include "metalrt/ops.h"

namespace metalrt::python {

void BindMoeOps(nb::module_& ops) {
  ops.def("gated_rms_norm", &ops::GatedRmsNorm, nb::arg("x"), nb::arg("z"), nb::arg("weight"), nb::arg("eps"),
          nb::arg("out") = nb::none());
  ops.def("gated_query_split", &ops::GatedQuerySplit, nb::arg("q_gate"), nb::arg("num_heads"),
          nb::arg("head_dim"), nb::arg("out_q") = nb::none(), nb::arg("out_gate") = nb::none());
  ops.def("sigmoid_mul", &ops::SigmoidMul, nb::arg("x"), nb::arg("gate"), nb::arg("out") = nb::none());
  ops.def("moe_router", &ops::MoeRouter, nb::arg("logits"), nb::arg("top_k"), nb::arg("renormalize"),
          nb::arg("out_weights") = nb::none(), nb::arg("out_ids") = nb::none());
  using FloatWeight = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, int64_t, const ops::OptTensor&);
  using QuantWeight = Tensor (*)(const Tensor&, const QuantizedTensor&, const Tensor&, int64_t,
                                 const ops::OptTensor&);
  ops.def("moe_matmul_bt", static_cast<FloatWeight>(&ops::MoeMatmulBT), nb::arg("x"), nb::arg("w"),
          nb::arg("expert_ids"), nb::arg("num_experts"), nb::arg("out") = nb::none());
  ops.def("moe_matmul_bt", static_cast<QuantWeight>(&ops::MoeMatmulBT), nb::arg("x"), nb::arg("w"),
          nb::arg("expert_ids"), nb::arg("num_experts"), nb::arg("out") = nb::none());
  using FloatPair = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                               const ops::OptTensor&);
  using QuantPair = Tensor (*)(const Tensor&, const QuantizedTensor&, const QuantizedTensor&, const Tensor&,
                               int64_t, const ops::OptTensor&);
  ops.def("moe_matmul_bt", static_cast<FloatPair>(&ops::MoeMatmulBT), nb::arg("x"), nb::arg("w"), nb::arg("up"),
          nb::arg("expert_ids"), nb::arg("num_experts"), nb::arg("out") = nb::none());
  ops.def("moe_matmul_bt", static_cast<QuantPair>(&ops::MoeMatmulBT), nb::arg("x"), nb::arg("w"), nb::arg("up"),
          nb::arg("expert_ids"), nb::arg("num_experts"), nb::arg("out") = nb::none());
  ops.def("moe_combine",
          [](const Tensor& y, const Tensor& weights, const std::optional<Tensor>& shared,
             const std::optional<Tensor>& shared_gate, const ops::OptTensor& out) {
            return ops::MoeCombine(y, weights, shared.value_or(Tensor()), shared_gate.value_or(Tensor()), out);
          },
          nb::arg("y"), nb::arg("weights"), nb::arg("shared").none(), nb::arg("shared_gate").none(),
          nb::arg("out") = nb::none());
  ops.def("swiglu_oai_and_mul", &ops::SwigluOaiAndMul, nb::arg("x"), nb::arg("alpha"), nb::arg("limit"),
          nb::arg("interleaved"), nb::arg("out") = nb::none());
  ops.def("moe_bias_add", &ops::MoeBiasAdd, nb::arg("y"), nb::arg("bias"), nb::arg("expert_ids"),
          nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
