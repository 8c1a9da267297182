// The nanobind extension metalrt._metalrt. Each bind_*.cpp adds one area.
#include "bind.h"
#include "python_owner.h"

NB_MODULE(_metalrt, m) {
  m.doc() = "metalrt native core";
  using namespace metalrt::python;
  BindErrors(m);
  BindTensor(m);
  BindDevice(m);
  BindProviders(m);
  BindProfiler(m);
  BindShader(m);
  BindDoctor(m);
  BindQuantized(m);
  BindPythonOwner(m);
  BindPlan(m);
  nb::module_ ops = m.def_submodule("ops", "Op entry points (wrapped by metalrt.ops).");
  BindElementwiseOps(ops);
  BindNormalizationOps(ops);
  BindMatmulOps(ops);
  BindLayoutOps(ops);
  BindAttentionOps(ops);
  BindSelectionOps(ops);
  BindRopeOps(ops);
  BindQuantizedOps(ops);
  BindLinearAttentionOps(ops);
  BindMoeOps(ops);
}
