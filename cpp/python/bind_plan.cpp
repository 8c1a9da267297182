// metalrt._metalrt.Plan (metalrt/plan.h) and the two transfers a replayed step needs:
// write_inputs (the step's new input values into the plan's fixed tensors, one call)
// and read_output (a plan output to numpy). Both wait only for the device work that
// touches those tensors (Backend::PrepareHostWrite/PrepareHostRead), never for a later
// step already committed. Python-facing docs live in python/metalrt/plan.py.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "bind.h"
#include "metalrt/errors.h"
#include "metalrt/plan.h"
#include "metalrt/profiler.h"
#include "metalrt/tensor.h"

namespace metalrt::python {
namespace {

// A tensor the host may copy to or from with one memcpy; `what` names the caller.
void CheckTransferable(const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": an undefined tensor");
  if (!t.is_contiguous())
    throw std::invalid_argument(std::string(what) + ": the tensor must be contiguous, got " + t.Describe());
  if (t.dtype() == DType::kBF16)
    throw TypeError(std::string(what) + ": bfloat16 tensors have no numpy element type; "
                    "use Tensor.numpy()");
  if (!GetBackend(t.device()).UnifiedMemory())
    throw std::invalid_argument(std::string(what) + ": the device's memory is not host-addressable");
}

void WriteInputs(const std::vector<std::tuple<Tensor, HostArray>>& pairs) {
  constexpr const char* what = "write_inputs";
  for (const auto& [t, array] : pairs) {
    CheckTransferable(t, what);
    const Shape shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
    if (shape != t.shape())
      throw std::invalid_argument(std::string(what) + ": a host array of shape " +
                                  ShapeToString(shape) + " for a tensor " + t.Describe());
    if (!(array.dtype() == NumpyDType(t.dtype())))
      throw TypeError(std::string(what) + ": a " + DTypeName(t.dtype()) +
                      " tensor needs a host array of that element type");
    if (t.storage() && t.storage()->read_only())
      throw std::invalid_argument(std::string(what) + ": the tensor is a view of read-only memory");
  }
  // Every pair was checked first, so a bad one writes nothing. The callers' references
  // keep the arrays alive while the GIL is released.
  nb::gil_scoped_release release;
  for (const auto& [t, array] : pairs) {
    if (t.nbytes() == 0) continue;
    GetBackend(t.device()).PrepareHostWrite(t.data(), t.nbytes());
    std::memcpy(t.data(), array.data(), t.nbytes());
  }
}

nb::object ReadOutput(const Tensor& t) {
  CheckTransferable(t, "read_output");
  const nb::dlpack::dtype dtype = NumpyDType(t.dtype());
  auto* buffer = new char[t.nbytes() + 1];   // +1: a valid pointer for 0 elements
  nb::capsule owner(buffer, [](void* p) noexcept { delete[] static_cast<char*>(p); });
  if (t.nbytes() != 0) {
    nb::gil_scoped_release release;
    GetBackend(t.device()).PrepareHostRead(t.data(), t.nbytes());
    std::memcpy(buffer, t.data(), t.nbytes());
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  return nb::ndarray<nb::numpy>(buffer, shape.size(), shape.data(), owner, nullptr, dtype).cast();
}

// With the Metal profiler on, a replay's start is a mark in its event log, so the log
// shows each step's commits against the host's waits.
void Replay(Plan& plan) {
  if (plan.device() == DeviceType::kMETAL) metal_profiler::Mark("replay");
  nb::gil_scoped_release release;
  plan.Replay();
}

}  // namespace

void BindPlan(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Plan>(m, "Plan")
      .def("__init__",
           [](Plan* self, const std::string& device, size_t first_commit_ops) {
             new (self) Plan(DeviceTypeFromName(device), first_commit_ops);
           },
           "device"_a, "first_commit_ops"_a = Plan::kDefaultFirstCommitOps)
      .def("begin_record", &Plan::BeginRecord)
      .def("end_record", &Plan::EndRecord, "ok"_a = true)
      .def("replay", &Replay)
      .def("release", &Plan::Release)
      .def_prop_ro("state", [](const Plan& p) { return std::string(PlanStateName(p.state())); })
      .def_prop_ro("device", [](const Plan& p) { return std::string(DeviceTypeName(p.device())); })
      .def_prop_ro("ops", &Plan::ops)
      .def_prop_ro("replays", &Plan::replays)
      .def("__len__", &Plan::size);
  m.def("write_inputs", &WriteInputs, "pairs"_a);
  m.def("read_output", &ReadOutput, "tensor"_a);
}

}  // namespace metalrt::python
