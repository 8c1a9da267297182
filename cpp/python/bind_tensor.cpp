// metalrt.Tensor and the numpy bridge. Every transfer goes through the backend's
// Copy (tensor_copy.cpp), so on Metal a numpy export is a host read = a flush point.
// Transfers release the GIL: a host read may wait for the GPU, and other Python
// threads should run meanwhile (they touch no memory these copies own).
#include "bind.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <vector>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "metalrt/tensor.h"

namespace metalrt::python {

nb::dlpack::dtype NumpyDType(DType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DType::kF32: case DType::kBF16: return make(Code::Float, 32);
    case DType::kF16: return make(Code::Float, 16);
    case DType::kI8: return make(Code::Int, 8);
    case DType::kU8: return make(Code::UInt, 8);
    case DType::kI32: return make(Code::Int, 32);
    case DType::kI64: return make(Code::Int, 64);
    case DType::kU32: return make(Code::UInt, 32);
  }
  throw TypeError("unknown dtype");
}

namespace {

nb::object ToNumpy(const Tensor& t) {
  const nb::dlpack::dtype dtype = NumpyDType(t.dtype());
  const size_t count = static_cast<size_t>(t.numel());
  auto* buffer = new char[count * (dtype.bits / 8) + 1];   // +1: a valid pointer for 0 elements
  nb::capsule owner(buffer, [](void* p) noexcept { delete[] static_cast<char*>(p); });
  if (t.dtype() == DType::kBF16) {
    std::vector<uint16_t> bits(count);
    {
      nb::gil_scoped_release release;
      CopyToHost(t, bits.data());
    }
    auto* values = reinterpret_cast<float*>(buffer);
    for (size_t i = 0; i < count; ++i) values[i] = BF16ToF32(bits[i]);
  } else {
    nb::gil_scoped_release release;
    CopyToHost(t, buffer);
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  return nb::ndarray<nb::numpy>(buffer, shape.size(), shape.data(), owner, nullptr, dtype).cast();
}

// Writes a C-contiguous host array whose element type stores t's dtype (for
// bfloat16: float32 values, rounded to nearest even here) into t; `what` names the
// caller in errors.
void WriteHost(const HostArray& array, const Tensor& t, const char* what) {
  const std::string dtype_name = DTypeName(t.dtype());
  if (!(array.dtype() == NumpyDType(t.dtype())))
    throw TypeError(std::string(what) + ": a " + dtype_name + " tensor needs a host array of " +
                    (t.dtype() == DType::kBF16 ? "float32" : dtype_name) + " elements");
  if (t.dtype() == DType::kBF16) {
    const auto* values = static_cast<const float*>(array.data());
    std::vector<uint16_t> bits(array.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = F32ToBF16(values[i]);
    nb::gil_scoped_release release;
    CopyFromHost(bits.data(), t);
  } else {
    // The caller's reference keeps the array alive while the GIL is released.
    nb::gil_scoped_release release;
    CopyFromHost(array.data(), t);
  }
}

// A new tensor from a C-contiguous host array (see WriteHost).
Tensor FromNumpy(const HostArray& array, const std::string& dtype_name,
                 const std::string& device_name) {
  Shape shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
  Tensor t = Tensor::Empty(shape, DTypeFromName(dtype_name), DeviceTypeFromName(device_name));
  WriteHost(array, t, "asarray");
  return t;
}

// t[...] = array in place, for a contiguous t of the same shape.
void CopyFromNumpy(const Tensor& t, const HostArray& array) {
  Shape shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
  if (shape != t.shape())
    throw std::invalid_argument("copy_from: the host array has shape " + ShapeToString(shape) +
                                ", the tensor " + ShapeToString(t.shape()));
  if (!t.is_contiguous())
    throw std::invalid_argument("copy_from: the tensor must be contiguous, got " + t.Describe());
  // Writing a view of read-only memory (np.memmap mode="r") would fault.
  if (t.storage() && t.storage()->read_only())
    throw std::invalid_argument("copy_from: the tensor is a view of read-only memory (e.g. an "
                                "np.memmap opened with mode='r')");
  WriteHost(array, t, "copy_from");
}

Tensor Filled(const Shape& shape, const std::string& dtype, const std::string& device,
              bool zero) {
  Tensor t = Tensor::Empty(shape, DTypeFromName(dtype), DeviceTypeFromName(device));
  if (zero && t.nbytes()) GetBackend(t.device()).Memset(t.data(), 0, t.nbytes());
  return t;
}

// Applies one index (int or slice with a positive step) to dimension `d` of the view
// `t` of a tensor of rank `rank` (an int index removes its dimension from `t`);
// returns the next dimension.
int ApplyIndex(Tensor& t, int rank, int d, nb::handle key) {
  if (key.is_none())
    throw TypeError("[Tensor] None (numpy.newaxis) is not a supported index: views keep their rank "
                    "or lose dimensions; add a dimension with t.reshape(1, *t.shape)");
  if (d >= t.ndim())
    throw nb::index_error(("too many indices for a tensor of rank " + std::to_string(rank)).c_str());
  const int64_t size = t.shape()[d];
  if (PySlice_Check(key.ptr())) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
    if (step < 0)
      throw std::invalid_argument("[Tensor] slice step must be positive, got " + std::to_string(step) +
                                  ": views have non-negative strides (reverse a host copy, "
                                  "t.numpy()[::-1])");
    const Py_ssize_t length = PySlice_AdjustIndices(size, &start, &stop, step);
    t = t.Slice(d, start, start + (length > 0 ? (length - 1) * step + 1 : 0), step);
    return d + 1;
  }
  if (PyBool_Check(key.ptr()) || !PyIndex_Check(key.ptr()))
    throw TypeError(std::string("Tensor indices must be integers or slices, got ") +
                    nb::type_name(key.type()).c_str());
  nb::object index = nb::steal(PyNumber_Index(key.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  const int64_t i = nb::cast<int64_t>(index);
  if (i < -size || i >= size)
    throw nb::index_error(("index " + std::to_string(i) + " is out of range for dimension " +
                           std::to_string(d) + " of size " + std::to_string(size)).c_str());
  t = t.Select(d, i < 0 ? i + size : i);
  return d;
}

Tensor GetItem(const Tensor& t, nb::handle key) {
  Tensor view = t;
  if (nb::isinstance<nb::tuple>(key)) {
    int d = 0;
    for (nb::handle k : nb::borrow<nb::tuple>(key)) d = ApplyIndex(view, t.ndim(), d, k);
  } else {
    ApplyIndex(view, t.ndim(), 0, key);
  }
  return view;
}

// reshape's dimensions: ints (not bools) that fit in int64; the range check against
// the element count is Tensor::Reshape's.
Shape ShapeArgs(const nb::args& args) {
  nb::handle dims = args;
  if (args.size() == 1 && (nb::isinstance<nb::tuple>(args[0]) || nb::isinstance<nb::list>(args[0])))
    dims = args[0];
  Shape shape;
  for (nb::handle d : dims) {
    if (PyBool_Check(d.ptr()) || !PyIndex_Check(d.ptr()))
      throw TypeError(std::string("[reshape] dimensions must be ints, got ") + nb::type_name(d.type()).c_str());
    nb::object index = nb::steal(PyNumber_Index(d.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0)
      throw std::invalid_argument("[reshape] dimension " + nb::cast<std::string>(nb::str(index)) +
                                  " does not fit in int64");
    shape.push_back(value);
  }
  return shape;
}

nb::tuple ShapeTuple(const Shape& shape) {
  nb::list dims;
  for (int64_t d : shape) dims.append(d);
  return nb::tuple(dims);
}

}  // namespace

void BindTensor(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor",
                     "A typed, shaped view of memory on a device (\"cpu\" or \"metal\").\n"
                     "Create one with metalrt.asarray, metalrt.empty or metalrt.zeros. Indexing\n"
                     "with ints and slices (positive steps) gives views into the same allocation.")
      .def_prop_ro("shape", [](const Tensor& t) { return ShapeTuple(t.shape()); },
                   "Dimensions, a tuple of int.")
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(DTypeName(t.dtype())); },
                   "Element type name: float32, float16, bfloat16, int8, uint8, int32, int64, uint32.")
      .def_prop_ro("device", [](const Tensor& t) { return std::string(DeviceTypeName(t.device())); },
                   "\"cpu\" or \"metal\".")
      .def_prop_ro("ndim", &Tensor::ndim, "Number of dimensions.")
      .def_prop_ro("nbytes", &Tensor::nbytes, "Bytes of the elements this tensor covers.")
      .def_prop_ro("read_only",
                   [](const Tensor& t) { return t.storage() != nullptr && t.storage()->read_only(); },
                   "True for a view of read-only memory (asarray(copy=False) of a read-only\n"
                   "array, e.g. an np.memmap opened with mode='r'): nothing may write it.")
      .def("__len__",
           [](const Tensor& t) {
             if (t.ndim() == 0) throw TypeError("len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("is_contiguous", &Tensor::is_contiguous, "True when the elements are dense and row-major.")
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); },
           "Address of the first element (views of one allocation share its range).")
      .def("numpy", &ToNumpy,
           "A numpy copy of the values (bfloat16 becomes float32 exactly). On Metal this is\n"
           "a host read, which flushes pending work.")
      .def("__array__",
           [](const Tensor& t, nb::handle dtype, nb::handle) {
             nb::object array = ToNumpy(t);
             return dtype.is_none() ? array : array.attr("astype")(dtype);
           },
           nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("copy_from", &CopyFromNumpy, nb::arg("array"),
           "copy_from(array): writes a C-contiguous numpy array of the same shape into this\n"
           "contiguous tensor, in place (no allocation); the element type must be the one\n"
           "numpy() returns for this dtype. On Metal a host write: pending GPU work is first\n"
           "waited for. ValueError for another shape or a non-contiguous tensor, TypeError\n"
           "for another element type.")
      .def("__getitem__", &GetItem, nb::arg("key").none(),
           "t[i], t[a:b], t[a:b:step] (step > 0) or a tuple of those, one per leading dimension:\n"
           "a view into the same allocation (strided, so not contiguous, when step > 1 keeps\n"
           "more than one row); an int index removes its dimension. IndexError when out of\n"
           "range; ValueError for a negative or zero step.")
      .def("reshape", [](const Tensor& t, const nb::args& args) { return t.Reshape(ShapeArgs(args)); },
           "reshape(*shape) or reshape(shape): a view with a new shape (one dim may be -1).\n"
           "ValueError when the element count differs or the tensor is not contiguous.")
      .def("to", [](const Tensor& t, const std::string& device) {
             const DeviceType target = DeviceTypeFromName(device);
             nb::gil_scoped_release release;
             return CopyToDevice(t, target);
           },
           nb::arg("device"), "A contiguous copy on `device` (\"cpu\" or \"metal\").")
      .def("astype",
           [](const Tensor& t, nb::handle dtype) {
             // A name, or anything numpy.dtype() understands (np.float16, "int32", ...).
             const std::string name =
                 nb::isinstance<nb::str>(dtype)
                     ? nb::cast<std::string>(dtype)
                     : nb::cast<std::string>(nb::module_::import_("numpy").attr("dtype")(dtype).attr("name"));
             return ops::Cast(t, DTypeFromName(name));
           },
           nb::arg("dtype"),
           "A new tensor of dtype `dtype` on the same device (metalrt.ops.cast). TypeError\n"
           "for a dtype metalrt does not have.")
      .def("__repr__", [](const Tensor& t) {
        return "metalrt.Tensor(" + (t.defined() ? t.Describe() : std::string("undefined")) + ")";
      });

  m.def("_from_numpy", &FromNumpy, nb::arg("array"), nb::arg("dtype"), nb::arg("device"),
        "Internal: use metalrt.asarray.");
  m.def("_empty",
        [](const Shape& shape, const std::string& dtype, const std::string& device) {
          return Filled(shape, dtype, device, false);
        },
        nb::arg("shape"), nb::arg("dtype"), nb::arg("device"), "Internal: use metalrt.empty.");
  m.def("_zeros",
        [](const Shape& shape, const std::string& dtype, const std::string& device) {
          return Filled(shape, dtype, device, true);
        },
        nb::arg("shape"), nb::arg("dtype"), nb::arg("device"), "Internal: use metalrt.zeros.");
}

}  // namespace metalrt::python
