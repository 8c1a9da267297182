// metalrt.QuantizedTensor, the quantized-weight ops and zero-copy tensors over host
// memory (numpy arrays, np.memmap views of a model file). metalrt/ops/quantized.py
// and metalrt/tensor.py wrap these with argument conversion and docstrings.
#include "bind.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "metalrt/quantized.h"
#include "python_owner.h"

namespace metalrt::python {
namespace {

using HostBytes = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// The element types whose bytes store `dtype` as they are: its own numpy type, or
// uint16 bit patterns for bfloat16 (numpy has none; safetensors and GGUF hold bits).
bool StoresDType(const nb::dlpack::dtype& given, DType dtype) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(given.code);
  const int bits = given.bits;
  switch (dtype) {
    case DType::kF32: return code == Code::Float && bits == 32;
    case DType::kF16: return code == Code::Float && bits == 16;
    case DType::kBF16: return (code == Code::UInt && bits == 16) || (code == Code::Bfloat && bits == 16);
    case DType::kI8: return code == Code::Int && bits == 8;
    case DType::kU8: return code == Code::UInt && bits == 8;
    case DType::kI32: return code == Code::Int && bits == 32;
    case DType::kI64: return code == Code::Int && bits == 64;
    case DType::kU32: return code == Code::UInt && bits == 32;
  }
  return false;
}

// A tensor over `array`'s memory without a copy. `region` (a uint8 view of the whole
// buffer the array lives in, e.g. the mapped file) is what a GPU wraps, once for all
// the tensors inside it; `owner` keeps the memory alive.
Tensor FromNumpyNoCopy(const HostBytes& array, const std::string& dtype_name, const std::string& device_name,
                       const HostBytes& region, nb::handle owner, bool read_only) {
  const DType dtype = DTypeFromName(dtype_name);
  if (!StoresDType(array.dtype(), dtype))
    throw TypeError("asarray(copy=False): a " + dtype_name + " tensor needs an array of " +
                    (dtype == DType::kBF16 ? "uint16 bfloat16 bit patterns" : dtype_name) +
                    " elements (without a copy no conversion is possible)");
  const auto* begin = static_cast<const char*>(array.data());
  const auto* region_begin = static_cast<const char*>(region.data());
  const size_t bytes = array.nbytes();
  if (begin < region_begin || begin + bytes > region_begin + region.nbytes())
    throw std::invalid_argument("asarray(copy=False): the array lies outside the buffer given as its region");
  Shape shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
  const DeviceType device = DeviceTypeFromName(device_name);
  std::shared_ptr<void> keep_alive = PythonOwner(owner);
  if (device != DeviceType::kCPU) {
    // Wrap the whole region first, so every tensor of one mapping shares one buffer.
    keep_alive = Tensor::FromExternal(const_cast<char*>(region_begin), {static_cast<int64_t>(region.nbytes())},
                                      DType::kU8, device, keep_alive)
                     .storage();
  }
  return Tensor::FromExternal(const_cast<char*>(begin), shape, dtype, device, std::move(keep_alive), read_only);
}

nb::tuple ShapeOf(const QuantizedTensor& w) { return nb::make_tuple(w.rows, w.cols); }

nb::object OrNone(const Tensor& t) { return t.defined() ? nb::cast(t) : nb::none(); }

}  // namespace

void BindQuantized(nb::module_& m) {
  m.def("_from_numpy_nocopy", &FromNumpyNoCopy, nb::arg("array"), nb::arg("dtype"), nb::arg("device"),
        nb::arg("region"), nb::arg("owner"), nb::arg("read_only"));
  nb::class_<QuantizedTensor>(m, "QuantizedTensor",
                              "A quantized weight [N, K]: packed codes plus their scales, in the\n"
                              "layout of the file they came from (GGUF blocks, or MLX affine\n"
                              "uint32 words with scales and biases). Make one with\n"
                              "metalrt.quantized_tensor.")
      .def_prop_ro("format", [](const QuantizedTensor& w) { return std::string(QuantFormatName(w.format)); },
                   "\"q4_0\" \"q4_1\" \"q5_0\" \"q5_1\" \"q8_0\" \"q4_k\" \"q5_k\" \"q6_k\" \"q3_k\" \"q2_k\"\n\"mxfp4_gguf\", \"affine\" or \"mxfp4\".")
      .def_prop_ro("shape", &ShapeOf, "(N, K): output and input features.")
      .def_prop_ro("bits", [](const QuantizedTensor& w) { return w.bits; }, "Bits per code.")
      .def_prop_ro("group_size", [](const QuantizedTensor& w) { return w.group_size; },
                   "Values per scale: the affine group, or the GGUF block (32 or 256).")
      .def_prop_ro("data", [](const QuantizedTensor& w) { return w.data; },
                   "The packed codes: uint8 [N, row_bytes] (GGUF) or uint32 [N, K*bits/32] (affine).")
      .def_prop_ro("scales", [](const QuantizedTensor& w) { return OrNone(w.scales); },
                   "Affine: [N, K/group_size] float; GGUF: None (inside the blocks).")
      .def_prop_ro("biases", [](const QuantizedTensor& w) { return OrNone(w.biases); },
                   "Affine: [N, K/group_size] float; GGUF: None.")
      .def_prop_ro("device", [](const QuantizedTensor& w) { return std::string(DeviceTypeName(w.device())); })
      .def_prop_ro("nbytes", &QuantizedTensor::nbytes, "Bytes of data, scales and biases.")
      .def("to", [](const QuantizedTensor& w, const std::string& device) { return w.To(DeviceTypeFromName(device)); },
           nb::arg("device"), "The weight on `device` (\"cpu\" or \"metal\"), copied when it is elsewhere.")
      .def("__repr__", [](const QuantizedTensor& w) { return "QuantizedTensor(" + w.Describe() + ")"; });
  m.def("_quantized_tensor",
        [](const std::string& format, int64_t rows, int64_t cols, const Tensor& data,
           const std::optional<Tensor>& scales, const std::optional<Tensor>& biases, int bits, int group_size) {
          return MakeQuantizedTensor(QuantFormatFromName(format), rows, cols, data, scales.value_or(Tensor()),
                                     biases.value_or(Tensor()), bits, group_size);
        },
        nb::arg("format"), nb::arg("rows"), nb::arg("cols"), nb::arg("data"), nb::arg("scales").none(),
        nb::arg("biases").none(), nb::arg("bits"), nb::arg("group_size"));
}

void BindQuantizedOps(nb::module_& ops) {
  ops.def("dequantize",
          [](const QuantizedTensor& w, const std::string& dtype, const ops::OptTensor& out) {
            return ops::Dequantize(w, DTypeFromName(dtype), out);
          },
          nb::arg("w"), nb::arg("dtype"), nb::arg("out") = nb::none());
  ops.def("quantized_matmul_bt", &ops::QuantizedMatmulBT, nb::arg("x"), nb::arg("w"), nb::arg("out") = nb::none());
  ops.def("quantized_matmul_bt_add", &ops::QuantizedMatmulBTAdd, nb::arg("x"), nb::arg("w"), nb::arg("residual"),
          nb::arg("out") = nb::none());
  ops.def("quantized_matmul_bt_swiglu", &ops::QuantizedMatmulBTSwiglu, nb::arg("x"), nb::arg("w"),
          nb::arg("out") = nb::none());
  ops.def("quantized_concat_is_one_gemv", &ops::QuantizedConcatIsOneGemv, nb::arg("x"));
  ops.def("is_coarse_weight", nb::overload_cast<const Tensor&>(&ops::IsCoarseWeight), nb::arg("weight"));
  ops.def("is_coarse_weight", nb::overload_cast<const QuantizedTensor&>(&ops::IsCoarseWeight),
          nb::arg("weight"));
  ops.def("quantized_matmul_bt_concat", &ops::QuantizedMatmulBTConcat, nb::arg("x"), nb::arg("weights"),
          nb::arg("out") = nb::none());
  ops.def("quantized_embedding",
          [](const Tensor& ids, const QuantizedTensor& w, const std::string& dtype, const ops::OptTensor& out) {
            return ops::QuantizedEmbedding(ids, w, DTypeFromName(dtype), out);
          },
          nb::arg("ids"), nb::arg("w"), nb::arg("dtype"), nb::arg("out") = nb::none());
}

}  // namespace metalrt::python
