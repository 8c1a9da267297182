#include "ops/op_common.h"

namespace metalrt::ops::detail {

void CheckDefined(const Tensor& t, const char* op, const char* arg) {
  Check(t.defined(), op, std::string(arg) + " is an undefined tensor");
}

void CheckFloat(const Tensor& t, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  CheckType(IsFloating(t.dtype()), op,
            std::string(arg) + " must be float32, float16 or bfloat16, got " + DTypeName(t.dtype()));
}

void CheckDType(const Tensor& t, DType dtype, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  CheckType(t.dtype() == dtype, op,
            std::string(arg) + " must be " + DTypeName(dtype) + ", got " + DTypeName(t.dtype()));
}

void CheckSameDType(const Tensor& a, const Tensor& b, const char* op, const char* arg_a,
                    const char* arg_b) {
  CheckType(a.dtype() == b.dtype(), op,
            std::string(arg_b) + " must have the dtype of " + arg_a + " (" + DTypeName(a.dtype()) +
                "), got " + DTypeName(b.dtype()));
}

void CheckRank(const Tensor& t, int rank, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  Check(t.ndim() == rank, op,
        std::string(arg) + " must have rank " + std::to_string(rank) + ", got shape " +
            ShapeToString(t.shape()));
}

void CheckShape(const Tensor& t, const Shape& shape, const char* op, const char* arg) {
  CheckDefined(t, op, arg);
  Check(t.shape() == shape, op,
        std::string(arg) + " must have shape " + ShapeToString(shape) + ", got " +
            ShapeToString(t.shape()));
}

void CheckContiguous(const Tensor& t, const char* op, const char* arg) {
  Check(t.is_contiguous(), op, std::string(arg) + " must be contiguous");
}

DeviceType CommonDevice(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) { first = t; continue; }
    Check(t->device() == first->device(), op,
          std::string("all tensors must be on one device, got ") + DeviceTypeName(first->device()) +
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
  Check(out->device() == device, op,
        std::string("out must be on ") + DeviceTypeName(device) + ", got " +
            DeviceTypeName(out->device()));
  CheckContiguous(*out, op, "out");
  return *out;
}

}  // namespace metalrt::ops::detail
