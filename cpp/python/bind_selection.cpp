#include "bind.h"

#include <nanobind/stl/optional.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindSelectionOps(nb::module_& ops) {
  ops.def("greedy_argmax", &ops::GreedyArgmax, nb::arg("logits"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
