// The op registry as seen from Python: which providers exist, which one ran.
#include "bind.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "metalrt/op_registry.h"

namespace metalrt::python {

void BindProviders(nb::module_& m) {
  nb::module_ p = m.def_submodule("providers", "Op providers and their statistics.");
  p.def("stats",
        [](const std::string& op, const std::string& device) {
          ProviderStats s = GetProviderStats(op, DeviceTypeFromName(device));
          nb::dict d;
          d["last_selected"] = s.last_selected;
          d["calls"] = s.calls;
          d["declines"] = s.declines;
          d["reference_hits"] = s.reference_hits;
          return d;
        },
        nb::arg("op"), nb::arg("device"),
        "Statistics of `op` on `device` since the last reset: dict(last_selected: provider\n"
        "name, \"reference:<name>\" for the CPU reference tier or \"\" if never run, calls,\n"
        "declines, reference_hits).");
  p.def("list",
        [](const std::string& op, const std::string& device) {
          return ListProviders(op, DeviceTypeFromName(device));
        },
        nb::arg("op"), nb::arg("device"),
        "Names of the native providers of `op` on `device`, in the order they are tried.");
  p.def("registered",
        [](const std::string& op, const std::string& device) {
          return OpRegistered(op, DeviceTypeFromName(device));
        },
        nb::arg("op"), nb::arg("device"),
        "True when `op` has a native provider on `device` (the reference tier does not count).");
  p.def("set_enabled", &SetProviderEnabled, nb::arg("name"), nb::arg("enabled"),
        "Enables or disables the provider called `name` on every op it serves; a disabled\n"
        "provider is skipped. Raises ValueError for an unknown name.");
  p.def("version", &ProviderSelectionVersion,
        "An int that changes whenever set_enabled changes which providers are disabled\n"
        "(recorded plans replay the providers chosen when they were recorded).");
  p.def("set_decode_rows", &SetDecodeRows, nb::arg("on"),
        "Sets the calling thread's decode-rows setting (DecodeRows, op_registry.h: every op\n"
        "computes each row as a one-row decode does); returns the previous setting.\n"
        "metalrt.ops.decode_rows is the context manager over it.");
  p.def("reset_stats", &ResetProviderStats, "Zeroes the statistics of every (op, device).");
  p.def("ops", &ListOps, "Every op name with a provider on some device, sorted.");
}

}  // namespace metalrt::python
