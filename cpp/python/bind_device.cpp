// Device queries and synchronisation.
#include "bind.h"

#include <nanobind/stl/string.h>

#include "metalrt/device.h"

namespace metalrt::python {

void BindDevice(nb::module_& m) {
  m.def("synchronize",
        [](const std::string& device) { GetBackend(DeviceTypeFromName(device)).Synchronize(); },
        nb::arg("device") = "metal",
        "Waits until all work submitted to `device` (\"cpu\" or \"metal\") has completed.\n"
        "Raises ValueError for an unknown device name, RuntimeError when the device is\n"
        "not available in this build.");
  m.def("is_available",
        [](const std::string& device) { return HasBackend(DeviceTypeFromName(device)); },
        nb::arg("device"),
        "True when `device` (\"cpu\" or \"metal\") has a backend in this build.\n"
        "Raises ValueError for an unknown device name.");
  m.def("device_info",
        [](const std::string& device) {
          Backend& backend = GetBackend(DeviceTypeFromName(device));
          nb::list dtypes;
          for (DType d : backend.SupportedDTypes()) dtypes.append(DTypeName(d));
          nb::dict info;
          info["name"] = backend.name();
          info["unified_memory"] = backend.UnifiedMemory();
          info["capability"] = backend.Capability();
          info["dtypes"] = dtypes;
          info["graph_capture"] = backend.SupportsGraphCapture();
          return info;
        },
        nb::arg("device"),
        "Describes `device`: dict(name: str, unified_memory: bool, capability: str,\n"
        "dtypes: list of dtype names, preferred first, graph_capture: bool).\n"
        "Raises ValueError for an unknown device name, RuntimeError when unavailable.");
}

}  // namespace metalrt::python
