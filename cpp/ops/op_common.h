// Validation and output helpers shared by every op entry point in cpp/ops.
// Every message starts with "[op] " and names the argument and what was expected.
#pragma once
#include <any>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "metalrt/errors.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

void CheckDefined(const Tensor& t, const char* op, const char* arg);
// f32, f16 or bf16, else TypeError.
void CheckFloat(const Tensor& t, const char* op, const char* arg);
void CheckDType(const Tensor& t, DType dtype, const char* op, const char* arg);
void CheckSameDType(const Tensor& a, const Tensor& b, const char* op, const char* arg_a,
                    const char* arg_b);
void CheckRank(const Tensor& t, int rank, const char* op, const char* arg);
void CheckShape(const Tensor& t, const Shape& shape, const char* op, const char* arg);
void CheckContiguous(const Tensor& t, const char* op, const char* arg);
// `v` is a vector over x's last dim: shape [x.dim(-1)], x's dtype, contiguous (a norm
// weight or bias).
void CheckLastDimVector(const Tensor& v, const Tensor& x, const char* op, const char* arg);
// All defined tensors on one device; returns it. std::invalid_argument otherwise.
DeviceType CommonDevice(std::initializer_list<const Tensor*> tensors, const char* op);
// `out` checked against (shape, dtype, device) and contiguity, or a new tensor.
Tensor OutputOrNew(const OptTensor& out, const Shape& shape, DType dtype, DeviceType device,
                   const char* op);
// True when the host can read t's elements: on the CPU, or on a unified-memory device
// once the submitted work that writes t has completed (waited for here only when
// there is such work). Entry points check index tensors' values where this holds.
bool ReadableOnHost(const Tensor& t);
// Says why one index is out of range: (its value, its position) → the message after
// "[op] ", built only for the index that fails.
using DescribeIndex = std::function<std::string(int64_t value, int64_t position)>;
// Checks lo <= indices[t] < hi for the first `count` elements of the contiguous int32 or
// int64 tensor `indices`, wherever ReadableOnHost holds, and throws std::invalid_argument
// with describe(value, t) for the first that is not. Entry points call it before
// anything runs, so a call with a bad index leaves its outputs untouched.
void CheckIndicesInRange(const Tensor& indices, int64_t count, int64_t lo, int64_t hi,
                         const char* op, const DescribeIndex& describe);
// The tensor held by an optional, or an undefined tensor (for CommonDevice's list).
const Tensor& OrUndefined(const OptTensor& t);
// Throws unless `out` and the input `in` occupy disjoint bytes. With `may_alias`, `out`
// may also be exactly `in` (same data, shape, strides), the in-place form ops.h allows.
void CheckNoOverlap(const Tensor& out, const Tensor& in, const char* op, const char* arg,
                    bool may_alias = false);

}  // namespace metalrt::ops::detail
