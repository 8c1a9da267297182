// The nanobind extension metalrt._metalrt. Each bind_*.cpp adds one area.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_metalrt, m) {
  m.doc() = "metalrt native core";
}
