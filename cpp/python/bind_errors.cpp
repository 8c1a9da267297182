// metalrt::TypeError -> TypeError. nanobind's built-in translator already maps
// std::invalid_argument -> ValueError and std::runtime_error -> RuntimeError; this
// one is tried first because TypeError derives from std::runtime_error.
#include "bind.h"

#include "metalrt/errors.h"

namespace metalrt::python {

void BindErrors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const metalrt::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    }
  });
}

}  // namespace metalrt::python
