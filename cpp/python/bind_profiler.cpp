// metalrt._metalrt.profiler (the Metal backend's profile counters) and flush().
// Python-facing docs live in python/metalrt/profiler.py.
#include <nanobind/stl/string.h>

#include <cinttypes>
#include <cstdio>

#include "bind.h"
#include "metalrt/device.h"
#include "metalrt/profiler.h"

namespace metalrt::python {
namespace {

nb::dict RowToDict(const ProfileRow& row) {
  nb::dict d;
  d["name"] = row.name;
  d["dispatches"] = row.dispatches;
  d["encode_seconds"] = row.encode_seconds;
  d["threadgroups"] = row.threadgroups;
  d["last_grid"] = nb::make_tuple(row.last_grid[0], row.last_grid[1], row.last_grid[2]);
  d["last_threads_per_threadgroup"] = row.last_threads_per_threadgroup;
  d["simdgroups"] = row.simdgroups;
  d["max_simd_collectives"] = row.max_simd_collectives;
  d["commits"] = row.commits;
  d["commits_at_cap"] = row.commits_at_cap;
  d["commits_at_flush"] = row.commits_at_flush;
  d["commits_at_synchronize"] = row.commits_at_synchronize;
  d["waits"] = row.waits;
  d["wait_seconds"] = row.wait_seconds;
  d["gpu_seconds"] = row.gpu_seconds;
  d["allocations"] = row.allocations;
  d["allocated_bytes"] = row.allocated_bytes;
  return d;
}

// ("commit", cause) | ("wait", "") | ("read", address) | ("mark", label), as
// profiler.events() documents; the address spelt as Python's hex(tensor.data_ptr()).
nb::tuple EventToTuple(const ProfileEvent& e) {
  using Kind = ProfileEvent::Kind;
  if (e.kind == Kind::kWait) return nb::make_tuple("wait", "");
  if (e.kind == Kind::kRead) {
    char address[2 + 2 * sizeof(uintptr_t) + 1];
    std::snprintf(address, sizeof(address), "0x%" PRIxPTR, e.address);
    return nb::make_tuple("read", address);
  }
  if (e.kind == Kind::kMark) return nb::make_tuple("mark", e.label);
  const char* cause =
      e.cause == CommitCause::kCap ? "cap" : e.cause == CommitCause::kFlush ? "flush" : "synchronize";
  return nb::make_tuple("commit", cause);
}

}  // namespace

void BindProfiler(nb::module_& m) {
  using namespace nb::literals;
  nb::module_ p = m.def_submodule("profiler", "Profile counters of the Metal backend");
  p.def("enable", &metal_profiler::Enable, "on"_a = true);
  p.def("enabled", &metal_profiler::Enabled);
  p.def("reset", &metal_profiler::Reset);
  p.def("rows", [] {
    nb::list rows;
    for (const auto& row : metal_profiler::Rows()) rows.append(RowToDict(row));
    return rows;
  });
  p.def("commits", &metal_profiler::Commits);
  p.def("waits", &metal_profiler::Waits);
  p.def("allocations", &metal_profiler::Allocations);
  p.def("allocated_bytes", &metal_profiler::AllocatedBytes);
  p.def("events", [] {
    nb::list events;
    for (const auto& e : metal_profiler::Events()) events.append(EventToTuple(e));
    return events;
  });

  m.def(
      "flush",
      [](const std::string& device) {
        // The CPU backend runs synchronously: nothing to commit.
        if (DeviceTypeFromName(device) == DeviceType::kMETAL) GetBackend(DeviceType::kMETAL).Flush();
      },
      "device"_a = "metal",
      "flush(device='metal')\n\nCommits the device's pending GPU work without waiting for it "
      "(a flush point of the Metal command stream; host reads and synchronize() also flush). "
      "A no-op for 'cpu'. Raises ValueError for an unknown device name and RuntimeError when "
      "no Metal device is available.");
}

}  // namespace metalrt::python
