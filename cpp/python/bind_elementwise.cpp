#include "bind.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindElementwiseOps(nb::module_& ops) {
  ops.def("add", &ops::Add, nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none());
  ops.def("mul", &ops::Mul, nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none());
  ops.def("relu", &ops::Relu, nb::arg("x"), nb::arg("out") = nb::none());
  ops.def("gelu", &ops::Gelu, nb::arg("x"), nb::arg("out") = nb::none());
  ops.def("silu_and_mul", &ops::SiluAndMul, nb::arg("x"), nb::arg("out") = nb::none());
  ops.def("cast",
          [](const Tensor& x, const std::string& dtype, const ops::OptTensor& out) {
            return ops::Cast(x, DTypeFromName(dtype), out);
          },
          nb::arg("x"), nb::arg("dtype"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
