// The nanobind extension metalrt._metalrt. Each bind_*.cpp adds one area.
#include "bind.h"

NB_MODULE(_metalrt, m) {
  m.doc() = "metalrt native core";
  using namespace metalrt::python;
  BindErrors(m);
  BindTensor(m);
  BindDevice(m);
  BindProviders(m);
}
