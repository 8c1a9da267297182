#include "bind.h"

#include <nanobind/stl/optional.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindMatmulOps(nb::module_& ops) {
  ops.def("matmul", &ops::Matmul, nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none());
  ops.def("matmul_bt", &ops::MatmulBT, nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
