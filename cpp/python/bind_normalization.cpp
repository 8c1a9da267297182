#include "bind.h"

#include <nanobind/stl/optional.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindNormalizationOps(nb::module_& ops) {
  ops.def("layer_norm",
          [](const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, float eps,
             const ops::OptTensor& out) {
            return ops::LayerNorm(x, weight, bias.value_or(Tensor()), eps, out);
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(), nb::arg("eps"),
          nb::arg("out") = nb::none());
  ops.def("rms_norm", &ops::RmsNorm, nb::arg("x"), nb::arg("weight"), nb::arg("eps"),
          nb::arg("out") = nb::none());
  ops.def("softmax", &ops::Softmax, nb::arg("x"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
