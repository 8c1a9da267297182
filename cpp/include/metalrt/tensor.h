// Tensor: a typed, shaped, strided view of device memory.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "metalrt/device.h"
#include "metalrt/dtype.h"

namespace metalrt {

constexpr int kMaxDims = 8;
using Shape = std::vector<int64_t>;

// Owns one allocation of a backend; freed when the last tensor referencing it dies.
class Storage {
 public:
  Storage(DeviceType device, size_t bytes);                 // allocates
  Storage(DeviceType device, void* data, size_t bytes,      // adopts external memory
          std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DeviceType device() const { return device_; }
  // Memory that must not be written (a read-only np.memmap, an immutable buffer):
  // writing it would fault or change what the owner promised not to change.
  bool read_only() const { return read_only_; }

 private:
  friend class Tensor;
  DeviceType device_;
  void* data_;
  size_t bytes_;
  std::shared_ptr<void> keep_alive_;  // set when the memory is not ours to free
  bool read_only_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  // A new contiguous tensor (uninitialised memory).
  static Tensor Empty(const Shape& shape, DType dtype, DeviceType device);
  // A non-owning view of memory the caller keeps alive (e.g. a host buffer).
  static Tensor FromBlob(void* data, const Shape& shape, DType dtype, DeviceType device);
  // A contiguous tensor over host memory the runtime did not allocate (e.g. a
  // memory-mapped file), without a copy: `keep_alive` owns the memory and lives until
  // the last view dies. On Metal the memory is wrapped for the kernels
  // (Backend::AdoptExternal); std::invalid_argument where the device cannot address it.
  // `read_only`: the memory may not be written; ops refuse such a tensor as `out`.
  static Tensor FromExternal(void* data, const Shape& shape, DType dtype, DeviceType device,
                             std::shared_ptr<void> keep_alive, bool read_only = false);

  bool defined() const { return data_ != nullptr || storage_ != nullptr; }
  void* data() const { return data_; }
  template <typename T> T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  DeviceType device() const { return device_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }   // in elements
  int64_t dim(int d) const;                            // negative d counts from the end
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // View of rows start, start + step, ... below stop along `dim` (step > 0: strides
  // stay non-negative); points into the same allocation. A step > 1 gives a
  // non-contiguous view unless it keeps at most one row.
  Tensor Slice(int dim, int64_t start, int64_t stop, int64_t step = 1) const;
  // View of element `index` along `dim` with that dimension removed.
  Tensor Select(int dim, int64_t index) const;
  // View with a new shape (one entry may be -1); requires a contiguous tensor.
  Tensor Reshape(const Shape& shape) const;
  // "float32[2, 3] on metal"
  std::string Describe() const;

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  DeviceType device_ = DeviceType::kCPU;
  Shape shape_;
  Shape strides_;
};

Shape ContiguousStrides(const Shape& shape);

// Host transfers that honour strides, so views of any layout can cross devices.
// Reads every element of `t` in row-major order into `dst` (t.nbytes() bytes); on a
// device this is a host read, i.e. a flush point (Backend::Copy kDeviceToHost).
void CopyToHost(const Tensor& t, void* dst);
// Writes t.nbytes() bytes of row-major host data into the contiguous tensor `t`.
void CopyFromHost(const void* src, const Tensor& t);
// A new contiguous tensor on `device` holding the elements of `t`.
Tensor CopyToDevice(const Tensor& t, DeviceType device);
std::string ShapeToString(const Shape& shape);   // "[2, 3]"

}  // namespace metalrt
