// Host <-> device transfers of tensors of any layout (views included).
#include <cstring>
#include <stdexcept>
#include <vector>

#include "metalrt/tensor.h"

namespace metalrt {
namespace {

void CheckDefined(const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
}

// Elements spanned by a view, from its first element to its last (strides >= 0).
int64_t SpanElements(const Tensor& t) {
  int64_t span = 1;
  for (int d = 0; d < t.ndim(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  return span;
}

// Copies the strided elements of `src` (laid out like `t`) into row-major `dst`.
void GatherRowMajor(const Tensor& t, const char* src, char* dst) {
  const size_t elem = DTypeSize(t.dtype());
  const int n = t.ndim();
  std::vector<int64_t> index(n, 0);
  for (int64_t i = 0, count = t.numel(); i < count; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < n; ++d) offset += index[d] * t.strides()[d];
    std::memcpy(dst + i * elem, src + offset * elem, elem);
    for (int d = n - 1; d >= 0 && ++index[d] == t.shape()[d]; --d) index[d] = 0;
  }
}

}  // namespace

void CopyToHost(const Tensor& t, void* dst) {
  CheckDefined(t, "CopyToHost");
  if (t.numel() == 0) return;
  Backend& backend = GetBackend(t.device());
  if (t.is_contiguous()) {
    backend.Copy(dst, t.data(), t.nbytes(), CopyKind::kDeviceToHost);
    return;
  }
  // One transfer of the whole span, then the strided gather on the host.
  std::vector<char> span(static_cast<size_t>(SpanElements(t)) * DTypeSize(t.dtype()));
  backend.Copy(span.data(), t.data(), span.size(), CopyKind::kDeviceToHost);
  GatherRowMajor(t, span.data(), static_cast<char*>(dst));
}

void CopyFromHost(const void* src, const Tensor& t) {
  CheckDefined(t, "CopyFromHost");
  if (!t.is_contiguous())
    throw std::invalid_argument("CopyFromHost: destination must be contiguous, got " + t.Describe());
  if (t.numel() == 0) return;
  GetBackend(t.device()).Copy(t.data(), src, t.nbytes(), CopyKind::kHostToDevice);
}

Tensor CopyToDevice(const Tensor& t, DeviceType device) {
  CheckDefined(t, "CopyToDevice");
  Tensor out = Tensor::Empty(t.shape(), t.dtype(), device);
  if (t.numel() == 0) return out;
  if (t.is_contiguous() && t.device() == device) {
    GetBackend(device).Copy(out.data(), t.data(), t.nbytes(), CopyKind::kDeviceToDevice);
  } else if (device == DeviceType::kCPU) {
    CopyToHost(t, out.data());
  } else if (t.device() == DeviceType::kCPU && t.is_contiguous()) {
    CopyFromHost(t.data(), out);
  } else {
    std::vector<char> host(t.nbytes());
    CopyToHost(t, host.data());
    CopyFromHost(host.data(), out);
  }
  return out;
}

}  // namespace metalrt
