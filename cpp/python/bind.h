// The areas of the nanobind extension metalrt._metalrt, one bind_<area>.cpp each.
#pragma once
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace metalrt::python {

void BindErrors(nb::module_& m);     // C++ exceptions -> Python exceptions
void BindTensor(nb::module_& m);     // Tensor, numpy import/export, empty/zeros
void BindDevice(nb::module_& m);     // synchronize, device_info, is_available
void BindProviders(nb::module_& m);  // the op registry's providers and stats

}  // namespace metalrt::python
