#include "metalrt/tensor.h"

#include <sstream>
#include <stdexcept>

namespace metalrt {

Storage::Storage(DeviceType device, size_t bytes)
    : device_(device), data_(GetBackend(device).Alloc(bytes)), bytes_(bytes) {}

Storage::Storage(DeviceType device, void* data, size_t bytes, std::shared_ptr<void> keep_alive)
    : device_(device), data_(data), bytes_(bytes), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (!keep_alive_) GetBackend(device_).Free(data_);
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

static void ValidateShape(const Shape& shape) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("tensor rank " + std::to_string(shape.size()) +
                                " exceeds the maximum of " + std::to_string(kMaxDims));
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + ShapeToString(shape));
  // Every byte offset (elements times the widest dtype, 8 bytes) must fit in int64, or
  // sizes, strides and offsets wrap and a huge shape gets a tiny allocation.
  int64_t bytes = 8;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw std::invalid_argument("shape " + ShapeToString(shape) +
                                  " has more elements than a tensor can address (2^60)");
}

static int64_t Product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, DeviceType device) {
  ValidateShape(shape);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(device, static_cast<size_t>(Product(shape)) * DTypeSize(dtype));
  t.data_ = t.storage_->data();
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  return t;
}

Tensor Tensor::FromBlob(void* data, const Shape& shape, DType dtype, DeviceType device) {
  ValidateShape(shape);
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  return t;
}

Tensor Tensor::FromExternal(void* data, const Shape& shape, DType dtype, DeviceType device,
                            std::shared_ptr<void> keep_alive, bool read_only) {
  Tensor t = FromBlob(data, shape, dtype, device);
  std::shared_ptr<void> owner = GetBackend(device).AdoptExternal(data, t.nbytes(), std::move(keep_alive));
  t.storage_ = std::make_shared<Storage>(device, data, t.nbytes(), std::move(owner));
  t.storage_->read_only_ = read_only;
  return t;
}

int64_t Tensor::dim(int d) const {
  const int n = ndim();
  if (d < -n || d >= n)
    throw std::invalid_argument("dimension " + std::to_string(d) + " out of range for rank " +
                                std::to_string(n));
  return shape_[d < 0 ? d + n : d];
}

int64_t Tensor::numel() const { return Product(shape_); }

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_) || numel() <= 1; }

Tensor Tensor::Slice(int d, int64_t start, int64_t stop, int64_t step) const {
  const int n = ndim();
  if (d < -n || d >= n)
    throw std::invalid_argument("slice dimension " + std::to_string(d) + " out of range for rank " +
                                std::to_string(n));
  if (d < 0) d += n;
  if (start < 0 || stop < start || stop > shape_[d])
    throw std::invalid_argument("slice [" + std::to_string(start) + ", " + std::to_string(stop) +
                                ") out of range for dimension " + std::to_string(d) +
                                " of size " + std::to_string(shape_[d]));
  if (step < 1) throw std::invalid_argument("slice step must be positive, got " + std::to_string(step));
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * static_cast<int64_t>(DTypeSize(dtype_));
  t.shape_[d] = (stop - start + step - 1) / step;
  // The stride of a dimension of one row is never followed, so keep it: such a view
  // of a contiguous tensor stays contiguous.
  if (t.shape_[d] > 1) t.strides_[d] *= step;
  return t;
}

Tensor Tensor::Select(int d, int64_t index) const {
  const int n = ndim();
  if (d < -n || d >= n)
    throw std::invalid_argument("select dimension " + std::to_string(d) + " out of range for rank " +
                                std::to_string(n));
  if (d < 0) d += n;
  if (index < 0 || index >= shape_[d])
    throw std::invalid_argument("index " + std::to_string(index) + " out of range for dimension " +
                                std::to_string(d) + " of size " + std::to_string(shape_[d]));
  Tensor t = Slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  if (!is_contiguous())
    throw std::invalid_argument("reshape needs a contiguous tensor, got " + Describe());
  Shape resolved = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: only one dimension may be -1");
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw std::invalid_argument("reshape: cannot infer -1 in " + ShapeToString(shape) +
                                  " for " + std::to_string(numel()) + " elements");
    resolved[infer] = numel() / known;
  }
  ValidateShape(resolved);
  if (Product(resolved) != numel())
    throw std::invalid_argument("reshape: shape " + ShapeToString(shape) + " does not hold " +
                                std::to_string(numel()) + " elements");
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = ContiguousStrides(resolved);
  return t;
}

std::string Tensor::Describe() const {
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_) + " on " + DeviceTypeName(device_);
}

}  // namespace metalrt
