#include "gpu/kernel_launch.h"

#include <cstring>
#include <set>
#include <stdexcept>

#include "gpu/metal_backend.h"
#include "gpu/op_capture.h"

namespace metalrt::gpu {
namespace {

// setThreadgroupMemoryLength:atIndex: requires a multiple of 16 bytes (Apple's doc).
constexpr size_t kThreadgroupMemoryGranule = 16;

template <typename T>
FunctionConstant MakeConstant(uint32_t index, FunctionConstant::Type type, T value) {
  static_assert(sizeof(T) <= 4, "function constants are at most 4 bytes");
  FunctionConstant c;
  c.index = index;
  c.type = type;
  std::memcpy(c.bytes.data(), &value, sizeof(T));
  return c;
}

// Bytes from the view's first element to one past its last (strides may skip).
size_t ViewSpanBytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < t.ndim(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  return static_cast<size_t>(last + 1) * DTypeSize(t.dtype());
}

std::string SizeToString(Size3 s) {
  return "(" + std::to_string(s.x) + ", " + std::to_string(s.y) + ", " + std::to_string(s.z) + ")";
}

}  // namespace

const char* KernelDTypeSuffix(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU32: return "u32";
  }
  throw std::logic_error("unknown dtype");
}

std::string KernelName(std::string_view op, std::string_view variant, DType dtype) {
  std::string name(op);
  if (!variant.empty()) name.append("_").append(variant);
  return name.append("_").append(KernelDTypeSuffix(dtype));
}

FunctionConstant Constant(uint32_t index, bool value) {
  return MakeConstant(index, FunctionConstant::Type::kBool, static_cast<uint8_t>(value));
}
FunctionConstant Constant(uint32_t index, int32_t value) {
  return MakeConstant(index, FunctionConstant::Type::kInt32, value);
}
FunctionConstant Constant(uint32_t index, uint32_t value) {
  return MakeConstant(index, FunctionConstant::Type::kUInt32, value);
}
FunctionConstant Constant(uint32_t index, float value) {
  return MakeConstant(index, FunctionConstant::Type::kFloat, value);
}

KernelLaunch::KernelLaunch(std::string kernel, FunctionConstants constants)
    : KernelLaunch(ActiveMetalBackend(), std::move(kernel), std::move(constants)) {}

KernelLaunch::KernelLaunch(MetalBackend& backend, std::string kernel, FunctionConstants constants)
    : backend_(backend), kernel_(std::move(kernel)), constants_(std::move(constants)) {
  if (backend_.profiler().enabled()) start_ = Profiler::Clock::now();
}

void KernelLaunch::Fail(const std::string& message) const {
  throw std::invalid_argument("[" + kernel_ + "] " + message);
}

void KernelLaunch::CheckBufferIndex(uint32_t index) const {
  if (index > kMaxBufferIndex)
    Fail("buffer index " + std::to_string(index) + " is out of range: Metal's buffer indices are 0.." +
         std::to_string(kMaxBufferIndex));
}

KernelLaunch& KernelLaunch::library(GpuLibrary& library) {
  library_ = &library;
  return *this;
}

KernelLaunch& KernelLaunch::input(uint32_t index, const Tensor& tensor) {
  return BindTensor(index, tensor, "input", false);
}

KernelLaunch& KernelLaunch::output(uint32_t index, const Tensor& tensor) {
  return BindTensor(index, tensor, "output", true);
}

KernelLaunch& KernelLaunch::argument(uint32_t index, const Tensor& tensor) {
  return BindTensor(index, tensor, "argument", true);
}

KernelLaunch& KernelLaunch::BindTensor(uint32_t index, const Tensor& tensor, const char* role,
                                       bool written) {
  CheckBufferIndex(index);
  const std::string what = std::string(role) + " at buffer " + std::to_string(index);
  if (!tensor.defined()) Fail(what + " is an undefined tensor");
  if (tensor.device() != DeviceType::kMETAL)
    Fail(what + " must be on the metal device, got " + tensor.Describe());
  const std::string context = "[" + kernel_ + "] " + what;
  ResolvedPointer r = backend_.allocations().Resolve(tensor.data(), ViewSpanBytes(tensor), context.c_str());
  Binding b;
  b.kind = Binding::Kind::kBuffer;
  b.index = index;
  b.buffer = std::move(r.buffer);
  b.offset = r.offset;
  b.written = written;   // the host must wait for it before reading (PrepareHostRead)
  bindings_.push_back(std::move(b));
  if (CapturedOp* capture = ActiveCapture()) capture->Keep(tensor.storage());
  return *this;
}

KernelLaunch& KernelLaunch::bytes(uint32_t index, const void* data, size_t length) {
  CheckBufferIndex(index);
  if (length == 0 || length >= kSetBytesLimit)
    Fail("bytes at buffer " + std::to_string(index) + " must be 1.." + std::to_string(kSetBytesLimit - 1) +
         " bytes, got " + std::to_string(length));
  Binding b;
  b.kind = Binding::Kind::kBytes;
  b.index = index;
  b.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + length);
  bindings_.push_back(std::move(b));
  return *this;
}

KernelLaunch& KernelLaunch::threadgroup_memory(uint32_t index, size_t length) {
  Binding b;
  b.kind = Binding::Kind::kThreadgroupMemory;
  b.index = index;
  b.length = (length + kThreadgroupMemoryGranule - 1) / kThreadgroupMemoryGranule * kThreadgroupMemoryGranule;
  bindings_.push_back(std::move(b));
  return *this;
}

void KernelLaunch::threadgroups(Size3 threadgroups, Size3 threads_per_threadgroup) {
  Launch(false, threadgroups, threads_per_threadgroup);
}

void KernelLaunch::threads(Size3 threads, Size3 threads_per_threadgroup) {
  Launch(true, threads, threads_per_threadgroup);
}

void KernelLaunch::Launch(bool per_thread, Size3 grid, Size3 group) {
  std::set<uint32_t> buffer_indices, threadgroup_indices;
  size_t threadgroup_bytes = 0;
  for (const Binding& b : bindings_) {
    const bool is_memory = b.kind == Binding::Kind::kThreadgroupMemory;
    if (!(is_memory ? threadgroup_indices : buffer_indices).insert(b.index).second)
      Fail(std::string(is_memory ? "threadgroup" : "buffer") + " index " + std::to_string(b.index) +
           " is bound twice");
    threadgroup_bytes += b.length;
  }
  if (group.x == 0 || group.y == 0 || group.z == 0)
    Fail("threads per threadgroup " + SizeToString(group) + " has a zero extent");

  GpuDevice& device = backend_.device();
  GpuLibrary& library = library_ ? *library_ : device.default_library();
  GpuPipeline& pipeline = library.pipeline(kernel_, constants_);
  const uint64_t group_threads = uint64_t{group.x} * group.y * group.z;
  if (group_threads > pipeline.max_total_threads_per_threadgroup())
    Fail("threads per threadgroup " + SizeToString(group) + " = " + std::to_string(group_threads) +
         " exceed the pipeline's maxTotalThreadsPerThreadgroup of " +
         std::to_string(pipeline.max_total_threads_per_threadgroup()));
  threadgroup_bytes += pipeline.static_threadgroup_memory_length();
  if (threadgroup_bytes > device.max_threadgroup_memory_length())
    Fail(std::to_string(threadgroup_bytes) + " bytes of threadgroup memory exceed the device's " +
         std::to_string(device.max_threadgroup_memory_length()));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;   // nothing to run

  Dispatch d;
  d.pipeline = &pipeline;
  d.bindings = std::move(bindings_);
  d.per_thread = per_thread;
  d.grid = grid;
  d.group = group;
  backend_.stream().Encode(d);
  // dispatchThreads: partial edge threadgroups count as threadgroups.
  auto groups = [&](uint32_t n, uint32_t g) { return per_thread ? (n + g - 1) / g : n; };
  const uint32_t threadgroups[3] = {groups(grid.x, group.x), groups(grid.y, group.y), groups(grid.z, group.z)};
  Profiler& profiler = backend_.profiler();
  // start_ is unset when profiling was switched on after this launch began: the
  // dispatch counts, its encode time is unknown.
  if (profiler.enabled())
    profiler.RecordDispatch(kernel_,
                            start_ == Profiler::Clock::time_point{} ? 0.0 : Profiler::SecondsSince(start_),
                            threadgroups, static_cast<uint32_t>(group_threads));
  if (CapturedOp* capture = ActiveCapture())
    capture->AddDispatch(backend_, std::move(d), kernel_, threadgroups, static_cast<uint32_t>(group_threads));
}

}  // namespace metalrt::gpu
