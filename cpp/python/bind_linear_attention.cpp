#include "bind.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindLinearAttentionOps(nb::module_& ops) {
  ops.def("causal_conv1d", &ops::CausalConv1d, nb::arg("x"), nb::arg("weight"),
          nb::arg("conv_state"), nb::arg("query_start"), nb::arg("state_slots"), nb::arg("silu"),
          nb::arg("out") = nb::none());
  ops.def("gdn_gating", &ops::GdnGating, nb::arg("a"), nb::arg("b"), nb::arg("A_log"),
          nb::arg("dt_bias"));
  // mode: 0 recurrent, 1 chunked, 2 auto (ops::DeltaRuleMode); the Python wrapper maps names.
  ops.def(
      "gated_delta_rule",
      [](const Tensor& mixed_qkv, const Tensor& g, const Tensor& beta, const Tensor& state,
         const Tensor& query_start, const Tensor& state_slots, int64_t num_k_heads,
         int64_t head_k_dim, int64_t num_v_heads, int64_t head_v_dim, float scale, int32_t mode,
         bool v_heads_tiled, const ops::OptTensor& out) {
        return ops::GatedDeltaRule(mixed_qkv, g, beta, state, query_start, state_slots,
                                   {num_k_heads, head_k_dim, num_v_heads, head_v_dim, scale,
                                    static_cast<ops::DeltaRuleMode>(mode), v_heads_tiled},
                                   out);
      },
      nb::arg("mixed_qkv"), nb::arg("g"), nb::arg("beta"), nb::arg("state"),
      nb::arg("query_start"), nb::arg("state_slots"), nb::arg("num_k_heads"),
      nb::arg("head_k_dim"), nb::arg("num_v_heads"), nb::arg("head_v_dim"), nb::arg("scale"),
      nb::arg("mode"), nb::arg("v_heads_tiled"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
