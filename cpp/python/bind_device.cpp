// Device queries and synchronisation.
#include "bind.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "metalrt/device.h"
#include "metalrt/diagnostics.h"
#include "metalrt/kernel_sources.h"

namespace metalrt::python {

void BindDevice(nb::module_& m) {
  m.def("synchronize",
        [](const std::string& device) {
          Backend& backend = GetBackend(DeviceTypeFromName(device));
          // Other Python threads run while this one waits for the GPU.
          nb::gil_scoped_release release;
          backend.Synchronize();
        },
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
          info["simulated"] = backend.Simulated();
          const size_t max_buffer = backend.MaxBufferLength();
          info["max_buffer_length"] = max_buffer == SIZE_MAX ? nb::none() : nb::cast(max_buffer);
          return info;
        },
        nb::arg("device"),
        "Describes `device`: dict(name: str, unified_memory: bool, capability: str,\n"
        "dtypes: list of dtype names, preferred first, graph_capture: bool, simulated: bool,\n"
        "true for the simulated Metal device, max_buffer_length: int bytes, the largest\n"
        "single buffer (Metal's maxBufferLength; METALRT_SIM_MAX_BUFFER_LENGTH on the\n"
        "simulated device), None for the CPU).\n"
        "Raises ValueError for an unknown device name, RuntimeError when unavailable.");
  m.def("metal_library_info",
        [] {
          MetalLibraryInfo library;
          {
            // Loading may compile the embedded kernel sources (seconds).
            nb::gil_scoped_release release;
            library = GetMetalLibraryInfo();
          }
          nb::dict info;
          info["device"] = library.device;
          info["selection"] = library.selection;
          info["library"] = library.library;
          info["kernels"] = library.kernels;
          return info;
        },
        "Which device serves \"metal\" and where its kernels come from, loading them first:\n"
        "dict(device: str, selection: str, library: str, kernels: sorted list of str).\n"
        "selection says why: \"native: <GPU>\", \"sim: native unavailable: <reason>\" (e.g. a\n"
        "GPU below family apple7, macOS below 14) or the METALRT_METAL override. library is\n"
        "\"metallib at <path>\", \"compiled at run time from embedded sources, each file on the\n"
        "first use of its kernels ...: <n> of <m> files compiled (<s> s)\" (a\n"
        "build without Apple's Metal compiler) or the simulated device's compiled-in\n"
        "kernels. Raises RuntimeError when no Metal device is available or the kernels\n"
        "cannot be loaded or compiled.");
  m.def("embedded_kernel_sources",
        [] {
          nb::dict sources;
          for (const EmbeddedKernelSource& k : EmbeddedKernelSources())
            sources[k.file.c_str()] = k.source;
          return sources;
        },
        "The project's kernels as embedded in this build: dict(file name -> MSL source), one\n"
        "self-contained string per metal/*.metal file with its project headers inlined\n"
        "(what the native device compiles at run time when there is no metalrt.metallib).");
}

}  // namespace metalrt::python
