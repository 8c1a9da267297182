#include "bind.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindRopeOps(nb::module_& ops) {
  ops.def("rope_neox", &ops::RopeNeox, nb::arg("x"), nb::arg("positions"), nb::arg("rotary_dim"),
          nb::arg("base"), nb::arg("out") = nb::none());
  ops.def("rope_interleaved", &ops::RopeInterleaved, nb::arg("x"), nb::arg("positions"),
          nb::arg("rotary_dim"), nb::arg("base"), nb::arg("out") = nb::none());
  ops.def("rope_cos_sin_cache", &ops::RopeCosSinCache, nb::arg("positions"),
          nb::arg("rotary_dim"), nb::arg("base"), nb::arg("out") = nb::none());
  ops.def("rope_from_cache", &ops::RopeFromCache, nb::arg("x"), nb::arg("cos_sin_cache"),
          nb::arg("positions"), nb::arg("neox") = true, nb::arg("out") = nb::none());
  ops.def("qk_norm_rope", &ops::QkNormRope, nb::arg("q"), nb::arg("k"), nb::arg("q_weight"),
          nb::arg("k_weight"), nb::arg("positions"), nb::arg("eps"), nb::arg("rotary_dim"),
          nb::arg("base"));
}

}  // namespace metalrt::python
