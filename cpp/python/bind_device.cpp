// Device queries and synchronisation.
#include "bind.h"

#include <nanobind/stl/string.h>

#include "gpu/metal_backend.h"
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
          const DeviceType type = DeviceTypeFromName(device);
          Backend& backend = GetBackend(type);
          nb::list dtypes;
          for (DType d : backend.SupportedDTypes()) dtypes.append(DTypeName(d));
          nb::dict info;
          info["name"] = backend.name();
          info["unified_memory"] = backend.UnifiedMemory();
          info["capability"] = backend.Capability();
          info["dtypes"] = dtypes;
          info["graph_capture"] = backend.SupportsGraphCapture();
          info["simulated"] = type == DeviceType::kMETAL && gpu::ActiveMetalBackend().device().is_simulated();
          return info;
        },
        nb::arg("device"),
        "Describes `device`: dict(name: str, unified_memory: bool, capability: str,\n"
        "dtypes: list of dtype names, preferred first, graph_capture: bool, simulated: bool,\n"
        "true for the simulated Metal device).\n"
        "Raises ValueError for an unknown device name, RuntimeError when unavailable.");
}

}  // namespace metalrt::python
