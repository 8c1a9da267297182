#include "bind.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindLayoutOps(nb::module_& ops) {
  ops.def("embedding", &ops::Embedding, nb::arg("weight"), nb::arg("ids"),
          nb::arg("out") = nb::none());
  ops.def("qkv_split", &ops::QkvSplit, nb::arg("qkv"), nb::arg("q_width"), nb::arg("k_width"),
          nb::arg("v_width"));
  ops.def("qkv_rope_cache", &ops::QkvRopeCache, nb::arg("qkv"), nb::arg("positions"), nb::arg("key_cache"),
          nb::arg("value_cache"), nb::arg("slot_mapping"), nb::arg("heads"), nb::arg("rotary_dim"),
          nb::arg("base"), nb::arg("neox"), nb::arg("out") = nb::none());
  ops.def("reshape_and_cache", &ops::ReshapeAndCache, nb::arg("key"), nb::arg("value"),
          nb::arg("key_cache"), nb::arg("value_cache"), nb::arg("slot_mapping"));
}

}  // namespace metalrt::python
