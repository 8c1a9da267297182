#include "bind.h"

#include <nanobind/stl/optional.h>

#include "metalrt/ops.h"

namespace metalrt::python {

void BindAttentionOps(nb::module_& ops) {
  ops.def("paged_attention", &ops::PagedAttention, nb::arg("query"), nb::arg("key_cache"),
          nb::arg("value_cache"), nb::arg("block_tables"), nb::arg("seq_lens"),
          nb::arg("query_start_loc"), nb::arg("scale"), nb::arg("out") = nb::none(),
          nb::arg("coarse_projections") = false, nb::arg("window") = 0, nb::arg("sinks") = nb::none());
}

}  // namespace metalrt::python
