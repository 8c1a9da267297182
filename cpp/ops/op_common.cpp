#include "ops/op_common.h"

#include <utility>

#include "metalrt/device.h"

namespace metalrt::ops::detail {

void CheckDefined(const Tensor& t, const char* op, const char* arg) {
  if (!t.defined()) Fail(op, std::string(arg) + " is an undefined tensor");
}

void CheckFloat(const Tensor& t, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  if (!IsFloating(t.dtype()))
    FailType(op, std::string(arg) + " must be float32, float16 or bfloat16, got " + DTypeName(t.dtype()));
}

void CheckDType(const Tensor& t, DType dtype, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  if (t.dtype() != dtype)
    FailType(op, std::string(arg) + " must be " + DTypeName(dtype) + ", got " + DTypeName(t.dtype()));
}

void CheckSameDType(const Tensor& a, const Tensor& b, const char* op, const char* arg_a,
                    const char* arg_b) {
  if (a.dtype() != b.dtype())
    FailType(op, std::string(arg_b) + " must have the dtype of " + arg_a + " (" + DTypeName(a.dtype()) +
         "), got " + DTypeName(b.dtype()));
}

void CheckRank(const Tensor& t, int rank, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  if (t.ndim() != rank)
    Fail(op, std::string(arg) + " must have rank " + std::to_string(rank) + ", got shape " +
         ShapeToString(t.shape()));
}

void CheckShape(const Tensor& t, const Shape& shape, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  if (t.shape() != shape)
    Fail(op, std::string(arg) + " must have shape " + ShapeToString(shape) + ", got " +
         ShapeToString(t.shape()));
}

void CheckContiguous(const Tensor& t, const char* op, const char* arg) {
  if (!t.is_contiguous()) Fail(op, std::string(arg) + " must be contiguous");
}

void CheckLastDimVector(const Tensor& v, const Tensor& x, const char* op, const char* arg) {
  CheckShape(v, {x.dim(-1)}, op, arg);
  CheckSameDType(x, v, op, "x", arg);
  CheckContiguous(v, op, arg);
}

DeviceType CommonDevice(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) { first = t; continue; }
    if (t->device() != first->device())
      Fail(op, std::string("all tensors must be on one device, got ") + DeviceTypeName(first->device()) +
           " and " + DeviceTypeName(t->device()));
  }
  Check(first != nullptr, op, "no tensor arguments");
  return first->device();
}

Tensor OutputOrNew(const OptTensor& out, const Shape& shape, DType dtype, DeviceType device,
                   const char* op) {
  if (!out) return Tensor::Empty(shape, dtype, device);
  CheckShape(*out, shape, op, "out");
  CheckDType(*out, dtype, op, "out");
  if (out->device() != device)
    Fail(op, std::string("out must be on ") + DeviceTypeName(device) + ", got " +
         DeviceTypeName(out->device()));
  CheckContiguous(*out, op, "out");
  // A view of read-only memory (np.memmap mode="r") would fault when written.
  Check(!(out->storage() && out->storage()->read_only()), op,
        "out is a view of read-only memory (e.g. an np.memmap opened with mode='r'); "
        "pass a writable tensor");
  return *out;
}

const Tensor& OrUndefined(const OptTensor& t) {
  static const Tensor undefined;
  return t ? *t : undefined;
}

// [first byte, one past the last byte] a tensor's elements can touch.
static std::pair<const char*, const char*> ByteRange(const Tensor& t) {
  const char* begin = static_cast<const char*>(t.data());
  if (t.numel() == 0) return {begin, begin};
  int64_t last = 0;
  for (int d = 0; d < t.ndim(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  const int64_t size = static_cast<int64_t>(DTypeSize(t.dtype()));
  return {begin, begin + (last + 1) * size};
}

void CheckNoOverlap(const Tensor& out, const Tensor& in, const char* op, const char* arg,
                    bool may_alias) {
  if (!in.defined()) return;
  if (may_alias && out.data() == in.data() && out.shape() == in.shape() &&
      out.strides() == in.strides())
    return;
  const auto o = ByteRange(out);
  const auto i = ByteRange(in);
  if (!(o.second <= i.first || i.second <= o.first))
    Fail(op, std::string("out overlaps ") + arg +
                 (may_alias ? " (only out = " + std::string(arg) + " exactly is allowed)" : ""));
}

bool ReadableOnHost(const Tensor& t) {
  if (t.device() == DeviceType::kCPU) return true;
  Backend& backend = GetBackend(t.device());
  if (!backend.UnifiedMemory()) return false;
  backend.PrepareHostRead(t.data(), t.nbytes());
  return true;
}

void CheckIndicesInRange(const Tensor& indices, int64_t count, int64_t lo, int64_t hi,
                         const char* op, const DescribeIndex& describe) {
  if (!ReadableOnHost(indices)) return;
  auto scan = [&](const auto* index) {
    for (int64_t t = 0; t < count; ++t)
      if (index[t] < lo || index[t] >= hi) Fail(op, describe(index[t], t));
  };
  if (indices.dtype() == DType::kI64)
    scan(indices.data_as<int64_t>());
  else
    scan(indices.data_as<int32_t>());
}

}  // namespace metalrt::ops::detail
