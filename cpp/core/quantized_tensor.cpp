// QuantizedTensor: format tables (ggml-common.h block structs, MLX affine parameters)
// and the validating constructor.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "metalrt/errors.h"
#include "metalrt/quantized.h"

namespace metalrt {
namespace {

constexpr const char* kOp = "quantized_tensor";

struct GgufFormat {
  QuantFormat format;
  const char* name;
  int64_t block_values;
  int64_t block_bytes;
  int bits;
};

// Block sizes from ggml-common.h (block_q4_0 ... block_q6_K, block_q3_K, block_q2_K,
// block_mxfp4).
constexpr GgufFormat kGgufFormats[] = {
    {QuantFormat::kQ4_0, "q4_0", 32, 18, 4},   {QuantFormat::kQ4_1, "q4_1", 32, 20, 4},
    {QuantFormat::kQ5_0, "q5_0", 32, 22, 5},   {QuantFormat::kQ5_1, "q5_1", 32, 24, 5},
    {QuantFormat::kQ8_0, "q8_0", 32, 34, 8},   {QuantFormat::kQ4_K, "q4_k", 256, 144, 4},
    {QuantFormat::kQ5_K, "q5_k", 256, 176, 5}, {QuantFormat::kQ6_K, "q6_k", 256, 210, 6},
    {QuantFormat::kQ3_K, "q3_k", 256, 110, 3}, {QuantFormat::kQ2_K, "q2_k", 256, 84, 2},
    {QuantFormat::kMxfp4Gguf, "mxfp4_gguf", 32, 17, 4},
};

const GgufFormat& Gguf(QuantFormat format) {
  for (const GgufFormat& f : kGgufFormats)
    if (f.format == format) return f;
  throw std::invalid_argument(std::string("[quantized_tensor] ") + (format == QuantFormat::kMxfp4 ? "mxfp4" : "affine") +
                              " weights keep their scales apart and have no fixed block; use group_size");
}

std::string Join(const int* values, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s;
}

// Every check here is `if (bad) Fail(message)`, never Check(ok, message): a message is
// built only for an error, where Check's argument was built on every call (each
// quantized op's entry point revalidates its weight, a few hundred times a decode step).
void CheckTensor(const Tensor& t, DType dtype, const Shape& shape, const char* arg) {
  if (!t.defined()) Fail(kOp, std::string(arg) + " is an undefined tensor");
  if (t.dtype() != dtype) FailType(kOp,
            std::string(arg) + " must be " + DTypeName(dtype) + ", got " + DTypeName(t.dtype()));
  if (t.shape() != shape) Fail(kOp,
        std::string(arg) + " must have shape " + ShapeToString(shape) + ", got " + ShapeToString(t.shape()) +
            (t.ndim() == 2 && t.dim(0) == shape[0] && t.dim(1) < shape[1] ? " (truncated data)" : ""));
  if (!t.is_contiguous()) Fail(kOp, std::string(arg) + " must be contiguous");
}

}  // namespace

const char* QuantFormatName(QuantFormat format) {
  if (format == QuantFormat::kAffine) return "affine";
  if (format == QuantFormat::kMxfp4) return "mxfp4";
  return Gguf(format).name;
}

QuantFormat QuantFormatFromName(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "affine") return QuantFormat::kAffine;
  if (lower == "mxfp4") return QuantFormat::kMxfp4;
  std::string known;
  for (const GgufFormat& f : kGgufFormats) {
    if (lower == f.name) return f.format;
    known += std::string(f.name) + ", ";
  }
  throw std::invalid_argument("[quantized_tensor] unknown format '" + name + "'; expected one of " + known +
                              "affine, mxfp4");
}

int64_t BlockValues(QuantFormat format) { return Gguf(format).block_values; }
int64_t BlockBytes(QuantFormat format) { return Gguf(format).block_bytes; }
int GgufBits(QuantFormat format) { return Gguf(format).bits; }

size_t QuantizedTensor::nbytes() const {
  return data.nbytes() + (scales.defined() ? scales.nbytes() : 0) + (biases.defined() ? biases.nbytes() : 0);
}

QuantizedTensor QuantizedTensor::To(DeviceType target) const {
  auto move = [target](const Tensor& t) {
    return !t.defined() || t.device() == target ? t : CopyToDevice(t, target);
  };
  QuantizedTensor moved = *this;
  moved.data = move(data);
  moved.scales = move(scales);
  moved.biases = move(biases);
  return moved;
}

std::string QuantizedTensor::Describe() const {
  std::string name = QuantFormatName(format);
  if (format == QuantFormat::kAffine)
    name += "(bits=" + std::to_string(bits) + ", group_size=" + std::to_string(group_size) + ")";
  return name + ShapeToString({rows, cols}) + " on " + DeviceTypeName(device());
}

QuantizedTensor MakeQuantizedTensor(QuantFormat format, int64_t rows, int64_t cols, Tensor data,
                                    Tensor scales, Tensor biases, int bits, int group_size) {
  if (rows < 1 || cols < 1) Fail(kOp,
        "shape must be [N >= 1, K >= 1], got " + ShapeToString({rows, cols}));
  QuantizedTensor w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  if (format == QuantFormat::kMxfp4) {
    if (bits != 0 && bits != 4) Fail(kOp, "mxfp4 has 4-bit codes, got bits=" + std::to_string(bits));
    if (group_size != 0 && group_size != 32) Fail(kOp,
          "mxfp4 has one scale per 32 values, got group_size=" + std::to_string(group_size));
    if (cols % 32 != 0) Fail(kOp, "mxfp4 needs K divisible by 32, got K=" + std::to_string(cols));
    if (biases.defined()) Fail(kOp, "mxfp4 has no biases; pass data and scales only");
    if (!scales.defined()) Fail(kOp, "mxfp4 weights need scales (uint8 E8M0 exponents)");
    CheckTensor(data, DType::kU8, {rows, cols / 2}, "data");
    CheckTensor(scales, DType::kU8, {rows, cols / 32}, "scales");
    w.bits = 4;
    w.group_size = 32;
  } else if (format != QuantFormat::kAffine) {
    const GgufFormat& f = Gguf(format);
    if (bits != 0 && bits != f.bits) Fail(kOp,
          std::string(f.name) + " has " + std::to_string(f.bits) + "-bit codes, got bits=" + std::to_string(bits));
    if (group_size != 0 && group_size != f.block_values) Fail(kOp,
          std::string(f.name) + " has blocks of " + std::to_string(f.block_values) +
              " values, got group_size=" + std::to_string(group_size));
    if (cols % f.block_values != 0) Fail(kOp,
          std::string(f.name) + " needs K divisible by its block of " + std::to_string(f.block_values) +
              " values, got K=" + std::to_string(cols));
    if (scales.defined() || biases.defined()) Fail(kOp,
          std::string(f.name) + " keeps its scales inside the blocks; pass no scales or biases");
    CheckTensor(data, DType::kU8, {rows, cols / f.block_values * f.block_bytes}, "data");
    w.bits = f.bits;
    w.group_size = static_cast<int>(f.block_values);
  } else {
    static constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
    static constexpr int kGroups[] = {32, 64, 128};
    if (std::count(std::begin(kBits), std::end(kBits), bits) != 1) Fail(kOp,
          "affine bits must be one of " + Join(kBits, 6) + ", got " + std::to_string(bits));
    if (std::count(std::begin(kGroups), std::end(kGroups), group_size) != 1) Fail(kOp,
          "affine group_size must be one of " + Join(kGroups, 3) + ", got " + std::to_string(group_size));
    if (cols % group_size != 0) Fail(kOp,
          "K=" + std::to_string(cols) + " is not divisible by group_size=" + std::to_string(group_size));
    CheckTensor(data, DType::kU32, {rows, cols * bits / 32}, "data");
    if (!scales.defined() || !biases.defined()) Fail(kOp, "affine weights need scales and biases");
    if (!IsFloating(scales.dtype())) FailType(kOp,
              std::string("scales must be float32, float16 or bfloat16, got ") + DTypeName(scales.dtype()));
    const Shape groups{rows, cols / group_size};
    CheckTensor(scales, scales.dtype(), groups, "scales");
    CheckTensor(biases, scales.dtype(), groups, "biases");
    w.bits = bits;
    w.group_size = group_size;
  }
  for (const Tensor* t : {&scales, &biases})
    if (t->defined() && t->device() != data.device()) Fail(kOp,
          std::string("scales and biases must be on the device of data (") + DeviceTypeName(data.device()) + ")");
  w.data = std::move(data);
  w.scales = std::move(scales);
  w.biases = std::move(biases);
  return w;
}

}  // namespace metalrt
